"""The book's visible checks, classified: every ``assert`` in a chapter's code cells has a
row in ``tests/data/visible_checks/NN.json`` saying what it checks, against what, and
whether that is independent of the quantity checked.

    python scripts/visible_checks.py            # add rows for new asserts ("todo"), list stale ones
    python scripts/visible_checks.py --counts   # the counts per chapter and in all

A row: ``{"cell": cell id, "check": the assert's text (whitespace collapsed), "what": what
it checks, "against": what it is compared with, "verdict": ...}`` with verdict one of

* ``"independent"``: compared with something computed another way (a brute-force count,
  another algorithm, a measurement, a closed form derived on the page, PyTorch);
* ``"fixed"``: it was circular (the package against itself, an identity, a construction)
  and was replaced by an independent check; ``"was"`` keeps the old text;
* ``"dropped"``: it was circular and was taken out; the cell is now an illustration
  (``check`` keeps the old text; the row is history, not matched against the chapter);
* ``"todo"``: not classified yet (tests/test_checks_can_fail.py fails on it).

``"breaks"`` lists the chapter's central ideas broken on purpose: each runs the cells
``setup`` (default: every code cell before ``cell``), then ``cell`` with ``replace``
applied (old text -> new text, each old text once in the cell), and the cell must raise
AssertionError; unbroken, it must not. tests/test_checks_can_fail.py runs them.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "visible_checks"
VERDICTS = ("independent", "fixed", "dropped", "todo")


def normalize(text: str) -> str:
    return " ".join(text.split())


def chapter_asserts(path: Path) -> list:
    """``[(cell id, assert text)]`` of every assert statement in the chapter's code cells."""
    found = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Assert):
                found.append((cell["id"], normalize(ast.get_source_segment(src, node))))
    return found


def chapters() -> list:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def data_path(chapter: Path) -> Path:
    return DATA / f"{chapter.name[:2]}.json"


def load(chapter: Path) -> dict:
    p = data_path(chapter)
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {"checks": [], "breaks": []}


def compare(chapter: Path, doc: dict) -> tuple:
    """``(missing, stale)``: asserts of the chapter with no live row, live rows with no assert.
    A row matches an assert by cell id and text; repeated identical asserts need as many rows."""
    live = [(r["cell"], normalize(r["check"])) for r in doc["checks"] if r.get("verdict") != "dropped"]
    missing, stale = [], list(live)
    for key in chapter_asserts(chapter):
        if key in stale:
            stale.remove(key)
        else:
            missing.append(key)
    return missing, stale


def update(chapter: Path) -> tuple:
    doc = load(chapter)
    missing, stale = compare(chapter, doc)
    for cell, check in missing:
        doc["checks"].append({"cell": cell, "check": check, "what": "", "against": "", "verdict": "todo"})
    doc["checks"].sort(key=lambda r: r["cell"])
    DATA.mkdir(parents=True, exist_ok=True)
    data_path(chapter).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return missing, stale


def counts(doc: dict) -> dict:
    c = {v: 0 for v in VERDICTS}
    for r in doc["checks"]:
        c[r.get("verdict", "todo")] += 1
    c["checks"] = c["independent"] + c["fixed"] + c["todo"]
    c["breaks"] = len(doc.get("breaks", []))
    return c


def main(argv: list) -> int:
    if "--counts" in argv:
        total: dict = {}
        print(f"{'chapter':10s} " + " ".join(f"{k:>11s}" for k in ("checks", *VERDICTS, "breaks")))
        for ch in chapters():
            c = counts(load(ch))
            total = {k: total.get(k, 0) + v for k, v in c.items()}
            print(f"{ch.name[:2]:10s} " + " ".join(f"{c[k]:11d}" for k in ("checks", *VERDICTS, "breaks")))
        print(f"{'all':10s} " + " ".join(f"{total[k]:11d}" for k in ("checks", *VERDICTS, "breaks")))
        return 0
    bad = 0
    for ch in chapters():
        missing, stale = update(ch)
        for cell, check in missing:
            print(f"{ch.name}: new row (todo) for {cell}: {check[:90]}")
        for cell, check in stale:
            bad = 1
            print(f"{ch.name}: STALE row (no such assert now; edit or mark dropped) {cell}: {check[:90]}")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
