"""Local Sphinx extension for the attn-edu book: make the built HTML fully offline.

Loaded through ``_config.yml`` (``sphinx: local_extensions: attn_edu_book: book/_ext``).

What it does, and why:

* **plotly.js from the build, only when a figure is about to be seen.** Chapters draw
  plotly figures with the renderer of :func:`attn_edu.notebook.setup_notebook`, whose
  ``text/html`` output is a ``<div class="plotly-graph-div">`` plus an inline script
  calling ``Plotly.newPlot``. On the page we turn that script into
  ``<script type="text/x-attn-edu-plotly">`` (which the browser does not run), give the
  div a text alternative (:func:`attn_edu.alt_text.plotly_alt_text` of its figure), and
  add one small deferred script, ``_static/attn-edu/figures.js``, which loads plotly.js
  and runs a figure's script when the figure comes near the viewport (and gives every
  plotly slider a keyboard control). Pages without a figure load neither.
  plotly.js is the published partial bundle ``plotly.js-cartesian-dist-min`` (vendored in
  ``book/_static/plotly``, see its README; a third of the full bundle), which holds every
  trace type the book draws: a figure with any other trace type is a build warning (so
  ``-W`` fails), listed in :data:`BUNDLE_TRACE_TYPES`. When the installed plotly.py ships
  another plotly.js version than the vendored one, the installed full ``plotly.min.js``
  is served instead (a logged note; figures still draw).
* **Live explorers as figures.** A live explorer's display bundle carries, next to its
  ipywidgets view, a ``text/html`` stand-in: its saved figure and a note that it
  recomputes in Jupyter or Colab (:mod:`attn_edu.widgets`). ``_config.yml`` removes the
  widget view from the HTML builder's mime priorities, so the page shows the stand-in,
  and we fill its ``attn-edu-colab-slot`` with the chapter's Colab link. No widget state
  and no widget manager are put on a page (no control that cannot do anything), and an
  output that still holds a widget view is a build warning.
* **Text alternatives.** Every matplotlib image of a notebook gets the ``alt`` text that
  :func:`attn_edu.alt_text.register_alt_text` stored in its output's metadata (or,
  without one, a generic description that names the chapter), through a myst-nb mime
  render plugin for ``image/png``.
* **Math typeset at build time.** Every formula is typeset by KaTeX (vendored:
  ``book/_ext/katex/katex.min.js`` runs under Node during the build,
  ``book/_static/katex`` holds its CSS and fonts, see its README), so a page shows its
  math without running any script, and MathJax is not loaded on a page where KaTeX
  typeset everything. A formula KaTeX cannot typeset (logged) stays for MathJax on its
  page; without Node.js every page keeps MathJax as before.
* **Icons without 1.5 MB of JavaScript.** pydata-sphinx-theme draws its Font Awesome
  icons with ``fontawesome.js`` (1.5 MB, every icon there is), which swaps each
  ``<i class="fa-solid fa-bars">`` for an inline SVG when the page loads. At the end of
  the build we do that swap in the HTML files, with the SVG paths read from that same
  file, and drop the script from every page where every icon was swapped.
* **Theme scripts deferred.** Every external script of the page (Sphinx's, the theme's,
  the extensions') gets ``defer``, except ``documentation_options.js``, whose global the
  page's inline scripts use; the search
  scripts that the theme writes into ``<head>`` itself get ``defer`` when the build ends.
* **Images when they are needed.** Every image of a page but the first gets
  ``loading="lazy"``: a first visit downloads only what is near the screen.
* **Valid lists.** The bibliography (sphinxcontrib-bibtex) writes ``role="list"`` around
  entries with ``role="doc-biblioentry"``, which is not a list item; we write
  ``role="listitem"`` instead.
* **No duplicated inline scripts.** sphinx-thebe registers its inline configuration
  script (``const THEBE_JS_URL = ...``) with ``app.add_js_file`` in an
  ``env-before-read-docs`` handler (sphinx-togglebutton does the same with its
  ``var togglebuttonSelector``); Sphinx stores it once in the registry (filename
  ``None``) and once in the builder (filename ``""``), does not see the two as equal,
  and the page then declares the ``const`` twice:
  ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared``.  We drop
  exact duplicates of inline scripts from every page (``html-page-context``), which
  keeps the launch buttons (they do not depend on it) and sphinx-thebe.js working.
* **No script that can do nothing.** With ``launch_buttons: thebe: false`` (the book's
  setting) sphinx-thebe's script, stylesheet and inline configuration leave every page,
  and sphinx-design's tab script every page without a tab set (:func:`_idle_assets`).
* **No warning for the plotly mime type.** The book renderer's bundle carries both
  ``text/html`` (drawn in the book) and ``application/vnd.plotly.v1+json`` (for
  JupyterLab / VS Code). myst-nb renders every mime type of a bundle while parsing and
  warns "skipping unknown output mime type" for the plotly one, which ``-W`` turns into
  a failure. We add a myst-nb mime-render plugin (the documented
  ``myst_nb.mime_renderers`` protocol, registered in-process instead of through an
  entry point) that renders that mime type to an empty comment; the HTML builder's
  priority list then selects ``text/html``. A bundle that has *only* the plotly mime
  type still fails the build ("No mime type available in priority list"), which is
  what we want: such a figure would be invisible on the static page.
* **plotly.js once, not per chapter.** In a live kernel the chapters' first cell displays
  plotly.js (4.8 MB) so figures draw in any front end offline; the book serves it from
  ``_static`` instead, so :func:`setup` sets ``ATTN_EDU_BOOK_BUILD=1``, which the
  executing kernels inherit and ``attn_edu.setup_notebook`` reads.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: the vendored partial plotly.js bundle, relative to ``_build/html/_static``
PLOTLY_STATIC = "plotly/plotly-cartesian.min.js"
#: where the installed plotly.py's full bundle lands when the versions differ
PLOTLY_FULL_STATIC = "plotly/plotly.min.js"
#: the trace types ``plotly.js-cartesian-dist-min`` registers (its README)
BUNDLE_TRACE_TYPES = frozenset({
    "bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour",
    "image", "pie", "scatter", "scatterternary", "violin",
})
#: the small deferred script that draws figures near the viewport
FIGURES_JS = "attn-edu/figures.js"
#: the small deferred script that opens a figure image at full size (a <dialog>)
ZOOM_JS = "attn-edu/zoom.js"
#: the id of the page's one description of what a figure's link does
ZOOM_HINT_ID = "attn-edu-zoom-hint"
BOOK_CSS = "attn-edu/book.css"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

_STATIC_SRC = Path(__file__).resolve().parents[1] / "_static"
_VERSION_RE = re.compile(r"plotly\.js(?: \([^)]*\))? v(\d+\.\d+\.\d+)")
_FIGURE_RE = re.compile(
    r'<div id="(?P<id>attn-edu-plotly-[0-9a-f]+)" class="plotly-graph-div"(?P<attrs>[^>]*)></div>'
    r'\s*<script type="text/javascript">(?P<js>.*?)</script>',
    re.S,
)
_FIG_JSON_RE = re.compile(r"var fig = (?P<json>.*?);\n\s*var config = ", re.S)
_COLAB_SLOT = '<span class="attn-edu-colab-slot"></span>'


# --------------------------------------------------------------------------- plotly.js
def plotly_js_source() -> Path:
    """Path of ``plotly.min.js`` shipped inside the installed plotly Python package."""
    import plotly  # noqa: PLC0415  (only needed at build time)

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def _js_version(path: Path) -> str | None:
    with open(path, encoding="utf-8") as f:
        m = _VERSION_RE.search(f.read(400))
    return m.group(1) if m else None


def plotly_bundle(app: Sphinx | None = None) -> str:
    """The plotly.js the pages load, relative to ``_static``: the vendored partial bundle,
    or the installed plotly.py's full one when their versions differ."""
    vendored = _STATIC_SRC / PLOTLY_STATIC
    try:
        installed = _js_version(plotly_js_source())
    except (ImportError, OSError):
        return PLOTLY_STATIC
    ours = _js_version(vendored)
    if installed == ours:
        return PLOTLY_STATIC
    logger.info("[attn_edu_book] plotly.py ships plotly.js %s, the vendored partial bundle is %s: "
                "serving the full plotly.min.js (update book/_static/plotly, see its README)",
                installed, ours)
    return PLOTLY_FULL_STATIC


def _builder_inited(app: Sphinx) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    app.add_css_file(BOOK_CSS)
    app.config._attn_edu_plotly = plotly_bundle(app)
    if app.config._attn_edu_plotly != PLOTLY_FULL_STATIC:
        return  # the vendored bundle is copied with the rest of html_static_path
    dst = Path(app.outdir) / "_static" / PLOTLY_FULL_STATIC
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plotly_js_source(), dst)


def _trace_types(fig: dict) -> set:
    traces = list(fig.get("data") or [])
    for frame in fig.get("frames") or []:
        traces += list(frame.get("data") or [])
    return {t.get("type", "scatter") for t in traces if isinstance(t, dict)}


