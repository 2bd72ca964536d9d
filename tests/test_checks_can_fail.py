"""A chapter's visible check must be able to fail.

An ``assert`` that compares a quantity with itself (``rope_scores(Q, K, s * pos / s)``
against ``rope_scores(Q, K, pos)``) passes whatever the idea it claims to check. These
tests re-run a chapter's cells up to such a check with the idea broken on purpose, and
require the check to fire.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cells(chapter: str, until: str, replace: dict = None) -> dict:
    """Execute the chapter's code cells in one namespace, up to the cell containing
    ``until``; ``replace`` maps text of that cell to what it becomes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = next((ROOT / "notebooks").glob(f"{chapter}_*.ipynb"))
    cells = [("".join(c["source"])) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"]
    ns: dict = {"__name__": "__chapter__"}
    for src in cells:
        last = until in src
        if last:
            for old, new in (replace or {}).items():
                assert src.count(old) == 1, f"{old!r} is not in the cell once"
                src = src.replace(old, new)
        exec(compile(src, f"{path.name}", "exec"), ns)
        plt.close("all")
        if last:
            return ns
    raise AssertionError(f"no code cell of {path.name} contains {until!r}")


# chapter 04, position interpolation: s*L tokens at positions t/s
PI_CELL = "pos_pi = np.arange(s * L) / s"
PI_RANGE_CHECK = "assert pos_pi.max() < L"


def test_ch04_position_interpolation_check_holds():
    ns = run_cells("04", PI_CELL)
    assert ns["S_pi"].shape == (ns["s"] * ns["L"],) * 2      # it ran s*L tokens


@pytest.mark.parametrize("broken", ["np.arange(s * L) * 1.0",          # no interpolation
                                    "np.arange(s * L) / (s / 2)"],      # the wrong factor
                         ids=["not-interpolated", "wrong-factor"])
def test_ch04_position_interpolation_check_fails_when_interpolation_is_broken(broken):
    # the score comparison alone must catch it (the range check is taken out)
    with pytest.raises(AssertionError):
        run_cells("04", PI_CELL, {"np.arange(s * L) / s": broken, PI_RANGE_CHECK: "pass"})
    # and the range check alone too
    with pytest.raises(AssertionError):
        run_cells("04", PI_CELL, {"np.arange(s * L) / s": broken})
