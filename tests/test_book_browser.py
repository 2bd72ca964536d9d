"""The built book renders completely offline: every page opened in headless Chromium.

For every page of the book (every file in ``_toc.yml`` plus ``search.html`` and
``genindex.html``) this test serves ``_build/html`` from 127.0.0.1 and asserts that

* no JavaScript exception is thrown and nothing is logged to the console as an error;
* no request fails and no response has a status >= 400;
* **no request leaves 127.0.0.1** (all other hosts are aborted and reported);
* every ``.math`` element is typeset: by KaTeX during the build (``.katex`` inside), or
  else by MathJax (served from the build, loaded only on pages that still need it); no raw
  ``$$``, ``\\(`` or ``\\[`` is left in the visible text;
* plotly.js is not requested while no figure is near the viewport, and never by a page
  without plotly figures; once drawn (``attnEduFigures.drawAll()``), every plotly figure
  has an SVG, uses only trace types that the page's plotly.js bundle registers, has a
  text alternative, and its sliders respond to a click and to the keyboard (no kernel);
* no ipywidgets control, widget state or widget manager is on any page; a live
  explorer's static stand-in links to the chapter in Colab;
* every ``<img>`` has a non-empty ``alt``;
* axe-core (WCAG 2 A/AA rules) finds no violation of impact serious or critical (the colour
  rules judge one element of each kind, once in the run: :func:`_axe`);
* dropdown solutions are hidden behind a working toggle button;
* chapter pages carry the Colab launch link for their notebook and the repository link.

And on a phone (390 x 844, :func:`test_page_on_a_phone`): no display formula, formula, code
span or image is cut off or runs off the screen except inside a sideways scroll box that
the keyboard reaches (a formula's box also has a name); in every plotly figure no two
texts (titles, axis titles, annotations, legend, colour bars, slider values, menus)
intersect and all lie inside the figure; every plotly slider and menu has a keyboard
control that Tab reaches, that shows a focus ring and a name, and that changes the figure;
"Back to top" does not cover a figure's controls; and every matplotlib figure is legible
(its smallest text at least 9 CSS px as shown, or in the full-size view that Enter opens);
axe-core at phone width (colours aside) finds nothing serious on an English page (a Chinese
page is judged at desktop width, its phone width on its twin: :func:`_checked_on_english_twin`).

Static checks of the built HTML: no render-blocking script over 50 KB in any page's
``<head>``; no CDN URL; plotly.js is not inlined.

A full-page screenshot of every English chapter is written to ``_build/screenshots/`` (of
every other page, its first screen: a Chinese chapter's layout is its twin's, and the API
page whole took 6 s), and the first screen of every page on a phone to
``_build/screenshots/phone-*.png``.

Environment variables:

* ``ATTN_EDU_BOOK_BUILT=1``: ``_build/html`` is built and fresh: check it. Without it these
  tests skip: the suite builds the book once, in the publishing workflow's steps
  (tests/test_publish_workflow.py), whose check step, ``bash scripts/site.sh check``, runs
  this file on that build with ``-m pages``. By hand: ``bash scripts/build-book.sh``, then
  ``bash scripts/site.sh check``;
* ``ATTN_EDU_BOOK_ROOT``: the book's source root (default: the repository root);
* ``ATTN_EDU_CHROMIUM``: the Chromium binary (default: what ``bash scripts/site.sh which-browser``
  finds; conftest's ``chromium_path``);
* ``ATTN_EDU_SKIP_BROWSER=1``: skip instead of failing when Chromium or Playwright is
  missing;
* ``ATTN_EDU_AXE``: axe-core's ``axe.min.js`` (default: where ``scripts/test.sh`` installs
  the pinned axe-core, ``.web-tools/axe/node_modules/axe-core/axe.min.js``).
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import os
import re
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import offline_context, run_shared_dir  # the session's Chromium is conftest's `browser` fixture

pytestmark = [pytest.mark.browser, pytest.mark.pages]
yaml = pytest.importorskip("yaml")  # the book's build tools; collection needs NumPy only

REPO = Path(__file__).resolve().parents[1]
ROOT = Path(os.environ.get("ATTN_EDU_BOOK_ROOT", REPO)).resolve()
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
TIMEOUT_MS = 60_000
AXE_JS = Path(os.environ.get("ATTN_EDU_AXE",
                             REPO / ".web-tools" / "axe" / "node_modules" / "axe-core" / "axe.min.js"))
#: a script in <head> without defer/async may weigh at most this (it blocks the first paint)
MAX_BLOCKING_HEAD_SCRIPT = 50 * 1024


# --------------------------------------------------------------------------- the toc
def _load_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _toc_files() -> list[str]:
    """Every document of ``_toc.yml`` (root first), without extension."""
    from site_pages import toc_files  # scripts/site_pages.py: the one toc walker

    return toc_files(ROOT)


def _repo_config() -> dict:
    cfg = _load_yaml(ROOT / "_config.yml")
    return {
        "url": cfg["repository"]["url"].rstrip("/"),
        "branch": cfg["repository"].get("branch", "main"),
        "path_to_book": (cfg["repository"].get("path_to_book") or "").strip("/"),
        "colab": cfg["launch_buttons"]["colab_url"].rstrip("/"),
    }


TOC_PAGES = _toc_files()
EXTRA_PAGES = ["search", "genindex", "py-modindex"]  # Sphinx's own pages
EN_PAGES = TOC_PAGES + EXTRA_PAGES
#: every page twice: the English edition at the site's root, the Chinese one under zh/
#: (scripts/build-book.sh builds both; the same checks and thresholds for both)
PAGES = EN_PAGES + [f"zh/{p}" for p in EN_PAGES]


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def built_book() -> Path:
    """The built book, when ATTN_EDU_BOOK_BUILT=1 says ``_build/html`` is fresh."""
    if os.environ.get("ATTN_EDU_BOOK_BUILT") != "1":
        pytest.skip("checks a built book: the publishing workflow's check step runs them on the "
                    "suite's one build (tests/test_publish_workflow.py); by hand: "
                    "bash scripts/build-book.sh && bash scripts/site.sh check")
    if not (HTML / "index.html").is_file():
        pytest.fail(f"ATTN_EDU_BOOK_BUILT=1 but {HTML / 'index.html'} does not exist")
    return HTML


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@pytest.fixture(scope="session")
def colour_kinds(tmp_path_factory) -> ColourKinds:
    """This run's :class:`ColourKinds`, in the folder its pytest-xdist workers share."""
    return ColourKinds(run_shared_dir(tmp_path_factory) / "colour-kinds.jsonl")


