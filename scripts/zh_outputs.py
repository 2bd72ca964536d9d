"""The catalogs of what the chapters show (attn_edu/i18n_outputs.py says how they are used).

    python scripts/zh_outputs.py extract [NN ...]  # add what the English build shows and no
                                                   # catalog translates yet, as empty entries
    python scripts/zh_outputs.py missing [NN ...]  # list the entries still untranslated
    python scripts/zh_outputs.py compile           # every outputs*.po -> .mo (Babel)
    python scripts/zh_outputs.py show NN           # compile, then every string chapter NN
                                                   # shows, English -> Chinese, cell by cell

``extract`` reads the English build's executions (``_build/.jupyter_cache``: build the book
first) and walks every output a page shows: printed lines, Markdown and HTML text, and plotly
figures' words (their JSON, also where the book's renderer embeds it in HTML). A string with
English words (:func:`attn_edu.i18n_outputs.english_words`) that no entry translates becomes
an entry, keyed by its skeleton when it has numbers: in ``outputs_NN.po`` when one chapter
shows it, in ``outputs.po`` when several do. Existing entries and their translations are kept.
"""
from __future__ import annotations

import html as _html
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from attn_edu import i18n_outputs as io  # noqa: E402

LC = ROOT / "attn_edu" / "locale" / "zh_CN" / "LC_MESSAGES"
#: where the book's plotly renderer embeds a figure's JSON in an HTML output
FIG_IN_HTML = re.compile(r"var fig = (\{.*?\});\n", re.S)
_TAG = re.compile(r"<[^>]+>")


def output_strings(output: dict):
    """Every string a page shows of one notebook output (a line, a text node, a figure's word)."""
    if output.get("output_type") == "stream":
        yield from "".join(output.get("text", "")).splitlines()
        return
    data = output.get("data", {})
    for mime, value in data.items():
        text = "".join(value) if isinstance(value, list) else value
        if mime == "application/vnd.plotly.v1+json":
            yield from (s for _, s in io.plotly_strings(value))
        elif mime == "text/html":
            for m in FIG_IN_HTML.finditer(text):
                yield from (s for _, s in io.plotly_strings(json.loads(m.group(1))))
            rest = re.sub(r"<script.*?</script>|<style.*?</style>", " ", FIG_IN_HTML.sub("", text), flags=re.S)
            for node in _TAG.split(rest):
                if node.strip():
                    yield _html.unescape(node.strip())
        elif mime == "text/markdown" or (mime == "text/plain" and len(data) == 1):
            yield from text.splitlines()


def chapter_strings(nb: dict):
    """(cell id, string) for every string the chapter's outputs show."""
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            for s in output_strings(output):
                for part in s.split("<br>"):
                    if part.strip():
                        yield cell.get("id", "?"), part.strip()


def executed_chapters(only):
    import nbformat
    from jupyter_cache import get_cache

    import zh
    if not zh.CACHE.is_dir():
        raise SystemExit(f"{zh.CACHE} is missing: build the English book first (scripts/build-book.sh)")
    cache = get_cache(str(zh.CACHE))
    for path in sorted(zh.EN.glob("[0-9][0-9]_*.ipynb")):
        if only and path.name[:2] not in only:
            continue
        _, merged = cache.merge_match_into_notebook(nbformat.from_dict(zh.load(path)))
        yield path.name[:2], json.loads(json.dumps(merged))


def _read(po: Path):
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po
    if po.exists():
        with open(po, "rb") as f:
            return read_po(f, locale="zh_CN")
    return Catalog(locale="zh_CN", domain=po.stem, project="attn-edu", fuzzy=False)


def _write(po: Path, catalog) -> None:
    from babel.messages.pofile import write_po
    with open(po, "wb") as f:
        write_po(f, catalog, width=0, omit_header=False, sort_output=True)


def _known(text: str, entries: set) -> bool:
    return text in entries or io.skeleton(text)[0] in entries


def extract(only) -> int:
    catalogs = {p.stem: _read(p) for p in sorted(LC.glob("outputs*.po"))}
    known = {m.id for c in catalogs.values() for m in c if m.id} | set(io.catalog("zh"))
    wanted: dict = {}  # key -> {chapter: [cell ids]}
    for chapter, nb in executed_chapters(only):
        for cell, text in chapter_strings(nb):
            if not io.english_words(text) or _known(text, known):
                continue
            key, numbers = io.skeleton(text)
            key = key if numbers else text
            wanted.setdefault(key, {}).setdefault(chapter, []).append(cell)
    added = 0
    for key, where in wanted.items():
        domain = "outputs" if len(where) > 1 else f"outputs_{next(iter(where))}"
        cat = catalogs.setdefault(domain, _read(LC / f"{domain}.po"))
        cells = sorted({f"{ch}:{c}" for ch, cs in where.items() for c in cs})
        cat.add(key, "", auto_comments=[" ".join(cells[:6])], flags=("python-format",) if "{0}" in key else ())
        added += 1
    for domain, cat in catalogs.items():
        _write(LC / f"{domain}.po", cat)
    print(f"{added} new entries; {sum(1 for c in catalogs.values() for m in c if m.id and not m.string)} untranslated")
    return 0


def missing(only) -> int:
    n = 0
    for po in sorted(LC.glob("outputs*.po")):
        if only and po.stem[-2:] not in only:
            continue
        for m in _read(po):
            if m.id and not m.string:
                print(f"{po.name}: {m.id!r}")
                n += 1
    print(f"{n} untranslated")
    return 1 if n else 0


def compile_all() -> int:
    from babel.messages.mofile import write_mo
    for po in sorted(LC.glob("outputs*.po")):
        with open(po.with_suffix(".mo"), "wb") as f:
            write_mo(f, _read(po), use_fuzzy=False)
    print(f"compiled {len(list(LC.glob('outputs*.po')))} catalogs")
    return 0


def display_width(text: str) -> int:
    """Columns ``text`` takes in a monospaced font (a CJK character takes two)."""
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def show(only) -> int:
    """Every string of the chapters' outputs beside its translation; a line of a table (two or
    more spaces in a row) whose translation is wider or narrower is flagged ``width!``."""
    compile_all()
    io._merged.clear()
    for chapter, nb in executed_chapters(only):
        last = None
        for cell, text in chapter_strings(nb):
            if not io.english_words(text):
                continue
            if cell != last:
                print(f"--- {chapter} {cell}")
                last = cell
            zh = io.translate_text(text, "zh")
            flag = "  width!" if zh != text and "  " in text and display_width(zh) != display_width(text) else ""
            print(f"  {text}\n    -> {zh if zh != text else '(untranslated)'}{flag}")
    return 0


def main(argv) -> int:
    if not argv or argv[0] not in ("extract", "missing", "compile", "show"):
        print(__doc__)
        return 2
    only = set(argv[1:])
    return {"extract": extract, "missing": missing, "compile": lambda _: compile_all(), "show": show}[argv[0]](only)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
