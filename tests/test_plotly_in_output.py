"""A plotly figure inside a live explorer's Output draws on Colab, in Chromium.

Colab shows an ipywidgets ``Output`` by inserting its ``text/html`` into the page and
running its scripts as it goes: the HTML set with ``innerHTML``, then every ``<script>``
re-created (an inline one runs at once; one with ``src`` loads asynchronously). Plotly's
own ``"colab"`` renderer writes ``<script src=plotly.js>`` then an inline
``Plotly.newPlot``, which then runs before the library has loaded: "Plotly is not defined"
(googlecolab/colabtools#5889).

Here an explorer is made as on Colab (``google.colab`` stood in, so
``attn_edu.setup_notebook``'s Colab renderer is used), a control is moved, and its
Output's HTML is inserted into a blank page exactly that way. plotly.js comes from plotly's
CDN address, which the browser context answers from the installed plotly package (late,
so the inline script surely runs first) -- nothing leaves the machine. The figure must
draw; the same insertion of plotly's ``"colab"`` HTML must fail (the test can fail).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from conftest import offline_context

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # drives Chromium

plotly = pytest.importorskip("plotly")
ipywidgets = pytest.importorskip("ipywidgets")
import plotly.graph_objects as go  # noqa: E402
import plotly.io as pio  # noqa: E402

from attn_edu import notebook, widgets  # noqa: E402

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"

#: what a front end does with an output's HTML (JupyterLab's renderHTML; Colab likewise)
INSERT_JS = """
([id, html]) => {
  const out = document.getElementById(id);
  out.innerHTML = html;
  for (const old of Array.from(out.querySelectorAll('script'))) {
    const s = document.createElement('script');
    for (const a of Array.from(old.attributes)) s.setAttribute(a.name, a.value);
    s.textContent = old.textContent;
    old.replaceWith(s);   // inline: runs now; src: loads asynchronously
  }
}
"""
DRAWN_JS = "(id) => !!document.querySelector(`#${id} .plotly-graph-div .main-svg`)"


@pytest.fixture
def colab_outputs(monkeypatch):
    """``explorer_html()``: the Output HTML of a plotly explorer made as on Colab."""
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)  # restored after
    assert notebook._register_plotly_renderer() == notebook.COLAB_RENDERER

    def explorer_html():
        n = ipywidgets.IntSlider(value=2, min=1, max=5)
        box = widgets.live_explorer(lambda n: go.Figure(go.Bar(y=list(range(n)))), n=n)
        n.value = 4  # a reader moved it: the handler put the new figure into the Output
        (out,) = box.children[-1].outputs
        assert set(out["data"]) == {"text/html"}, "on Colab the figure is text/html only"
        return out["data"]["text/html"]

    return explorer_html


def _page(browser, problems):
    context = offline_context(browser, problems)
    served = []

    def cdn(route):  # plotly's CDN, answered from the installed package, after a delay
        served.append(route.request.url)
        time.sleep(0.5)
        route.fulfill(path=str(PLOTLY_JS), content_type="application/javascript")

    context.route("https://cdn.plot.ly/**", cdn)  # registered last: runs before the block
    page = context.new_page()
    page.on("pageerror", lambda exc: problems.append(f"JS exception: {exc}"))
    page.set_content("<html><head></head><body><div id='a'></div><div id='b'></div></body></html>")
    return context, page, served


def test_an_explorers_plotly_output_draws_when_inserted_as_colab_does(colab_outputs, browser):
    first, second = colab_outputs(), colab_outputs()
    assert notebook.plotly_cdn_url() in first
    problems: list = []
    context, page, served = _page(browser, problems)
    try:
        page.evaluate(INSERT_JS, ["a", first])
        page.evaluate(INSERT_JS, ["b", second])  # a second figure before plotly.js arrived
        page.wait_for_function(DRAWN_JS, arg="a", timeout=30_000)
        page.wait_for_function(DRAWN_JS, arg="b", timeout=30_000)
        page.evaluate(INSERT_JS, ["a", colab_outputs()])  # the next move: plotly.js is there
        page.wait_for_function(DRAWN_JS, arg="a", timeout=10_000)
        loaders = page.evaluate(f"() => document.querySelectorAll('#{notebook.SRC_LOADER_ID}').length")
        text = page.inner_text("body")
    finally:
        context.close()
    assert not problems, problems
    assert served == [notebook.plotly_cdn_url()], f"plotly.js should load once: {served}"
    assert loaders == 1
    assert "could not load" not in text and "needs plotly.js" not in text


def test_plotlys_colab_html_fails_when_inserted_the_same_way(browser):
    """The insertion above reproduces colabtools#5889 with plotly's own "colab" renderer."""
    html = pio.renderers["colab"].to_mimebundle(go.Figure(go.Bar(y=[1, 2])).to_dict())["text/html"]
    problems: list = []
    context, page, served = _page(browser, problems)
    try:
        page.evaluate(INSERT_JS, ["a", html])
        page.wait_for_timeout(1500)
        drawn = page.evaluate(DRAWN_JS, "a")
    finally:
        context.close()
    assert served, "plotly's colab renderer loads plotly.js from its CDN"
    assert not drawn and any("Plotly is not defined" in p for p in problems), problems


def test_without_network_the_figure_says_so(colab_outputs, browser):
    html = colab_outputs()
    assert "< 30000)" in html
    html = html.replace("< 30000)", "< 500)")  # do not wait 30 s for a CDN that is cut off
    problems: list = []
    context = offline_context(browser, problems)
    try:
        page = context.new_page()
        page.set_content("<html><head></head><body><div id='a'></div></body></html>")
        page.evaluate(INSERT_JS, ["a", html])
        page.wait_for_function("() => document.body.innerText.includes('could not load plotly.js')",
                               timeout=10_000)
    finally:
        context.close()
    assert any("cdn.plot.ly" in p for p in problems)  # it tried the CDN, and was blocked