@pytest.fixture(scope="session")
def server(built_book: Path):
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


# --------------------------------------------------------------------------- page checks
_WAIT_RENDERED_JS = """
() => {
  const math = Array.from(document.querySelectorAll('.math')).filter(m => !m.querySelector('.katex'));
  if (math.length) {
    if (!(window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)) return false;
    for (const m of math) if (!m.querySelector('mjx-container')) return false;
  }
  for (const d of document.querySelectorAll('.plotly-graph-div'))
    if (!d.querySelector('.main-svg')) return false;
  return true;
}
"""

_RAW_TEX_JS = r"""
() => {
  const skip = 'PRE, CODE, SCRIPT, STYLE, TEXTAREA, MJX-CONTAINER, MJX-ASSISTIVE-MML, .katex-mathml, .highlight, .search, #search-results';
  const bad = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const inlineCmd = /\$[^$\s][^$]*\\[a-zA-Z]+[^$]*\$/;
  while (walker.nextNode()) {
    const n = walker.currentNode;
    const el = n.parentElement;
    if (!el || el.closest(skip)) continue;
    const t = n.textContent;
    if (t.includes('$$') || t.includes('\\(') || t.includes('\\[') || inlineCmd.test(t))
      bad.push(t.trim().slice(0, 120));
  }
  return bad;
}
"""

_WIDGETS_JS = """
() => ({
  views: document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length,
  state: document.querySelectorAll('script[type="application/vnd.jupyter.widget-state+json"]').length,
  controls: document.querySelectorAll('.jupyter-widgets, .lm-Widget, .widget-slider, .widget-dropdown').length,
  manager: Array.from(document.scripts).filter(s => /embed(-amd)?\\.js|html-manager/.test(s.src)).length,
})
"""

#: axe-core's WCAG 2 A/AA rules; what it reports: violations of impact serious or critical.
#: ``sampled``: the colour rules judge only the elements :data:`_COLOUR_SAMPLE_JS` marked
_AXE_JS = """
([only, off, sampled]) => {
  axe.reset();
  if (sampled) axe.configure({rules: [
    {id: 'color-contrast', selector: '[data-attn-edu-sample]'},
    {id: 'link-in-text-block', selector: 'a[href][data-attn-edu-sample]'}]});
  return axe.run(document, {
    runOnly: only.length ? {type: 'rule', values: only}
                         : {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']},
    rules: Object.fromEntries(off.map(id => [id, {enabled: false}])),
    resultTypes: ['violations'],
    // no CSSOM preload: axe would re-fetch the theme's @import from the wrong base URL
    preload: false})
  .then(r => r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => `${v.impact} ${v.id}: ${v.help} (${v.nodes.length}x, e.g. ${v.nodes[0].target.join(' ')})`));
}
"""

#: axe's rules that judge colours (text against its background; a link against the text
#: around it). Their answer depends on the markup and the stylesheet, not on the width of the
#: window.
COLOUR_RULES = ["color-contrast", "link-in-text-block"]
#: One element of each kind for the colour rules. A text's contrast is decided by its colour,
#: size, weight, shadow and decoration, by the backgrounds and opacity of everything it sits
#: on, by whether it is shown, and (a link in text) by the colour of the text around it: two
#: elements alike in all of these pass or fail together. Judging every element took most of
#: axe's time (on chapter 02, 11,000 of its 20,000 elements are glyphs of formulas and 2,000
#: tokens of code; the API page has 27,000 spans of signatures), so the first element of each
#: kind is marked (``data-attn-edu-sample``) and the rules judge those: 134 kinds of text and
#: 16 of links on chapter 02. The pages share one stylesheet, so a kind already judged on
#: another page of the run (``judged``: :class:`ColourKinds`) is not marked again; returns the
#: kinds marked. tests/test_axe_check.py plants a pale element among many alike.
_COLOUR_SAMPLE_JS = r"""
(judged) => {
  const seen = new Set(judged || []);
  const memo = new Map();
  const behind = e => {  // [the backgrounds under e, from the page down; the opacity above it]
    if (!e) return ['', 1];
    let r = memo.get(e);
    if (r) return r;
    const s = getComputedStyle(e), up = behind(e.parentElement);
    const bg = s.backgroundImage !== 'none' || !/^rgba\(.*, 0\)$|^transparent$/.test(s.backgroundColor)
      ? `${s.backgroundColor} ${s.backgroundImage} ${s.mixBlendMode} ${s.filter};` : '';
    r = [up[0] + bg, up[1] * parseFloat(s.opacity)];
    memo.set(e, r);
    return r;
  };
  const shown = e => e.getClientRects().length > 0
    && (!e.checkVisibility || e.checkVisibility({contentVisibilityAuto: true, visibilityProperty: true}));
  const text = new Map(), links = new Map();
  for (const e of document.body.querySelectorAll('*')) {
    const own = Array.prototype.some.call(e.childNodes, n => n.nodeType === 3 && n.data.trim());
    const link = e.matches('a[href]');
    if (!own && !link) continue;
    const s = getComputedStyle(e), [bg, opacity] = behind(e);
    const key = [s.color, s.fontSize, s.fontWeight, s.textShadow, s.webkitTextStrokeWidth,
                 s.textDecorationLine, bg, opacity, shown(e), !!e.closest('a[href]')].join('|');
    const t = 'text|' + key;
    if (own && !text.has(t) && !seen.has(t)) text.set(t, e);
    const p = link && e.parentElement && getComputedStyle(e.parentElement);
    const l = 'link|' + key + (p ? p.color + p.display : '');
    if (link && !links.has(l) && !seen.has(l)) links.set(l, e);
  }
  for (const e of [...text.values(), ...links.values()]) e.setAttribute('data-attn-edu-sample', '');
  return [...text.keys(), ...links.keys()];
}
"""


class ColourKinds:
    """The kinds of text and link (:data:`_COLOUR_SAMPLE_JS`'s keys) whose colours the colour
    rules judged and passed in this run, in a file the run's pytest-xdist workers share
    (locked): a kind is judged on the first page that has it. The English and Chinese pages of
    a chapter have the same kinds, and most chapters' kinds are all on earlier pages: on those
    the colour rules (axe's colour grid of every element, ~2 s a chapter) do not run. A kind
    that fails is not recorded, so every page that has it reports it."""

    def __init__(self, path: Path):
        self.path = path

    def judged(self) -> list:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            return [json.loads(line) for line in f if line.strip()]

    def add(self, kinds) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.writelines(json.dumps(k) + "\n" for k in kinds)


