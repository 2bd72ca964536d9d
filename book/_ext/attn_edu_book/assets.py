"""What a page loads besides its text: scripts deferred, or inlined where tiny and blocking,
assets that can do nothing on a page dropped, the search scripts on the search page alone:
each request before the first paint was a phone's bandwidth taken from the page itself.

* **Theme scripts deferred.** Every external script of the page (Sphinx's, the theme's,
  the extensions') gets ``defer``, except ``documentation_options.js`` (:data:`KEEP_BLOCKING`),
  whose global the page's inline scripts use, and which the finish step writes into the page
  (:func:`finish_scripts`); the search scripts that the theme writes into ``<head>`` itself
  get ``defer`` when the build ends, on the search page, and leave every other page.
* **No duplicated inline scripts.** sphinx-thebe registers its inline configuration
  script (``const THEBE_JS_URL = ...``) with ``app.add_js_file`` in an
  ``env-before-read-docs`` handler (sphinx-togglebutton does the same with its
  ``var togglebuttonSelector``); Sphinx stores it once in the registry (filename
  ``None``) and once in the builder (filename ``""``), does not see the two as equal,
  and the page then declares the ``const`` twice:
  ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared``. Exact duplicates
  of inline scripts leave every page (:func:`page_assets`), which keeps the launch buttons
  (they do not depend on it) and sphinx-thebe.js working.
* **No script that can do nothing.** With ``launch_buttons: thebe: false`` (the book's
  setting) sphinx-thebe's script, stylesheet and inline configuration leave every page,
  and sphinx-design's tab script every page without a tab set (:func:`idle_assets`).

The icons (``icons.py``) and the stylesheets (``stylesheets.py``) have modules of their own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

from .figures import WIDGET_STATE
from .katex import is_mathjax

#: the book's own stylesheet (book/_static/attn-edu/book.css), on every page
BOOK_CSS = "attn-edu/book.css"


#: the theme's search button shows "Search Ctrl + K" but is named "Search" (``aria-label``):
#: a voice user who says what they see does not reach it (WCAG 2.5.3, axe's
#: label-content-name-mismatch, on every page). Without the attribute its name is its text.
_SEARCH_BUTTON_LABEL_RE = re.compile(r'(<button class="btn search-button-field search-button__button[^"]*"'
                                     r'(?: title="[^"]*")?) aria-label="[^"]*"')
_SEARCH_SCRIPT_RE = re.compile(r'<script src="([^"]*(?:searchindex|searchtools|language_data)\.js)">')
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


def finish_scripts(text: str, page: Path, out: Path) -> str:
    """A written page's scripts as the finish step leaves them: the search index and its
    scripts (66 KB compressed) on the search page alone, deferred (the theme's search box
    sends the reader there, ``search_as_you_type`` is off, so no other page uses them); no
    ``<link rel="preload">`` of the theme's two scripts (loaded, deferred, at the end of the
    page, preloading them took a phone's bandwidth from the page itself before its first
    paint); the search button named by its text; ``documentation_options.js`` inlined."""
    if page.relative_to(out).as_posix() == "search.html":
        new = _SEARCH_SCRIPT_RE.sub(r'<script defer src="\1">', text)
    else:
        new = _SEARCH_TAG_RE.sub("", text)
    new = _PRELOAD_SCRIPT_RE.sub("", new)
    new = _SEARCH_BUTTON_LABEL_RE.sub(r"\1", new)
    return _inline_small_scripts(new, page)


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


def idle_assets(app: Sphinx, body: str) -> tuple:
    """What a page loads that can do nothing there: sphinx-thebe's script, stylesheet and
    inline configuration when the book's launch buttons have no "Live code" (``thebe:
    false``), sphinx-design's tab script on a page without a tab set. Each was a request
    (and a phone's bandwidth) before the first paint on every page."""
    launch = (getattr(app.config, "html_theme_options", None) or {}).get("launch_buttons") or {}
    idle = () if launch.get("thebe") else THEBE_ASSETS
    if "sd-tab-set" not in body:
        idle += (DESIGN_TABS_JS,)
    return idle


def asset_is(asset: Any, names: tuple) -> bool:
    """Whether a script or stylesheet of the page is one of ``names`` (a file name, or a
    word of an inline script's code)."""
    filename = (getattr(asset, "filename", None) or "").split("?")[0]
    if filename:
        return filename.rsplit("/", 1)[-1] in names
    code = str((getattr(asset, "attributes", None) or {}).get("body") or "")
    return any(name in code for name in names)


#: scripts that must run where they stand: the page's inline scripts use their globals
KEEP_BLOCKING = ("_static/documentation_options.js",)


def _defer_script(js: Any) -> None:
    """Load a classic external script with ``defer``: it no longer blocks the first paint,
    and deferred scripts still run in document order before ``DOMContentLoaded``."""
    attrs = getattr(js, "attributes", None)
    filename = getattr(js, "filename", "") or ""
    if (attrs is None or not filename or filename.startswith(KEEP_BLOCKING)
            or {"defer", "async"} & set(attrs) or attrs.get("type") not in (None, "text/javascript")):
        return
    attrs["defer"] = "defer"


def page_assets(app: Sphinx, context: dict, body: str, no_mathjax: bool) -> None:
    """The page's stylesheets and scripts (``html-page-context``): no idle asset
    (:func:`idle_assets`), no exact duplicate of an inline script, no widget state, no
    MathJax where KaTeX typeset every formula (``no_mathjax``), every other external
    script deferred."""
    idle = idle_assets(app, body)
    css_files = context.get("css_files")
    if css_files:
        css_files[:] = [c for c in css_files if not asset_is(c, idle)]
    scripts = context.get("script_files")
    if scripts:
        seen: set[tuple] = set()
        unique = []
        for js in scripts:
            key = _script_key(js)
            attrs = getattr(js, "attributes", {}) or {}
            # no widget state: nothing on the page draws widgets
            if key in seen or attrs.get("type") == WIDGET_STATE or asset_is(js, idle):
                continue
            if no_mathjax and is_mathjax(js, app):  # KaTeX typeset every formula
                continue
            _defer_script(js)
            seen.add(key)
            unique.append(js)
        if len(unique) != len(scripts):
            scripts[:] = unique
