"""Chapter 03's self-checking exercise: a softmax that survives huge logits and
fully masked rows."""
from __future__ import annotations

from typing import List

import numpy as np

from ..reference import softmax as _gold_softmax
from ._harness import Case, checker

__all__ = ["check_stable_softmax"]


@checker("stable_softmax", chapter=3)
def check_stable_softmax() -> List[Case]:
    """Grade ``fn(x)``: softmax over the last axis of a NumPy array.

    It must subtract the row maximum (so 1e4 does not overflow), treat ``-inf`` as
    "excluded", give a row of **zeros** when every entry is ``-inf`` (the book's rule
    for fully masked rows), keep the input's dtype, and let NaN propagate.
    """
    rng = np.random.default_rng(3)
    ninf = -np.inf
    inputs = [
        ("a small vector", np.array([1.0, 2.0, 3.0])),
        ("rows of a 3x5 matrix (softmax over the last axis)", rng.standard_normal((3, 5))),
        ("huge logits: 1e4 must not overflow", np.array([1e4, 1e4 - 1.0, 0.0])),
        ("very negative logits: -1e4 must not become 0/0", np.array([-1e4, -1e4 - 2.0, -1e4 - 5.0])),
        ("-inf entries are excluded", np.array([[0.5, ninf, 1.5, ninf]])),
        ("a fully masked row gives zeros, not NaN", np.array([[1.0, 2.0, 3.0], [ninf, ninf, ninf]])),
        ("NaN in a row propagates to that row", np.array([[0.0, np.nan], [1.0, 2.0]])),
        ("length 1", np.array([[7.0]])),
    ]
    cases = [Case(name, (x,), _gold_softmax(x, axis=-1), dtype="float64") for name, x in inputs]
    x32 = rng.standard_normal((2, 7)).astype(np.float32)
    cases.append(Case("float32 in gives float32 out", (x32,), _gold_softmax(x32, axis=-1),
                      atol=1e-6, rtol=1e-5, dtype="float32"))
    return cases
