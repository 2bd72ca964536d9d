"""Chapter 04's self-checking exercise: the sinusoidal positional-encoding table."""
from __future__ import annotations

from typing import List

from ..positions import sinusoidal_positions as _gold_positions
from ._harness import Case, checker

__all__ = ["check_sinusoidal_positions"]


@checker("sinusoidal_positions", chapter=4)
def check_sinusoidal_positions() -> List[Case]:
    r"""Grade ``fn(length, d_model)``: the table of shape (length, d_model) with
    :math:`\mathrm{PE}_{p,2i} = \sin(p\,\omega_i)`, :math:`\mathrm{PE}_{p,2i+1} = \cos(p\,\omega_i)`,
    :math:`\omega_i = 10000^{-2i/d_{\text{model}}}`, for positions :math:`p = 0, \dots,
    \text{length} - 1` (0-based: row 0 is ``(0, 1, 0, 1, ...)``).
    """
    sizes = [
        ("one position: row 0 is (0, 1, 0, 1)", 1, 4),
        ("d_model = 2: a single frequency, omega_0 = 1", 5, 2),
        ("an odd number of positions, 7 x 8", 7, 8),
        ("long and wide: 129 positions x 64 (slow frequencies matter)", 129, 64),
    ]
    return [Case(name, (length, d), _gold_positions(length, d), atol=1e-10, rtol=1e-8,
                 shown=f"length={length}, d_model={d}") for name, length, d in sizes]
