"""The book's two editions: a language switch on every page, and the Chinese pages' links.

The English book is built at the site's root and the Chinese one under ``zh/`` (scripts/zh.py
``site`` prepares its sources; scripts/build-book.sh builds both). Configuration, set by each
edition's ``_config.yml`` (``sphinx: config:``):

* ``attn_edu_edition``: ``"en"`` or ``"zh"`` (default ``"en"``);
* ``attn_edu_other_edition_pages``: the page names the other edition has (default: all), so
  the switch never points to a missing page.

On every page it puts, first in the article, a link to the same page in the other edition
(``中文`` / ``English``, with ``lang`` and ``hreflang``, reachable by keyboard like any link),
and nothing in the head (see :func:`_page_context`). In the Chinese edition it points
the launch buttons (Colab) at the Chinese notebooks, ``notebooks/zh/NN_name.ipynb``.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

_OTHER = {"en": ("zh", "zh-CN", "中文", "阅读本页的中文版"), "zh": ("en", "en", "English",
                                                              "Read this page in English")}


def _href(edition: str, pagename: str) -> str:
    depth = pagename.count("/")
    if edition == "en":  # root -> zh/
        return "../" * depth + "zh/" + pagename + ".html"
    return "../" * (depth + 1) + pagename + ".html"  # zh/ -> root


def _page_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    edition = app.config.attn_edu_edition
    pages = app.config.attn_edu_other_edition_pages
    if pages is not None and pagename not in pages:
        return
    _, lang, label, title = _OTHER[edition]
    href = _href(edition, pagename)
    # styled inline: no stylesheet of its own to wait for
    link = (f'<p class="attn-edu-edition" style="float:right;margin:0 0 .5rem 1rem">'
            f'<a href="{html.escape(href)}" lang="{lang}" hreflang="{lang}" title="{html.escape(title)}" '
            f'style="display:inline-block;padding:.2rem .6rem;border:1px solid currentColor;'
            f'border-radius:.3rem;text-decoration:none">{html.escape(label)}</a></p>\n')
    if "body" in context:
        context["body"] = link + context["body"]
    # No <link rel="alternate" hreflang> in the head: it must carry an absolute URL (Lighthouse's
    # SEO audit failed the relative one: 90 instead of 100), and the book has no fixed address
    # (a fork publishes it elsewhere, a reader opens it from disk). The visible link says it.


#: the themes' strings that their zh_CN catalogues lack (or give in Taiwanese usage), as they
#: appear in the pages: attribute values and text between tags
ZH_STRINGS = {
    "Search this book...": "搜索本书……", "Color mode": "颜色模式", "System Settings": "跟随系统",
    "Launch interactive content": "启动交互内容", "Launch on Colab": "在 Colab 中打开",
    "Toggle primary sidebar": "切换主侧栏", "Toggle secondary sidebar": "切换次侧栏",
    "Link to this heading": "链接到此标题", "Toggle hidden content": "显示或隐藏内容",
    "Source repositories": "源码库", "Open issue": "提交问题", "Repository": "代码库",
    "列印成 PDF": "打印为 PDF", "Skip to main content": "跳到正文", "Back to top": "回到顶部",
    "Contents": "本页目录", "On this page": "本页内容", "Interactive figure: ": "交互式图：",
}


def _zh_strings(text: str) -> str:
    for en, zh in ZH_STRINGS.items():
        text = text.replace(f'"{en}"', f'"{zh}"').replace(f">{en}<", f">{zh}<")
        text = text.replace(f">\n{en}<", f">\n{zh}<")
    return text.replace('aria-label="Interactive figure: ', 'aria-label="交互式图：')


def _finish(app: Sphinx, exception: Exception | None) -> None:
    """Chinese pages: the launch buttons open the Chinese notebook (notebooks/zh/...), and the
    themes' strings their catalogues lack are in Chinese (:data:`ZH_STRINGS`)."""
    if exception is not None or app.config.attn_edu_edition != "zh" or app.builder.format != "html":
        return
    opts = app.config.html_theme_options or {}
    repo = (opts.get("repository_url") or "").rstrip("/").removeprefix("https://github.com/")
    branch = opts.get("repository_branch") or "main"
    old, new = f"/github/{repo}/blob/{branch}/notebooks/", f"/github/{repo}/blob/{branch}/notebooks/zh/"
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        changed = _zh_strings(text.replace(old, new) if repo else text)
        if changed != text:
            page.write_text(changed, encoding="utf-8")


class _TermSet(set):
    """A set with ``list.extend``: what Sphinx's Chinese search splitter keeps its Latin words in."""

    def extend(self, items) -> None:
        self.update(items)


def _fast_chinese_search() -> None:
    """Sphinx 7's Chinese search (``sphinx.search.zh.SearchChinese``) collects every Latin word
    of every page in a list and asks ``word in`` that list for each word it stems: quadratic in
    the book's size, 48 of the Chinese build's 108 s (cProfile). A set gives the same answers."""
    try:
        from sphinx.search.zh import SearchChinese  # noqa: PLC0415
    except ImportError:
        return
    if not isinstance(SearchChinese.latin_terms, set):
        SearchChinese.latin_terms = _TermSet(SearchChinese.latin_terms)


def setup(app: Sphinx) -> dict[str, Any]:
    _fast_chinese_search()
    app.add_config_value("attn_edu_edition", "en", "html")
    app.add_config_value("attn_edu_other_edition_pages", None, "html")
    app.connect("html-page-context", _page_context, priority=950)
    app.connect("build-finished", _finish)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
