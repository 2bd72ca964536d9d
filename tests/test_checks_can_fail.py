"""A chapter's visible check must be able to fail.

An ``assert`` that compares a quantity with itself (``rope_scores(Q, K, s * pos / s)``
against ``rope_scores(Q, K, pos)``) passes whatever the idea it claims to check. These
tests re-run a chapter's cells up to such a check with the idea broken on purpose, and
require the check to fire.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow      # runs a chapter's cells (about 20 s)


@functools.lru_cache(maxsize=None)
def chapter_until(chapter: str, until: str):
    """Run the chapter's code cells in one namespace up to (not including) the cell that
    contains ``until``; return that namespace and the cell's source."""
    import matplotlib
    import matplotlib.pyplot as plt
    import plotly.io as pio

    path = next((ROOT / "notebooks").glob(f"{chapter}_*.ipynb"))
    cells = [("".join(c["source"])) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"]
    ns: dict = {"__name__": "__chapter__"}
    renderer, backend = pio.renderers.default, matplotlib.get_backend()
    plt.switch_backend("Agg")
    try:
        with matplotlib.rc_context():      # the chapter's setup changes plot defaults
            for src in cells:
                if until in src:
                    return ns, src
                exec(compile(src, path.name, "exec"), ns)
                plt.close("all")
    finally:
        pio.renderers.default = renderer
        plt.switch_backend(backend)
    raise ValueError(f"no code cell of {path.name} contains {until!r}")


def run_check(chapter: str, until: str, replace: dict = None) -> dict:
    """Run the cell containing ``until`` after the cells before it, with ``replace``
    (text of the cell -> what it becomes) applied; return the namespace."""
    before, src = chapter_until(chapter, until)
    ns = dict(before)                      # each run starts from the same state
    for old, new in (replace or {}).items():
        if src.count(old) != 1:       # not an AssertionError: that is what the tests expect
            raise ValueError(f"{old!r} is not in the cell once")
        src = src.replace(old, new)
    exec(compile(src, f"chapter {chapter}", "exec"), ns)
    return ns


# chapter 04, position interpolation: s*L tokens at positions t/s
PI_CELL = "pos_pi = np.arange(s * L) / s"
PI_RANGE_CHECK = "assert pos_pi.max() < L"


def test_ch04_position_interpolation_check_holds():
    ns = run_check("04", PI_CELL)
    assert ns["S_pi"].shape == (ns["s"] * ns["L"],) * 2      # it ran s*L tokens


@pytest.mark.parametrize("broken", ["np.arange(s * L) * 1.0",          # no interpolation
                                    "np.arange(s * L) / (s / 2)"],      # the wrong factor
                         ids=["not-interpolated", "wrong-factor"])
def test_ch04_position_interpolation_check_fails_when_interpolation_is_broken(broken):
    # the score comparison alone must catch it (the range check is taken out)
    with pytest.raises(AssertionError):
        run_check("04", PI_CELL, {"np.arange(s * L) / s": broken, PI_RANGE_CHECK: "pass"})
    # and the range check alone too
    with pytest.raises(AssertionError):
        run_check("04", PI_CELL, {"np.arange(s * L) / s": broken})


# the NumPy reference in a low dtype T against the float64 gold answer (tests/test_reference.py)
def test_reference_dtype_check_fails_on_a_broken_reference():
    """The check holds for the reference and fires for one whose scale is rounded to
    float16 in a float32 run; the assertion it replaced (the output as its own naive_T)
    passes that broken output."""
    import numpy as np

    from attn_edu.reference import scaled_dot_product_attention as sdpa
    from attn_edu.testing import assert_close_to_reference, reference_pair
    from test_reference import reference_in_dtype_meets_the_rule

    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((2, n, 16)).astype(np.float32) for n in (33, 40, 40))
    reference_in_dtype_meets_the_rule(sdpa(q, k, v, causal=True), q, k, v)
    broken = sdpa(q, k, v, causal=True, scale=float(np.float16(1 / np.sqrt(16 * 1.1))))
    with pytest.raises(AssertionError, match="exceeds the tolerance"):
        reference_in_dtype_meets_the_rule(broken, q, k, v)
    gold = reference_pair(q, k, v, causal=True)[0]
    assert_close_to_reference(broken, gold, broken)  # the old assertion: cannot fail
