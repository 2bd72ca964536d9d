"""The GPUs the Triton kernels are built for, and what each can run (one home for the rule).

Chapters 10, 11 and 13 compile their kernels for three targets without a GPU
(``triton.compile`` with a ``GPUTarget``), and the launchers refuse what a target
cannot do with a message instead of a compiler error. Importing this module imports
nothing heavy (only ``triton.runtime.errors`` when triton is installed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

__all__ = ["Target", "TARGETS", "OutOfResources", "PRECISIONS", "TF32_MIN_CAPABILITY", "input_precision",
           "cuda_dtype_problem", "interpreter_dtype_problem", "check_runnable"]

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
    has_tf32 = capability is not None and tuple(capability) >= TF32_MIN_CAPABILITY
    if precision is None:
        return "tf32" if has_tf32 else "ieee"
    if precision == "tf32" and capability is not None and not has_tf32:
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


def check_runnable(device: object, dtype_name: str, built_interpreted: bool, what: str = "the Triton kernel") -> None:
    """Raise the error that says why ``what`` cannot run on ``device`` (a ``torch.device``)
    with inputs of ``dtype_name``; return quietly when it can.

    CUDA: bfloat16 needs compute capability 8.0 (:func:`cuda_dtype_problem`). CPU: the
    interpreter must be on, and on in time (``attn_edu.kernels._interpret.cpu_problem``;
    ``built_interpreted`` is how the kernel module was decorated), and takes no bfloat16.
    Anything else: a ValueError.
    """
    from . import _interpret

    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        import torch

        problem = cuda_dtype_problem(dtype_name, torch.cuda.get_device_capability(device))
        if problem:
            raise TypeError(problem)
    elif kind == "cpu":
        failure = _interpret.cpu_problem(built_interpreted, device)
        if failure:
            raise failure[0](failure[1])
        problem = interpreter_dtype_problem(dtype_name)
        if problem:
            raise TypeError(problem)
    else:
        raise ValueError(f"{what} runs on CUDA (or the CPU with TRITON_INTERPRET=1); got tensors on {device}")
