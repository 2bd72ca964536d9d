#!/usr/bin/env python3
"""How long is each chapter's main flow? The measure behind the chapter budget (BOOK.md).

    python scripts/chapter_stats.py                  # a table for every chapter
    python scripts/chapter_stats.py notebooks/05_*.ipynb --cells   # also list long visible cells

Main-flow prose: the words of markdown cells, leaving out what a reader has to open to
see -- admonitions with ``:class: dropdown`` (solutions, "Going deeper"), ``{dropdown}``
and ``{toggle}`` directives -- and display math (``$$ ... $$`` and ``{math}`` blocks).
A word is a whitespace-separated token that contains a letter or digit; inline math
counts as the words it splits into. HTML comments and tags and MyST targets (a line
``(name)=``, the anchor a glossary entry links to) are not words.

Visible code: code cells without a ``hide-input``, ``remove-input`` or ``remove-cell``
tag; a cell's length is its number of non-blank lines.

The budget (tests/test_notebooks.py): at most ``MAX_WORDS`` words of main-flow prose and
at most ``MAX_CELL_LINES`` non-blank lines in any visible code cell.

The Chinese edition (``notebooks/zh/``) is measured in CJK characters of the same main flow
(:func:`cjk_chars`): at most ``MAX_CJK`` (tests/test_zh.py). The first four translated
chapters ran at 1.33-1.56 characters per English word (4,000-4,700 characters for 3,000
words); 4,800 characters read in about 15 minutes at 320 characters a minute.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Dict, List

MAX_WORDS = 3000
MAX_CJK = 4800
MAX_CELL_LINES = 25
HIDDEN_TAGS = {"hide-input", "remove-input", "remove-cell"}

_FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}(?P<arg>.*)$")


def _strip_folded(md: str) -> str:
    """Drop folded directive blocks (dropdowns, toggles) and display math from markdown."""
    out: List[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i].strip())
        if m:
            fence, name = m.group("fence"), m.group("name")
            # find the block's end: the same fence on a line of its own (nesting allowed
            # for longer/shorter fences of other lengths)
            j, depth = i + 1, 1
            while j < len(lines):
                s = lines[j].strip()
                inner = _FENCE.match(s)
                if inner and inner.group("fence") == fence:
                    depth += 1
                elif s == fence:
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            body = lines[i + 1:j]
            options = [b.strip() for b in body if b.strip().startswith(":")]
            folded = (name in ("dropdown", "toggle", "math")
                      or any(re.match(r":class:.*\bdropdown\b", o) for o in options))
            if not folded:
                out.append(m.group("arg"))
                out.append(_strip_folded("\n".join(b for b in body if not b.strip().startswith(":"))))
            i = j + 1
            continue
        out.append(lines[i])
        i += 1
    text = "\n".join(out)
    return re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)


# Only what a browser would read as markup: comments and tags that start with a letter
# (``<div class="x">``, ``</span>``, ``<br/>``). A bare ``<`` in prose or inline math
# (``$m_{new} < m_{old}$``) is text, and must not swallow the words up to the next ``>``.
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
_HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
# a MyST target line, ``(ch09-online-softmax)=`` before a heading: a link's anchor, not read
_LABEL_LINE = re.compile(r"^\([\w-]+\)=[ \t]*$", re.M)


def words(md: str) -> int:
    """Main-flow words in a markdown string (see the module docstring)."""
    text = _strip_folded(md)
    text = _HTML_COMMENT.sub(" ", text)
    text = _HTML_TAG.sub(" ", text)
    text = _LABEL_LINE.sub(" ", text)
    return sum(1 for tok in text.split() if re.search(r"[A-Za-z0-9]", tok))


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def cjk_chars(md: str) -> int:
    """Main-flow CJK characters in a markdown string (the Chinese edition's measure)."""
    text = _HTML_COMMENT.sub(" ", _strip_folded(md))
    return len(_CJK.findall(text))


def visible_code_cells(nb: dict) -> List[Dict[str, int]]:
    """(index, non-blank lines) of every code cell a reader sees."""
    cells = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        if HIDDEN_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        src = "".join(cell["source"])
        cells.append({"index": i, "lines": sum(1 for line in src.splitlines() if line.strip())})
    return cells


def chapter_stats(path: Path) -> Dict[str, object]:
    nb = json.loads(Path(path).read_text())
    # cell by cell: nothing in one cell (an unclosed fence, a stray ``<``) can hide the next
    md = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    n_words = sum(words(m) for m in md)
    code = visible_code_cells(nb)
    return {
        "chapter": Path(path).name,
        "words": n_words,
        "cjk": sum(cjk_chars(m) for m in md),
        "visible_cells": len(code),
        "longest_cell": max((c["lines"] for c in code), default=0),
        "long_cells": [c for c in code if c["lines"] > MAX_CELL_LINES],
    }


def main(argv=None) -> int:
    root = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--cells", action="store_true", help="list visible cells longer than the budget")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((root / "notebooks").glob("*.ipynb")) + \
        sorted((root / "notebooks" / "zh").glob("*.ipynb"))
    print(f"{'chapter':<34} {'words':>6} {'cells':>6} {'longest':>8} {'> ' + str(MAX_CELL_LINES):>5}")
    over = False
    for p in paths:
        s = chapter_stats(p)
        zh = p.parent.name == "zh"
        size = s["cjk"] if zh else s["words"]
        flag = " *" if size > (MAX_CJK if zh else MAX_WORDS) or s["long_cells"] else ""
        over |= bool(flag)
        name = ("zh/" if zh else "") + s["chapter"]
        print(f"{name:<34} {size:>6} {s['visible_cells']:>6} {s['longest_cell']:>8} "
              f"{len(s['long_cells']):>5}{flag}")
        if args.cells:
            for c in s["long_cells"]:
                print(f"    cell {c['index']}: {c['lines']} lines")
    print(f"budget: <= {MAX_WORDS} words of main-flow prose (zh/: <= {MAX_CJK} CJK characters), "
          f"<= {MAX_CELL_LINES} non-blank lines per visible code cell (* = over)")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
