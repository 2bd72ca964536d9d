"""What the Triton kernels share: the constants of base-2 softmax and the padded head size.

The kernels compute ``exp`` as ``exp2`` (one instruction on a GPU): scores are scaled by
``LOG2E`` = log2(e) before, and a base-2 log-sum-exp is turned back into a natural one by
``LN2`` = ln(2). Both are ``tl.constexpr`` so ``@triton.jit`` code can use them by name;
``.value`` is the Python float for launchers. Importing this module imports triton when
it is installed (the kernel modules import it anyway); package-internal (the underscore).
"""
from __future__ import annotations

import math

try:
    from triton.language import constexpr
except ImportError:  # pragma: no cover - no triton: the kernels cannot run, the numbers remain
    class constexpr:  # noqa: N801 - stands in for triton.language.constexpr
        def __init__(self, value: float) -> None:
            self.value = value

#: log2(e): the kernels use exp2, so scores are scaled by it first.
LOG2E = constexpr(math.log2(math.e))
#: ln(2): turns a base-2 log-sum-exp back into a natural log.
LN2 = constexpr(math.log(2.0))


def padded_head_dim(d: int) -> int:
    """The power of two >= max(d, 16) a kernel computes a head dimension with
    (``tl.arange`` needs a power of two, ``tl.dot`` at least 16); the rest is masked."""
    return max(16, 1 << (int(d) - 1).bit_length())
