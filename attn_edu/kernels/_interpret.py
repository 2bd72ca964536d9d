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
