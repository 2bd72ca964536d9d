"""attn_edu.notebook: the first cell's plotly renderer and its offline plotly.js loader."""
import os
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("plotly")
import plotly  # noqa: E402
import plotly.graph_objects as go  # noqa: E402
import plotly.io as pio  # noqa: E402

from attn_edu import notebook  # noqa: E402


def _bundle(fig):
    notebook._register_plotly_renderer()
    return pio.renderers[notebook.BOOK_RENDERER].to_mimebundle(fig.to_dict())


def test_renderer_bundle_draws_with_the_pages_plotly_and_never_a_cdn():
    fig = go.Figure(go.Bar(y=[1, 3, 2]), layout=dict(height=300))
    bundle = _bundle(fig)
    assert set(bundle) == {"text/html", "application/vnd.plotly.v1+json"}
    html = bundle["text/html"]
    assert "window.Plotly.newPlot" in html and 'height:300px' in html
    assert not re.search(r"https?://", html), "the figure must not load anything from the network"
    assert "needs plotly.js" in html  # says so, instead of a blank area, when plotly.js is missing
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["y"] == [1, 3, 2]


def test_loader_defines_plotly_from_the_installed_package_offline():
    html = notebook.plotly_js_loader()
    js = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    assert len(html) > len(js) - 100  # the whole of plotly.js, inline
    assert html.count("</script>") == 1 and html.rstrip().endswith("</script>")
    assert "if (!window.Plotly)" in html and "window.Plotly = Plotly" in html
    assert not re.search(r"<script[^>]*\bsrc=", html)


def test_loader_is_shown_only_in_a_live_kernel_outside_the_book_build(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append(obj))

    class Shell:  # a kernel's shell has .kernel; a terminal IPython does not
        kernel = object()

    monkeypatch.setattr("IPython.get_ipython", lambda: None)
    assert notebook._show_plotly_js_loader() is False  # plain Python
    monkeypatch.setattr("IPython.get_ipython", lambda: Shell())
    monkeypatch.setenv(notebook.BOOK_BUILD_ENV, "1")
    assert notebook._show_plotly_js_loader() is False  # the book serves plotly.js itself
    monkeypatch.delenv(notebook.BOOK_BUILD_ENV)
    monkeypatch.setitem(sys.modules, "google.colab", object())
    assert notebook._show_plotly_js_loader() is False  # Colab has its own renderer
    monkeypatch.delitem(sys.modules, "google.colab")
    assert notebook._show_plotly_js_loader() is True
    (obj,) = shown
    assert notebook.LOADER_ID in obj["text/html"]


def test_book_extension_marks_the_build_so_chapters_do_not_inline_plotly(monkeypatch):
    from conftest import book_extension

    pytest.importorskip("sphinx")
    ext = book_extension("attn_edu_book_under_test")

    class App:
        def connect(self, *args, **kwargs):
            pass

    monkeypatch.setattr(ext, "register_mime_plugin", lambda: None)
    # setenv first so that monkeypatch records the variable's absence and removes it
    # afterwards (delenv of an unset variable records nothing): setup() must not leak
    # ATTN_EDU_BOOK_BUILD=1 into the rest of this worker's tests -- a Jupyter server they
    # start would inherit it, and its chapters would never load plotly.js
    monkeypatch.setenv(notebook.BOOK_BUILD_ENV, "0")
    monkeypatch.delenv(notebook.BOOK_BUILD_ENV)
    ext.setup(App())
    assert os.environ[notebook.BOOK_BUILD_ENV] == "1"


def test_on_colab_figures_load_plotly_js_from_plotlys_cdn_and_wait_for_it(monkeypatch):
    """Colab: text/html only (as plotly's "colab" renderer), which loads the plotly.js that
    the installed plotly.py was made for, once, and draws when it has loaded -- no inline
    ``Plotly.newPlot`` that runs before it (tests/test_plotly_in_output.py draws it)."""
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    assert notebook._register_plotly_renderer() == notebook.COLAB_RENDERER
    bundle = pio.renderers[notebook.COLAB_RENDERER].to_mimebundle(go.Figure(go.Bar(y=[1])).to_dict())
    html = bundle["text/html"]
    assert set(bundle) == {"text/html"}
    assert notebook.plotly_cdn_url().startswith("https://cdn.plot.ly/plotly-")
    assert html.count(notebook.plotly_cdn_url()) == 1 and notebook.SRC_LOADER_ID in html
    assert not re.search(r"<script[^>]*\bsrc=", html), "no <script src> racing an inline script"
    monkeypatch.delitem(sys.modules, "google.colab")
    assert notebook._register_plotly_renderer() == notebook.BOOK_RENDERER


def test_setup_notebook_chooses_the_readers_language_and_refuses_one_it_lacks():
    """lang="zh" (the Chinese twins' first cell) makes the package's words Chinese; the default
    (the English chapters) is English; a language without a catalog is a ValueError naming lang,
    raised before anything is set up."""
    import attn_edu
    from attn_edu import i18n
    from attn_edu.widgets import live_note

    try:
        assert attn_edu.setup_notebook(plotly=False, lang="zh") in ("cpu", "cuda")
        assert i18n.current_language() == "zh" and live_note("T = 1").startswith("<strong>交互式探索器。")
        with pytest.raises(ValueError, match=r"lang must be one of \['en', 'zh'\]; got 'de'"):
            attn_edu.setup_notebook(plotly=False, lang="de")
        assert i18n.current_language() == "zh"  # refused: nothing changed
        attn_edu.setup_notebook(plotly=False)
        assert i18n.current_language() == "en"
        assert live_note("T = 1") == ("<strong>Live explorer.</strong> In Jupyter or Colab this figure "
                                      "recomputes as you move its controls; here it is shown for T = 1.")
    finally:
        i18n.set_language("en")
