"""Chapter 06's self-checking exercise: split the heads out of a wide projection, the
reshape that gets the right shape with the wrong contents when its axis swap is missing."""
from __future__ import annotations

from typing import List

import numpy as np

from ..multihead import split_heads
from ._harness import Case, checker

__all__ = ["check_split_heads"]


@checker("split_heads", chapter=6)
def check_split_heads() -> List[Case]:
    """Grade ``fn(x, H)``: ``x`` of shape ``(B, L, H*d)`` (every head's columns side by
    side, head ``h`` owning columns ``h*d`` to ``(h+1)*d - 1``) to ``(B, H, L, d)``, so that
    ``out[b, h, i] == x[b, i, h*d:(h+1)*d]``. Hidden cases include one head (where the
    classic bug is invisible), odd lengths and heads of width 1.
    """
    rng = np.random.default_rng(6)
    shapes = [(2, 6, 4, 3, "B=2, L=6, H=4 heads of width 3"),
              (1, 5, 1, 4, "one head"),
              (1, 7, 3, 2, "odd length, 3 heads"),
              (3, 4, 8, 1, "heads of width 1"),
              (2, 1, 2, 5, "a single token"),
              (1, 9, 6, 4, "L=9, H=6, d=4")]
    cases = []
    for B, L, H, d, name in shapes:
        x = rng.standard_normal((B, L, H * d))
        cases.append(Case(name, (x, H), split_heads(x, H), atol=0.0, rtol=0.0,
                          shown=f"x of shape {(B, L, H * d)}, H={H}"))
    return cases