def _axe(page, phone: bool = False, kinds: "ColourKinds | None" = None) -> list[str]:
    """axe-core on the loaded page: every WCAG 2 A/AA rule, reported when serious or critical.
    The colour rules judge one element of each kind (:data:`_COLOUR_SAMPLE_JS`) not judged
    yet on another page of the run (``kinds``), at desktop width only: colours do not depend
    on the width, and the phone pass checks the rest."""
    page.add_script_tag(path=str(AXE_JS))
    if phone:
        return page.evaluate(_AXE_JS, [[], COLOUR_RULES, False])
    new = page.evaluate(_COLOUR_SAMPLE_JS, kinds.judged() if kinds else [])
    found = page.evaluate(_AXE_JS, [[], [] if new else COLOUR_RULES, bool(new)])
    if kinds and new and not any(f" {rule}:" in v for v in found for rule in COLOUR_RULES):
        kinds.add(new)
    return found


_TRACE_TYPES_JS = """
() => {
  const used = new Set();
  for (const d of document.querySelectorAll('.plotly-graph-div')) {
    for (const t of d.data || []) used.add(t.type || 'scatter');
    for (const f of (d._transitionData && d._transitionData._frames) || [])
      for (const t of f.data || []) used.add(t.type || 'scatter');
  }
  const known = Object.keys(Plotly.PlotSchema.get().traces);
  return {used: [...used].sort(), missing: [...used].filter(t => !known.includes(t))};
}
"""


def _until(page, js: str, arg=None, timeout_ms: int = 5000) -> bool:
    """Whether ``js(arg)`` becomes true within ``timeout_ms`` (polled every 50 ms): a check
    waits as long as the page needs and no longer, where a fixed pause would either waste
    time on a quiet machine or be too short on a busy one."""
    try:
        page.wait_for_function(js, arg=arg, timeout=timeout_ms, polling=50)
        return True
    except Exception:  # noqa: BLE001  (Playwright's TimeoutError)
        return False


def _page_file(name: str) -> str:
    return f"{name}.html"


#: resolves once ``element``'s box has been the same for three animation frames in a row
#: while the element is rendered (not inside a ``content-visibility: auto`` block that the
#: browser still skips: book.css lays out each block of a section when it comes near, which
#: can move what is below it) and, for a plotly figure ``fig`` without a width of its own,
#: plotly has drawn it at the width of its box (a figure drawn at another width, its box
#: resized since, puts the rail where the figure is not). Frames, not milliseconds: a
#: loaded machine draws fewer of them in a given time, and each frame is one chance for the
#: page to lay itself out. Resolves with "" once settled, else with what had not settled
#: after ``ms`` (the caller says so).
_SETTLED_JS = """([e, fig, ms]) => new Promise(resolve => {
  const end = performance.now() + ms;
  let last = null, same = 0, why = '';
  (function frame() {
    const r = e.getBoundingClientRect(), key = [r.x, r.y, r.width, r.height].join();
    const rendered = !e.checkVisibility || e.checkVisibility({contentVisibilityAuto: true});
    const sized = !fig || !fig._fullLayout || (fig.layout && fig.layout.width)  // a width of its own
      || Math.abs(fig._fullLayout.width - fig.clientWidth) <= 1;
    why = !rendered ? 'the element is in a block not laid out yet'
        : !sized ? `the figure is drawn ${fig._fullLayout.width} px wide in a ${fig.clientWidth} px box`
        : key !== last ? 'the element still moves' : '';
    same = why ? 0 : same + 1;
    last = key;
    if (same >= 3) return resolve('');
    if (performance.now() > end) return resolve(why);
    requestAnimationFrame(frame);
  })();
})"""


#: whether the point (x, y) of the viewport is on ``element``: what a click there would hit
_HITS_JS = "([e, x, y]) => { const t = document.elementFromPoint(x, y); return !!t && (t === e || e.contains(t)); }"


#: what is drawn at the point (x, y) of the viewport, for a message: tag, id, classes
_WHAT_IS_AT_JS = ("([x, y]) => { const t = document.elementFromPoint(x, y); if (!t) return 'nothing';"
                  " const c = (t.getAttribute('class') || '').trim(); return t.tagName.toLowerCase()"
                  " + (t.id ? '#' + t.id : '') + (c ? '.' + c.split(/\\s+/).join('.') : ''); }")


def _click_end_of(page, element, seconds: float = 15.0, figure=None) -> str:
    """Click 2 px inside the right end of ``element``, once the point is on it.

    The element is scrolled to the middle of the screen, and the click waits until the page
    has settled there (:data:`_SETTLED_JS`: the element rendered and still for three frames,
    ``figure`` drawn at its box's width) and the point is on the element. On a loaded
    machine a block above can still be laid out after that (``content-visibility: auto``),
    and the element is then brought to the middle again, up to ``seconds``. Returns "" when
    the click was on the element, else what was at the point instead, and where (it never
    settled there), and what had not settled if anything."""
    seen = ""
    deadline = time.monotonic() + seconds
    while True:
        element.evaluate("e => e.scrollIntoView({block: 'center', inline: 'center'})")
        left_ms = max(500, int((deadline - time.monotonic()) * 1000))
        unsettled = page.evaluate(_SETTLED_JS, [element, figure, left_ms])
        box = element.bounding_box()
        x, y = box["x"] + box["width"] - 2, box["y"] + box["height"] / 2
        if not unsettled and page.evaluate(_HITS_JS, [element, x, y]):
            page.mouse.click(x, y)
            return ""
        seen = f"{page.evaluate(_WHAT_IS_AT_JS, [x, y])} at ({x:.0f}, {y:.0f})"
        if unsettled:
            seen += f" ({unsettled})"
        if time.monotonic() > deadline:
            return seen


def _checked_on_english_twin(name: str) -> bool:
    """Whether part of the page's check was done on its English twin: a Chinese chapter shows
    its twin's figures, file for file and byte for byte (tests/test_zh_site.py), drawn by the
    same scripts at the same widths, and the same theme. On such a page the figures must still
    load and draw; their sliders, keys, phone layout and legibility are checked once, on the
    English page (about 3 s of the browser's time a page). And axe at phone width: axe judges
    a page's markup alike at any width, except for what the width shows or hides (the theme's
    header, sidebars and drawers, a formula's sideways scroll box); a Chinese page's markup is
    judged on its own desktop pass, and what the phone width changes on its twin's phone pass
    (about 1 s a page)."""
    return name.startswith("zh/")


