"""The GPUs the Triton kernels are built for, and what each can run (one home for the rule).

Chapters 10, 11 and 13 compile their kernels for three targets without a GPU
(``triton.compile`` with a ``GPUTarget``), and the launchers refuse what a target
cannot do with a message instead of a compiler error. Importing this module imports
nothing heavy (only ``triton.runtime.errors`` when triton is installed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

__all__ = ["Target", "TARGETS", "OutOfResources", "cuda_dtype_problem", "interpreter_dtype_problem",
           "check_runnable"]

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
