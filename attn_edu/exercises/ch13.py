"""Chapter 13's self-checking exercises: merging split-KV partials, and a block-table lookup."""
from __future__ import annotations

from typing import List

import numpy as np

from ..decoding import merge_partials
from ..i18n import gettext as _
from ._harness import Case, checker

__all__ = ["check_merge_partials", "check_page_slot"]


def _partials(rng, splits, lq, dv, empty=(), lse_shift=0.0, dtype=np.float64):
    outs = rng.standard_normal((splits, lq, dv)).astype(dtype)
    lses = (rng.standard_normal((splits, lq)) * 3 + lse_shift).astype(dtype)
    for s in empty:
        outs[s], lses[s] = 0, -np.inf
    return outs, lses


@checker("merge_partials", chapter=13)
def check_merge_partials() -> List[Case]:
    """Grade ``fn(outs, lses) -> out``: merge split-KV partials into the exact output.

    ``outs`` (S, L_q, d_v) are the S splits' normalised partial outputs, ``lses`` (S, L_q)
    their log-sum-exps (``-inf`` with a zero output for a split with no allowed key). The
    result (L_q, d_v) weights split s by ``exp(lse_s - lse)``: it must not overflow for
    huge lse, give zeros (not NaN) for a row no split covers, and keep the dtype.
    """
    rng = np.random.default_rng(13)
    inputs = [
        ("two splits", _partials(rng, 2, 1, 4)),
        ("one split: the merge is the identity", _partials(rng, 1, 3, 2)),
        ("eight splits, three queries", _partials(rng, 8, 3, 5)),
        ("an empty split (lse = -inf, output 0) contributes nothing", _partials(rng, 4, 2, 3, empty=(1,))),
        ("huge log-sum-exps (1e4) must not overflow", _partials(rng, 3, 2, 3, lse_shift=1e4)),
        ("very negative log-sum-exps (-1e4) must not underflow to 0/0", _partials(rng, 3, 2, 3, lse_shift=-1e4)),
    ]
    outs, lses = _partials(rng, 3, 2, 4)
    outs[:, 1], lses[:, 1] = 0, -np.inf  # query 1 sees no key in any split
    inputs.append(("a query no split covers gets zeros, not NaN", (outs, lses)))
    cases = [Case(name, (o, l), merge_partials(list(o), list(l))[0], dtype="float64", atol=1e-10, rtol=1e-9)
             for name, (o, l) in inputs]
    o32, l32 = _partials(rng, 5, 2, 3, dtype=np.float32)
    cases.append(Case("float32 in gives float32 out", (o32, l32), merge_partials(list(o32), list(l32))[0],
                      dtype="float32", atol=1e-6, rtol=1e-5))
    return cases


@checker("page_slot", chapter=13)
def check_page_slot() -> List[Case]:
    """Grade ``fn(block_table, page_size, position) -> (page, offset)``: where a paged KV
    cache stores token ``position`` of a sequence whose pages are ``block_table`` (a list of
    page numbers in the pool, in order)."""
    cases = []
    for name, table, size, pos in [
        ("the first token", [7, 2, 9], 4, 0),
        ("inside the second page", [7, 2, 9], 4, 5),
        ("the first slot of a page", [7, 2, 9], 4, 8),
        ("the last slot of a page", [7, 2, 9], 4, 3),
        ("pages of one token", [3, 0, 5, 1], 1, 2),
        ("pages out of order in the pool", [30, 4, 17, 4096], 16, 63),
    ]:
        # another route than the solution's // and %: lay the table's pages out slot by slot
        want = [(page, offset) for page in table for offset in range(size)][pos]
        cases.append(Case(name, (table, size, pos), _slot_judge(want),
                          shown=f"block_table={table}, page_size={size}, position={pos}"))
    return cases


def _slot_judge(want):
    def judge(got):
        try:
            page, offset = (int(x) for x in got)
        except (TypeError, ValueError):
            return _("expected a pair (page, offset), got {got}").format(got=repr(got))
        if (page, offset) != want:
            return _("expected (page, offset) = {want}, got {got}").format(want=want, got=(page, offset))
        return None

    return judge
