"""The attn-edu book's Sphinx extension: it makes the built HTML fully offline, light on a
phone and accessible (plotly.js and KaTeX from the build, only where needed; text
alternatives; keyboard stops). This file wires Sphinx's events; each job has a module.

Loaded through ``_config.yml`` (``sphinx: local_extensions: attn_edu_book: book/_ext``: a
package there is imported as a module would be). The map of which module does which job
is CONTRIBUTING.md's "Where to change what":

* ``figures``: plotly.js served by the build and drawn on demand, figures' text
  alternatives, live explorers as their saved figure, the myst-nb mime plugin;
* ``katex``: math typeset at build time, its cache, KaTeX's fonts (cut and preloaded);
* ``icons``: Font Awesome's icons as inline SVG;
* ``assets``: scripts deferred, inlined or dropped where they can do nothing;
* ``stylesheets``: every page's stylesheets as one pruned ``<style>``;
* ``images``: lazy, sized and zoomable images;
* ``layout``: section placeholders, tab stops, code;
* ``pages``: the pass over each page as it is written and the finish step over the files;
* ``_common``: the logger, the source folders, a text's width (imported by the others).

Imports run downwards only (``pages`` uses the jobs, no job imports ``pages`` or this
file), with no cycle: ``tests/test_conventions.py`` walks them.
"""

from __future__ import annotations

import os
from typing import Any

from sphinx.application import Sphinx

from . import assets, figures, katex, pages
from .figures import register_mime_plugin


def _builder_inited(app: Sphinx) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    app.add_css_file(assets.BOOK_CSS)
    figures.serve_plotly(app)


def setup(app: Sphinx) -> dict[str, Any]:
    # plotly.js once, not per chapter: in a live kernel the chapters' first cell displays
    # plotly.js (4.8 MB) so figures draw in any front end offline; the book serves it from
    # _static instead. The chapters' kernels inherit this variable, and then their first cell
    # does not display it (attn_edu.notebook.plotly_js_loader).
    os.environ["ATTN_EDU_BOOK_BUILD"] = "1"
    register_mime_plugin()
    app.connect("builder-inited", _builder_inited)
    app.connect("doctree-resolved", katex.typeset_math)
    # after the theme's own build-finished handler, which writes its light/dark pygments.css
    # (that file is inlined into the pages here)
    app.connect("build-finished", pages.finish_pages, priority=900)
    # run after the other extensions' html-page-context handlers (default priority 500)
    app.connect("html-page-context", pages.page_context, priority=900)
    return {"version": "0.2", "parallel_read_safe": True, "parallel_write_safe": True}
