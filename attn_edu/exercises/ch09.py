"""Chapter 09's self-checking exercise: one step of the online softmax."""
from __future__ import annotations

from typing import List

import numpy as np

from ._harness import Case, checker, compare_parts, describe

__all__ = ["check_online_softmax_update"]


def _gold_update(m: float, ell: float, A: np.ndarray, s: np.ndarray, v: np.ndarray):
    # chapter 09's update with the shift c = m_new (0 while no key is allowed)
    m_new = max(m, float(np.max(s))) if s.size else m
    c = 0.0 if m_new == -np.inf else m_new
    alpha = np.exp(m - c)
    p = np.exp(s - c)  # (Bk,)
    return m_new, alpha * ell + p.sum(), alpha * A + p @ v


def _judge(expected: tuple):
    parts = dict(zip(("m", "ell", "A"), expected))
    return lambda got: compare_parts(got, parts, atol=1e-12, rtol=1e-10)


@checker("online_softmax_update", chapter=9)
def check_online_softmax_update() -> List[Case]:
    """Grade ``fn(m, ell, A, s, v) -> (m, ell, A)``: one block of chapter 09's online softmax.

    ``m``, ``ell`` are floats (running max and sum for one query), ``A`` the unnormalised
    accumulator of shape ``(d_v,)``; ``s`` is the block's scores ``(B_k,)`` (``-inf`` =
    blocked key) and ``v`` its values ``(B_k, d_v)``. The new state keeps sums relative to
    the new max (shifted by 0 while every key seen so far is blocked): no NaN, no overflow.
    """
    rng = np.random.default_rng(9)
    ninf = -np.inf
    dv = 3
    A0 = np.zeros(dv)
    v4, v5, v1 = rng.standard_normal((4, dv)), rng.standard_normal((5, dv)), rng.standard_normal((1, dv))
    s_mid = rng.standard_normal(5)
    m1, l1, A1 = _gold_update(ninf, 0.0, A0, s_mid, v5)
    states = [
        ("the first block (state m=-inf, ell=0, A=0)", (ninf, 0.0, A0, rng.standard_normal(4), v4)),
        ("a block that raises the max: old ell and A must be rescaled",
         (m1, l1, A1, s_mid + 4.0, v5)),
        ("a block whose scores are all below the max", (m1, l1, A1, s_mid - 3.0, v5)),
        ("an odd block of one key", (m1, l1, A1, np.array([0.5]), v1)),
        ("a fully blocked first block: the state stays (-inf, 0, 0), no NaN",
         (ninf, 0.0, A0, np.full(4, ninf), v4)),
        ("a fully blocked block after allowed keys changes nothing", (m1, l1, A1, np.full(5, ninf), v5)),
        ("a block with some blocked keys", (m1, l1, A1, np.array([0.3, ninf, 2.0, ninf]), v4)),
        ("huge logits (1e4) must not overflow", (ninf, 0.0, A0, np.array([1e4, 1e4 - 1.0, 9990.0, 0.0]), v4)),
        ("huge logits after a small state", (m1, l1, A1, np.array([1e4, ninf, 1e4 - 2.0, 5.0, 0.0]), v5)),
    ]
    cases = []
    for name, args in states:
        m, ell, A, s, v = args
        shown = (f"m={m!r}, ell={ell:.4g}, A={describe(A)}, s={describe(s)}, v: array of shape {v.shape}")
        cases.append(Case(name, (m, ell, A.copy(), s, v), _judge(_gold_update(m, ell, A, s, v)), shown=shown))
    return cases
