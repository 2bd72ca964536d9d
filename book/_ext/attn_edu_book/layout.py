"""How a page is laid out before it is drawn: each section a placeholder height so the browser
lays out only what comes near, code blocks as tab stops measured lazily, inline code that wraps,
highlighted code with fewer elements: a phone spends its load time on the first screen.

* **Tab stops** (:func:`patch_theme_tab_stops`, on the theme's script when the build
  ends; :func:`focusable_code` on each page): see :data:`_THEME_TAB_STOP` below.
* **Section placeholders** (:func:`section_placeholders`): ``content-visibility: auto``
  in book.css lets the browser skip a section until it comes near; the placeholder height
  written here, no smaller than the content, keeps the page's length right meanwhile.
* **Code** (:func:`breakable_code`, :func:`unwrap_pre`, :func:`unwrap_plain_tokens`):
  inline code breaks after a dot or a slash; Sphinx's per-word ``<span class="pre">`` and
  the Pygments tokens drawn as plain text lose their elements.
"""

from __future__ import annotations

import re
from pathlib import Path

from ._common import text_width

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
#: a block has ``tabindex="0"`` -- the one :func:`focusable_code` gives every ``<pre>``, and
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


def patch_theme_tab_stops(path: Path) -> bool:
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


_PRE_SPAN_RE = re.compile(r'<span class="pre">((?:[^<]|<wbr>)*)</span>')


def unwrap_pre(text: str) -> str:
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


def plain_token_re(plain: set) -> re.Pattern | None:
    """A highlighted token of one of the ``plain`` classes, its text the group."""
    return re.compile(r'<span class="(?:%s)">([^<]*)</span>' % "|".join(sorted(map(re.escape, plain)))) if plain else None


def unwrap_plain_tokens(text: str, token: re.Pattern | None) -> str:
    """In highlighted code, a token whose class draws it as the text around it
    (:func:`plain_token_classes`, :func:`plain_token_re`) needs no element of its own: its
    text alone looks the same (about 3,700 of chapter 05's elements: every name and bracket)."""
    if token is None:
        return text
    return _HIGHLIGHT_PRE_RE.sub(lambda m: m.group(1) + token.sub(r"\1", m.group(2)) + m.group(3), text)


_SECTION_TAG_RE = re.compile(r"<section\b[^>]*>|</section>")


def _section_height_px(fragment: str, slack: int = 300) -> int:
    """A generous guess of a section's (or a block's: ``slack``) height on a phone (about
    380 px of text width): its words (40 widths a line, a CJK character two:
    :func:`._common.text_width`), code lines, images, figures (three times their height: stacked on a
    phone) and table rows. Over, not under: the blocks below a section whose placeholder is
    too short would be laid out, their fonts fetched, before the first screen is painted; a
    section that grows when it is drawn moves what is below it; and a skipped section taller
    than its placeholder overlaps the next one for anything that measures it before it is
    drawn (accessibility checkers do)."""
    text = re.sub(r"<[^>]+>", "", re.sub(r"<(pre|script|style)\b.*?</\1>", "", fragment, flags=re.S))
    height = 28 * (text_width(" ".join(text.split())) // 40 + fragment.count("<p") + fragment.count("<li"))
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


def section_placeholders(body: str) -> str:
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


def focusable_code(body: str) -> str:
    """Every ``<pre>``, wide-table box and HTML table output starts as a tab stop (the
    theme's lazy pass drops those that turn out not to scroll when they come near)."""
    body = re.sub(r"<pre(?=[ >])(?![^>]*\btabindex=)", '<pre tabindex="0"', body)
    # a notebook's HTML table (an output) scrolls sideways on a phone: a tab stop as well
    body = body.replace('<div class="output text_html"><table', '<div class="output text_html" tabindex="0"><table')
    return body.replace('<div class="pst-scrollable-table-container">',
                        '<div class="pst-scrollable-table-container" tabindex="0">')


_CODE_PRE_RE = re.compile(r'(<code class="docutils literal notranslate">)(.*?)(</code>)', re.S)


def breakable_code(body: str) -> str:
    """Inline code may break after a dot or a slash (``<wbr>``): a long dotted name wraps
    there on a phone instead of running off the column (book.css lets it wrap anywhere
    when even a part is too long)."""
    def pre(m: re.Match) -> str:
        inner = re.sub(r'(<span class="pre">)([^<]*)(</span>)',
                       lambda p: p.group(1) + re.sub(r"([./])(?=[^./])", r"\1<wbr>", p.group(2)) + p.group(3),
                       m.group(2))
        return m.group(1) + inner + m.group(3)

    return _CODE_PRE_RE.sub(pre, body)

