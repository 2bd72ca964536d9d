"""Chapter 10's self-checking exercise: the backward of one tile, recomputed from the
log-sum-exp."""
from __future__ import annotations

from typing import List

import numpy as np

from ._harness import Case, checker

__all__ = ["check_scores_gradient"]


def _gold_dS(S: np.ndarray, lse: np.ndarray, V: np.ndarray, dO: np.ndarray) -> np.ndarray:
    # Another route than the kernel's (and the solution's): per row, the softmax Jacobian
    # diag(p) - p p^T applied to dP = dO V^T, with p the row's softmax taken from S alone (its
    # max subtracted; ``lse`` unused) and no delta shortcut. A row with no key gets zeros.
    # Shapes (Lq, Lk), (Lq,), (Lk, dv), (Lq, dv) -> (Lq, Lk).
    dS = np.zeros(S.shape)
    dP = dO @ V.T
    for i, s in enumerate(S):
        if np.isneginf(s).all():
            continue
        p = np.exp(s - s.max())
        p /= p.sum()
        dS[i] = (np.diag(p) - np.outer(p, p)) @ dP[i]
    return dS


def _lse(S: np.ndarray) -> np.ndarray:
    m = S.max(-1)
    shift = np.where(np.isneginf(m), 0.0, m)
    with np.errstate(divide="ignore"):
        return shift + np.log(np.exp(S - shift[:, None]).sum(-1))


@checker("scores_gradient", chapter=10)
def check_scores_gradient() -> List[Case]:
    """Grade ``fn(S, lse, V, dO) -> dS``: the gradient with respect to the scores, as
    FlashAttention's backward recomputes it (chapter 10).

    ``S`` are the scaled scores ``(L_q, L_k)`` with ``-inf`` for masked pairs, ``lse`` the
    forward's log-sum-exp per row ``(L_q,)`` (``-inf`` for a fully masked row), ``V`` the
    values ``(L_k, d_v)`` and ``dO`` the output gradient ``(L_q, d_v)``. Recompute
    ``P = exp(S - lse)`` (never ``exp(S)``: scores of 1e4 overflow), ``O = P V``,
    ``delta = rowsum(dO * O)`` and return ``dS = P * (dO V^T - delta)``; a fully masked
    row gets zeros, not NaN.
    """
    rng = np.random.default_rng(10)
    cases = []

    def add(name, S, dv=3):
        lq, lk = S.shape
        V, dO = rng.standard_normal((lk, dv)), rng.standard_normal((lq, dv))
        lse = _lse(S)
        cases.append(Case(name, (S, lse, V, dO), _gold_dS(S, lse, V, dO), atol=1e-10, rtol=1e-8,
                          shown=f"S of shape {S.shape}, lse of shape {lse.shape}, V {V.shape}, dO {dO.shape}"))

    add("a small square tile", rng.standard_normal((4, 4)))
    add("an odd tile, 5 queries x 7 keys", rng.standard_normal((5, 7)) * 2)
    S = rng.standard_normal((6, 6))
    S[np.triu_indices(6, 1)] = -np.inf
    add("a causal tile (-inf above the diagonal)", S)
    S = rng.standard_normal((3, 5))
    S[1] = -np.inf
    add("a fully masked row: lse = -inf, its dS must be 0, not NaN", S)
    add("huge scores (1e4): recompute from lse, never exp(S)", 1e4 + rng.standard_normal((4, 6)))
    add("one key", rng.standard_normal((3, 1)))
    return cases
