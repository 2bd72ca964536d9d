"""Notebook setup shared by every chapter: plotly renderer, matplotlib defaults, device.

Every chapter's first code cell calls::

    from attn_edu import setup_notebook
    device = setup_notebook()

and gets ``"cuda"`` on a GPU runtime (Colab) and ``"cpu"`` elsewhere.

Plotly and the static book
--------------------------
Plotly's default renderer in a plain Jupyter kernel emits only the
``application/vnd.plotly.v1+json`` mime type, which the built book cannot draw, and
the ``notebook``/``iframe`` renderers either load plotly.js from a CDN or embed 4.8 MB
per figure.  :func:`setup_notebook` therefore registers and selects the renderer
``"attn_edu"`` (see ``BookRenderer``), whose mime bundle holds

* ``text/html``: a ``<div class="plotly-graph-div">`` and a small script calling
  ``Plotly.newPlot`` (and ``Plotly.addFrames`` for animations).  It uses the page's
  ``window.Plotly``: the book build serves plotly.js from ``_static`` on pages that
  contain a figure (``book/_ext/attn_edu_book.py``), so figures, sliders and frames
  work offline on the static page;
* ``application/vnd.plotly.v1+json``: the figure itself, which JupyterLab and VS Code
  draw live with their own plotly (JupyterLab's comes from plotly's extension, which
  must be installed in the *Jupyter server's* environment).

In a live kernel (not on Colab, not in the book build) :func:`setup_notebook` also
displays plotly.js itself, once, in the first cell's output (:func:`plotly_js_loader`):
so every front end draws the figures offline, also a JupyterLab whose own environment
has no plotly (its server then shows the ``text/html`` part), and the classic Notebook.
No figure loads anything from the network; a figure that finds no plotly.js after a few
seconds says so (and how to fix it) instead of staying blank.

On Colab (``"google.colab" in sys.modules``) the renderer ``"attn_edu_colab"`` is used:
the same HTML (``text/html`` only, as plotly's ``"colab"`` renderer gives), which loads
plotly.js from plotly's CDN when the page has none -- Colab's output frames have none, and
Colab is online -- and draws once it has loaded. Plotly's ``"colab"`` renderer instead
writes ``<script src=...>`` followed by an inline ``Plotly.newPlot``; inside an ipywidgets
``Output`` (a live explorer) Colab runs the inline script before the library has loaded,
and the figure fails with "Plotly is not defined" (googlecolab/colabtools#5889).
tests/test_plotly_in_output.py inserts an explorer's output into Chromium the way a front
end does (``innerHTML``, then each script re-created: ``src`` ones load asynchronously)
and checks that it draws, and that plotly's ``"colab"`` HTML does not.
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

from .alt_text import register_alt_text
from .gpu_profile import PROFILE_ENV, active_profile, applied_profile, apply_profile

__all__ = ["setup_notebook", "BOOK_RENDERER", "in_colab", "pick_device", "plotly_js_loader"]

#: name under which the book renderer is registered in ``plotly.io.renderers``
BOOK_RENDERER = "attn_edu"
#: its Colab variant (loads plotly.js from plotly's CDN and waits for it)
COLAB_RENDERER = "attn_edu_colab"


def in_colab() -> bool:
    """True when running inside Google Colab."""
    return "google.colab" in sys.modules


def pick_device() -> str:
    """``"cuda"`` if torch is importable and sees a GPU, else ``"cpu"`` (never raises)."""
    try:
        import torch  # noqa: PLC0415
    except Exception:  # torch missing or broken: the NumPy chapters still run
        return "cpu"
    try:
        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


_HTML_TEMPLATE = """\
<div id="{div_id}" class="plotly-graph-div" style="height:{height}; width:100%;"></div>
<script type="text/javascript">
(function () {{
  var divId = "{div_id}";
  var fig = {fig_json};
  var config = {config_json};
  var src = {src_json};
  function draw() {{
    var el = document.getElementById(divId);
    if (!el) return;
    window.Plotly.newPlot(el, fig.data || [], fig.layout || {{}}, config).then(function () {{
      if (fig.frames && fig.frames.length) return window.Plotly.addFrames(el, fig.frames);
    }});
  }}
  if (src && !window.Plotly && !document.getElementById("{loader_id}")) {{
    var s = document.createElement("script");
    s.id = "{loader_id}"; s.src = src; s.charset = "utf-8";
    document.head.appendChild(s);
  }}
  var waited = 0;
  (function whenPlotly() {{
    if (window.Plotly) {{ draw(); return; }}
    if ((waited += 100) < {wait_ms}) {{ setTimeout(whenPlotly, 100); return; }}
    var el = document.getElementById(divId);
    if (el) el.innerHTML = '<p style="color:#a00">' + (src ? {missing_src} + src : {missing}) + '</p>';
  }})();
}})();
</script>"""


#: shown in place of a figure when the page has no plotly.js (no network is ever used)
PLOTLY_MISSING = (
    "This plotly figure needs plotly.js, which this page has not loaded: run the "
    "notebook&#39;s first cell (attn_edu.setup_notebook() loads it), or install plotly in "
    "the Jupyter server&#39;s environment."
)
#: shown in place of a figure whose plotly.js (from ``src``) did not load
PLOTLY_SRC_MISSING = "This plotly figure could not load plotly.js (no network?) from "
#: id of the element that :func:`plotly_js_loader` displays
LOADER_ID = "attn-edu-plotly-js-loader"
#: id of the ``<script src>`` that a figure adds to the page when it loads plotly.js itself
SRC_LOADER_ID = "attn-edu-plotly-js-src"
#: Set (to "1") while the book builds, when the book serves plotly.js itself.
BOOK_BUILD_ENV = "ATTN_EDU_BOOK_BUILD"


def plotly_js_loader() -> str:
    """HTML that defines ``window.Plotly`` from the installed plotly's own plotly.js.

    About 4.8 MB, displayed once per notebook by :func:`setup_notebook`; where the page
    already has plotly.js it does nothing. Needs no network (no CDN).
    """
    from pathlib import Path  # noqa: PLC0415

    import plotly  # noqa: PLC0415

    js = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    js = js.replace("</script", "<\\/script")  # cannot end the <script> element early
    return (f'<div id="{LOADER_ID}" style="display:none"></div>\n'
            f'<script type="text/javascript">\nif (!window.Plotly) {{\n{js}\n}}\n</script>')


def _show_plotly_js_loader() -> bool:
    """Display :func:`plotly_js_loader` in a live Jupyter kernel; return whether it did."""
    import os  # noqa: PLC0415

    if in_colab() or os.environ.get(BOOK_BUILD_ENV) == "1":
        return False
    try:
        from IPython import get_ipython  # noqa: PLC0415
        from IPython.display import display  # noqa: PLC0415
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):  # a terminal IPython has no page
        return False
    display({"text/html": plotly_js_loader(), "text/plain": ""}, raw=True)
    return True


def _make_renderer_class():
    """Create the renderer class lazily so importing this module never needs plotly."""
    from plotly.io._base_renderers import MimetypeRenderer  # noqa: PLC0415
    from plotly.io.json import to_json  # noqa: PLC0415

    class BookRenderer(MimetypeRenderer):
        """Plotly renderer for the static book that also works live in Jupyter front ends.

        ``plotly_js_url``: where a figure loads plotly.js from when the page has none
        (Colab: plotly's CDN); ``None`` (the book, Jupyter): never load, wait for the
        page's. ``plotly_json``: whether the bundle also carries the plotly mime type.
        """

        def __init__(self, config: dict | None = None, plotly_js_url: str | None = None,
                     plotly_json: bool = True) -> None:
            self.config = dict(config) if config else {}
            self.plotly_js_url, self.plotly_json = plotly_js_url, plotly_json

        def to_mimebundle(self, fig_dict: dict) -> dict[str, Any]:
            from .i18n import current_language  # noqa: PLC0415

            if current_language() != "en":  # a Chinese kernel: the figure's words in Chinese
                from .i18n_outputs import translate_plotly  # noqa: PLC0415

                fig_dict = translate_plotly(fig_dict)
            fig_json = to_json(fig_dict, validate=False, remove_uids=False)
            fig_obj = json.loads(fig_json)
            layout = fig_obj.get("layout", {}) or {}
            height = layout.get("height")
            height_css = f"{int(height)}px" if isinstance(height, (int, float)) else "525px"
            config = {"responsive": True, "displaylogo": False}
            config.update(self.config)
            safe = lambda s: s.replace("</", "<\\/")  # noqa: E731  (no "</script>" inside)
            html = _HTML_TEMPLATE.format(
                div_id=f"attn-edu-plotly-{uuid.uuid4().hex[:12]}",
                height=height_css,
                fig_json=safe(fig_json),
                config_json=safe(json.dumps(config)),
                src_json=safe(json.dumps(self.plotly_js_url)),
                loader_id=SRC_LOADER_ID,
                wait_ms=30000 if self.plotly_js_url else 5000,  # a download may take a while
                missing=json.dumps(PLOTLY_MISSING),
                missing_src=json.dumps(PLOTLY_SRC_MISSING),
            )
            if not self.plotly_json:
                return {"text/html": html}
            plotly_fig = dict(fig_obj)
            if self.config:
                plotly_fig["config"] = dict(self.config)
            return {"text/html": html, "application/vnd.plotly.v1+json": plotly_fig}

    return BookRenderer


def plotly_cdn_url() -> str:
    """plotly's CDN address of the plotly.js that the installed plotly.py was made for
    (what plotly's own ``"colab"`` renderer loads)."""
    try:
        from plotly.io._utils import plotly_cdn_url as cdn  # noqa: PLC0415

        return cdn()
    except ImportError:  # an older plotly.py
        from plotly.offline import get_plotlyjs_version  # noqa: PLC0415

        return f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"


def _register_plotly_renderer() -> str:
    """Register the book renderer (its Colab variant on Colab) and make it the default."""
    import plotly.io as pio  # noqa: PLC0415

    if in_colab():
        # plotly's "colab" renderer writes <script src=cdn> + an inline Plotly.newPlot. Colab
        # runs an ipywidgets Output's scripts as it inserts them, the inline one before the
        # library has loaded: "Plotly is not defined" (colabtools#5889). This one loads the
        # same plotly.js from the CDN itself and waits for it; text/html only, as "colab".
        name = COLAB_RENDERER
        pio.renderers[name] = _make_renderer_class()(plotly_js_url=plotly_cdn_url(), plotly_json=False)
    else:
        if BOOK_RENDERER not in pio.renderers:
            pio.renderers[BOOK_RENDERER] = _make_renderer_class()()
        name = BOOK_RENDERER
    pio.renderers.default = name
    return name


def _matplotlib_defaults() -> None:
    try:
        import matplotlib as mpl  # noqa: PLC0415
    except ImportError:
        return
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 100,
            "savefig.dpi": 150,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )


def setup_notebook(plotly: bool = True, lang: str = "en") -> str:
    """Prepare a chapter notebook; return the torch device string (``"cuda"``/``"cpu"``).

    * ``plotly=True``: register and select a plotly renderer that draws on the static
      book page and live in JupyterLab / VS Code (on Colab its variant that loads
      plotly.js from plotly's CDN, ``COLAB_RENDERER``), and, in a live
      kernel, display plotly.js once (:func:`plotly_js_loader`) so that figures draw
      offline in any front end.  Skipped silently when plotly is not installed.
    * tidy matplotlib defaults (size, grid, no top/right spines).
    * device: ``"cuda"`` if torch is importable and ``torch.cuda.is_available()``,
      else ``"cpu"``; works without torch.
    * a GPU profile, when ``ATTN_EDU_GPU_PROFILE`` names one (``t4``: the GPU capped to
      15 GB and seen as compute capability 7.5, :func:`attn_edu.gpu_profile.apply_profile`),
      applied once and said in one printed line; a ValueError for a name that is no profile.
    * ``lang``: the language of what the package shows (figures' words, checkers' messages,
      alt text, the explorers' notes): ``"en"`` (the English chapters) or ``"zh"`` (their
      Chinese twins' first cell); :func:`attn_edu.i18n.set_language`, a ValueError naming
      ``lang`` for anything else, raised before anything is set up. With ``"zh"`` the
      kernel also shows the chapter's outputs as the Chinese pages do
      (``attn_edu.i18n_outputs.install_output_translation``): printed lines, displayed
      text, Markdown and HTML, plotly figures, and matplotlib figures (their words, in a CJK
      font) are looked up in the output catalogs; ``"en"`` installs nothing.
    """
    from .i18n import set_language  # noqa: PLC0415
    from .i18n_outputs import install_output_translation  # noqa: PLC0415

    set_language(lang)
    install_output_translation(lang)  # "en": nothing (and a kernel's earlier "zh" undone)
    if plotly:
        try:
            _register_plotly_renderer()
        except ImportError:
            pass
        else:
            _show_plotly_js_loader()
    _matplotlib_defaults()
    register_alt_text()  # matplotlib figures carry their alt text (the book's <img alt>)
    device = pick_device()
    profile = active_profile()  # checks the variable on every machine
    if profile is not None and device == "cuda" and applied_profile() is None:
        apply_profile()
        print(f"{PROFILE_ENV}={profile.name}: this GPU runs as a {profile.gpu} for attn_edu (memory capped "
              f"to {profile.memory_bytes / 1e9:.0f} GB, compute capability {profile.capability[0]}."
              f"{profile.capability[1]}, {profile.half_dtype}); its times are still its own")
    return device
