#!/usr/bin/env python3
"""The book's pages, read from ``_toc.yml``: the one table-of-contents walker (the browser
test, the web audit and the publishing workflow's package step all use it).

    python scripts/site_pages.py _build/html   # exit 1 unless the folder is a complete site:
                                               # index.html and every page of _toc.yml

As a module: :func:`toc_files` (every document of the toc, root first, without extension)
and :func:`missing_pages` (what a built folder lacks).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def toc_files(root: Path = ROOT) -> list:
    """Every document of ``root/_toc.yml`` (jb-book format), root first, without extension:
    parts, chapters and their sections at any depth."""
    import yaml

    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    walk(toc.get("sections"))
    return [re.sub(r"\.(md|ipynb|rst)$", "", f) for f in files]


def missing_pages(html: Path, root: Path = ROOT) -> list:
    """The pages a built site at ``html`` lacks: ``index.html`` and one ``.html`` per toc file."""
    html = Path(html)
    want = ["index"] + toc_files(root)
    return [f"{page}.html" for page in want if not (html / f"{page}.html").is_file()]


def main(argv: list) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    html = Path(argv[0])
    missing = missing_pages(html)
    if missing:
        print(f"{html} is not a complete site: missing {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"{html}: index.html and the {len(toc_files())} pages of _toc.yml")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
