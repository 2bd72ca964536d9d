"""The two passes over the pages, in order: each page's body and assets as Sphinx writes it
(:func:`page_context`, on ``html-page-context``), then every written file once the build is done
(:func:`finish_html`, on ``build-finished``). The jobs are the other modules'; the order is here.

``finish_html`` works on the HTML files alone (``python book/_ext/attn_edu_book _build/html``
runs it again after an edit of book.css: see ``__main__.py``), because what it changes only the
written page shows: the theme's icons, its search scripts and preloads, the math it wrote from
other documents (the table of contents), the stylesheets, KaTeX's fonts.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

from . import assets, figures, icons, images, katex, layout, stylesheets
from ._common import logger


def page_context(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """A page's body, metadata and assets as Sphinx is about to write them."""
    if app.builder is None or app.builder.format != "html":
        return
    body = context.get("body") or ""
    lang = figures.edition_language(app)  # the Chinese edition's words are Chinese (attn_edu.i18n)
    body, n_figures = figures.defer_figures(body, pagename, app.outdir, lang)
    body = figures.localize_live_notes(body, lang)
    if figures.COLAB_SLOT in body:
        url = figures.colab_url(app, pagename)
        body = body.replace(figures.COLAB_SLOT, figures.colab_link(url, lang) if url else "")
    # valid lists: the bibliography (sphinxcontrib-bibtex) writes role="list" around entries
    # with role="doc-biblioentry", which is not a list item
    body = body.replace('role="doc-biblioentry"', 'role="listitem"')
    # a collapsed cell's summary says what it hides ("Show code cell source"): the generic
    # label sphinx-togglebutton puts on it hid that from screen readers
    body = body.replace('<summary aria-label="Toggle hidden content">', "<summary>")
    body = images.external_images(body, pagename, app.outdir)
    body = images.lazy_images(body)
    body, n_images = images.zoomable_images(body)
    body = layout.breakable_code(body)
    body = layout.focusable_code(body)
    body = layout.section_placeholders(body)
    if figures.WIDGET_VIEW in body:
        logger.warning("[attn_edu_book] %s: an ipywidgets view is on the page, whose controls "
                       "cannot do anything without a kernel (give it a text/html stand-in)",
                       pagename)
    context["body"] = body
    description = _page_description(body)
    if description and 'name="description"' not in (context.get("metatags") or ""):
        context["metatags"] = (context.get("metatags") or "") + \
            f'\n<meta name="description" content="{html.escape(description)}" />'
    if n_images:
        app.add_js_file(images.ZOOM_JS, loading_method="defer")
    if n_figures:
        plotly = getattr(app.config, "_attn_edu_plotly", figures.PLOTLY_STATIC)
        app.add_js_file(figures.FIGURES_JS, loading_method="defer",
                        **{"data-plotly": "../" + plotly})
    no_mathjax = katex.page_math(app, pagename, context)
    assets.page_assets(app, context, body, no_mathjax)


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


def finish_pages(app: Sphinx, exception: Exception | None) -> None:
    """What only the written page shows (see :func:`finish_html`)."""
    if exception is not None or app.builder is None or app.builder.format != "html":
        return
    finish_html(Path(app.outdir))
    katex.save_katex_cache()


def finish_html(out: Path) -> None:
    """What only the written pages show: the theme's icons, its search scripts, the math
    that the theme wrote from other documents (the page's table of contents, the links to
    the neighbouring pages), the stylesheets (one pruned ``<style>`` per page), and KaTeX's
    fonts cut to the characters of the pages' formulas."""
    if not layout.patch_theme_tab_stops(out / "_static" / layout.THEME_JS):
        logger.warning("[attn_edu_book] the theme's tab-stop code was not found in %s: every "
                       "page lays itself out at once on load (update _THEME_TAB_STOP)", layout.THEME_JS)
    js = out / "_static" / icons.FONTAWESOME_JS
    fa_icons = icons.fontawesome_icons(js.read_text(encoding="utf-8")) if js.is_file() else {}
    css = out / "_static" / "pygments.css"
    plain = layout.plain_token_re(layout.plain_token_classes(css.read_text(encoding="utf-8"))
                                  if css.is_file() else set())
    pages = []
    for page in sorted(out.rglob("*.html")):
        if page.relative_to(out).parts[0] in ("_static", "_sources"):
            continue
        text = page.read_text(encoding="utf-8")
        new = assets.finish_scripts(text, page, out)
        new = images.lazy_header_images(new)
        new = images.sized_images(new, page)
        new = layout.unwrap_pre(new)
        new = layout.unwrap_plain_tokens(new, plain)
        new = icons.finish_icons(new, fa_icons)
        new = katex.finish_math(new, page.name)
        pages.append((page, new, text))
    styled = stylesheets.inline_stylesheets(out, [(p, new) for p, new, _ in pages], fa_icons)
    katex.subset_katex_fonts(out, katex.math_characters(new for _, new, _ in pages))
    for page, new, text in pages:
        new = styled.get(page, new)
        if new != text:
            page.write_text(new, encoding="utf-8")
