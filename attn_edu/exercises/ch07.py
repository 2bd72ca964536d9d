"""Chapter 07's self-checking exercise: attention rollout, the product of head-averaged,
residual-mixed attention matrices, later layers on the left."""
from __future__ import annotations

from typing import List

import numpy as np

from ._harness import Case, checker

__all__ = ["check_rollout"]


def _weights(rng: np.random.Generator, heads: int, length: int, sharp: float = 1.0) -> np.ndarray:
    s = sharp * rng.standard_normal((heads, length, length))
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)  # (H, L, L), rows sum to 1


@checker("rollout", chapter=7)
def check_rollout() -> List[Case]:
    """Grade ``fn(layers, alpha)``: ``layers`` is a list of NumPy arrays (H, L, L), the
    attention weights of one sequence, first layer first; return the rollout (L, L),
    ``R = Ã_N ... Ã_1`` with ``Ã = (1 - alpha) * mean over heads + alpha * I`` (rows
    renormalised). Hidden cases: one layer, several layers whose order matters, one head,
    odd lengths, ``alpha`` of 0, 0.5 and 0.9.
    """
    import torch  # the gold answer is chapter 07's rollout (torch); importing the module needs NumPy only

    from ..tiny_transformer import attention_rollout

    rng = np.random.default_rng(7)
    specs = [(1, 3, 5, 0.0, "one layer, alpha = 0: the mean of the heads"),
             (2, 4, 6, 0.5, "two layers, alpha = 0.5"),
             (3, 2, 7, 0.5, "three layers, odd length: the order of the product matters"),
             (2, 1, 5, 0.0, "one head per layer"),
             (2, 4, 3, 0.9, "alpha = 0.9: mostly the residual path")]
    cases = []
    for n_layers, heads, length, alpha, name in specs:
        layers = [_weights(rng, heads, length, sharp=3.0) for _ in range(n_layers)]
        gold = attention_rollout([torch.from_numpy(a)[None] for a in layers], alpha)[0].numpy()
        cases.append(Case(name, (layers, alpha), gold, atol=1e-10, rtol=1e-8,
                          shown=f"{n_layers} layer(s) of shape {(heads, length, length)}, alpha={alpha}"))
    return cases