def _figure_alt(js: str) -> tuple[str, set]:
    """The text alternative and trace types of the figure an inline script draws."""
    from attn_edu.alt_text import plotly_alt_text  # noqa: PLC0415

    m = _FIG_JSON_RE.search(js)
    if not m:
        return "Interactive figure.", set()
    fig = json.loads(m.group("json"))
    return plotly_alt_text(fig), _trace_types(fig)


#: where a figure's data goes, relative to the output folder (one small script per figure)
FIGURE_DATA_DIR = "_static/attn-edu-figures"
_FIG_CONFIG_RE = re.compile(r"var config = (?P<json>.*?);\n", re.S)


def figure_data_script(div_id: str, fig_json: str, config_json: str) -> str:
    """The script that carries one figure's data: figures.js adds it to the page (a
    ``<script src>``, which also works for a page opened from the disk) when the figure
    comes near the viewport, and reads ``window.attnEduFigureData[div_id]``."""
    safe = json.dumps(div_id)
    return (f"(window.attnEduFigureData=window.attnEduFigureData||{{}})[{safe}]="
            f'{{"fig":{fig_json},"config":{config_json}}};\n')


def _defer_figures(body: str, pagename: str, outdir: Path | None = None) -> tuple[str, int]:
    """Turn every plotly figure's inline script into one that figures.js runs on demand.

    With ``outdir``, a figure's data (its JSON, up to a few hundred KB on a chapter page)
    leaves the page for ``FIGURE_DATA_DIR/<div id>.js``, which figures.js loads with the
    figure: the page a phone downloads first is smaller by all of its figures."""
    count = 0
    depth = pagename.count("/")

    def swap(m: re.Match) -> str:
        nonlocal count
        count += 1
        js = m.group("js")
        alt, types = _figure_alt(js)
        outside = sorted(types - BUNDLE_TRACE_TYPES)
        if outside:
            logger.warning("[attn_edu_book] %s: a plotly figure uses trace types %s, which the "
                           "partial plotly.js bundle lacks (book/_static/plotly/README.md)",
                           pagename, outside)
        title = re.split(r"\.(?:\s|$)", alt)[0].removeprefix("Interactive figure: ")
        div_id = m.group("id")
        fig, config = _FIG_JSON_RE.search(js), _FIG_CONFIG_RE.search(js)
        inline, src = js, ""
        if outdir is not None and fig and config:
            path = Path(outdir) / FIGURE_DATA_DIR / f"{div_id}.js"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(figure_data_script(div_id, fig.group("json"), config.group("json")), encoding="utf-8")
            inline, src = "", f' data-src="{"../" * depth}{FIGURE_DATA_DIR}/{div_id}.js"'
        return (f'<div id="{div_id}" class="plotly-graph-div"{m.group("attrs")} '
                f'role="figure" aria-label="{html.escape(alt)}" '
                f'data-title="{html.escape(title)}" data-attn-edu-pending></div>\n'
                f'<script type="text/x-attn-edu-plotly" data-div="{div_id}"{src}>'
                f'{inline}</script>')

    return _FIGURE_RE.sub(swap, body), count


# --------------------------------------------------------------------------- math (KaTeX)
KATEX_CSS = "katex/katex.min.css"
#: the accessible name of a display formula's box (it scrolls sideways where it is wider
#: than the column; the theme's lazy tab-stop pass keeps it a tab stop only then)
DISPLAY_MATH_NAME = "equation"
_KATEX_JS = Path(__file__).resolve().parent / "katex" / "render.js"
#: docname -> how many formulas KaTeX could not typeset (MathJax stays for those)
_MATH_LEFT: dict[str, int] = {}


def _display_tex(node: Any) -> str:
    """The TeX of a display-math node, wrapped as Sphinx's MathJax writer wraps it."""
    text = node.astext()
    if node.get("nowrap"):
        return text
    parts = [p for p in text.split("\n\n") if p.strip()]
    parts = [f"\\begin{{aligned}}{p}\\end{{aligned}}" if "\\\\" in p else p for p in parts]
    if len(parts) > 1:
        return "\\begin{aligned}" + "\\\\".join(parts) + "\\end{aligned}"
    return parts[0] if parts else ""


#: KaTeX's results, kept between builds: the Chinese edition's formulas are the English
#: edition's, so its build typesets none of them again (Node took 4.6 of its 33 s)
KATEX_CACHE = Path(__file__).resolve().parents[2] / "_build" / ".katex_cache.json"
_katex_cache: dict | None = None
_katex_cache_new = False
_katex_version: str | None = None


def _katex_key(tex: str, display: bool) -> str:
    """What a result depends on: the TeX, display or inline, and the renderer (KaTeX's code
    and render.js, so that an upgrade typesets everything again)."""
    global _katex_version
    if _katex_version is None:
        h = hashlib.sha256()
        for f in (_KATEX_JS, _KATEX_JS.with_name("katex.min.js")):
            h.update(f.read_bytes())
        _katex_version = h.hexdigest()[:16]
    return hashlib.sha256(f"{_katex_version}\0{int(display)}\0{tex}".encode()).hexdigest()


