"""Run some of a chapter's code cells in this process: the cells a check needs, not the chapter.

The suite executes each chapter once per environment (the book build; the Colab stand-in,
tests/standin.py). A test that needs a few cells under other conditions -- a check with its
idea broken on purpose (tests/test_checks_can_fail.py), a cell that draws recorded data from
another folder (tests/test_gpu_pipeline.py) -- runs just those cells here, in one namespace,
with matplotlib drawing off screen and plotly's renderer restored afterwards.
"""
from __future__ import annotations

import contextlib

import functools
import io
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def code_cells(chapter: str) -> list:
    """``[(cell id, source)]`` of chapter ``chapter``'s code cells (``"04"`` or a file stem)."""
    path = next((ROOT / "notebooks").glob(f"{chapter}*.ipynb"))
    return [(c["id"], "".join(c["source"])) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "code"]


def ids_until(chapter: str, text: str) -> list:
    """The ids of the code cells before the first one containing ``text``, and that cell's id last."""
    ids = []
    for cid, src in code_cells(chapter):
        ids.append(cid)
        if text in src:
            return ids
    raise ValueError(f"no code cell of chapter {chapter} contains {text!r}")


@contextlib.contextmanager
def plotting():
    """matplotlib on Agg and plotly's default renderer restored after a chapter's cells."""
    import matplotlib
    import matplotlib.pyplot as plt
    import plotly.io as pio

    renderer, backend = pio.renderers.default, matplotlib.get_backend()
    plt.switch_backend("Agg")
    try:
        with matplotlib.rc_context():      # the chapter's setup changes plot defaults
            yield
    finally:
        plt.close("all")
        pio.renderers.default = renderer
        plt.switch_backend(backend)


def run(chapter: str, ids, ns: dict = None, replace: dict = None) -> tuple:
    """Run the code cells ``ids`` (in the chapter's order) in ``ns`` (a new namespace by
    default); ``replace`` maps a cell id to its changed source. Returns ``(namespace, printed)``."""
    import matplotlib.pyplot as plt

    ns = {"__name__": "__chapter__"} if ns is None else ns
    cells = code_cells(chapter)
    unknown = set(ids) - {i for i, _ in cells}
    if unknown:
        raise ValueError(f"chapter {chapter} has no code cells {sorted(unknown)}")
    out = io.StringIO()
    with plotting(), contextlib.redirect_stdout(out):
        for cid, src in cells:
            if cid in ids:
                src = (replace or {}).get(cid, src)
                exec(compile(src, f"chapter {chapter} {cid}", "exec"), ns)
                plt.close("all")
    return ns, out.getvalue()


@functools.lru_cache(maxsize=None)
def namespace(chapter: str, ids: tuple) -> dict:
    """The namespace after cells ``ids``, once per session (copy it before changing it)."""
    return run(chapter, ids)[0]


def _names(src: str) -> tuple:
    """``(defined, used)`` names of a cell (assignments, imports, defs; loads), by ``ast``."""
    import ast

    defined, used = set(), set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                defined.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return defined, used


def needed(cells: list, targets: list) -> list:
    """The indices of ``cells`` (sources, in order) that cells ``targets`` need: the first cell
    (the chapter's setup), the targets, and, for every name a needed cell uses, the last
    earlier cell that defines it, transitively. What runs is then what the targets read."""
    names = [_names(src) for src in cells]
    keep, todo = {0, *targets}, list(targets)
    while todo:
        i = todo.pop()
        for name in names[i][1] - names[i][0]:
            for j in range(i - 1, -1, -1):
                if name in names[j][0]:
                    if j not in keep:
                        keep.add(j)
                        todo.append(j)
                    break
    return sorted(keep)
