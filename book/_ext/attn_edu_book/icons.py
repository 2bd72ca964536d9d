"""Font Awesome's icons inlined as SVG when the build ends: pydata-sphinx-theme draws them with
``fontawesome.js`` (1.5 MB, every icon there is), which swaps each ``<i class="fa-solid
fa-bars">`` for an inline SVG when the page loads; here that swap is done in the HTML files.

The SVG paths are read from that same file (:func:`fontawesome_icons`), and the script leaves
every page where every icon was swapped (:data:`FA_SCRIPT_RE`). The icon-font glyphs of the
stylesheets (the admonitions' icons) become SVG masks where the stylesheets are inlined
(``stylesheets.py``), from the same icons.
"""

from __future__ import annotations

import re

FONTAWESOME_JS = "scripts/fontawesome.js"
_FA_PACKS = {"fas": "solid", "fa-solid": "solid", "fab": "brands", "fa-brands": "brands",
             "far": "regular", "fa-regular": "regular"}
_FA_ICON_RE = re.compile(r'<(?P<tag>i|span) class="(?P<cls>[^"]*\bfa[a-z-]*\b[^"]*)"(?P<attrs>[^>]*)>'
                         r"\s*</(?P=tag)>")
FA_SCRIPT_RE = re.compile(r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>')
_FA_MODIFIERS = {"fa-lg", "fa-fw", "fa-xs", "fa-sm", "fa-xl", "fa-2x", "fa-spin"}


def fontawesome_icons(js: str) -> dict:
    """``{(pack, name): (width, height, path)}`` read from fontawesome.js: each pack's icons
    come before its ``x("fab", {...})`` registration call (brands, regular, solid)."""
    marks = []
    for short in ("fab", "far", "fas"):
        m = re.search(r'[\w$]\("' + short + r'",', js)
        if m is None:
            return {}
        marks.append((m.start(), _FA_PACKS[short]))
    marks.sort()
    icons, start = {}, 0
    icon_re = re.compile(r'(?:"(?P<q>[a-z0-9-]+)"|(?<![\w$-])(?P<b>[a-z][a-z0-9]*)):\[(?P<w>\d+),(?P<h>\d+),'
                         r'\[[^\]]*\],"(?P<code>[0-9a-f]+)","(?P<d>M[^"]+)"\]')
    for end, pack in marks:
        for m in icon_re.finditer(js, start, end):
            icon = (m.group("w"), m.group("h"), m.group("d"))
            icons.setdefault((pack, m.group("q") or m.group("b")), icon)
            icons.setdefault((pack, int(m.group("code"), 16)), icon)  # by code point, for CSS
        start = end
    return icons


def inline_icons(text: str, icons: dict) -> tuple[str, bool]:
    """Swap every Font Awesome ``<i>``/``<span>`` for its SVG; also say whether all were."""
    all_done = True

    def swap(m: re.Match) -> str:
        nonlocal all_done
        classes = m.group("cls").split()
        pack = next((_FA_PACKS[c] for c in classes if c in _FA_PACKS), "solid")
        names = [c[3:] for c in classes if c.startswith("fa-") and c not in _FA_PACKS
                 and c not in _FA_MODIFIERS]
        icon = icons.get((pack, names[0])) if len(names) == 1 else None
        if icon is None:
            all_done = all_done and not names
            return m.group(0)
        w, h, d = icon
        return (f'<svg class="{" ".join(classes)} svg-inline--fa"{m.group("attrs")} '
                f'aria-hidden="true" focusable="false" xmlns="http://www.w3.org/2000/svg" '
                f'viewBox="0 0 {w} {h}"><path fill="currentColor" d="{d}"></path></svg>')

    return _FA_ICON_RE.sub(swap, text), all_done


def finish_icons(text: str, icons: dict) -> str:
    """A written page with its icons as SVG, and without ``fontawesome.js`` when every icon
    was swapped."""
    if icons and "fontawesome.js" in text:
        text, all_done = inline_icons(text, icons)
        if all_done:
            text = FA_SCRIPT_RE.sub("", text)
    return text
