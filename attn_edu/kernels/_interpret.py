"""When do Triton kernels run on the CPU? One home for the rule (chapters 10 and 11).

Triton 3.9 reads ``TRITON_INTERPRET`` when ``@triton.jit`` wraps a function, not when a
kernel launches. Its own library functions (``tl.sum``, ``tl.max``, ``tl.zeros``) are
wrapped at the first ``import triton`` of the process, so the variable must be set
before that; a kernel module imported earlier is rebuilt by reloading it. Importing
this module never imports triton.
"""
from __future__ import annotations

import os

_TRUE = ("1", "true", "on", "yes")


def requested() -> bool:
    """True when the environment asks for Triton's CPU interpreter now (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def library_interpreted() -> bool:
    """Was Triton's own library (``tl.sum``, ...) built for the interpreter?

    If triton was imported before ``TRITON_INTERPRET=1`` was set, no kernel that reduces
    (every attention kernel) can run interpreted in this process.
    """
    try:
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - triton missing or reorganised
        return False
    return isinstance(tl.sum, InterpretedFunction)


def cpu_problem(built_interpreted: bool, device: object, what: str = "the Triton kernel") -> "tuple | None":
    """Why a kernel cannot run on the CPU now: ``(exception class, message)``, or None.

    ``built_interpreted`` says whether the kernel module's ``@triton.jit`` ran with
    ``TRITON_INTERPRET=1`` set. The two failures: the variable is not set (a kernel needs a
    CUDA GPU or the interpreter), or it was set after triton had been imported. ``what``
    names the kernel in the message.
    """
    if not requested():
        return ValueError, (
            f"{what} needs a CUDA GPU, or the CPU with the environment variable "
            "TRITON_INTERPRET=1 (Triton's interpreter; set it before importing triton); "
            f"got tensors on {device} and TRITON_INTERPRET unset")
    import importlib.util

    if importlib.util.find_spec("triton") is not None and not (built_interpreted and library_interpreted()):
        return RuntimeError, (
            "TRITON_INTERPRET=1 was set after triton had been imported: Triton 3.9 builds "
            "its own library (tl.max, tl.sum, ...) for the GPU at `import triton`, so "
            "kernels cannot be interpreted in this process. Set TRITON_INTERPRET=1 before "
            "anything imports triton (first line of the script, or restart the notebook "
            "kernel).")
    return None
