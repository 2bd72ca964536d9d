"""Chapter 14's self-checking exercise: merge two ranks' partial attention results.

Each rank of a ring has attended to some of the keys and holds, for every query row, its
normalised partial output ``o`` (..., n, d) and the log-sum-exp ``lse`` (..., n) of the
scores it saw. The reader writes ``merge(o1, lse1, o2, lse2) -> (o, lse)``: the output and
log-sum-exp over both ranks' keys together.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import numpy as np

from ..precision import merge_softmax_stats
from ._harness import Case, checker, compare_parts

__all__ = ["check_merge_ranks"]


def _gold(o1, lse1, o2, lse2):
    """The answer through chapter 09's merge: a block's (m, l) is (lse, 1), or (-inf, 0) if empty."""
    ones = lambda lse: np.where(np.isneginf(lse), 0.0, 1.0).astype(lse.dtype)  # noqa: E731
    m, l, o = merge_softmax_stats(lse1, ones(lse1), o1, lse2, ones(lse2), o2)
    with np.errstate(divide="ignore"):
        lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), -np.inf).astype(lse1.dtype)
    return o, lse


def _judge(o_want, lse_want, atol: float, rtol: float, dtype: str) -> Callable[[object], Optional[str]]:
    return lambda got: compare_parts(got, {"o": o_want, "lse": lse_want}, atol, rtol, dtype)


@checker("merge_ranks", chapter=14)
def check_merge_ranks() -> List[Case]:
    """Grade ``fn(o1, lse1, o2, lse2) -> (o, lse)`` on NumPy arrays.

    ``o1``, ``o2`` (..., n, d) are two ranks' normalised partial outputs and ``lse1``,
    ``lse2`` (..., n) the log-sum-exps of the scores each saw. The merge must weight each
    partial by its share of the total, stay finite for huge log-sum-exps, treat a rank
    that saw no allowed key (``lse = -inf``, ``o = 0``) as contributing nothing, give
    zeros and ``-inf`` when neither saw one, and keep the inputs' dtype.
    """
    rng = np.random.default_rng(14)

    def partials(n, d, shift=0.0, dtype=np.float64):
        o = rng.standard_normal((2, n, d)).astype(dtype)
        lse = (rng.standard_normal((2, n)) * 2 + shift).astype(dtype)
        return o[0], lse[0], o[1], lse[1]

    cases = []
    inputs = [
        ("one query row, d = 3", partials(1, 3)),
        ("8 query rows, d = 4", partials(8, 4)),
        ("log-sum-exps near 1000: exp(lse) overflows", partials(5, 2, shift=1000.0)),
        ("log-sum-exps near -1000: exp(lse) underflows to 0", partials(5, 2, shift=-1000.0)),
    ]
    o1, lse1, o2, lse2 = partials(4, 3)
    lse1[1], o1[1] = -np.inf, 0.0  # rank 1 saw no allowed key for row 1
    lse1[3], o1[3], lse2[3], o2[3] = -np.inf, 0.0, -np.inf, 0.0  # nobody did for row 3
    inputs.append(("a row only rank 2 saw, and a row nobody saw (lse = -inf)", (o1, lse1, o2, lse2)))
    b = [x.reshape((1,) + x.shape).repeat(2, axis=0) for x in partials(3, 2)]  # (2, 3, 2)
    inputs.append(("a leading batch axis (2, n, d)", tuple(b)))
    for name, args in inputs:
        o, lse = _gold(*args)
        cases.append(Case(name, args, _judge(o, lse, 1e-10, 1e-10, "float64")))
    args32 = partials(6, 5, dtype=np.float32)
    o, lse = _gold(*args32)
    cases.append(Case("float32 in gives float32 out", args32, _judge(o, lse, 1e-5, 1e-5, "float32")))
    return cases
