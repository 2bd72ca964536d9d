"""The GPUs the Triton kernels are built for, and what each can run (one home for the rule).

Chapters 10, 11 and 13 compile their kernels for three targets without a GPU
(``triton.compile`` with a ``GPUTarget``), and the launchers refuse what a target
cannot do with a message instead of a compiler error. Importing this module imports
nothing heavy (only ``triton.runtime.errors`` when triton is installed).
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from . import _interpret
from ._plans import plan_cache

__all__ = ["device_capability", "sm_count", "Target", "TARGETS", "OutOfResources", "PRECISIONS", "TF32_MIN_CAPABILITY",
           "TENSOR_CORE_MIN_CAPABILITY", "has_tf32",
           "float32_precisions", "input_precision", "cuda_dtype_problem", "interpreter_dtype_problem",
           "check_runnable", "KernelLimits", "KERNEL_DTYPES", "check_kernel_inputs"]

try:  # what Triton raises when a launch needs more shared memory than the GPU has
    from triton.runtime.errors import OutOfResources
except ImportError:  # pragma: no cover - no triton (or an older one)
    OutOfResources = RuntimeError


@dataclass(frozen=True)
class Target:
    """A compile target: the ``GPUTarget`` arguments and the limits a kernel must fit."""

    arch: str  # what ptxas is asked for
    capability: int  # major * 10 + minor, as triton.backends.compiler.GPUTarget takes it
    example: str  # a GPU of this kind
    shared_memory: int  # bytes of shared memory one program (CTA) may use (opt-in maximum)
    bfloat16: bool  # native bfloat16 tensor-core math


#: sm_75 is Colab's T4 (64 KiB of shared memory per block, no bfloat16), sm_80 the A100
#: (163 KiB), sm_90a the H100 (227 KiB; "a" enables Hopper's wgmma instructions).
TARGETS: Dict[str, Target] = {t.arch: t for t in [
    Target("sm_75", 75, "T4", 65536, False),
    Target("sm_80", 80, "A100", 166912, True),
    Target("sm_90a", 90, "H100", 232448, True),
]}


#: What ``tl.dot`` does with float32 inputs (the kernels' ``precision=`` argument), ``"tf32"``
#: (tensor cores: each product of two float32 numbers rounded to TF32's 10-bit mantissa
#: first, sums in float32) or ``"ieee"`` (exact float32 products with fused multiply-adds:
#: no tensor cores, slow, and the kernels launch it with one small fixed configuration).
PRECISIONS = ("tf32", "ieee")
#: TF32 tensor cores exist from compute capability 8.0 (Ampere) on; a T4 (7.5) has none.
TF32_MIN_CAPABILITY = (8, 0)
#: From this compute capability on Triton 3.9 turns ``tl.dot`` into tensor-core instructions
#: (``mma.sync``, and ``wgmma`` on Hopper); before it (a T4, 7.5, although its hardware has
#: float16 tensor cores) into FMA loops, the ``matrix`` column of the compile report. The
#: launchers keep one small configuration there, and ``impl="auto"`` prefers PyTorch's SDPA.
TENSOR_CORE_MIN_CAPABILITY = (8, 0)


def has_tf32(capability: Optional[Tuple[int, int]]) -> bool:
    """Whether a GPU of this compute capability has TF32 tensor cores (False for None, the
    interpreter): ``TF32_MIN_CAPABILITY`` and newer."""
    return capability is not None and tuple(capability) >= TF32_MIN_CAPABILITY


def float32_precisions(capability: Optional[Tuple[int, int]]) -> Tuple[str, ...]:
    """Every ``precision`` a float32 launch may ask for on a GPU of this capability: ``"ieee"``
    everywhere, ``"tf32"`` too where it has TF32 (:func:`has_tf32`)."""
    return PRECISIONS[::-1] if has_tf32(capability) else ("ieee",)


def input_precision(dtype_name: str, capability: Optional[Tuple[int, int]],
                    precision: Optional[str] = None) -> str:
    """The ``input_precision`` of every ``tl.dot`` of a kernel launch (one rule for all kernels).

    ``dtype_name``: the inputs' dtype; ``capability``: the GPU's compute capability, None
    under Triton's CPU interpreter; ``precision``: the caller's choice, one of
    ``PRECISIONS`` or None for the default.

    * float16 and bfloat16: ``"tf32"`` whatever ``precision`` says. Triton ignores it for
      half types: their products are exact in float32 and the tensor cores sum in float32.
    * float32, default: ``"tf32"`` from ``TF32_MIN_CAPABILITY`` (8.0, tensor cores), else
      ``"ieee"`` (a T4 has no TF32; the interpreter computes exact float32 products
      whatever it is told, so ``"ieee"`` is what it runs).
    * float32, ``precision="ieee"``: exact products everywhere; ``precision="tf32"``:
      refused below 8.0 on a GPU (ValueError), accepted by the interpreter (which still
      computes exactly: it cannot show TF32's rounding).

    The tolerance that goes with TF32: a TF32 product has the 10-bit mantissa of float16
    with float32's range, so a float32 launch on TF32 is held to the float16 rule of
    :mod:`attn_edu.testing` on the same inputs: ``max|out - gold| <= 2 max|naive_16 - gold|
    + eps_16 max|gold|`` (``naive_16`` the plain attention in float16; 3x for gradients).
    Exact float32 (``"ieee"``) is held to the float32 rule.
    """
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision must be None or one of {', '.join(map(repr, PRECISIONS))}; "
                         f"got {precision!r}")
    if dtype_name != "float32":
        return "tf32"
    tf32 = has_tf32(capability)
    if precision is None:
        return "tf32" if tf32 else "ieee"
    if precision == "tf32" and capability is not None and not tf32:
        major, minor = capability
        raise ValueError(
            f"precision='tf32' needs TF32 tensor cores, compute capability 8.0 or newer; got a GPU "
            f"of compute capability {major}.{minor} (e.g. a T4). Use precision='ieee' (exact float32, "
            "the default there) or float16 inputs.")
    return precision


def cuda_dtype_problem(dtype_name: str, capability: Tuple[int, int]) -> Optional[str]:
    """Why a kernel cannot take ``dtype_name`` on a GPU of this compute capability (None
    when it can). bfloat16 tensor-core math needs compute capability 8.0 (Ampere); on older
    GPUs such as Colab's T4 (7.5) Triton fails to compile it ("Feature '.bf16' requires
    .target sm_80 or higher")."""
    if dtype_name == "bfloat16" and tuple(capability) < (8, 0):
        major, minor = capability
        return (
            f"bfloat16 needs a GPU of compute capability 8.0 or newer (Ampere, Ada, Hopper); "
            f"got q, k, v of dtype bfloat16 on a GPU of compute capability {major}.{minor} "
            "(e.g. a T4). Use float16 or float32 there: q.half() or q.float()."
        )
    return None


def interpreter_dtype_problem(dtype_name: str) -> Optional[str]:
    """Why Triton's CPU interpreter cannot take ``dtype_name`` (None when it can)."""
    if dtype_name == "bfloat16":
        return (
            "bfloat16 is not supported by Triton's CPU interpreter (TRITON_INTERPRET=1): "
            "Triton 3.9 multiplies the raw bit patterns of bfloat16 in tl.dot "
            "(triton-lang/triton#11584); got q, k, v of dtype bfloat16 on the CPU. Use "
            "float16 or float32 here, bfloat16 on a CUDA GPU."
        )
    return None


def check_runnable(device: object, dtype_name: str, built_interpreted: bool, what: str = "the Triton kernel",
                   interpreter_bfloat16: bool = False) -> None:
    """Raise the error that says why ``what`` cannot run on ``device`` (a ``torch.device``)
    with inputs of ``dtype_name``; return quietly when it can.

    CUDA: bfloat16 needs compute capability 8.0 (:func:`cuda_dtype_problem`). CPU: the
    interpreter must be on, and on in time (``attn_edu.kernels._interpret.cpu_problem``;
    ``built_interpreted`` is how the kernel module was decorated), and takes no bfloat16
    unless the kernel multiplies it in float32 there (``interpreter_bfloat16``).
    Anything else: a ValueError.
    """
    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        import torch

        problem = cuda_dtype_problem(dtype_name, torch.cuda.get_device_capability(device))
        if problem:
            raise TypeError(problem)
    elif kind == "cpu":
        failure = _interpret.cpu_problem(built_interpreted, device, what)
        if failure:
            raise failure[0](failure[1])
        problem = None if interpreter_bfloat16 else interpreter_dtype_problem(dtype_name)
        if problem:
            raise TypeError(problem)
    else:
        raise ValueError(f"{what} runs on CUDA (or the CPU with TRITON_INTERPRET=1); got tensors on {device}")


#: The dtypes every kernel takes (``tl.dot`` has no float64 path worth teaching).
KERNEL_DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class KernelLimits:
    """What one Triton kernel takes, as data: :func:`check_kernel_inputs` holds each kernel
    to its own limits, with one wording for every refusal.

    * ``name`` -- how errors name the kernel ("the Triton kernel");
    * ``instead`` -- what takes the inputs the kernel refuses (an error's way out);
    * ``dtypes`` -- the input dtypes (bfloat16 needs compute capability 8.0 on a GPU);
    * ``head_dims`` -- the smallest and largest d_k and d_v, inclusive: a kernel computes a
      head with ``padded_head_dim(d)`` lanes (a power of two >= 16) and masks the rest, so
      1 works as well as 16; above 128 the tiles outgrow registers and shared memory;
    * ``broadcast`` -- leading (batch, head) axes of size 1 broadcast; without it q, k and v
      share B, and H unless ``gqa``;
    * ``gqa`` -- H_q may be a multiple of H_kv, with ``enable_gqa=True``;
    * ``interpreter_bfloat16`` -- under Triton's CPU interpreter the kernel multiplies
      bfloat16 in float32 (else bfloat16 is refused there, triton-lang/triton#11584).

    Where a kernel runs (a CUDA GPU, bfloat16 from compute capability 8.0; or the CPU with
    ``TRITON_INTERPRET=1`` set in time) is :func:`check_runnable`'s rule, the same for all.
    """

    name: str
    instead: str
    dtypes: Tuple[str, ...] = KERNEL_DTYPES
    head_dims: Tuple[int, int] = (1, 128)
    broadcast: bool = False
    gqa: bool = False
    interpreter_bfloat16: bool = False

    def dtype_problem(self, dtype_name: str) -> Optional[str]:
        """Why the kernel refuses q, k, v of ``dtype_name`` (the message of its TypeError), or
        None when ``dtypes`` holds it."""
        if dtype_name in self.dtypes:
            return None
        return (f"{self.name} supports dtypes {', '.join(self.dtypes)}; got q, k, v of dtype {dtype_name}. "
                f"Use {self.instead} for {dtype_name}, or convert, e.g. q.float().")

    def head_dim_problem(self, d_k: int, d_v: int) -> Optional[str]:
        """Why the kernel refuses these head dimensions (the message of its ValueError), or None
        when both lie within ``head_dims``."""
        lo, hi = self.head_dims
        for arg, axis, d in (("d_k", "the last axis of q and k", d_k), ("d_v", "the last axis of v", d_v)):
            if not lo <= d <= hi:
                return (f"{self.name} supports head dimensions from {lo} to {hi} (padded inside to a power "
                        f"of two >= 16); got {arg} = {d} ({axis}). Use {self.instead} for other heads.")
        return None


@functools.lru_cache(maxsize=None)
def _triton_installed() -> bool:
    """Whether the triton package can be imported, looked up once per process (a lookup of
    the import path costs tens of microseconds, too much for every call)."""
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def _asked_with(name: str):
    """A :func:`plan_cache` key of a device and the ``torch.cuda`` function ``name`` that
    answers for it: the GPU profile (``attn_edu.gpu_profile``), the compile stand-in and
    tests swap that function in-process, and each one swapped in is asked anew."""
    def key(device) -> tuple:
        import torch

        return device, getattr(torch.cuda, name)
    return key


@plan_cache(key=_asked_with("get_device_capability"))
def device_capability(device) -> Tuple[int, int]:
    """``torch.cuda.get_device_capability(device)`` as a tuple, asked once per device (a
    launcher asks it on every call: microseconds of torch's device lookups each time)."""
    import torch

    return tuple(torch.cuda.get_device_capability(device))


@plan_cache(key=_asked_with("get_device_properties"))
def sm_count(device) -> int:
    """The streaming multiprocessors of ``device``'s GPU, asked once per device."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def _input_facts(q: object, k: object, v: object) -> Optional[tuple]:
    """Everything :func:`check_kernel_inputs` reads of its inputs, as a key: the three
    dtypes and devices, their shapes but for the lengths (the axis before the last), whether
    k and v have one length, and on a CPU whether ``TRITON_INTERPRET`` asks for the
    interpreter now (the rest it reads is fixed once triton is imported); None where the
    inputs are not exactly ``torch.Tensor`` (those are checked in full, every call). No rule
    reads a length but that one, so a decode loop's cache, one key longer each step, is
    answered from the table."""
    torch = sys.modules.get("torch")
    if torch is None or type(q) is not torch.Tensor or type(k) is not torch.Tensor or type(v) is not torch.Tensor:
        return None
    device = q.device
    interpret = _interpret.requested() if device.type == "cpu" else None
    qs, ks, vs = tuple(q.shape), tuple(k.shape), tuple(v.shape)  # a tuple slices faster than a torch.Size
    return (q.dtype, k.dtype, v.dtype, device, k.device, v.device, qs[:-2], qs[-1:], ks[:-2], ks[-1:],
            vs[:-2], vs[-1:], ks[-2:-1] == vs[-2:-1], interpret)


def _passed_key(limits, q, k, v, built_interpreted, enable_gqa=False) -> Optional[tuple]:
    """The key :func:`check_kernel_inputs` files a pass under: the inputs' facts
    (:func:`_input_facts`) with the limits, ``built_interpreted`` and ``enable_gqa``, their
    types too; None (checked in full, every call) where the inputs are not exactly tensors."""
    facts = _input_facts(q, k, v)
    if facts is None:
        return None
    return (limits, type(built_interpreted), built_interpreted, type(enable_gqa), enable_gqa, facts)


@plan_cache(key=_passed_key)
def check_kernel_inputs(limits: KernelLimits, q: object, k: object, v: object, built_interpreted: bool,
                        enable_gqa: bool = False) -> Tuple[str, Tuple[int, ...], int]:
    """The one input check of the Triton kernels: q, k, v against ``limits``, then
    :func:`check_runnable`; returns (dtype name, broadcast leading axes (B, H), GQA group).
    Every call is checked: one whose inputs' facts (dtypes, devices, shapes, the
    interpreter switch on a CPU) passed before is answered from a table of those that
    passed, in a lookup, any other in full (:func:`~attn_edu.kernels._plans.plan_cache`,
    keyed by :func:`_passed_key`; a check that raises remembers nothing).

    The reference's own checks come first (``attn_edu._checks``: the same words as
    ``attn_edu.scaled_dot_product_attention`` for the same mistake), then the kernel's
    limits, each error naming the argument and what was seen: torch tensors, one dtype out
    of ``limits.dtypes``, one device, 4-D (B, H, L, D), the batch and head axes
    ``limits.broadcast`` and ``limits.gqa`` allow, d_k and d_v within ``limits.head_dims``,
    a device the kernel runs on, and triton installed. ``built_interpreted``: how the
    kernel's module was decorated (its ``@triton.jit`` under ``TRITON_INTERPRET=1``).
    """
    from .. import _checks
    from .._call import require_tensor

    name, args = limits.name, (("q", q), ("k", k), ("v", v))
    for arg, x in args:
        require_tensor(arg, x)
    dt = _checks.check_float_dtypes(q=_checks.dtype_name(q), k=_checks.dtype_name(k), v=_checks.dtype_name(v))
    problem = limits.dtype_problem(dt)
    if problem:
        raise TypeError(problem)
    _checks.same_devices(q=q.device, k=k.device, v=v.device)
    batch, group = _checks.check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape),
                                            enable_gqa and limits.gqa)
    for arg, x in args:
        if x.dim() != 4:
            raise ValueError(f"{name} takes 4-D tensors (B, H, L, D); got {arg} of shape {tuple(x.shape)}. "
                             f"Add axes with {arg}[None, None] or reshape.")
    if not limits.broadcast and (q.shape[0] != k.shape[0] or (group == 1 and q.shape[1] != k.shape[1])):
        heads = "H_q may be a multiple of H_kv with enable_gqa=True" if limits.gqa else "no grouped-query heads"
        raise ValueError(f"{name} needs q, k and v with the same batch and head axes (no broadcasting; "
                         f"{heads}); got q {tuple(q.shape)} and k {tuple(k.shape)}")
    problem = limits.head_dim_problem(q.shape[-1], v.shape[-1])
    if problem:
        raise ValueError(problem)
    check_runnable(q.device, dt, built_interpreted, name, limits.interpreter_bfloat16)
    if not _triton_installed():  # pragma: no cover - triton is in requirements.txt
        raise ImportError(f"{name} needs the triton package: pip install triton")
    return dt, tuple(batch), group
