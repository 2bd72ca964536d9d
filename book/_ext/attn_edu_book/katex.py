"""Math typeset at build time: every formula by KaTeX under Node, its results cached between
builds, MathJax kept only for what KaTeX cannot typeset, KaTeX's fonts cut to the book's
characters and the first screen's preloaded: a page shows its math without running a script.

* **Typesetting.** Every formula of a page's doctree (:func:`typeset_math`, on
  ``doctree-resolved``) and of its table of contents (:func:`typeset_toc_math`) is typeset
  by KaTeX (vendored: ``book/_ext/katex/katex.min.js`` runs under Node during the build,
  ``book/_static/katex`` holds its CSS and fonts, see its README), so MathJax is not loaded
  on a page where KaTeX typeset everything (:data:`MATH_LEFT`, :func:`is_mathjax`,
  :func:`finish_math`). A formula KaTeX cannot typeset (logged) stays for MathJax on its
  page; without Node.js every page keeps MathJax as before.
* **The cache** (:data:`KATEX_CACHE`): results are keyed by the TeX and the renderer's own
  code, so the Chinese edition's build typesets none of the English edition's formulas again.
* **Fonts.** Each KaTeX font is served cut to the characters of the built pages' formulas
  (:func:`subset_katex_fonts`), and the fonts a page's first screen uses are preloaded
  (:func:`katex_preloads`, written beside the page's inlined stylesheet).
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

from ._common import BUILD_DIR, CLASS_ID_RE, EXT_DIR, STATIC_SRC, logger, text_width

KATEX_CSS = "katex/katex.min.css"
#: the accessible name of a display formula's box (it scrolls sideways where it is wider
#: than the column; the theme's lazy tab-stop pass keeps it a tab stop only then)
DISPLAY_MATH_NAME = "equation"
_KATEX_JS = EXT_DIR / "katex" / "render.js"
#: docname -> how many formulas KaTeX could not typeset (MathJax stays for those)
MATH_LEFT: dict[str, int] = {}


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
KATEX_CACHE = BUILD_DIR / ".katex_cache.json"
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


def typeset_math(app: Sphinx, doctree: Any, docname: str) -> None:
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
        MATH_LEFT[docname] = len(found)
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
    MATH_LEFT[docname] = left


TOC_MATH_RE = re.compile(r'<span class="math notranslate nohighlight">\\\((?P<tex>.*?)\\\)</span>', re.S)


def typeset_toc_math(toc: str) -> tuple[str, int]:
    """Typeset the math of the page's table of contents (section titles, rendered from the
    environment's copy of them, not from the page's doctree); also say how many are left."""
    found = list(TOC_MATH_RE.finditer(toc))
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


def page_math(app: Sphinx, pagename: str, context: dict) -> bool:
    """The math of what the theme writes around a page (``html-page-context``): the titles of
    the neighbouring pages as plain text, its table of contents typeset, KaTeX's stylesheet
    where there is math. True when KaTeX typeset every formula of the page (no MathJax)."""
    math_left = MATH_LEFT.get(pagename)  # None: no math on the page
    for link in ("prev", "next"):  # titles of the neighbouring pages: math as plain text
        title = (context.get(link) or {}).get("title")
        if isinstance(title, str) and TOC_MATH_RE.search(title):
            from attn_edu.alt_text import plain_text  # noqa: PLC0415

            context[link]["title"] = TOC_MATH_RE.sub(
                lambda m: html.escape(plain_text(html.unescape(m.group("tex")))), title)
    if isinstance(context.get("toc"), str) and TOC_MATH_RE.search(context["toc"]):
        context["toc"], toc_left = typeset_toc_math(context["toc"])
        math_left = (math_left or 0) + toc_left
    if math_left is not None:
        app.add_css_file(KATEX_CSS)
    return math_left == 0  # KaTeX typeset every formula: no MathJax


def is_mathjax(js: Any, app: Sphinx) -> bool:
    filename = getattr(js, "filename", "") or ""
    body = (getattr(js, "attributes", {}) or {}).get("body", "") or ""
    mathjax_path = str(getattr(app.config, "mathjax_path", "") or "")
    return bool((mathjax_path and filename.endswith(mathjax_path)) or "window.MathJax" in body)


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
#: :func:`._common.text_width`), with what precedes it
FIRST_SCREEN_TEXT = 2500


def katex_preloads(text: str, depth: int, out: Path) -> str:
    """``<link rel="preload">`` of the KaTeX fonts the page's first screen uses."""
    start, article = text.find("<body"), text.find("<article")
    if start < 0 or article < 0:
        return ""
    seen, end = 0, len(text)
    for m in re.finditer(r">([^<]+)<", text[article:]):
        seen += text_width(m.group(1).strip())
        if seen >= FIRST_SCREEN_TEXT:
            end = article + m.end()
            break
    first = text[start:end]
    if 'class="katex' not in first:
        return ""
    classes = set()
    for m in CLASS_ID_RE.finditer(first):
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
#: characters the built pages' formulas use (:func:`subset_katex_fonts`)
KATEX_FONTS_SRC = STATIC_SRC / "katex" / "fonts"
_MATH_TOKEN_RE = re.compile(r"<(/?)span\b[^>]*>|<[^>]*>|([^<]+)")


def math_characters(texts) -> set:
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


def subset_katex_fonts(out: Path, chars: set) -> int:
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


_MATHJAX_TAG_RE = re.compile(r'\s*<script[^>]*src="[^"]*_static/mathjax/[^"]*"></script>'
                             r'|\s*<script>window\.MathJax = .*?</script>', re.S)


def finish_math(text: str, name: str) -> str:
    """A written page's math that the theme wrote from other documents (its table of
    contents) typeset too; MathJax's scripts leave the page when KaTeX typeset every formula."""
    if TOC_MATH_RE.search(text):
        text, left = typeset_toc_math(text)
        if left:
            logger.info("[attn_edu_book] %s: %d formulas left to MathJax", name, left)
    if _MATHJAX_TAG_RE.search(text) and not TOC_MATH_RE.search(text) \
            and not re.search(r'class="math notranslate nohighlight">\s*\\\[', text):
        text = _MATHJAX_TAG_RE.sub("", text)  # KaTeX typeset every formula
    return text