def _load_katex_cache() -> dict:
    global _katex_cache
    if _katex_cache is None:
        try:
            _katex_cache = json.loads(KATEX_CACHE.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            _katex_cache = {}
    return _katex_cache


def save_katex_cache() -> None:
    """Write the results typeset by this build beside the earlier ones (atomically)."""
    global _katex_cache_new
    if not _katex_cache_new or _katex_cache is None:
        return
    KATEX_CACHE.parent.mkdir(parents=True, exist_ok=True)
    tmp = KATEX_CACHE.with_name(f"{KATEX_CACHE.name}.{os.getpid()}")
    tmp.write_text(json.dumps(_katex_cache), encoding="utf-8")
    tmp.replace(KATEX_CACHE)
    _katex_cache_new = False


def katex_render(items: list[tuple[str, bool]]) -> list[dict] | None:
    """``[(tex, display), ...]`` typeset by KaTeX under Node: ``[{"html"} | {"error"}]``,
    or None when Node.js is not available. Results typeset before (:data:`KATEX_CACHE`) are
    not typeset again."""
    import subprocess  # noqa: PLC0415

    global _katex_cache_new
    if not items:
        return None
    cache = _load_katex_cache()
    keys = [_katex_key(t, d) for t, d in items]
    todo = {k: item for k, item in zip(keys, items) if k not in cache}  # each new formula once
    if todo:
        node = shutil.which("node")
        if node is None:
            return None
        proc = subprocess.run([node, str(_KATEX_JS)], capture_output=True, timeout=300,
                              input=json.dumps([{"tex": t, "display": d} for t, d in todo.values()]).encode())
        if proc.returncode != 0:
            logger.info("[attn_edu_book] KaTeX failed (%s); MathJax typesets instead",
                        proc.stderr.decode(errors="replace")[-500:])
            return None
        cache.update(zip(todo, json.loads(proc.stdout)))
        _katex_cache_new = True
    return [cache[k] for k in keys]


def _typeset_math(app: Sphinx, doctree: Any, docname: str) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    from docutils import nodes  # noqa: PLC0415

    found = [n for n in doctree.findall(lambda n: isinstance(n, (nodes.math, nodes.math_block)))]
    if not found:
        return
    items = [(_display_tex(n), True) if isinstance(n, nodes.math_block) else (n.astext(), False)
             for n in found]
    results = katex_render(items)
    if results is None:
        _MATH_LEFT[docname] = len(found)
        return
    left = 0
    for n, (tex, display), res in zip(found, items, results):
        if "html" not in res:
            left += 1
            logger.info("[attn_edu_book] %s: KaTeX cannot typeset %r (%s); MathJax will",
                        docname, tex[:80], res.get("error"))
            continue
        tag = "div" if display else "span"
        ids = " ".join(n.get("ids", []))
        id_attr = f' id="{ids.split()[0]}"' if ids else ""
        # a display formula is its own scroll box (book.css): a tab stop with a name
        box = f' tabindex="0" role="group" aria-label="{DISPLAY_MATH_NAME}"' if display else ""
        n.replace_self(nodes.raw("", f'<{tag}{id_attr} class="math notranslate nohighlight katex-math"'
                                     f'{box}>{res["html"]}</{tag}>', format="html"))
    _MATH_LEFT[docname] = left


_TOC_MATH_RE = re.compile(r'<span class="math notranslate nohighlight">\\\((?P<tex>.*?)\\\)</span>', re.S)


def _typeset_toc_math(toc: str) -> tuple[str, int]:
    """Typeset the math of the page's table of contents (section titles, rendered from the
    environment's copy of them, not from the page's doctree); also say how many are left."""
    found = list(_TOC_MATH_RE.finditer(toc))
    if not found:
        return toc, 0
    results = katex_render([(html.unescape(m.group("tex")), False) for m in found])
    if results is None:
        return toc, len(found)
    left = 0
    parts, pos = [], 0
    for m, res in zip(found, results):
        parts.append(toc[pos:m.start()])
        if "html" in res:
            parts.append(f'<span class="math notranslate nohighlight katex-math">{res["html"]}</span>')
        else:
            parts.append(m.group(0))
            left += 1
        pos = m.end()
    parts.append(toc[pos:])
    return "".join(parts), left


def _is_mathjax(js: Any, app: Sphinx) -> bool:
    filename = getattr(js, "filename", "") or ""
    body = (getattr(js, "attributes", {}) or {}).get("body", "") or ""
    mathjax_path = str(getattr(app.config, "mathjax_path", "") or "")
    return bool((mathjax_path and filename.endswith(mathjax_path)) or "window.MathJax" in body)


# --------------------------------------------------------------------------- icons
FONTAWESOME_JS = "scripts/fontawesome.js"
_FA_PACKS = {"fas": "solid", "fa-solid": "solid", "fab": "brands", "fa-brands": "brands",
             "far": "regular", "fa-regular": "regular"}
_FA_ICON_RE = re.compile(r'<(?P<tag>i|span) class="(?P<cls>[^"]*\bfa[a-z-]*\b[^"]*)"(?P<attrs>[^>]*)>'
                         r"\s*</(?P=tag)>")
_FA_SCRIPT_RE = re.compile(r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>')
_FA_MODIFIERS = {"fa-lg", "fa-fw", "fa-xs", "fa-sm", "fa-xl", "fa-2x", "fa-spin"}


def _fontawesome_icons(js: str) -> dict:
    """``{(pack, name): (width, height, path)}`` read from fontawesome.js: each pack's icons
    come before its ``x("fab", {...})`` registration call (brands, regular, solid)."""
    marks = []
    for short in ("fab", "far", "fas"):
        m = re.search(r'[\w$]\("' + short + r'",', js)
        if m is None:
            return {}
        marks.append((m.start(), _FA_PACKS[short]))
    marks.sort()
    icons, start = {}, 0
    icon_re = re.compile(r'(?:"(?P<q>[a-z0-9-]+)"|(?<![\w$-])(?P<b>[a-z][a-z0-9]*)):\[(?P<w>\d+),(?P<h>\d+),'
                         r'\[[^\]]*\],"(?P<code>[0-9a-f]+)","(?P<d>M[^"]+)"\]')
    for end, pack in marks:
        for m in icon_re.finditer(js, start, end):
            icon = (m.group("w"), m.group("h"), m.group("d"))
            icons.setdefault((pack, m.group("q") or m.group("b")), icon)
            icons.setdefault((pack, int(m.group("code"), 16)), icon)  # by code point, for CSS
        start = end
    return icons


def _inline_icons(text: str, icons: dict) -> tuple[str, bool]:
    """Swap every Font Awesome ``<i>``/``<span>`` for its SVG; also say whether all were."""
    all_done = True

    def swap(m: re.Match) -> str:
        nonlocal all_done
        classes = m.group("cls").split()
        pack = next((_FA_PACKS[c] for c in classes if c in _FA_PACKS), "solid")
        names = [c[3:] for c in classes if c.startswith("fa-") and c not in _FA_PACKS
                 and c not in _FA_MODIFIERS]
        icon = icons.get((pack, names[0])) if len(names) == 1 else None
        if icon is None:
            all_done = all_done and not names
            return m.group(0)
        w, h, d = icon
        return (f'<svg class="{" ".join(classes)} svg-inline--fa"{m.group("attrs")} '
                f'aria-hidden="true" focusable="false" xmlns="http://www.w3.org/2000/svg" '
                f'viewBox="0 0 {w} {h}"><path fill="currentColor" d="{d}"></path></svg>')

    return _FA_ICON_RE.sub(swap, text), all_done


# --------------------------------------------------------------------------- tab stops
THEME_JS = "scripts/pydata-sphinx-theme.js"
#: The theme's ``addTabStopsToScrollableElements`` measures every code block and output of
#: the page on ``load`` (and again after every change to the article) to make the scrollable
#: ones keyboard-focusable: reading ``scrollWidth`` lays out the whole page at once, which
#: on a chapter page is most of the main-thread time a phone spends at load, and lays out the
#: sections that ``book.css`` lets the browser skip until they come near. The patch keeps the
#: rule (a scrollable block gets ``tabIndex = 0``, others ``-1``) but applies it only to
#: blocks within a screen of the viewport, measured when they come near and again whenever
#: their box changes size (a ``ResizeObserver``: a phone turned, the sidebar sliding away, a
#: full-page screenshot), so a width seen mid-transition never sticks. Away from the viewport
#: a block has ``tabindex="0"`` -- the one :func:`_page_context` gives every ``<pre>``, and
#: the one it gets back when it leaves -- so the keyboard can reach every block that may
#: scroll, and no checker finds a scrollable block the keyboard cannot reach.
#: The patch also adds the display formulas typeset by KaTeX (``div.math.katex-math``, their
#: own sideways scroll box in book.css) to the blocks the pass looks at, and measures them
#: sideways only (a formula's box may be a pixel shorter than its content: not a scroll).
_THEME_TAB_STOP = "e.tabIndex=e.scrollWidth>e.clientWidth||e.scrollHeight>e.clientHeight?0:-1"
_LAZY_TAB_STOP = (
    "(window.attnEduTabStop||(window.attnEduTabStop=(()=>{"
    "const m=t=>{t.tabIndex=t.scrollWidth>t.clientWidth||!t.classList.contains(\"katex-math\")"
    "&&t.scrollHeight>t.clientHeight?0:-1},"
    "near=new Set,seen=new WeakSet,ro=new ResizeObserver(es=>{for(const x of es)m(x.target)}),"
    "io=new IntersectionObserver(es=>{for(const x of es){const t=x.target;"
    "if(x.isIntersecting){if(!near.has(t)){near.add(t);ro.observe(t)}}"
    "else if(near.delete(t)){ro.unobserve(t);t.tabIndex=0}}},{rootMargin:\"100% 0px\"});"
    "return t=>{if(!seen.has(t)){seen.add(t);io.observe(t)}else if(near.has(t))m(t)}})()))(e)"
)


_THEME_TAB_STOP_BLOCKS = '".pst-scrollable-table-container"]'
_TAB_STOP_BLOCKS = '".pst-scrollable-table-container","div.math.katex-math"]'


def _patch_theme_tab_stops(path: Path) -> bool:
    """Make the theme's tab-stop pass lazy and add display math to it (see above); False
    when its code was not found."""
    if not path.is_file():
        return False
    text = path.read_text(encoding="utf-8")
    if "window.attnEduTabStop" in text and _TAB_STOP_BLOCKS in text:
        return True
    if text.count(_THEME_TAB_STOP) != 1 or text.count(_THEME_TAB_STOP_BLOCKS) != 1:
        return False
    text = text.replace(_THEME_TAB_STOP, _LAZY_TAB_STOP).replace(_THEME_TAB_STOP_BLOCKS, _TAB_STOP_BLOCKS)
    path.write_text(text, encoding="utf-8")
    return True


# --------------------------------------------------------------------------- stylesheets
#: A chapter page linked 12 stylesheets (100 KB compressed, most of it Bootstrap and Font
#: Awesome rules that match nothing on the page), which the browser must fetch before it
#: paints anything: on a phone's connection the first paragraph waited seconds for them.
#: At the end of the build every page gets, in place of its ``<link rel="stylesheet">``
#: tags, one ``<style>`` with the rules of those same sheets, in the same order, that can
#: match the page: a rule is dropped when a class or id its selector requires (outside
#: ``:not()``, ``:is()``...) is neither in the page's HTML nor a word of a script the pages
#: run (scripts add classes: ``show``, ``toggle-hidden``...). Every colour mode's rules stay
#: (they are attribute selectors). On the way:
#:
#: * icon-font glyphs become SVG masks: a rule whose ``content`` is a Font Awesome glyph
#:   (the theme's admonition icons) draws that glyph's path, read from ``fontawesome.js``,
#:   as a CSS mask in ``currentColor``; the icon fonts (153 KB, ``font-display: block``) are
#:   no longer requested, their ``@font-face`` rules dropped;
#: * KaTeX's ``@font-face`` rules get ``font-display: swap`` (text shows at once), and the
#:   KaTeX fonts the page's first screen uses are preloaded (they arrive before the first
#:   paint, so the swap moves nothing);
#: * ``url()``s are rewritten for the page's folder.
#:
#: Nothing is fetched before the first paint but the page itself.
STYLE_ID = "attn-edu-css"
_DONE_STYLE_RE = re.compile(r'<style id="attn-edu-css" data-sheets="([^"]*)">.*?</style>\n?', re.S)
_PRELOAD_FONT_RE = re.compile(r'<link rel="preload" [^>]*data-attn-edu-font />\n?')
_LINK_CSS_RE = re.compile(r'[ \t]*<link\b(?=[^>]*\brel="stylesheet")(?![^>]*\bmedia="(?!all|screen))[^>]*>\n?')
_HREF_RE = re.compile(r'\bhref="([^"]+)"')
_CLASS_ID_RE = re.compile(r'\b(?:class|id)="([^"]*)"')
_JS_WORD_RE = re.compile(r"[A-Za-z_][\w-]*")
_SCRIPT_SRC_RE = re.compile(r'<script\b[^>]*\bsrc="([^"]+)"')
_CSS_URL_RE = re.compile(r'url\((["\']?)([^"\')]+)\1\)')
_ROOT = "@@attn-edu-root@@/"
#: scripts whose words do not name classes of the pages' stylesheets (their own CSS is
#: their own: plotly.js and MathJax inject it; fontawesome.js holds every icon's name; the
#: search index and the stemmer's word lists are data)
_NOT_CLASS_SOURCES = ("plotly", "mathjax", "fontawesome", "searchindex", "language_data")
#: KaTeX's font of each class it writes (katex.min.css), for the preloads
KATEX_FONTS = {
    "katex": "KaTeX_Main-Regular", "mathnormal": "KaTeX_Math-Italic", "mathit": "KaTeX_Main-Italic",
    "mathbf": "KaTeX_Main-Bold", "boldsymbol": "KaTeX_Math-BoldItalic", "amsrm": "KaTeX_AMS-Regular",
    "mathbb": "KaTeX_AMS-Regular", "mathcal": "KaTeX_Caligraphic-Regular", "mathfrak": "KaTeX_Fraktur-Regular",
    "mathtt": "KaTeX_Typewriter-Regular", "mathsf": "KaTeX_SansSerif-Regular", "mathscr": "KaTeX_Script-Regular",
    "size1": "KaTeX_Size1-Regular", "size2": "KaTeX_Size2-Regular", "size3": "KaTeX_Size3-Regular",
    "size4": "KaTeX_Size4-Regular", "small-op": "KaTeX_Size1-Regular", "large-op": "KaTeX_Size2-Regular",
}
#: how much of the article counts as its first screen (for the font preloads): this many
#: characters' widths of text (a phone shows about 1,200, a desktop about 2,500; see
#: :func:`_text_width`), with what precedes it
FIRST_SCREEN_TEXT = 2500
#: characters a line gives two widths: CJK ideographs, kana, hangul, fullwidth forms and CJK
#: punctuation (Unicode's East Asian Wide and Fullwidth blocks)
_WIDE_RE = re.compile("[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff"
                      "\ua000-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]")


def _text_width(text: str) -> int:
    """The width of a text in characters of Latin text: a CJK character (wide, in Unicode's
    East Asian Width) takes about two; 40 widths are a line on a phone."""
    return len(text) + len(_WIDE_RE.findall(text))


def _selector_needs(prelude: list) -> list[set]:
    """For each selector of a rule's selector list, the class and id names it requires
    (top level only: what is inside ``:not()``, ``:is()``, ``:has()`` requires nothing)."""
    out, cur, prev = [], set(), None
    for tok in prelude:
        if tok.type == "literal" and tok.value == ",":
            out.append(cur)
            cur, prev = set(), None
            continue
        if tok.type == "ident" and prev is not None and prev.type == "literal" and prev.value == ".":
            cur.add(tok.value)
        elif tok.type == "hash" and tok.is_identifier:
            cur.add(tok.value)
        prev = tok
    out.append(cur)
    return out


class _Sheet:
    """A stylesheet, parsed once: ``items`` = [(needs | None, css text | nested items,
    at-rule prefix)], ready to be filtered by the classes a page has."""

    def __init__(self, path: Path, out: Path, icons: dict, custom: dict) -> None:
        import tinycss2  # noqa: PLC0415  (a dependency of nbconvert, so of jupyter-book)

        self.tinycss2 = tinycss2
        self.icons, self.custom = icons, custom
        self.path, self.out = path, out
        text = path.read_text(encoding="utf-8")
        self.items = self._items(tinycss2.parse_stylesheet(text, skip_comments=True, skip_whitespace=True))

    def _url(self, m: re.Match) -> str:
        url = m.group(2)
        if re.match(r"^(?:[a-z]+:|#|/)", url):
            return m.group(0)
        target = (self.path.parent / url.split("#")[0].split("?")[0]).resolve()
        rel = target.relative_to(self.out.resolve()).as_posix()
        return f'url("{_ROOT}{rel}")'

    def _text(self, css: str) -> str:
        css = re.sub(r"\s*([{};])\s*", r"\1", re.sub(r"\s+", " ", css))  # basic.css is not minified
        return _CSS_URL_RE.sub(self._url, css)

    def _items(self, rules: list) -> list:
        t = self.tinycss2
        items = []
        for r in rules:
            if r.type == "qualified-rule":
                selector = t.serialize(r.prelude)
                decls = _rewrite_declarations(t, r.content, self.icons, self.custom,
                                              pseudo=bool(re.search(r":(?::)?(?:before|after)\b", selector)))
                if decls is None:
                    continue
                items.append((_selector_needs(r.prelude), self._text(t.serialize(r.prelude).strip() + "{" + decls + "}"), ""))
            elif r.type == "at-rule":
                kw = r.lower_at_keyword
                if kw == "charset":
                    continue
                if kw == "import":
                    urls = [tok.value for tok in r.prelude if tok.type in ("string", "url")]
                    if urls:
                        sub = _Sheet(self.path.parent / urls[0], self.out, self.icons, self.custom)
                        items.extend(sub.items)
                    continue
                if kw == "font-face":
                    face = t.serialize(r.content)
                    if "Font Awesome" in face:
                        continue  # the icons are SVG now (masks and inline <svg>)
                    if "KaTeX" in face and "font-display" not in face:
                        face = "font-display:swap;" + face
                    items.append((None, self._text("@font-face{" + face + "}"), ""))
                elif kw in ("media", "supports", "layer", "container") and r.content is not None:
                    inner = self._items(t.parse_blocks_contents(r.content, skip_comments=True, skip_whitespace=True))
                    items.append((None, inner, "@" + r.at_keyword + t.serialize(r.prelude)))
                else:
                    items.append((None, self._text(t.serialize([r])), ""))
        return items

    def css(self, tokens: set) -> str:
        return _filter_items(self.items, tokens)


def _filter_items(items: list, tokens: set) -> str:
    parts = []
    for needs, body, prefix in items:
        if isinstance(body, list):
            inner = _filter_items(body, tokens)
            if inner:
                parts.append(prefix + "{" + inner + "}")
        elif needs is None or any(req <= tokens for req in needs):
            parts.append(body)
    return "".join(parts)


def _custom_properties(paths: list[Path]) -> dict:
    """``--name: value`` of every custom property the sheets set (the theme's icon names)."""
    found = {}
    for path in paths:
        for m in re.finditer(r"(--[\w-]+):([^;}]*)", path.read_text(encoding="utf-8")):
            found[m.group(1)] = m.group(2).strip()
    return found


def _icon_code(value: str, custom: dict) -> int | None:
    """The code point of an icon-font glyph a ``content`` value shows (through ``var()``s)."""
    for _ in range(5):
        m = re.fullmatch(r"var\((--[\w-]+)\)", value.strip())
        if not m:
            break
        value = custom.get(m.group(1), "")
    m = re.fullmatch(r'\s*(["\'])(.+?)\1\s*', value)
    if not m:
        return None
    s = m.group(2)
    if re.fullmatch(r"\\[0-9a-fA-F]{4,5}\s?", s):
        code = int(s.strip()[1:], 16)
    elif len(s) == 1:
        code = ord(s)
    else:
        return None
    return code if 0xE000 <= code <= 0xF8FF else None


def _svg_mask(w: str, h: str, d: str) -> str:
    from urllib.parse import quote  # noqa: PLC0415

    svg = f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {w} {h}'><path d='{d}'/></svg>"
    return 'url("data:image/svg+xml,' + quote(svg, safe=" /:=',.-") + '")'


#: what a rule that drew an icon with the icon font draws instead (before its own
#: declarations: its width, height, position... still apply)
_MASK_DECLS = ("display:inline-block;width:1em;height:1em;vertical-align:-.125em;"
               "background-color:currentColor;-webkit-mask:var(--attn-edu-icon) center/contain no-repeat;"
               "mask:var(--attn-edu-icon) center/contain no-repeat;")


def _rewrite_declarations(t: Any, content: list, icons: dict, custom: dict, pseudo: bool = True) -> str | None:
    """A rule's declarations, with icon-font glyphs turned into SVG masks (``pseudo``: the
    rule styles a ``::before``/``::after``, where an icon font draws its glyphs)."""
    text = t.serialize(content)
    if "fa-font" not in text and "Font Awesome" not in text and "content" not in text:
        return text
    decls = t.parse_blocks_contents(content, skip_comments=True, skip_whitespace=True)
    out, icon_font, pack = [], False, "solid"
    for d in decls:
        if d.type != "declaration":
            out.append(t.serialize([d]))
            continue
        value = t.serialize(d.value).strip()
        imp = "!important" if d.important else ""
        if d.lower_name in ("font", "font-family") and ("fa-font" in value or "Font Awesome" in value) \
                and pseudo:
            icon_font = True
            pack = "brands" if ("brands" in value.lower()) else "regular" if "regular" in value else "solid"
            continue
        if d.lower_name == "content":
            code = _icon_code(value, custom)
            if code is not None:
                icon = icons.get((pack, code)) or icons.get(("solid", code)) or icons.get(("brands", code)) \
                    or icons.get(("regular", code))
                if icon is not None:
                    out.append(f'content:""{imp};--attn-edu-icon:{_svg_mask(*icon)}')
                    continue
        out.append(f"{d.name}:{value}{imp}")
    return (_MASK_DECLS if icon_font else "") + ";".join(out)


def _page_depth(page: Path, out: Path) -> int:
    return len(page.relative_to(out).parts) - 1


def _script_words(out: Path, pages: list[tuple[Path, str]]) -> set:
    """Every word of every script the pages run (but plotly.js, MathJax, fontawesome.js)."""
    words: set = set()
    seen: set = set()
    for page, text in pages:
        for src in _SCRIPT_SRC_RE.findall(text):
            path = (page.parent / src.split("?")[0]).resolve()
            if path in seen or not path.is_file() or any(n in path.name for n in _NOT_CLASS_SOURCES):
                continue
            seen.add(path)
            words.update(_JS_WORD_RE.findall(path.read_text(encoding="utf-8", errors="replace")))
    for extra in (FIGURES_JS, ZOOM_JS):  # loaded by the pages that need them
        path = out / "_static" / extra
        if path.is_file():
            words.update(_JS_WORD_RE.findall(path.read_text(encoding="utf-8")))
    return words


def _katex_preloads(text: str, depth: int, out: Path) -> str:
    """``<link rel="preload">`` of the KaTeX fonts the page's first screen uses."""
    start, article = text.find("<body"), text.find("<article")
    if start < 0 or article < 0:
        return ""
    seen, end = 0, len(text)
    for m in re.finditer(r">([^<]+)<", text[article:]):
        seen += _text_width(m.group(1).strip())
        if seen >= FIRST_SCREEN_TEXT:
            end = article + m.end()
            break
    first = text[start:end]
    if 'class="katex' not in first:
        return ""
    classes = set()
    for m in _CLASS_ID_RE.finditer(first):
        classes.update(m.group(1).split())
    fonts = list(dict.fromkeys(f for c, f in KATEX_FONTS.items() if c in classes))
    prefix = "../" * depth
    links = []
    for font in fonts:
        if (out / "_static" / "katex" / "fonts" / f"{font}.woff2").is_file():
            links.append(f'<link rel="preload" href="{prefix}_static/katex/fonts/{font}.woff2" as="font" '
                         f'type="font/woff2" crossorigin="anonymous" data-attn-edu-font />')
    return "\n".join(links)


#: KaTeX's fonts as vendored (book/_static/katex/fonts): the build serves each one cut to the
#: characters the built pages' formulas use (:func:`_subset_katex_fonts`)
KATEX_FONTS_SRC = _STATIC_SRC / "katex" / "fonts"
_MATH_TOKEN_RE = re.compile(r"<(/?)span\b[^>]*>|<[^>]*>|([^<]+)")


def _math_characters(texts) -> set:
    """Every character of the formulas the pages show (the text inside KaTeX's
    ``katex-html``, entities decoded), and what katex.min.css writes itself (equation
    numbers: digits and parentheses)."""
    chars = set("()0123456789")
    for text in texts:
        for start in re.finditer(r'<span class="katex-html"', text):
            depth = 0
            for m in _MATH_TOKEN_RE.finditer(text, start.start()):
                if m.group(2) is not None:
                    chars.update(html.unescape(m.group(2)))
                elif m.group(1) is not None:
                    depth += -1 if m.group(1) else 1
                    if depth == 0:
                        break
    return chars


def _subset_katex_fonts(out: Path, chars: set) -> int:
    """Write each of KaTeX's fonts into the built site cut to ``chars`` (its glyphs for the
    characters the book's formulas use, from the vendored original every time, so a
    character a later build needs is never lost): a phone fetches the few fonts a page
    uses before its first paint, and the whole set went from about 300 KB to a fraction.
    Needs fontTools (with matplotlib) and brotli (for woff2); without them the fonts stay
    whole. Returns the bytes written."""
    dest = out / "_static" / "katex" / "fonts"
    if not dest.is_dir() or not KATEX_FONTS_SRC.is_dir():
        return 0
    try:
        import brotli  # noqa: F401,PLC0415  (woff2)
        from fontTools import subset  # noqa: PLC0415
        from fontTools.ttLib import TTFont  # noqa: PLC0415
    except ImportError:
        logger.info("[attn_edu_book] fontTools or brotli is missing: KaTeX's fonts are served whole")
        return 0
    options = subset.Options()
    options.flavor = "woff2"
    options.layout_features = ["*"]
    options.name_IDs = ["*"]
    options.notdef_outline = True
    written = 0
    for src in sorted(KATEX_FONTS_SRC.glob("*.woff2")):
        font = TTFont(src)
        cmap = font.getBestCmap() or {}
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=sorted(ord(c) for c in chars if ord(c) in cmap))
        subsetter.subset(font)
        font.flavor = "woff2"
        font.save(dest / src.name)
        written += (dest / src.name).stat().st_size
    return written


def _inline_stylesheets(out: Path, pages: list[tuple[Path, str]], icons: dict) -> dict:
    """``{page: new text}``: each page's stylesheets as one pruned ``<style>`` (see above)."""
    try:
        import tinycss2  # noqa: F401,PLC0415
    except ImportError:
        logger.info("[attn_edu_book] tinycss2 is missing: the pages keep their stylesheet links")
        return {}
    def restore(text: str) -> str:
        """A page inlined before (finish_html run again, after a CSS edit): its links again."""
        done = _DONE_STYLE_RE.search(text)
        if not done:
            return text
        links = "".join(f'<link rel="stylesheet" href="{href}" />\n'
                        for href in html.unescape(done.group(1)).split())
        return _PRELOAD_FONT_RE.sub("", text.replace(done.group(0), links))

    pages = [(page, restore(text)) for page, text in pages]
    words = _script_words(out, pages)
    sheets: dict[Path, _Sheet] = {}
    css_paths = sorted({(page.parent / href.split("?")[0]).resolve()
                        for page, text in pages
                        for tag in _LINK_CSS_RE.findall(text)
                        for href in _HREF_RE.findall(tag)})
    custom = _custom_properties([p for p in css_paths if p.is_file()])
    result = {}
    for page, text in pages:
        head_end = text.find("</head>")
        tags = _LINK_CSS_RE.findall(text[:head_end])
        paths = [(page.parent / _HREF_RE.search(tag).group(1).split("?")[0]).resolve()
                 for tag in tags if _HREF_RE.search(tag)]
        if not paths or not all(p.is_file() for p in paths):
            continue
        tokens = set(words)
        for m in _CLASS_ID_RE.finditer(text):
            tokens.update(m.group(1).split())
        css = []
        for path in paths:
            if path not in sheets:
                sheets[path] = _Sheet(path, out, icons, custom)
            css.append(sheets[path].css(tokens))
        depth = _page_depth(page, out)
        style = "".join(css).replace(_ROOT, "../" * depth)
        first = text.find(tags[0])
        new = text[:first] + "<!--STYLE-->" + text[first:head_end].replace(tags[0], "", 1)
        for tag in tags[1:]:
            new = new.replace(tag, "", 1)
        preloads = _katex_preloads(text, depth, out)
        hrefs = html.escape(" ".join(_HREF_RE.search(tag).group(1) for tag in tags))
        new = new.replace("<!--STYLE-->", (preloads + "\n" if preloads else "")
                          + f'<style id="{STYLE_ID}" data-sheets="{hrefs}">{style}</style>\n') + text[head_end:]
        result[page] = new
    return result


#: the theme's search button shows "Search Ctrl + K" but is named "Search" (``aria-label``):
#: a voice user who says what they see does not reach it (WCAG 2.5.3, axe's
#: label-content-name-mismatch, on every page). Without the attribute its name is its text.
_SEARCH_BUTTON_LABEL_RE = re.compile(r'(<button class="btn search-button-field search-button__button[^"]*"'
                                     r'(?: title="[^"]*")?) aria-label="[^"]*"')
_SEARCH_SCRIPT_RE = re.compile(r'<script src="([^"]*(?:searchindex|searchtools|language_data)\.js)">')
_MATHJAX_TAG_RE = re.compile(r'\s*<script[^>]*src="[^"]*_static/mathjax/[^"]*"></script>'
                             r'|\s*<script>window\.MathJax = .*?</script>', re.S)


_SEARCH_TAG_RE = re.compile(r'\s*<script (?:defer )?src="[^"]*(?:searchindex|searchtools|language_data)\.js[^"]*"></script>')
_PRELOAD_SCRIPT_RE = re.compile(r'[ \t]*<link rel="preload" as="script" href="[^"]*" />\n?')


_BLOCKING_SCRIPT_RE = re.compile(r'<script src="(?P<src>[^"]*_static/documentation_options\.js)(?:\?[^"]*)?"></script>')


def _inline_small_scripts(text: str, page: Path) -> str:
    """``documentation_options.js`` (400 bytes, which the page's inline scripts need before
    they run, so it blocks the first paint) is written into the page instead: one request
    less before anything shows."""
    def inline(m: re.Match) -> str:
        path = page.parent / m.group("src")
        if not path.is_file():
            return m.group(0)
        code = path.read_text(encoding="utf-8")
        return m.group(0) if "</script" in code else f"<script>{code}</script>"

    return _BLOCKING_SCRIPT_RE.sub(inline, text)


def _lazy_header_images(text: str) -> str:
    """The theme's images before the article (the launch menu's logos, hidden in a menu)
    load when they are shown."""
    cut = text.find("<article")
    if cut < 0:
        return text
    head = re.sub(r"<img (?![^>]*\bloading=)", '<img loading="lazy" ', text[:cut])
    return head + text[cut:]


_PRE_SPAN_RE = re.compile(r'<span class="pre">((?:[^<]|<wbr>)*)</span>')


def _unwrap_pre(text: str) -> str:
    """Sphinx wraps every word of inline code and of an API signature in its own
    ``<span class="pre">`` (for basic.css's ``white-space: nowrap``, which book.css undoes
    there: inline code wraps on a phone). Its text alone does the same with one element
    fewer per word: 10,400 of the API page's elements."""
    return _PRE_SPAN_RE.sub(r"\1", text)


_PYGMENTS_RULE_RE = re.compile(r'^(html\[data-theme="\w+"\]) \.highlight(?: \.(\w+))? \{([^}]*)\}', re.M)
_HIGHLIGHT_PRE_RE = re.compile(r'(<div class="highlight"><pre[^>]*>)(.*?)(</pre>)', re.S)


def plain_token_classes(pygments_css: str) -> set:
    """The Pygments token classes that draw their text exactly as the code block around it
    does, in every theme: a rule of nothing but the block's own colour, or no rule at all
    (with the theme's style: names ``n``, punctuation ``p``, whitespace ``w``...)."""
    base, rules = {}, {}
    for theme, cls, body in _PYGMENTS_RULE_RE.findall(pygments_css):
        decls = {k.strip(): v.strip() for k, v in (d.split(":", 1) for d in body.split(";") if ":" in d)}
        if cls:
            rules.setdefault(cls, {})[theme] = decls
        else:
            base[theme] = decls.get("color")
    if not base or None in base.values():
        return set()
    return {cls for cls, by_theme in rules.items()
            if all(by_theme.get(theme, {"color": colour}) == {"color": colour} for theme, colour in base.items())}


def _plain_token_re(plain: set) -> re.Pattern | None:
    """A highlighted token of one of the ``plain`` classes, its text the group."""
    return re.compile(r'<span class="(?:%s)">([^<]*)</span>' % "|".join(sorted(map(re.escape, plain)))) if plain else None


def _unwrap_plain_tokens(text: str, token: re.Pattern | None) -> str:
    """In highlighted code, a token whose class draws it as the text around it
    (:func:`plain_token_classes`, :func:`_plain_token_re`) needs no element of its own: its
    text alone looks the same (about 3,700 of chapter 05's elements: every name and bracket)."""
    if token is None:
        return text
    return _HIGHLIGHT_PRE_RE.sub(lambda m: m.group(1) + token.sub(r"\1", m.group(2)) + m.group(3), text)


def _finish_pages(app: Sphinx, exception: Exception | None) -> None:
    """What only the written page shows (see :func:`finish_html`)."""
    if exception is not None or app.builder is None or app.builder.format != "html":
        return
    finish_html(Path(app.outdir))
    save_katex_cache()


def finish_html(out: Path) -> None:
    """What only the written pages show: the theme's icons, its search scripts, the math
    that the theme wrote from other documents (the page's table of contents, the links to
    the neighbouring pages), the stylesheets (one pruned ``<style>`` per page), and KaTeX's
    fonts cut to the characters of the pages' formulas.

    The search index and its scripts (66 KB compressed) stay on the search page alone: the
    theme's search box sends the reader there (``search_as_you_type`` is off), so no other
    page uses them. The theme's ``<link rel="preload">`` of its two scripts goes: they are
    loaded, deferred, at the end of the page, and preloading them took a phone's bandwidth
    from the page itself before its first paint."""
    if not _patch_theme_tab_stops(out / "_static" / THEME_JS):
        logger.warning("[attn_edu_book] the theme's tab-stop code was not found in %s: every "
                       "page lays itself out at once on load (update _THEME_TAB_STOP)", THEME_JS)
    js = out / "_static" / FONTAWESOME_JS
    icons = _fontawesome_icons(js.read_text(encoding="utf-8")) if js.is_file() else {}
    css = out / "_static" / "pygments.css"
    plain = _plain_token_re(plain_token_classes(css.read_text(encoding="utf-8")) if css.is_file() else set())
    pages = []
    for page in sorted(out.rglob("*.html")):
        if page.relative_to(out).parts[0] in ("_static", "_sources"):
            continue
        text = page.read_text(encoding="utf-8")
        if page.relative_to(out).as_posix() == "search.html":
            new = _SEARCH_SCRIPT_RE.sub(r'<script defer src="\1">', text)
        else:
            new = _SEARCH_TAG_RE.sub("", text)
        new = _PRELOAD_SCRIPT_RE.sub("", new)
        new = _SEARCH_BUTTON_LABEL_RE.sub(r"\1", new)
        new = _inline_small_scripts(new, page)
        new = _lazy_header_images(new)
        new = _sized_images(new, page)
        new = _unwrap_pre(new)
        new = _unwrap_plain_tokens(new, plain)
        if icons and "fontawesome.js" in new:
            new, all_done = _inline_icons(new, icons)
            if all_done:
                new = _FA_SCRIPT_RE.sub("", new)
        if _TOC_MATH_RE.search(new):
            new, left = _typeset_toc_math(new)
            if left:
                logger.info("[attn_edu_book] %s: %d formulas left to MathJax", page.name, left)
        if _MATHJAX_TAG_RE.search(new) and not _TOC_MATH_RE.search(new) \
                and not re.search(r'class="math notranslate nohighlight">\s*\\\[', new):
            new = _MATHJAX_TAG_RE.sub("", new)  # KaTeX typeset every formula
        pages.append((page, new, text))
    styled = _inline_stylesheets(out, [(p, new) for p, new, _ in pages], icons)
    _subset_katex_fonts(out, _math_characters(new for _, new, _ in pages))
    for page, new, text in pages:
        new = styled.get(page, new)
        if new != text:
            page.write_text(new, encoding="utf-8")


# --------------------------------------------------------------------------- the pages
def _colab_url(app: Sphinx, pagename: str) -> str | None:
    opts = app.config.html_theme_options or {}
    colab = ((opts.get("launch_buttons") or {}).get("colab_url") or "").rstrip("/")
    repo = (opts.get("repository_url") or "").rstrip("/")
    if not (colab and repo.startswith("https://github.com/")):
        return None
    branch = opts.get("repository_branch") or "main"
    path = "/".join(p for p in ((opts.get("path_to_docs") or "").strip("/"), f"{pagename}.ipynb") if p)
    return f"{colab}/github/{repo.removeprefix('https://github.com/')}/blob/{branch}/{path}"


def _script_key(js: Any) -> tuple:
    attrs = getattr(js, "attributes", {}) or {}
    # inline scripts come as filename None (from the registry) *and* "" (from the
    # builder), which Sphinx does not consider equal: normalise both to ""
    return (
        getattr(js, "filename", str(js)) or "",
        tuple(sorted((k, str(v)) for k, v in attrs.items())),
    )


#: what sphinx-thebe adds to every page (its script, its stylesheet, its inline configuration)
THEBE_ASSETS = ("sphinx-thebe.js", "sphinx-thebe.css", "THEBE_JS_URL")
#: sphinx-design's script: it only switches the tabs of a tab set
DESIGN_TABS_JS = "design-tabs.js"


def _idle_assets(app: Sphinx, body: str) -> tuple:
    """What a page loads that can do nothing there: sphinx-thebe's script, stylesheet and
    inline configuration when the book's launch buttons have no "Live code" (``thebe:
    false``), sphinx-design's tab script on a page without a tab set. Each was a request
    (and a phone's bandwidth) before the first paint on every page."""
    launch = (getattr(app.config, "html_theme_options", None) or {}).get("launch_buttons") or {}
    idle = () if launch.get("thebe") else THEBE_ASSETS
    if "sd-tab-set" not in body:
        idle += (DESIGN_TABS_JS,)
    return idle


def _asset_is(asset: Any, names: tuple) -> bool:
    """Whether a script or stylesheet of the page is one of ``names`` (a file name, or a
    word of an inline script's code)."""
    filename = (getattr(asset, "filename", None) or "").split("?")[0]
    if filename:
        return filename.rsplit("/", 1)[-1] in names
    code = str((getattr(asset, "attributes", None) or {}).get("body") or "")
    return any(name in code for name in names)


#: scripts that must run where they stand: the page's inline scripts use their globals
KEEP_BLOCKING = ("_static/documentation_options.js",)


def _defer(js: Any) -> None:
    """Load a classic external script with ``defer``: it no longer blocks the first paint,
    and deferred scripts still run in document order before ``DOMContentLoaded``."""
    attrs = getattr(js, "attributes", None)
    filename = getattr(js, "filename", "") or ""
    if (attrs is None or not filename or filename.startswith(KEEP_BLOCKING)
            or {"defer", "async"} & set(attrs) or attrs.get("type") not in (None, "text/javascript")):
        return
    attrs["defer"] = "defer"


_SECTION_TAG_RE = re.compile(r"<section\b[^>]*>|</section>")


def _section_height_px(fragment: str, slack: int = 300) -> int:
    """A generous guess of a section's (or a block's: ``slack``) height on a phone (about
    380 px of text width): its words (40 widths a line, a CJK character two:
    :func:`_text_width`), code lines, images, figures (three times their height: stacked on a
    phone) and table rows. Over, not under: the blocks below a section whose placeholder is
    too short would be laid out, their fonts fetched, before the first screen is painted; a
    section that grows when it is drawn moves what is below it; and a skipped section taller
    than its placeholder overlaps the next one for anything that measures it before it is
    drawn (accessibility checkers do)."""
    text = re.sub(r"<[^>]+>", "", re.sub(r"<(pre|script|style)\b.*?</\1>", "", fragment, flags=re.S))
    height = 28 * (_text_width(" ".join(text.split())) // 40 + fragment.count("<p") + fragment.count("<li"))
    for pre in re.findall(r"<pre\b.*?</pre>", fragment, flags=re.S):
        height += 40 + 21 * pre.count("\n")
    height += 500 * fragment.count("<img ") + 120 * fragment.count("<tr")
    # a plotly figure on a phone stacks its panels (figures.js): up to about three times its height
    height += sum(3 * int(h) + 60 for h in re.findall(r'class="plotly-graph-div" style="height:(\d+)px', fragment))
    return height + slack


_TAG_RE = re.compile(r"<(/?)([a-zA-Z][\w:-]*)[^>]*?(/?)>|<!--.*?-->", re.S)
_VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def _child_placeholders(inner: str) -> str:
    """Each element directly inside a second-level section but its heading (book.css:
    ``content-visibility: auto`` on them too) gets a placeholder height a little over its
    content's: a section that comes near the viewport lays out the blocks near it, not all
    of itself (a Chinese chapter's opening is shorter than the English one, so its first
    section starts within the distance at which the browser lays sections out at load)."""
    out, last, depth, start, pos = [], 0, 0, None, 0
    while (m := _TAG_RE.search(inner, pos)) is not None:
        pos = m.end()
        if m.group(2) is None:  # a comment
            continue
        name = m.group(2).lower()
        if m.group(1):
            depth -= 1
            if depth == 0 and start is not None:
                if start.group(2).lower() not in ("h2", "script", "style", "dl"):  # dl.py: book.css
                    height = _section_height_px(inner[start.start():m.end()], slack=40)
                    tag = start.group(0)
                    tag = (tag.replace(' style="', f' style="contain-intrinsic-size: auto {height}px; ', 1)
                           if ' style="' in tag else tag[:-1].rstrip("/") + f' style="contain-intrinsic-size: auto {height}px">')
                    out.append(inner[last:start.start()] + tag)
                    last = start.end()
                start = None
        elif name not in _VOID_TAGS and not m.group(3):
            if depth == 0:
                start = m
            depth += 1
            if name in ("script", "style"):  # their text is not markup
                end = inner.find(f"</{name}", m.end())
                pos = end if end >= 0 else len(inner)
    out.append(inner[last:])
    return "".join(out)


def _section_placeholders(body: str) -> str:
    """Give each second-level section (``content-visibility: auto`` in book.css) a placeholder
    height no smaller than its content: the browser lays it out only when it comes near; and
    so each block inside it (:func:`_child_placeholders`)."""
    out, depth, last, starts = [], 0, 0, []
    for m in _SECTION_TAG_RE.finditer(body):
        if m.group(0) != "</section>":
            depth += 1
            if depth == 2:
                starts.append(m)
            continue
        if depth == 2 and starts:
            start = starts.pop()
            height = _section_height_px(body[start.end():m.start()])
            tag = start.group(0)[:-1] + f' style="contain-intrinsic-size: auto {height}px">'
            out.append(body[last:start.start()] + tag + _child_placeholders(body[start.end():m.start()]))
            last = m.start()
        depth -= 1
    out.append(body[last:])
    return "".join(out)


def _focusable_code(body: str) -> str:
    """Every ``<pre>``, wide-table box and HTML table output starts as a tab stop (the
    theme's lazy pass drops those that turn out not to scroll when they come near)."""
    body = re.sub(r"<pre(?=[ >])(?![^>]*\btabindex=)", '<pre tabindex="0"', body)
    # a notebook's HTML table (an output) scrolls sideways on a phone: a tab stop as well
    body = body.replace('<div class="output text_html"><table', '<div class="output text_html" tabindex="0"><table')
    return body.replace('<div class="pst-scrollable-table-container">',
                        '<div class="pst-scrollable-table-container" tabindex="0">')


_CODE_PRE_RE = re.compile(r'(<code class="docutils literal notranslate">)(.*?)(</code>)', re.S)


def _breakable_code(body: str) -> str:
    """Inline code may break after a dot or a slash (``<wbr>``): a long dotted name wraps
    there on a phone instead of running off the column (book.css lets it wrap anywhere
    when even a part is too long)."""
    def pre(m: re.Match) -> str:
        inner = re.sub(r'(<span class="pre">)([^<]*)(</span>)',
                       lambda p: p.group(1) + re.sub(r"([./])(?=[^./])", r"\1<wbr>", p.group(2)) + p.group(3),
                       m.group(2))
        return m.group(1) + inner + m.group(3)

    return _CODE_PRE_RE.sub(pre, body)


_TEXT_PX_CLASS_RE = re.compile(r'\s*\battn-edu-textpx-(\d+)\b')
_CONTENT_IMG_RE = re.compile(r'<img (?P<attrs>[^>]*\bsrc="(?P<src>[^"]*_images/[^"]+)"[^>]*)>')


def _zoomable_images(body: str) -> tuple[str, int]:
    """Every figure image of the page (``_images/``) becomes a link to itself, which
    ``zoom.js`` opens at full size in a dialog (with its alt text); without JavaScript the
    link opens the image. A notebook image's smallest text size (in image pixels, from
    :func:`attn_edu.alt_text.figure_text_px`, carried as a class by :class:`BookMimePlugin`)
    becomes ``data-text-px``. Also says how many images it wrapped."""
    count = 0

    def wrap(m: re.Match) -> str:
        nonlocal count
        attrs = m.group("attrs").rstrip(" /")
        px = _TEXT_PX_CLASS_RE.search(attrs)
        if px:
            attrs = _TEXT_PX_CLASS_RE.sub("", attrs).replace(' class=""', "")
            attrs += f' data-text-px="{int(px.group(1)) / 10:g}"'
        before = body[max(0, m.start() - 200):m.start()]
        if re.search(r"<a\b[^>]*>\s*$", before):  # already a link (an image with a target)
            return f"<img {attrs} />"
        count += 1
        return (f'<a class="attn-edu-zoom" href="{m.group("src")}" aria-describedby="{ZOOM_HINT_ID}">'
                f'<img {attrs} /></a>')

    body = _CONTENT_IMG_RE.sub(wrap, body)
    if count:
        body += (f'<span id="{ZOOM_HINT_ID}" hidden>Opens the figure at full size; '
                 f'Escape closes it.</span>')
    return body, count


_DATA_IMG_RE = re.compile(r'(<img\b[^>]*\bsrc=")data:image/(?P<ext>png|jpeg|gif|webp);base64,(?P<data>[A-Za-z0-9+/=\s]+)(")')


def _external_images(body: str, pagename: str, outdir: Path | None) -> str:
    """An image written into the page as a ``data:`` URI (an explorer's static stand-in,
    :func:`attn_edu.widgets._static_html`, up to 100 KB of base64 on a chapter page)
    becomes a file of ``_images/``, named by its content as Sphinx names a notebook's
    images: the page a phone downloads first is smaller by it, the image loads lazily like
    every other figure (:func:`_lazy_images`) and opens full size (:func:`_zoomable_images`).
    A PNG gets its ``width`` and ``height``: the page keeps its box while it loads (it loads
    lazily, and what is below it would move). An English page and its Chinese twin name the
    same image alike."""
    if outdir is None:
        return body
    import base64  # noqa: PLC0415

    prefix = "../" * pagename.count("/")

    def swap(m: re.Match) -> str:
        data = base64.b64decode("".join(m.group("data").split()))
        name = hashlib.sha256(data).hexdigest() + "." + m.group("ext").replace("jpeg", "jpg")
        path = Path(outdir) / "_images" / name
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        size = _png_size(data)  # its box is reserved before it loads
        size = f' width="{size[0]}" height="{size[1]}"' if size else ""
        return f"{m.group(1)}{prefix}_images/{name}{m.group(4)}{size}"

    return _DATA_IMG_RE.sub(swap, body)


def _png_size(head: bytes) -> tuple[int, int] | None:
    """A PNG's width and height in pixels, from the first 24 bytes of the file (its IHDR
    chunk); None for anything that is not a PNG."""
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


_UNSIZED_IMG_RE = re.compile(r'<img (?![^>]*\bwidth=)(?P<attrs>[^>]*\bsrc="(?P<src>[^":]*_images/[^"]+\.png)"[^>]*)>')


def _sized_images(text: str, page: Path) -> str:
    """Every PNG figure of a written page gets its ``width`` and ``height`` (book.css keeps it
    fluid: ``height: auto``): the browser reserves its box before it arrives. The figures load
    lazily (:func:`_lazy_images`), and without their sizes each one that arrived moved every
    heading, paragraph and slider below it while the reader was reading or about to click."""
    def size(m: re.Match) -> str:
        path = os.path.normpath(page.parent / m.group("src"))
        try:
            with open(path, "rb") as f:
                wh = _png_size(f.read(24))
        except OSError:
            return m.group(0)
        if wh is None:
            return m.group(0)
        attrs = m.group("attrs").rstrip(" /")
        return f'<img {attrs} width="{wh[0]}" height="{wh[1]}" />'

    return _UNSIZED_IMG_RE.sub(size, text)


def _lazy_images(body: str) -> str:
    """Every image of the page after its introduction (from the first second-level section
    on) loads when it comes near the viewport: a first visit downloads only what is near
    the screen, and no figure far below competes with the text for a phone's bandwidth."""
    starts = [m.start() for m in re.finditer(r"<section\b", body)]
    intro_end = starts[1] if len(starts) > 1 else len(body)

    def lazy(m: re.Match) -> str:
        return m.group(0) if m.start() < intro_end else '<img loading="lazy" decoding="async" '

    return re.sub(r"<img (?![^>]*\bloading=)", lazy, body)


def _page_description(body: str) -> str | None:
    """The page's first paragraph (of 40 characters or more) as plain text, at most 160
    characters, for its ``<meta name="description">``; math as its TeX read as symbols."""
    from html.parser import HTMLParser  # noqa: PLC0415

    from attn_edu.alt_text import plain_text  # noqa: PLC0415

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []
            self.skip = 0   # inside KaTeX's visual copy of a formula, or a <script>
            self.tex = False

        def handle_starttag(self, tag, attrs):
            cls = dict(attrs).get("class") or ""
            if self.skip or "katex-html" in cls or tag in ("script", "style"):
                self.skip += 1
            self.tex = tag == "annotation"

        def handle_endtag(self, tag):
            if self.skip:
                self.skip -= 1
            self.tex = False

        def handle_data(self, data):
            if not self.skip:
                self.parts.append(plain_text(data) if self.tex else data)

    for m in re.finditer(r"<p>(.*?)</p>", body, re.S):
        parser = Text()
        parser.feed(re.sub(r"<math\b.*?<annotation", "<annotation", m.group(1), flags=re.S))
        text = " ".join("".join(parser.parts).split())
        if len(text) >= 40:
            return text if len(text) <= 160 else text[:157].rsplit(" ", 1)[0] + "…"
    return None


def _page_context(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    body = context.get("body") or ""
    body, n_figures = _defer_figures(body, pagename, app.outdir)
    if _COLAB_SLOT in body:
        url = _colab_url(app, pagename)
        link = (f'<a href="{html.escape(url)}">Open this chapter in Colab</a> to move them.'
                if url else "")
        body = body.replace(_COLAB_SLOT, link)
    body = body.replace('role="doc-biblioentry"', 'role="listitem"')
    # a collapsed cell's summary says what it hides ("Show code cell source"): the generic
    # label sphinx-togglebutton puts on it hid that from screen readers
    body = body.replace('<summary aria-label="Toggle hidden content">', "<summary>")
    body = _external_images(body, pagename, app.outdir)
    body = _lazy_images(body)
    body, n_images = _zoomable_images(body)
    body = _breakable_code(body)
    body = _focusable_code(body)
    body = _section_placeholders(body)
    if WIDGET_VIEW in body:
        logger.warning("[attn_edu_book] %s: an ipywidgets view is on the page, whose controls "
                       "cannot do anything without a kernel (give it a text/html stand-in)",
                       pagename)
    context["body"] = body
    description = _page_description(body)
    if description and 'name="description"' not in (context.get("metatags") or ""):
        context["metatags"] = (context.get("metatags") or "") + \
            f'\n<meta name="description" content="{html.escape(description)}" />'
    if n_images:
        app.add_js_file(ZOOM_JS, loading_method="defer")
    if n_figures:
        plotly = getattr(app.config, "_attn_edu_plotly", PLOTLY_STATIC)
        app.add_js_file(FIGURES_JS, loading_method="defer",
                        **{"data-plotly": "../" + plotly})

    math_left = _MATH_LEFT.get(pagename)  # None: no math on the page
    for link in ("prev", "next"):  # titles of the neighbouring pages: math as plain text
        title = (context.get(link) or {}).get("title")
        if isinstance(title, str) and _TOC_MATH_RE.search(title):
            from attn_edu.alt_text import plain_text  # noqa: PLC0415

            context[link]["title"] = _TOC_MATH_RE.sub(
                lambda m: html.escape(plain_text(html.unescape(m.group("tex")))), title)
    if isinstance(context.get("toc"), str) and _TOC_MATH_RE.search(context["toc"]):
        context["toc"], toc_left = _typeset_toc_math(context["toc"])
        math_left = (math_left or 0) + toc_left
    if math_left is not None:
        app.add_css_file(KATEX_CSS)
    no_mathjax = math_left == 0  # KaTeX typeset every formula: no MathJax

    idle = _idle_assets(app, body)
    css_files = context.get("css_files")
    if css_files:
        css_files[:] = [c for c in css_files if not _asset_is(c, idle)]
    scripts = context.get("script_files")
    if scripts:
        seen: set[tuple] = set()
        unique = []
        for js in scripts:
            key = _script_key(js)
            attrs = getattr(js, "attributes", {}) or {}
            # no widget state: nothing on the page draws widgets
            if key in seen or attrs.get("type") == WIDGET_STATE or _asset_is(js, idle):
                continue
            if no_mathjax and _is_mathjax(js, app):  # KaTeX typeset every formula
                continue
            _defer(js)
            seen.add(key)
            unique.append(js)
        if len(unique) != len(scripts):
            scripts[:] = unique


# --------------------------------------------------------------------------- myst-nb
PLOTLY_MIME = "application/vnd.plotly.v1+json"
#: said of a notebook image whose output carries no alt text of its own
FALLBACK_ALT = "A figure drawn by the code cell above."


class BookMimePlugin:
    """myst-nb mime renderer plugin: drop the plotly JSON mime type (the figure is drawn
    from its ``text/html``); give every notebook image the alt text of its output."""

    mime_priority_overrides: tuple = ()

    @staticmethod
    def handle_mime(renderer: Any, data: Any, inline: bool) -> list | None:
        if inline:
            return None
        if data.mime_type == PLOTLY_MIME:
            from docutils import nodes  # noqa: PLC0415

            return [nodes.comment("", "plotly figure JSON (drawn from the text/html output)")]
        if data.mime_type in ("image/png", "image/jpeg", "image/svg+xml"):
            from attn_edu.alt_text import ALT_KEY, TEXT_PX_KEY  # noqa: PLC0415

            image_nodes = renderer.render_image(data)
            meta = data.output_metadata.get(data.mime_type) or {}
            alt = meta.get(ALT_KEY) or FALLBACK_ALT
            text_px = meta.get(TEXT_PX_KEY)
            for node in image_nodes:
                if not node.get("alt"):
                    node["alt"] = str(alt)
                if isinstance(text_px, (int, float)) and text_px > 0:
                    # written as data-text-px on the page (_zoomable_images)
                    node["classes"].append(f"attn-edu-textpx-{round(10 * text_px)}")
            return image_nodes
        return None


def _register_mime_plugin() -> None:
    from myst_nb.core import render  # noqa: PLC0415

    plugins = render.load_mime_renders()  # lru_cached list of entry-point plugins
    if not any(p is BookMimePlugin for p in plugins):
        plugins.append(BookMimePlugin)


def setup(app: Sphinx) -> dict[str, Any]:
    # the chapters' kernels inherit this: their first cell then does not display plotly.js
    # (attn_edu.notebook.plotly_js_loader), which the book serves from _static instead
    os.environ["ATTN_EDU_BOOK_BUILD"] = "1"
    _register_mime_plugin()
    app.connect("builder-inited", _builder_inited)
    app.connect("doctree-resolved", _typeset_math)
    # after the theme's own build-finished handler, which writes its light/dark pygments.css
    # (that file is inlined into the pages here)
    app.connect("build-finished", _finish_pages, priority=900)
    # run after the other extensions' html-page-context handlers (default priority 500)
    app.connect("html-page-context", _page_context, priority=900)
    return {"version": "0.2", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # after editing book.css: python book/_ext/attn_edu_book.py _build/html
    import sys

    for _name in ("book.css", "figures.js", "zoom.js"):  # the build copies them; so does this
        shutil.copyfile(_STATIC_SRC / "attn-edu" / _name, Path(sys.argv[1]) / "_static" / "attn-edu" / _name)
    finish_html(Path(sys.argv[1]))
