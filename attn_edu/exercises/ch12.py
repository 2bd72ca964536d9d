"""Chapter 12's self-checking exercise: the decay mask of gated linear attention."""
from __future__ import annotations

from typing import List

import numpy as np

from ._harness import Case, checker

__all__ = ["check_decay_mask"]


def _gold_decay_mask(a: np.ndarray) -> np.ndarray:
    # D[t, s] = a[s+1] * ... * a[t] for s <= t (1 on the diagonal), 0 above it; (L, L)
    L = len(a)
    D = np.zeros((L, L))
    for t in range(L):
        prod = 1.0
        for s in range(t, -1, -1):
            D[t, s] = prod
            prod *= a[s]
    return D


@checker("decay_mask", chapter=12)
def check_decay_mask() -> List[Case]:
    """Grade ``fn(a) -> D``: the ``(L, L)`` decay mask of chapter 12's gated linear attention.

    ``a`` holds one gate per position, ``0 <= a[t] <= 1`` (shape ``(L,)``). The recurrence
    ``S_t = a[t] S_{t-1} + k_t v_t^T`` equals the parallel form ``((Q K^T) * D) V`` with
    ``D[t, s] = a[s+1] * ... * a[t]`` for ``s <= t`` (the empty product 1 on the diagonal)
    and ``D[t, s] = 0`` for ``s > t``. A gate of exactly 0 forgets everything before it
    (no NaN), and long products underflow to 0, never to NaN.
    """
    rng = np.random.default_rng(12)
    inputs = [
        ("a constant gate 0.9 (RetNet's decay), L = 5", np.full(5, 0.9)),
        ("all gates 1: the plain causal mask", np.ones(6)),
        ("length 1", np.array([0.5])),
        ("random gates, odd length 7", rng.uniform(0.2, 1.0, 7)),
        ("a gate of exactly 0 forgets the past (no NaN from log 0)", np.array([0.9, 0.8, 0.0, 0.7, 0.6])),
        ("the first gate never matters", np.array([0.0, 0.5, 0.5])),
        ("tiny gates: long products underflow to 0, not NaN", np.full(400, 1e-3)),
    ]
    return [Case(name, (a.copy(),), _gold_decay_mask(a), atol=1e-12, rtol=1e-9) for name, a in inputs]
