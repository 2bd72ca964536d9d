"""Figures on the page: plotly figures drawn only when they come near (by figures.js, from
plotly.js served by the build), every figure with a text alternative, live explorers shown as
their saved figure: a page's text never waits for a figure, and a screen reader hears each one.

* **plotly.js from the build, only when a figure is about to be seen.** Chapters draw
  plotly figures with the renderer of :func:`attn_edu.notebook.setup_notebook`, whose
  ``text/html`` output is a ``<div class="plotly-graph-div">`` plus an inline script
  calling ``Plotly.newPlot``. On the page (:func:`defer_figures`) that script becomes
  ``<script type="text/x-attn-edu-plotly">`` (which the browser does not run), its data a
  small script of its own (:data:`FIGURE_DATA_DIR`), and the div gets a text alternative
  (:func:`attn_edu.alt_text.plotly_alt_text` of its figure); one small deferred script,
  ``_static/attn-edu/figures.js``, loads plotly.js and draws a figure when it comes near the
  viewport (and gives every plotly slider a keyboard control). Pages without a figure load
  neither. plotly.js is the published partial bundle ``plotly.js-cartesian-dist-min``
  (vendored in ``book/_static/plotly``, see its README; a third of the full bundle), which
  holds every trace type the book draws: a figure with any other trace type is a build
  warning (so ``-W`` fails), listed in :data:`BUNDLE_TRACE_TYPES`. When the installed
  plotly.py ships another plotly.js version than the vendored one, the installed full
  ``plotly.min.js`` is served instead (:func:`serve_plotly`; a logged note; figures still draw).
* **Live explorers as figures.** A live explorer's display bundle carries, next to its
  ipywidgets view, a ``text/html`` stand-in: its saved figure and a note that it
  recomputes in Jupyter or Colab (:mod:`attn_edu.widgets`). ``_config.yml`` removes the
  widget view from the HTML builder's mime priorities, so the page shows the stand-in,
  and its ``attn-edu-colab-slot`` gets the chapter's Colab link (:func:`colab_url`). No
  widget state (:data:`WIDGET_STATE`) and no widget manager are put on a page, and an
  output that still holds a widget view (:data:`WIDGET_VIEW`) is a build warning.
* **Text alternatives and no warning for the plotly mime type** (:class:`BookMimePlugin`,
  a myst-nb mime render plugin: the documented ``myst_nb.mime_renderers`` protocol,
  registered in-process by :func:`register_mime_plugin` instead of through an entry point).
  Every matplotlib image of a notebook gets the ``alt`` text that
  :func:`attn_edu.alt_text.register_alt_text` stored in its output's metadata (or, without
  one, :data:`FALLBACK_ALT`). The book renderer's bundle carries both ``text/html`` (drawn
  in the book) and ``application/vnd.plotly.v1+json`` (for JupyterLab / VS Code); myst-nb
  renders every mime type of a bundle while parsing and would warn "skipping unknown output
  mime type" for the plotly one, which ``-W`` turns into a failure: the plugin renders it
  to an empty comment, and the HTML builder's priority list then selects ``text/html``. A
  bundle that has *only* the plotly mime type still fails the build ("No mime type
  available in priority list"), which is what we want: such a figure would be invisible.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

from ._common import STATIC_SRC, logger

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


WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


_VERSION_RE = re.compile(r"plotly\.js(?: \([^)]*\))? v(\d+\.\d+\.\d+)")
_FIGURE_RE = re.compile(
    r'<div id="(?P<id>attn-edu-plotly-[0-9a-f]+)" class="plotly-graph-div"(?P<attrs>[^>]*)></div>'
    r'\s*<script type="text/javascript">(?P<js>.*?)</script>',
    re.S,
)
_FIG_JSON_RE = re.compile(r"var fig = (?P<json>.*?);\n\s*var config = ", re.S)
COLAB_SLOT = '<span class="attn-edu-colab-slot"></span>'


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
    vendored = STATIC_SRC / PLOTLY_STATIC
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


def serve_plotly(app: Sphinx) -> None:
    """Choose the plotly.js the pages load (:func:`plotly_bundle`, kept in the config for
    the pages' ``data-plotly``) and copy the installed full bundle when that is the one."""
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


def _figure_alt(js: str, lang: str = "en") -> tuple[str, set]:
    """The text alternative (in ``lang``, the edition's) and trace types of the figure an
    inline script draws."""
    from attn_edu.alt_text import plotly_alt_text  # noqa: PLC0415
    from attn_edu.i18n import language, translate  # noqa: PLC0415

    m = _FIG_JSON_RE.search(js)
    if not m:
        return translate("Interactive figure.", lang), set()
    fig = json.loads(m.group("json"))
    with language(lang):
        return plotly_alt_text(fig), _trace_types(fig)


def _alt_title(alt: str, lang: str) -> str:
    """A figure's title, from its text alternative (its first sentence, less the prefix)."""
    from attn_edu.i18n import translate  # noqa: PLC0415

    prefix = translate("Interactive figure: {title}.", lang).split("{title}")[0]
    return re.split(r"\.(?:\s|$)|。", alt)[0].removeprefix(prefix)


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


def defer_figures(body: str, pagename: str, outdir: Path | None = None, lang: str = "en") -> tuple[str, int]:
    """Turn every plotly figure's inline script into one that figures.js runs on demand.

    With ``outdir``, a figure's data (its JSON, up to a few hundred KB on a chapter page)
    leaves the page for ``FIGURE_DATA_DIR/<div id>.js``, which figures.js loads with the
    figure: the page a phone downloads first is smaller by all of its figures. ``lang``: the
    language of the text alternatives (:func:`edition_language`)."""
    count = 0
    depth = pagename.count("/")

    def swap(m: re.Match) -> str:
        nonlocal count
        count += 1
        js = m.group("js")
        alt, types = _figure_alt(js, lang)
        outside = sorted(types - BUNDLE_TRACE_TYPES)
        if outside:
            logger.warning("[attn_edu_book] %s: a plotly figure uses trace types %s, which the "
                           "partial plotly.js bundle lacks (book/_static/plotly/README.md)",
                           pagename, outside)
        title = _alt_title(alt, lang)
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


def edition_language(app: Sphinx) -> str:
    """The language of the edition being built (``attn_edu_edition``, which book/_ext/
    attn_edu_i18n.py defines: ``"zh"`` in the Chinese build, _build/zh-src), as a language
    of :data:`attn_edu.i18n.LANGUAGES`."""
    return getattr(app.config, "attn_edu_edition", None) or "en"


def localize_live_notes(body: str, lang: str) -> str:
    """The explorers' stand-in notes, which the English execution wrote, in ``lang``
    (:func:`attn_edu.widgets.localize_live_notes`; the Chinese pages carry English outputs)."""
    from attn_edu.widgets import localize_live_notes as localize  # noqa: PLC0415

    return localize(body, lang)


def colab_link(url: str, lang: str) -> str:
    """The sentence in an explorer note's Colab slot, in ``lang`` (:func:`attn_edu.widgets.colab_link`)."""
    from attn_edu.widgets import colab_link as link  # noqa: PLC0415

    return link(url, lang)


def colab_url(app: Sphinx, pagename: str) -> str | None:
    """The chapter's Colab link, for the ``attn-edu-colab-slot`` of its explorers' stand-ins."""
    opts = app.config.html_theme_options or {}
    colab = ((opts.get("launch_buttons") or {}).get("colab_url") or "").rstrip("/")
    repo = (opts.get("repository_url") or "").rstrip("/")
    if not (colab and repo.startswith("https://github.com/")):
        return None
    branch = opts.get("repository_branch") or "main"
    path = "/".join(p for p in ((opts.get("path_to_docs") or "").strip("/"), f"{pagename}.ipynb") if p)
    return f"{colab}/github/{repo.removeprefix('https://github.com/')}/blob/{branch}/{path}"


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
                    # written as data-text-px on the page (images.zoomable_images)
                    node["classes"].append(f"attn-edu-textpx-{round(10 * text_px)}")
            return image_nodes
        return None


def register_mime_plugin() -> None:
    from myst_nb.core import render  # noqa: PLC0415

    plugins = render.load_mime_renders()  # lru_cached list of entry-point plugins
    if not any(p is BookMimePlugin for p in plugins):
        plugins.append(BookMimePlugin)

