"""Chapter 02's self-checking exercise: the entropy of rows of attention weights."""
from __future__ import annotations

from typing import List

import numpy as np

from ..reference import softmax as _softmax
from ..scaling import softmax_entropy as _gold_entropy
from ._harness import Case, checker

__all__ = ["check_softmax_entropy"]


@checker("softmax_entropy", chapter=2)
def check_softmax_entropy() -> List[Case]:
    r"""Grade ``fn(P)``: the entropy in nats, :math:`H(p) = -\sum_j p_j \log p_j`, of every
    row of weights ``P`` (..., L_k) -> (...,).

    :math:`0 \log 0 = 0`: a weight that underflowed to 0 (a very peaked softmax) or an
    all-zero row (a fully masked query) contributes 0, never NaN. The natural logarithm,
    so a uniform row of n weights has entropy :math:`\log n`.
    """
    rng = np.random.default_rng(2)
    rows = _softmax(rng.standard_normal((3, 5)))
    batched = _softmax(2.0 * rng.standard_normal((2, 4, 7)))
    peaked = _softmax(np.array([[0.0, 800.0, 1.0], [5.0, 5.0, -900.0]]))  # exact zeros
    masked = np.vstack([_softmax(np.array([1.0, 2.0, 3.0])), np.zeros(3)])
    cases = [
        ("a uniform row of 4 weights has entropy log 4", np.full((1, 4), 0.25)),
        ("3 rows of 5 softmax weights (one entropy per row)", rows),
        ("a batch (2, 4, 7): entropy over the last axis only", batched),
        ("weights that underflowed to exactly 0 (0 log 0 = 0)", peaked),
        ("a fully masked row of zeros has entropy 0, not NaN", masked),
        ("a single weight of 1 (L_k = 1)", np.ones((2, 1))),
    ]
    return [Case(name, (p,), _gold_entropy(p), atol=1e-10, rtol=1e-8) for name, p in cases]
