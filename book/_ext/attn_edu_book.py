"""Local Sphinx extension for the attn-edu book: make the built HTML fully offline.

Loaded through ``_config.yml`` (``sphinx: local_extensions: attn_edu_book: book/_ext``).

What it does, and why:

* **plotly.js from the build.** Chapters draw plotly figures with the renderer of
  :func:`attn_edu.notebook.setup_notebook`, whose ``text/html`` output is a ``<div>``
  plus a ``Plotly.newPlot(...)`` call that relies on the page's ``window.Plotly``.
  We copy ``plotly.min.js`` from the *installed* plotly package (so plotly.js always
  matches plotly.py and 4.8 MB is not committed) into ``_build/html/_static/plotly/``
  at the end of the build, and add a ``<script>`` for it only to pages whose body
  contains a plotly figure (the other pages stay light).  It is added with a low
  priority, i.e. in ``<head>`` before every other script and without ``defer``, so
  ``window.Plotly`` exists when the inline figure scripts in the body run, and it is
  loaded before any AMD loader could exist on the page (the plotly.js 4 shipped with
  plotly.py 7 sets ``window.Plotly`` and does not use AMD, but older builds register
  as an anonymous AMD module when require.js is already on the page, and then
  ``window.Plotly`` is undefined). The widgets use the standalone embed.js bundle,
  so no require.js is on the page anyway.
* **No duplicated inline scripts.** sphinx-thebe registers its inline configuration
  script (``const THEBE_JS_URL = ...``) with ``app.add_js_file`` in an
  ``env-before-read-docs`` handler (sphinx-togglebutton does the same with its
  ``var togglebuttonSelector``); Sphinx stores it once in the registry (filename
  ``None``) and once in the builder (filename ``""``), does not see the two as equal,
  and the page then declares the ``const`` twice:
  ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared``.  We drop
  exact duplicates of inline scripts from every page (``html-page-context``), which
  keeps the launch buttons (they do not depend on it) and sphinx-thebe.js working.
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

import filecmp
import os
import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: where plotly.js lands, relative to ``_build/html/_static``
PLOTLY_STATIC = "plotly/plotly.min.js"
#: markers of plotly output in a page body
PLOTLY_MARKERS = ("plotly-graph-div",)


def plotly_js_source() -> Path:
    """Path of ``plotly.min.js`` shipped inside the installed plotly Python package."""
    import plotly  # noqa: PLC0415  (only needed at build time)

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def _copy_plotly_js(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder is None or app.builder.format != "html":
        return
    try:
        src = plotly_js_source()
    except ImportError:
        logger.warning("[attn_edu_book] plotly is not installed; figures will not be drawn")
        return
    if not src.is_file():
        logger.warning("[attn_edu_book] %s not found; figures will not be drawn", src)
        return
    dst = Path(app.outdir) / "_static" / PLOTLY_STATIC
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists() or not filecmp.cmp(src, dst, shallow=False):
        shutil.copyfile(src, dst)


def _script_key(js: Any) -> tuple:
    attrs = getattr(js, "attributes", {}) or {}
    # inline scripts come as filename None (from the registry) *and* "" (from the
    # builder), which Sphinx does not consider equal: normalise both to ""
    return (
        getattr(js, "filename", str(js)) or "",
        tuple(sorted((k, str(v)) for k, v in attrs.items())),
    )


def _page_context(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    body = context.get("body") or ""
    if any(marker in body for marker in PLOTLY_MARKERS):
        # low priority number = early in <head>, before the theme's and myst-nb's scripts
        app.add_js_file(PLOTLY_STATIC, priority=100)

    # Remove exact duplicates (same file or same inline body and attributes).
    scripts = context.get("script_files")
    if scripts:
        seen: set[tuple] = set()
        unique = []
        for js in scripts:
            key = _script_key(js)
            if key in seen:
                continue
            seen.add(key)
            unique.append(js)
        if len(unique) != len(scripts):
            scripts[:] = unique


PLOTLY_MIME = "application/vnd.plotly.v1+json"


class PlotlyJsonMimePlugin:
    """myst-nb mime renderer plugin: accept (and drop) the plotly JSON mime type."""

    mime_priority_overrides: tuple = ()

    @staticmethod
    def handle_mime(renderer: Any, data: Any, inline: bool) -> list | None:
        if inline or data.mime_type != PLOTLY_MIME:
            return None
        from docutils import nodes  # noqa: PLC0415

        return [nodes.comment("", "plotly figure JSON (drawn from the text/html output)")]


def _register_mime_plugin() -> None:
    from myst_nb.core import render  # noqa: PLC0415

    plugins = render.load_mime_renders()  # lru_cached list of entry-point plugins
    if not any(p is PlotlyJsonMimePlugin for p in plugins):
        plugins.append(PlotlyJsonMimePlugin)


def _copy_plotly_js_early(app: Sphinx) -> None:
    # copy before the pages are written so that Sphinx adds the ?v=checksum cache buster
    _copy_plotly_js(app, None)


def setup(app: Sphinx) -> dict[str, Any]:
    # the chapters' kernels inherit this: their first cell then does not display plotly.js
    # (attn_edu.notebook.plotly_js_loader), which the book serves from _static instead
    os.environ["ATTN_EDU_BOOK_BUILD"] = "1"
    _register_mime_plugin()
    app.connect("builder-inited", _copy_plotly_js_early)
    # run after the other extensions' html-page-context handlers (default priority 500)
    app.connect("html-page-context", _page_context, priority=900)
    app.connect("build-finished", _copy_plotly_js)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