@pytest.mark.parametrize("name", PAGES)
def test_page_renders_offline(name: str, server: str, browser, built_book: Path, colour_kinds) -> None:
    path = built_book / _page_file(name)
    assert path.is_file(), f"{path} was not built"
    assert AXE_JS.is_file(), f"{AXE_JS} is missing: run bash scripts/test.sh (it installs axe-core)"
    url = f"{server}/{_page_file(name)}"

    problems: list[str] = []
    context = offline_context(browser, problems, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("pageerror", lambda e: problems.append(f"JS exception: {e}"))
    page.on(
        "console",
        lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on(
        "requestfailed",
        lambda r: problems.append(f"request failed: {r.url} ({r.failure})"),
    )
    page.on(
        "response",
        lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
    )
    plotly_requests: list[str] = []
    page.on("request", lambda r: plotly_requests.append(r.url) if "plotly" in r.url.rsplit("/", 1)[-1] else None)
    try:
        page.goto(url, wait_until="networkidle", timeout=TIMEOUT_MS)
        n_figures = page.evaluate("() => document.querySelectorAll('.plotly-graph-div').length")
        if not n_figures and plotly_requests:
            problems.append(f"plotly.js requested by a page without plotly figures: {plotly_requests}")
        if n_figures:
            page.evaluate("() => window.attnEduFigures.drawAll()")
        try:
            page.wait_for_function(_WAIT_RENDERED_JS, timeout=TIMEOUT_MS, polling=250)
        except Exception:
            problems.append(f"math / plotly figures / widgets not rendered within {TIMEOUT_MS // 1000} s")
        if page.evaluate("() => Array.from(document.querySelectorAll('.math'))"
                         ".filter(m => !m.querySelector('.katex')).length"):
            status = page.evaluate(
                "() => (window.MathJax && MathJax.startup && MathJax.startup.promise)"
                " ? MathJax.startup.promise.then(() => 'ok', e => 'MathJax failed: ' + e)"
                " : 'MathJax was not loaded on a page with math'"
            )
            if status != "ok":
                problems.append(status)
        # web fonts (KaTeX's, MathJax's) are requested lazily, once text uses them: wait for
        # them, then for every resource the page asked for to have arrived (the page's own
        # Resource Timing; Playwright's "networkidle" is not re-reached on the API page,
        # 43,000 elements, although Chromium reports it idle and no request is in flight)
        page.evaluate("() => document.fonts.ready.then(() => true)")
        try:
            page.wait_for_function("() => document.fonts.status === 'loaded' && performance"
                                   ".getEntriesByType('resource').every(e => e.responseEnd > 0)",
                                   timeout=TIMEOUT_MS, polling=250)
        except Exception:
            problems.append(f"the page's requests did not all finish within {TIMEOUT_MS // 1000} s")

        SHOTS.mkdir(parents=True, exist_ok=True)  # an English chapter whole; other pages, their first screen
        page.screenshot(path=str(SHOTS / f"{name.replace('/', '__')}.png"), full_page=name.startswith("notebooks/"))

        # ---- math: KaTeX (build time) or MathJax
        n_math = page.evaluate("() => document.querySelectorAll('.math').length")
        n_typeset = page.evaluate(
            "() => document.querySelectorAll('.math mjx-container, .math > .katex, .math > .katex-display').length")
        if n_math:
            untypeset = page.evaluate(
                "() => Array.from(document.querySelectorAll('.math'))"
                ".filter(m => !m.querySelector('mjx-container, .katex')).map(m => m.textContent.slice(0, 80))"
            )
            if untypeset:
                problems.append(f"{len(untypeset)}/{n_math} math elements not typeset: {untypeset[:3]}")
            assert n_typeset >= n_math - len(untypeset)
        raw = page.evaluate(_RAW_TEX_JS)
        if raw:
            problems.append(f"raw TeX left in the page text: {raw[:3]}")

        # ---- plotly
        n_plotly = page.evaluate("() => document.querySelectorAll('.plotly-graph-div').length")
        n_drawn = page.evaluate(
            "() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
            ".filter(d => d.querySelector('.main-svg')).length"
        )
        if n_drawn != n_plotly:
            problems.append(f"only {n_drawn} of {n_plotly} plotly figures drawn")
        if n_plotly and not page.evaluate("() => typeof window.Plotly === 'object'"):
            problems.append("window.Plotly is not defined on a page with plotly figures")
        if n_plotly:
            types = page.evaluate(_TRACE_TYPES_JS)
            if types["missing"]:
                problems.append(f"trace types {types['missing']} are not in the page's plotly.js bundle")
        unlabelled = page.evaluate(
            "() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
            ".filter(d => !(d.getAttribute('aria-label') || '').trim()).length")
        if unlabelled:
            problems.append(f"{unlabelled} plotly figures without a text alternative (aria-label)")
        no_alt = page.evaluate(
            "() => Array.from(document.images).filter(i => !(i.getAttribute('alt') || '').trim())"
            ".map(i => i.src.slice(0, 80))")
        if no_alt:
            problems.append(f"{len(no_alt)} images without alt text: {no_alt[:3]}")

        # ---- plotly sliders work without a kernel: click the right end of each slider's
        # rail and the slider must move to its last step (running the step's method,
        # e.g. "animate" to a saved frame) without any JS error.
        divs = [] if _checked_on_english_twin(name) else page.query_selector_all(".plotly-graph-div")
        for i, div in enumerate(divs):
            rail = div.query_selector(".slider-container .slider-rail-touch-rect")
            if rail is None:
                continue
            n_steps = page.evaluate("d => d.layout.sliders[0].steps.length", div)
            covered_by = _click_end_of(page, rail, figure=div)
            if covered_by:
                problems.append(f"plotly figure {i}: its slider's rail cannot be clicked where a "
                                f"reader clicks it (at its right end: {covered_by})")
                continue
            _until(page, "([d, n]) => d.layout.sliders[0].active === n - 1", [div, n_steps], 15_000)
            active = page.evaluate("d => d.layout.sliders[0].active", div)
            if active != n_steps - 1:
                problems.append(
                    f"plotly figure {i}: slider did not move to its last step "
                    f"(active={active}, steps={n_steps})"
                )
            # the keyboard: the slider's range input (after the figure), Home = first step
            keys = page.evaluate_handle(
                "d => { let e = d.nextElementSibling;"
                " while (e && !(e.matches && e.matches('input.attn-edu-slider-keys'))) e = e.nextElementSibling;"
                " return e; }", div).as_element()
            if keys is None:
                problems.append(f"plotly figure {i}: its slider has no keyboard control")
                continue
            keys.focus()
            page.keyboard.press("Home")
            _until(page, "d => d.layout.sliders[0].active === 0", div)
            active = page.evaluate("d => d.layout.sliders[0].active", div)
            if active != 0:
                problems.append(f"plotly figure {i}: the Home key did not move its slider "
                                f"to the first step (active={active})")

        # ---- no ipywidgets on a page without a kernel: the live explorers' stand-ins
        w = page.evaluate(_WIDGETS_JS)
        if any(w.values()):
            problems.append(f"ipywidgets on the static page (controls that do nothing): {w}")
        notes = page.evaluate(
            "() => Array.from(document.querySelectorAll('.attn-edu-live-note'))"
            ".map(n => (n.querySelector('a[href]') || {}).href || '')")
        if any(not href.startswith("https://colab.research.google.com/") for href in notes):
            problems.append(f"a live explorer's note without the chapter's Colab link: {notes}")

        # ---- axe-core: no serious or critical WCAG 2 A/AA violation
        problems += [f"axe: {v}" for v in _axe(page, kinds=colour_kinds)]

        # ---- dropdown solutions behind a toggle
        n_dropdown = page.evaluate("() => document.querySelectorAll('.admonition.dropdown').length")
        if n_dropdown:
            n_buttons = page.evaluate(
                "() => document.querySelectorAll('.admonition.dropdown .toggle-button').length"
            )
            if n_buttons != n_dropdown:
                problems.append(f"{n_dropdown} dropdown admonitions but {n_buttons} toggle buttons")
            else:
                hidden = page.evaluate(
                    "() => document.querySelector('.admonition.dropdown').classList.contains('toggle-hidden')"
                )
                # by the keyboard (a button: Enter clicks it), which also holds where a late font
                # or a section laid out on arrival moves the button under a mouse click
                toggle = page.locator(".admonition.dropdown .toggle-button").first
                toggle.focus()
                page.keyboard.press("Enter")
                try:  # the theme's handler may run a moment after the click on a busy machine
                    page.wait_for_function("() => !document.querySelector('.admonition.dropdown')"
                                           ".classList.contains('toggle-hidden')", timeout=5000, polling=100)
                    shown = True
                except Exception:  # noqa: BLE001  (Playwright's TimeoutError)
                    shown = False
                if not hidden:
                    problems.append("the first dropdown solution is not hidden when the page loads")
                elif not shown:
                    problems.append("the first dropdown solution's toggle does not open it (5 s)")

        # ---- launch / repository buttons on chapter pages (a Chinese chapter: its notebook)
        en_name = name.removeprefix("zh/")
        nb_file = f"{en_name}.ipynb" if en_name == name else en_name.replace("notebooks/", "notebooks/zh/") + ".ipynb"
        source = ROOT / nb_file
        if en_name in TOC_PAGES and source.exists():
            cfg = _repo_config()
            owner_repo = urlsplit(cfg["url"]).path.strip("/")
            nb_path = "/".join(p for p in (cfg["path_to_book"], nb_file) if p)
            colab = f"{cfg['colab']}/github/{owner_repo}/blob/{cfg['branch']}/{nb_path}"
            if not page.locator(f'a[href="{colab}"]').count():
                problems.append(f"no Colab launch link {colab}")
            if not page.locator(f'a[href="{cfg["url"]}"]').count():
                problems.append(f"no repository link {cfg['url']}")
    finally:
        context.close()

    assert not problems, f"{url}:\n  " + "\n  ".join(problems)


def test_the_slider_click_says_what_covers_the_rail(browser) -> None:
    """The harness's click (``_click_end_of``) clicks a rail it can reach and, when something
    lies over the rail's end, says what, instead of clicking it."""
    page = browser.new_page(viewport={"width": 600, "height": 400})
    try:
        page.set_content('<svg width="300" height="40"><rect id="rail" width="300" height="40" '
                         'onclick="this.dataset.hit=1"/></svg>'
                         '<div id="cover" style="position:fixed;left:250px;top:0;width:100px;height:60px"></div>')
        rail = page.query_selector("#rail")
        assert re.fullmatch(r"div#cover at \(306, 28\)", _click_end_of(page, rail, seconds=0.5))  # 8 px body margin
        assert page.evaluate("() => !document.querySelector('#rail').dataset.hit")
        page.evaluate("() => document.querySelector('#cover').remove()")
        assert _click_end_of(page, rail, seconds=0.5) == ""
        assert page.evaluate("() => document.querySelector('#rail').dataset.hit === '1'")
        # a figure that plotly drew at another width than its box's: no click, and why
        page.evaluate("() => { const d = document.createElement('div'); d.id = 'fig'; d.style.width = '300px';"
                      " d._fullLayout = {width: 500}; d.layout = {}; document.body.appendChild(d);"
                      " document.querySelector('#rail').dataset.hit = ''; }")
        figure = page.query_selector("#fig")
        said = _click_end_of(page, rail, seconds=0.5, figure=figure)
        assert said.endswith("(the figure is drawn 500 px wide in a 300 px box)"), said
        assert page.evaluate("() => !document.querySelector('#rail').dataset.hit")
        page.evaluate("() => { document.querySelector('#fig').layout = {width: 500}; }")  # a width of its own
        assert _click_end_of(page, rail, seconds=0.5, figure=figure) == ""
    finally:
        page.close()


def test_every_built_page_is_checked(built_book: Path) -> None:
    """No HTML content page escapes the browser test (and every toc entry was built)."""
    built = {
        p.relative_to(built_book).with_suffix("").as_posix()
        for p in built_book.rglob("*.html")
        if not any(part.startswith("_") for part in p.relative_to(built_book).parts)
    }
    built -= {"index", "zh/index"}  # redirects to the root page, checked below
    assert set(PAGES) <= built, f"toc pages not built: {sorted(set(PAGES) - built)}"
    assert built <= set(PAGES), f"pages not in the toc: {sorted(built - set(PAGES))}"
    for index in (built_book / "index.html", built_book / "zh" / "index.html"):
        assert f"{TOC_PAGES[0]}.html" in index.read_text(encoding="utf-8"), f"{index} does not redirect to the root page"


def test_no_cdn_urls_in_script_or_link_tags(built_book: Path) -> None:
    """Static check: no <script src> / <link href> points off the site."""
    pattern = re.compile(r"<(?:script[^>]*\bsrc|link[^>]*\bhref)=[\"'](https?:)?//", re.I)
    offenders = []
    for p in built_book.rglob("*.html"):
        if p.relative_to(built_book).parts[0] in ("_static", "_sources"):
            continue
        for m in pattern.finditer(p.read_text(encoding="utf-8")):
            line = p.read_text(encoding="utf-8")[m.start() : m.start() + 160]
            if "rel=\"canonical\"" in line:
                continue
            offenders.append(f"{p.relative_to(built_book)}: {line}")
    assert not offenders, "\n".join(offenders[:20])


def test_api_page_documents_every_public_name(built_book: Path) -> None:
    """Every name of every module's ``__all__`` listed on book/api.md has its entry (an
    anchor) on the built page: autodoc found it and Sphinx rendered it."""
    from conftest import api_page_members

    html = (built_book / "book" / "api.html").read_text()
    missing = [f"{module}.{name}" for module, names in api_page_members().items() for name in names
               if f'id="{module}.{name}"' not in html]
    assert not missing, missing


def test_pages_do_not_inline_plotly_js(built_book: Path) -> None:
    """The book serves plotly.js once from _static; the chapters' first cell must not
    embed its 4.8 MB loader (attn_edu.notebook.plotly_js_loader) during the build."""
    from attn_edu.notebook import LOADER_ID

    inlined = [p.relative_to(built_book).as_posix() for p in built_book.rglob("*.html")
               if LOADER_ID in p.read_text(encoding="utf-8")]
    assert not inlined, f"plotly.js inlined into {inlined}"


def test_no_heavy_script_blocks_the_first_paint(built_book: Path) -> None:
    """Every <script src> in a page's <head> that is neither defer nor async (so the
    browser stops parsing until it has run) weighs at most 50 KB."""
    offenders = []
    for p in built_book.rglob("*.html"):
        if p.relative_to(built_book).parts[0] in ("_static", "_sources"):
            continue
        text = p.read_text(encoding="utf-8")
        head = text[: text.find("</head>")]
        for tag in re.findall(r"<script\b[^>]*>", head):
            src = re.search(r'\bsrc="([^"]+)"', tag)
            if not src or re.search(r"\b(defer|async)\b", tag) or 'type="module"' in tag:
                continue
            target = (p.parent / src.group(1).split("?")[0]).resolve()
            size = target.stat().st_size if target.is_file() else 0
            if size > MAX_BLOCKING_HEAD_SCRIPT:
                offenders.append(f"{p.relative_to(built_book)}: {src.group(1)} ({size // 1024} KB)")
    assert not offenders, "render-blocking scripts over 50 KB:\n" + "\n".join(offenders[:20])


def test_every_chapter_draws_only_trace_types_of_the_plotly_bundle(built_book: Path) -> None:
    """The trace types each chapter's figures use, against the partial plotly.js bundle the
    book serves (book/_ext/attn_edu_book/figures.py: BUNDLE_TRACE_TYPES, from the bundle's README)."""
    import json as _json

    from conftest import book_extension

    ext = book_extension("attn_edu_book").figures
    readme = (REPO / "book" / "_static" / "plotly" / "README.md").read_text(encoding="utf-8")
    for kind in ext.BUNDLE_TRACE_TYPES:
        assert f"`{kind}`" in readme, f"{kind} is not a trace type of the vendored bundle"
    used = {}
    for name in TOC_PAGES:
        text = (built_book / _page_file(name)).read_text(encoding="utf-8")
        for m in re.finditer(r'<script type="text/x-attn-edu-plotly"([^>]*)>(.*?)</script>', text, re.S):
            src = re.search(r'data-src="([^"]+)"', m.group(1))
            if src:  # the figure's data has its own script (the build moves it off the page)
                data = (built_book / _page_file(name)).parent.joinpath(src.group(1)).read_text(encoding="utf-8")
                fig = _json.loads(data.split("]=", 1)[1].rstrip().rstrip(";"))["fig"]
            else:
                fig = _json.loads(re.search(r"var fig = (.*?);\n\s*var config = ", m.group(2), re.S).group(1))
            used.setdefault(name, set()).update(ext._trace_types(fig))
    assert used, "no chapter has a plotly figure: the bundle check checks nothing"
    outside = {name: sorted(types - ext.BUNDLE_TRACE_TYPES) for name, types in used.items()
               if types - ext.BUNDLE_TRACE_TYPES}
    print({name: sorted(types) for name, types in used.items()})
    assert not outside, f"trace types outside the plotly.js bundle: {outside}"


# --------------------------------------------------------------------------- on a phone
#: the phone the book is checked on: CSS px of the viewport (a 6.1" phone; 358 px of column)
PHONE = {"width": 390, "height": 844}
#: the smallest text a reader is asked to read, in CSS px (matplotlib figures: the rule below)
MIN_TEXT_PX = 9

#: Every display formula, inline formula, inline code span and image of the article: each of
#: its boxes (a span broken over lines has several) lies inside the viewport, or inside an
#: ancestor that scrolls sideways (``overflow-x: auto|scroll`` with room to scroll), which
#: must be a tab stop -- and, for a formula, have an accessible name. An ancestor that clips
#: (``overflow: hidden``) what sticks out of it is a failure. Measured from element boxes.
_CLIPPED_JS = r"""
() => {
  const vw = document.documentElement.clientWidth, out = [];
  const named = e => !!(e.getAttribute('aria-label') || e.getAttribute('aria-labelledby') || '').trim();
  function check(el, kind, needName) {
    for (const r of Array.from(el.getClientRects()).filter(r => r.width > 0.5 && r.height > 0.5)) {
      let inBox = false;
      for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
        const cs = getComputedStyle(a);
        if (cs.overflowX === 'visible') continue;
        const ar = a.getBoundingClientRect();
        if (r.left >= ar.left - 1 && r.right <= ar.right + 1) continue;
        const scrolls = (cs.overflowX === 'auto' || cs.overflowX === 'scroll') && a.scrollWidth > a.clientWidth;
        const what = `${kind} "${(el.textContent || el.getAttribute('alt') || '').trim().slice(0, 50)}"`;
        if (!scrolls) out.push(`${what} is cut off by ${a.tagName.toLowerCase()}.${String(a.className).split(' ')[0]} (${Math.round(r.width)} px in ${Math.round(ar.width)} px)`);
        else if (a.tabIndex < 0) out.push(`${what} scrolls in a box the keyboard cannot reach`);
        else if (needName && a.matches('div.math') && !named(a)) out.push(`${what} scrolls in a box without an accessible name`);
        inBox = true;
        break;
      }
      if (!inBox && (r.right > vw + 1 || r.left < -1)) {
        out.push(`${kind} "${(el.textContent || el.getAttribute('alt') || '').trim().slice(0, 50)}" runs off the screen (${Math.round(r.left)}..${Math.round(r.right)} of ${vw} px)`);
        break;
      }
    }
  }
  const art = document.querySelector('.bd-article') || document.querySelector('main') || document.body;
  art.querySelectorAll('div.math > .katex-display > .katex').forEach(e => check(e, 'display formula', true));
  art.querySelectorAll('span.math > .katex').forEach(e => check(e, 'formula', false));
  art.querySelectorAll('code').forEach(e => { if (!e.closest('pre')) check(e, 'code', false); });
  art.querySelectorAll('img').forEach(e => check(e, 'image', false));
  if (document.documentElement.scrollWidth > vw + 1) out.push(`the page scrolls sideways (${document.documentElement.scrollWidth} px wide)`);
  return out;
}
"""

#: In every drawn plotly figure: the boxes of its texts (main title, axis titles,
#: annotations, which include subplot titles, the legend, colour bars, a slider's current
#: value, menu buttons) lie inside the figure, and no two of them intersect.
_PLOTLY_TEXT_JS = r"""
() => Array.from(document.querySelectorAll('.plotly-graph-div')).map((div, fi) => {
  const fr = div.getBoundingClientRect(), boxes = [], out = [];
  const add = (sel, kind) => div.querySelectorAll(sel).forEach(e => {
    if (kind === 'axis title' && e.closest('.colorbar')) return;  // a colour bar's title: in its box
    const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
    if (r.width < 1 || r.height < 1 || cs.visibility === 'hidden' || cs.display === 'none') return;
    if (boxes.some(b => b.el === e || b.el.contains(e))) return;
    boxes.push({el: e, kind, text: (e.textContent || '').trim().slice(0, 40), l: r.left, t: r.top, r: r.right, b: r.bottom});
  });
  add('.infolayer .gtitle', 'title');
  add('.infolayer text[class$="title"]:not(.gtitle)', 'axis title');
  add('.infolayer .annotation', 'annotation');
  add('.infolayer .legend', 'legend');
  add('.infolayer .colorbar', 'colour bar');
  add('.slider-container .slider-currentvalue', 'slider value');
  add('.updatemenu-container .updatemenu-button', 'menu');
  const name = b => `${b.kind} "${b.text}"`;
  for (const b of boxes)
    if (b.l < fr.left - 1 || b.r > fr.right + 1 || b.t < fr.top - 1 || b.b > fr.bottom + 1)
      out.push(`${name(b)} sticks out of the figure (${Math.round(b.l - fr.left)}..${Math.round(b.r - fr.left)} x ${Math.round(b.t - fr.top)}..${Math.round(b.b - fr.top)} in ${Math.round(fr.width)} x ${Math.round(fr.height)})`);
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (Math.min(a.r, b.r) - Math.max(a.l, b.l) > 1 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 1)
      out.push(`${name(a)} overlaps ${name(b)}`);
  }
  return {figure: fi, title: div.getAttribute('data-title'), problems: out, texts: boxes.length};
})
"""

#: a figure's state: what its sliders and menus show, which traces are visible, its title
_FIGURE_STATE_JS = """
d => JSON.stringify([(d.layout.sliders || []).map(s => s.active), (d.layout.updatemenus || []).map(u => u.active),
                     d.data.map(t => t.visible), (d.layout.title || {}).text, d.data.map(t => (t.z || t.y || []).length)])
"""


#: resolves after the next two frames: what was changed before it is laid out and painted
_TWO_FRAMES_JS = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"


def _phone_page(browser, server: str, name: str, problems: list):
    context = offline_context(browser, problems, viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("pageerror", lambda e: problems.append(f"JS exception: {e}"))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.goto(f"{server}/{_page_file(name)}", wait_until="networkidle", timeout=TIMEOUT_MS)
    return context, page


def _phone_figure_problems(page) -> list[str]:
    """The figures of a page at phone width (drawn): plotly's texts and keyboard controls,
    "Back to top" beside the sliders, matplotlib's legibility or full-size view."""
    problems: list[str] = []
    # ---- plotly: text boxes, then every control with the keyboard
    for fig in page.evaluate(_PLOTLY_TEXT_JS):
        problems += [f"plotly figure {fig['figure']} ({fig['title']}): {p}" for p in fig["problems"]]
    for i, div in enumerate(page.query_selector_all(".plotly-graph-div")):
        want = page.evaluate("d => (d.layout.sliders || []).filter(s => (s.steps || []).length > 1).length"
                             " + (d.layout.updatemenus || []).filter(u => (u.buttons || []).length"
                             " && u.visible !== false).length", div)
        controls = page.evaluate_handle(
            "d => { const out = []; for (let e = d.nextElementSibling; e && e.classList"
            " && e.classList.contains('attn-edu-figure-keys'); e = e.nextElementSibling) out.push(e);"
            " return out; }", div)
        n = page.evaluate("c => c.length", controls)
        if n != want:
            problems.append(f"plotly figure {i}: {want} sliders and menus but {n} keyboard controls")
        for k in range(n):
            control = page.evaluate_handle("([c, k]) => c[k]", [controls, k]).as_element()
            target = control.query_selector("button") or control
            target.focus()
            page.keyboard.press("Shift+Tab")
            page.keyboard.press("Tab")  # back by the keyboard: it is in the tab order
            what = f"plotly figure {i}, control {k}"
            if not page.evaluate("t => document.activeElement === t", target):
                problems.append(f"{what}: Tab does not reach it")
                continue
            info = page.evaluate(
                "t => { const r = t.getBoundingClientRect(), cs = getComputedStyle(t);"
                " const box = t.closest('.attn-edu-figure-keys');"
                " return {w: r.width, h: r.height, l: r.left, r: r.right, outline: cs.outlineStyle,"
                " ow: parseFloat(cs.outlineWidth), name: (box.getAttribute('aria-label') || '').trim(),"
                " text: t.textContent.trim(), tag: t.tagName}; }", target)
            if info["w"] < 10 or info["h"] < 10 or info["l"] < -1 or info["r"] > PHONE["width"] + 1:
                problems.append(f"{what}: not shown on the screen when it has the focus ({info})")
            if info["outline"] == "none" or info["ow"] < 2:
                problems.append(f"{what}: no visible focus ({info['outline']} {info['ow']} px)")
            if not (info["name"] or info["text"]):
                problems.append(f"{what}: no accessible name")
            before = page.evaluate(_FIGURE_STATE_JS, div)
            keys = {"INPUT": ("End", "Home"), "SELECT": ("ArrowDown", "ArrowUp")}.get(info["tag"], ("Enter",))
            for key in keys:  # at the last step already, the other way
                page.keyboard.press(key)
                if _until(page, f"([d, b]) => ({_FIGURE_STATE_JS})(d) !== b", [div, before], 3000):
                    break
            else:
                problems.append(f"{what} ({info['tag'].lower()} {info['name'] or info['text']}): "
                                f"{key} changes nothing in the figure")
            if info["tag"] == "BUTTON":  # Play: stop the animation again
                for b in control.query_selector_all("button")[1:]:
                    b.focus()
                    page.keyboard.press("Enter")

    # ---- "Back to top" never covers a figure's controls
    slider = page.query_selector(".plotly-graph-div .slider-container")
    if slider is not None:
        page.evaluate("s => { const r = s.getBoundingClientRect();"
                      " window.scrollBy(0, r.top - innerHeight * 0.9 + 300); }", slider)
        page.wait_for_timeout(200)
        page.mouse.wheel(0, -300)  # scrolling up shows the theme's button
        page.wait_for_timeout(500)
        covered = page.evaluate(
            "() => { const b = document.getElementById('pst-back-to-top'); if (!b) return [];"
            " const r = b.getBoundingClientRect(); if (!r.width) return [];"
            " return Array.from(document.querySelectorAll('.slider-container, .updatemenu-container'))"
            ".filter(s => { const q = s.getBoundingClientRect(); return q.right > r.left && q.left < r.right"
            " && q.bottom > r.top && q.top < r.bottom; }).length; }")
        if covered:
            problems.append(f"'Back to top' covers {covered} figure controls")

    # ---- matplotlib figures: legible as shown, or opened full size with the keyboard
    for img in page.query_selector_all(".bd-article img[data-text-px]"):
        info = page.evaluate("i => ({px: parseFloat(i.dataset.textPx), w: i.clientWidth, nw: i.naturalWidth,"
                             " alt: i.alt, link: !!i.closest('a.attn-edu-zoom')})", img)
        shown = info["px"] * info["w"] / max(info["nw"], 1)
        if shown >= MIN_TEXT_PX:
            continue
        if info["px"] < MIN_TEXT_PX:
            problems.append(f"figure '{info['alt'][:50]}': its smallest text is {info['px']} px even at "
                            f"full size (under {MIN_TEXT_PX})")
            continue
        if not info["link"]:
            problems.append(f"figure '{info['alt'][:50]}': text {shown:.1f} px and no full-size view")
            continue
        link = img.evaluate_handle("i => i.closest('a.attn-edu-zoom')").as_element()
        link.focus()
        page.keyboard.press("Enter")
        _until(page, "() => { const i = document.querySelector('dialog.attn-edu-zoom-view[open] img');"
                     " return i && i.complete && i.getBoundingClientRect().width > 0; }")
        big = page.evaluate("() => { const d = document.querySelector('dialog.attn-edu-zoom-view[open]');"
                            " const i = d && d.querySelector('img'); return i && {w: i.getBoundingClientRect().width,"
                            " alt: i.alt, focus: d.contains(document.activeElement)}; }")
        if not big or big["w"] < info["nw"] - 1 or big["alt"] != info["alt"] or not big["focus"]:
            problems.append(f"figure '{info['alt'][:50]}': Enter does not open it at full size with its "
                            f"alt text ({big}, natural width {info['nw']})")
        page.keyboard.press("Escape")
        _until(page, "() => !document.querySelector('dialog.attn-edu-zoom-view')", timeout_ms=3000)
        if page.evaluate("() => !!document.querySelector('dialog.attn-edu-zoom-view')") or \
                not page.evaluate("l => document.activeElement === l", link):
            problems.append(f"figure '{info['alt'][:50]}': Escape does not close the full-size view "
                            "and give the focus back")
    return problems


@pytest.mark.parametrize("name", PAGES)
def test_page_on_a_phone(name: str, server: str, browser, built_book: Path) -> None:
    """The page at 390 x 844 CSS px: nothing of the text is cut off, the plotly figures are
    laid out for the width (no two texts meet, all inside the figure), every plotly control
    is reachable with Tab and works with the keyboard, and matplotlib figures are legible.

    The legibility rule: the smallest text of a notebook's matplotlib figure (``data-text-px``,
    :func:`attn_edu.alt_text.figure_text_px`, in the image's pixels) is at least
    ``MIN_TEXT_PX`` CSS px as the page shows the image, or else the image is a link that
    Enter opens at its natural size, in a dialog with the same alt text, where that text is
    at least ``MIN_TEXT_PX`` px; Escape closes it and gives the focus back. (A Chinese
    chapter's figures are its English twin's: see :func:`_checked_on_english_twin`.)"""
    problems: list[str] = []
    context, page = _phone_page(browser, server, name, problems)
    figures = not _checked_on_english_twin(name)
    try:
        if figures and page.evaluate("() => !!window.attnEduFigures"):
            page.evaluate("() => window.attnEduFigures.drawAll()")
            page.wait_for_function("() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
                                   ".every(d => d.querySelector('.main-svg'))", timeout=TIMEOUT_MS, polling=250)
            # drawAll's promise holds every figure's phone layout, its second pass included
            # (figures.js: the sizes plotly drew); then two frames for the page to lay it out
            page.evaluate(_TWO_FRAMES_JS)
        page.add_style_tag(content=".bd-article section, .bd-article section > * { content-visibility: visible !important; }")
        page.evaluate("() => Promise.all(Array.from(document.images, i => { i.loading = 'eager';"
                      " return i.complete ? 0 : new Promise(r => { i.onload = i.onerror = r; }); }))")
        page.evaluate(_TWO_FRAMES_JS)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"phone-{name.replace('/', '__')}.png"))

        problems += page.evaluate(_CLIPPED_JS)
        if not _checked_on_english_twin(name):
            problems += [f"axe at {PHONE['width']} px: {v}" for v in _axe(page, phone=True)]

        if figures:
            problems += _phone_figure_problems(page)
    finally:
        context.close()
    assert not problems, f"{name} at {PHONE['width']} x {PHONE['height']}:\n  " + "\n  ".join(problems)
