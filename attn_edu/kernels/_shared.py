"""What the Triton kernels share: the guarded triton import, base-2 softmax constants, the
padded head size, launch grids, AOT records.

The one guarded ``import triton`` of the kernel modules is here: they take ``triton``,
``tl`` and ``HAS_TRITON`` from this module (None, None and False without triton, so
they import, and a page can print their source, where triton is missing), and decorate
their kernels with :func:`jit`.

The kernels compute ``exp`` as ``exp2`` (one instruction on a GPU): scores are scaled by
``LOG2E`` = log2(e) before, and a base-2 log-sum-exp is turned back into a natural one by
``LN2`` = ln(2). Both are ``tl.constexpr`` so ``@triton.jit`` code can use them by name;
``.value`` is the Python float for launchers. Importing this module imports triton when
it is installed (the kernel modules need it anyway); package-internal (the underscore).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..masks import causal_offset_or_none

try:  # guarded: the rest of attn_edu never needs triton
    import triton
    import triton.language as tl
    from triton.language import constexpr

    HAS_TRITON = True
except ImportError:  # pragma: no cover - triton is in requirements.txt
    triton = None
    tl = None
    HAS_TRITON = False

    class constexpr:  # noqa: N801 - stands in for triton.language.constexpr (the numbers remain)
        def __init__(self, value: float) -> None:
            self.value = value


def jit(fn: Callable) -> Any:
    """``triton.jit(fn)`` when triton is installed; the plain function otherwise (so a kernel
    module imports, and ``inspect.getsource`` reads its kernels, without triton). Triton reads
    ``TRITON_INTERPRET`` here, when it decorates: the kernel is built for the interpreter or
    for the GPU once, at the import of its module."""
    return triton.jit(fn) if HAS_TRITON else fn


#: log2(e). The kernels use exp2, so scores are scaled by it first.
LOG2E = constexpr(math.log2(math.e))
#: ln(2), which turns a base-2 log-sum-exp back into a natural log.
LN2 = constexpr(math.log(2.0))


def padded_head_dim(d: int) -> int:
    """The power of two >= max(d, 16) a kernel computes a head dimension with
    (``tl.arange`` needs a power of two, ``tl.dot`` at least 16); the rest is masked."""
    return max(16, 1 << (int(d) - 1).bit_length())


def causal_offset_arg(lq: int, lk: int, alignment: Optional[str]) -> int:
    """What a kernel's causal-offset argument gets: :func:`attn_edu.masks.causal_offset_or_none`,
    0 when not causal (the kernel then ignores it)."""
    return causal_offset_or_none(lq, lk, alignment) or 0


#: The kernels' input dtypes as Triton spells them in a compile signature (``"*fp16"``).
TRITON_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


#: CUDA's limits on a grid, 2**31 - 1 programs along x and 65,535 along y and z.
GRID_X_MAX = 2**31 - 1
GRID_YZ_MAX = 65535


def launch_grid(batch_heads: int, length: int, block: int) -> Tuple[int]:
    """The one-axis grid of a kernel with one program per (batch x head, block of ``block``
    rows of ``length``): ``(batch_heads * cdiv(length, block),)``, blocks varying fastest
    (a kernel recovers both with ``//`` and ``%`` of ``cdiv(length, block)``). On CUDA's x
    axis any B * H launches; on y it would stop at ``GRID_YZ_MAX``."""
    programs = batch_heads * -(-length // block)
    if programs > GRID_X_MAX:
        raise ValueError(f"the launch needs {programs} programs (B * H = {batch_heads}, {length} rows in "
                         f"blocks of {block}); a CUDA grid holds at most {GRID_X_MAX}")
    return (programs,)


@dataclass(frozen=True)
class AotKernel:
    """One Triton kernel as the ahead-of-time report (:mod:`attn_edu.kernels.report`)
    compiles it without a GPU: each kernel module lists its kernels in ``aot_kernels()``.

    ``pointers`` maps pointer parameters to their element type (``"{dtype}"`` = the input
    dtype, else e.g. ``"fp32"``); ``floats`` are the float scalars; every other
    non-constexpr parameter is an int (strides named ``*_d``/``s_*d`` are 1 at run time,
    as Triton specialises them). ``constexprs(d, dtype, config, precision)`` gives the
    compile-time constants for head dim ``d`` and ``tl.dot`` input precision ``precision``
    (``"tf32"`` or ``"ieee"``, see ``attn_edu.kernels._targets.input_precision``);
    ``configs(capability, d, dtype, precision)`` the (BLOCK_M, BLOCK_N, num_warps,
    num_stages) a launch can use on a GPU of that compute capability at head dim d;
    ``needs_wgmma``: on Hopper (sm_90a) its matmuls must become wgmma instructions (not
    asked of exact float32, which has no tensor-core instruction);
    ``needs_tma``: on Hopper it must copy its tiles with TMA (``cp.async.bulk.tensor``);
    ``per_target(capability, precision)``: constants that depend on the target and
    precision (e.g. the forward's ``USE_TMA``), merged over ``constexprs``;
    ``descriptors(constants)``: the pointer parameters that are host-built tensor
    descriptors under these constants, each with its block shape (e.g. the FlashAttention-3
    forward's Q, K, V and Out with ``HOST_TMA``), compiled as Triton's ``tensordesc`` type.
    """

    name: str
    fn: Any
    pointers: Dict[str, str]
    floats: Tuple[str, ...]
    constexprs: Callable[[int, str, Tuple[int, int, int, int], str], Dict[str, Any]]
    configs: Callable[[Tuple[int, int], int, str, str], List[Tuple[int, int, int, int]]]
    needs_wgmma: bool = True
    unit_strides: Tuple[str, ...] = field(default_factory=tuple)
    needs_tma: bool = False
    per_target: Optional[Callable[[Tuple[int, int], str], Dict[str, Any]]] = None
    descriptors: Optional[Callable[[Dict[str, Any]], Dict[str, List[int]]]] = None

    def constants(self, d: int, dtype: str, config: Tuple[int, int, int, int],
                  capability: Tuple[int, int], precision: str = "tf32") -> Dict[str, Any]:
        """The compile-time constants for head dim ``d`` on a GPU of this capability."""
        return {**self.constexprs(d, dtype, config, precision),
                **(self.per_target(capability, precision) if self.per_target else {})}


def kernel_text(kernels: Dict[str, Callable], kernel: str, start: Optional[str] = None,
                stop: Optional[str] = None) -> str:
    """The source of ``kernels[kernel]`` (a ``@triton.jit`` kernel or, without triton, the
    plain function), from the first line containing ``start`` to before the next line
    containing ``stop``, dedented: what a kernel module's ``kernel_source`` prints on a page.
    """
    import inspect
    import textwrap

    if kernel not in kernels:
        raise ValueError(f"kernel must be one of {', '.join(map(repr, kernels))}; got {kernel!r}")
    fn = kernels[kernel]
    lines = inspect.getsource(getattr(fn, "fn", fn)).splitlines()  # a jitted kernel keeps .fn
    i = 0 if start is None else next((n for n, line in enumerate(lines) if start in line), None)
    if i is None:
        raise ValueError(f"no line of the {kernel} kernel contains {start!r}")
    j = next((n for n, line in enumerate(lines) if stop and n > i and stop in line), len(lines))
    return textwrap.dedent("\n".join(lines[i:j]))
