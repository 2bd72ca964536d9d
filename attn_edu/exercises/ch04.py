"""Chapter 04's self-checking exercise: rotary position embedding (RoPE) from scratch."""
from __future__ import annotations

from typing import List

import numpy as np

from ..positions import rotary as _gold_rotary
from ._harness import Case, checker

__all__ = ["check_rotary"]


@checker("rotary", chapter=4)
def check_rotary() -> List[Case]:
    r"""Grade ``fn(x, positions)``: rotate each interleaved pair :math:`(x_{2i}, x_{2i+1})` of
    the row at position :math:`p` counter-clockwise by the angle :math:`p\,\omega_i`,
    :math:`\omega_i = 10000^{-2i/d}`:

    .. math:: (x'_{2i},\, x'_{2i+1}) = (x_{2i}\cos p\omega_i - x_{2i+1}\sin p\omega_i,\;
              x_{2i}\sin p\omega_i + x_{2i+1}\cos p\omega_i).

    Shapes: ``x`` (..., L, d) with even d, ``positions`` (L,) -> (..., L, d). The hidden
    cases: position 0 (no rotation), d = 2, consecutive positions 0..L-1 with odd L,
    positions that are far apart, and leading batch and head axes.
    """
    rng = np.random.default_rng(4)

    def case(name, shape, positions):
        x = rng.standard_normal(shape)
        pos = np.asarray(positions)
        return Case(name, (x, pos), _gold_rotary(x, pos), atol=1e-10, rtol=1e-8)

    return [
        case("position 0 is not rotated", (1, 4), [0]),
        case("d = 2: one pair, omega_0 = 1 (angle = position)", (3, 2), [0, 1, 2]),
        case("positions 0..6 (odd L = 7), d = 8", (7, 8), np.arange(7)),
        case("positions far apart: 3, 100, 7 (slow pairs matter)", (3, 64), [3, 100, 7]),
        case("a batch of 2 sequences with 3 heads: (2, 3, 5, 6)", (2, 3, 5, 6), np.arange(5)),
    ]
