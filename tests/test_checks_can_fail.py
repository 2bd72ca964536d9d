"""A chapter's visible check must be able to fail.

An ``assert`` that compares a quantity with itself (``rope_scores(Q, K, s * pos / s)``
against ``rope_scores(Q, K, pos)``) passes whatever the idea it claims to check. So:

* every ``assert`` in a chapter's code cells is classified in
  ``tests/data/visible_checks/NN.json`` (what it checks, against what, and whether that is
  independent; ``python scripts/visible_checks.py`` adds rows for new asserts and
  ``--counts`` prints the tally), and none is left unclassified;
* each chapter lists at least two of its central ideas broken on purpose (``"breaks"``):
  these tests run the cells a check needs, then the check's cell with the idea broken,
  and require it to fire, and to hold when nothing is broken.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
import chapter_cells  # noqa: E402  (tests/chapter_cells.py: runs a chapter's cells here)
import visible_checks  # noqa: E402  (scripts/visible_checks.py, on the path by conftest)

CHAPTERS = visible_checks.chapters()
BREAKS = [(ch.name[:2], b) for ch in CHAPTERS for b in visible_checks.load(ch).get("breaks", [])]


# --- the classification: fast, reads the notebooks' text only --------------------------------
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name[:2])
def test_every_visible_check_is_classified(chapter):
    doc = visible_checks.load(chapter)
    missing, stale = visible_checks.compare(chapter, doc)
    assert not missing, (f"{chapter.name}: asserts with no row in tests/data/visible_checks/ "
                         f"(run python scripts/visible_checks.py): {missing}")
    assert not stale, f"{chapter.name}: rows whose assert is gone (edit them, or mark dropped): {stale}"
    todo = [(r["cell"], r["check"]) for r in doc["checks"] if r["verdict"] == "todo"]
    assert not todo, f"{chapter.name}: unclassified checks: {todo}"
    for r in doc["checks"]:
        assert r["verdict"] in visible_checks.VERDICTS, r
        assert r["what"].strip() and r["against"].strip(), f"{chapter.name}: say what and against what: {r}"
        if r["verdict"] == "fixed":
            assert r.get("was", "").strip(), f"{chapter.name}: a fixed check keeps the old text in 'was': {r}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name[:2])
def test_each_chapter_breaks_at_least_two_central_ideas(chapter):
    breaks = visible_checks.load(chapter).get("breaks", [])
    assert len(breaks) >= 2, f"{chapter.name}: {len(breaks)} broken-on-purpose cases, want >= 2"
    for b in breaks:
        assert {"name", "idea", "cell", "replace"} <= set(b) and b["replace"], b


# --- the breaks: run the cells (slow) ----------------------------------------------------------
def run_break(chapter: str, b: dict, broken: bool) -> dict:
    """Run break ``b``'s cell after its setup cells, with its replacements when ``broken``."""
    ids = [i for i, _ in chapter_cells.code_cells(chapter)]
    if b["cell"] not in ids:
        raise ValueError(f"chapter {chapter} has no code cell {b['cell']!r}")
    setup = tuple(b.get("setup") or ids[:ids.index(b["cell"])])
    ns = dict(chapter_cells.namespace(chapter, setup))
    src = dict(chapter_cells.code_cells(chapter))[b["cell"]]
    for old, new in b["replace"].items():
        if src.count(old) != 1:       # not an AssertionError: that is what the tests expect
            raise ValueError(f"{old!r} is not in cell {b['cell']} once")
        if broken:
            src = src.replace(old, new)
    return chapter_cells.run(chapter, [b["cell"]], ns, replace={b["cell"]: src})[0]


@pytest.mark.slow  # runs the cells each check needs
@pytest.mark.parametrize("chapter,b", BREAKS, ids=[f"{c}-{b['name']}" for c, b in BREAKS])
def test_a_broken_central_idea_fires_its_check(chapter, b):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # holds as written, with no overflow or NaN on the way
        run_break(chapter, b, broken=False)
    with warnings.catch_warnings(), pytest.raises(AssertionError):
        warnings.simplefilter("ignore", RuntimeWarning)  # broken, it may overflow: that is how it breaks
        run_break(chapter, b, broken=True)


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
