"""Stylesheets inlined: each page's ``<link rel="stylesheet">`` tags become one ``<style>`` of
the rules that can match the page, when the build ends (:func:`inline_stylesheets`): a page
paints without fetching anything else first, where it waited seconds on a phone's connection.

A chapter page linked 12 stylesheets (100 KB compressed, most of it Bootstrap and Font
Awesome rules that match nothing on the page). The ``<style>`` holds the rules of those
same sheets, in the same order, that can match the page: a rule is dropped when a class or
id its selector requires (outside ``:not()``, ``:is()``...) is neither in the page's HTML
nor a word of a script the pages run (scripts add classes: ``show``, ``toggle-hidden``...).
Every colour mode's rules stay (they are attribute selectors). On the way:

* icon-font glyphs become SVG masks: a rule whose ``content`` is a Font Awesome glyph
  (the theme's admonition icons) draws that glyph's path, read from ``fontawesome.js``,
  as a CSS mask in ``currentColor``; the icon fonts (153 KB, ``font-display: block``) are
  no longer requested, their ``@font-face`` rules dropped;
* KaTeX's ``@font-face`` rules get ``font-display: swap`` (text shows at once), and the
  KaTeX fonts the page's first screen uses are preloaded (they arrive before the first
  paint, so the swap moves nothing);
* ``url()``s are rewritten for the page's folder.

Nothing is fetched before the first paint but the page itself.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from ._common import CLASS_ID_RE, logger
from .figures import FIGURES_JS
from .images import ZOOM_JS
from .katex import katex_preloads

STYLE_ID = "attn-edu-css"
_DONE_STYLE_RE = re.compile(r'<style id="attn-edu-css" data-sheets="([^"]*)">.*?</style>\n?', re.S)
_PRELOAD_FONT_RE = re.compile(r'<link rel="preload" [^>]*data-attn-edu-font />\n?')
_LINK_CSS_RE = re.compile(r'[ \t]*<link\b(?=[^>]*\brel="stylesheet")(?![^>]*\bmedia="(?!all|screen))[^>]*>\n?')
_HREF_RE = re.compile(r'\bhref="([^"]+)"')
_JS_WORD_RE = re.compile(r"[A-Za-z_][\w-]*")
_SCRIPT_SRC_RE = re.compile(r'<script\b[^>]*\bsrc="([^"]+)"')
_CSS_URL_RE = re.compile(r'url\((["\']?)([^"\')]+)\1\)')
_ROOT = "@@attn-edu-root@@/"
#: scripts whose words do not name classes of the pages' stylesheets (their own CSS is
#: their own: plotly.js and MathJax inject it; fontawesome.js holds every icon's name; the
#: search index and the stemmer's word lists are data)
_NOT_CLASS_SOURCES = ("plotly", "mathjax", "fontawesome", "searchindex", "language_data")


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


def inline_stylesheets(out: Path, pages: list[tuple[Path, str]], icons: dict) -> dict:
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
        for m in CLASS_ID_RE.finditer(text):
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
        preloads = katex_preloads(text, depth, out)
        hrefs = html.escape(" ".join(_HREF_RE.search(tag).group(1) for tag in tags))
        new = new.replace("<!--STYLE-->", (preloads + "\n" if preloads else "")
                          + f'<style id="{STYLE_ID}" data-sheets="{hrefs}">{style}</style>\n') + text[head_end:]
        result[page] = new
    return result

