"""Chapter 01's self-checking exercise: scaled dot-product attention from scratch."""
from __future__ import annotations

from typing import List

import numpy as np

from ..reference import scaled_dot_product_attention as _gold_attention
from ._harness import Case, checker

__all__ = ["check_attention"]


@checker("attention", chapter=1)
def check_attention() -> List[Case]:
    r"""Grade ``fn(Q, K, V)``: :math:`\operatorname{softmax}(QK^\top/\sqrt{d_k})\,V` in NumPy.

    Shapes: ``Q`` (..., L_q, d_k), ``K`` (..., L_k, d_k), ``V`` (..., L_k, d_v) -> (..., L_q, d_v).
    The hidden cases have L_q != L_k and d_v != d_k, odd lengths, a single key, leading
    batch and head axes (``K.T`` reverses all of them; transpose only the last two),
    and scores large enough to overflow a softmax that does not subtract the row maximum.
    """
    rng = np.random.default_rng(1)

    def case(name, *shapes, scale=1.0):
        q, k, v = (scale * rng.standard_normal(s) for s in shapes)
        return Case(name, (q, k, v), _gold_attention(q, k, v), atol=1e-10, rtol=1e-8)

    toy_k = np.array([[1.0, 0], [0, 1], [-1, 0], [0, -1]])
    toy_v = np.array([[1.0, 0], [3, 1], [2, 3], [0, 2]])
    toy_q = np.array([[2.0, 1], [-1, 1.5], [0.5, -2]])
    return [
        Case("the toy dictionary of section 1.2 (d_k = 2: scale 1/sqrt(2))", (toy_q, toy_k, toy_v),
             _gold_attention(toy_q, toy_k, toy_v), atol=1e-10, rtol=1e-8),
        case("L_q = 3, L_k = 5, d_k = 4, d_v = 2: nothing square", (3, 4), (5, 4), (5, 2)),
        case("odd sizes: L_q = 7, L_k = 1 (a single key), d_k = 3, d_v = 5", (7, 3), (1, 3), (1, 5)),
        case("a batch of 2 sequences with 3 heads: (B, H, L, D)", (2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5)),
        case("large scores (|q.k| ~ 1e4): subtract the row maximum", (4, 16), (9, 16), (9, 3), scale=30.0),
    ]
