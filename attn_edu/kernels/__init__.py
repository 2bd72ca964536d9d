"""Triton kernels (chapter 10): imported lazily, so ``import attn_edu.kernels`` never
needs triton (or torch).

* :func:`~attn_edu.kernels.flash_triton.triton_attention` (q, k, v, causal=False, scale=None) -> out, differentiable;
* :func:`~attn_edu.kernels.flash_triton.triton_attention_forward` (q, k, v, causal=False, scale=None) -> (out, lse);
* :func:`~attn_edu.kernels.block_sparse_triton.block_sparse_attention` (q, k, v, mask, block=64, ...) -> out, forward only
  (chapter 11); :func:`~attn_edu.kernels.block_sparse_triton.make_block_sparse_layout` builds its tile lists once;
* :func:`available` -- can the kernels run here (triton installed, and a CUDA GPU or
  ``TRITON_INTERPRET=1`` for the CPU interpreter)?

Triton 3.9 decides between compiled and interpreted kernels when ``@triton.jit``
runs, i.e. when :mod:`attn_edu.kernels.flash_triton` is first imported; set
``TRITON_INTERPRET=1`` before that on a machine without a GPU. The functions below
import that module only when they are called.
"""
from __future__ import annotations

import importlib.util

__all__ = ["triton_attention", "triton_attention_forward", "block_sparse_attention",
           "make_block_sparse_layout", "available"]


def available() -> bool:
    """True when the Triton kernels can run: triton and torch import, and either a
    CUDA GPU is visible or ``TRITON_INTERPRET=1`` is set (CPU interpreter)."""
    for name in ("torch", "triton"):
        if importlib.util.find_spec(name) is None:
            return False
    try:
        import torch  # (triton is not imported here: that would fix its interpret mode)
    except Exception:  # a broken install counts as absent
        return False
    if torch.cuda.is_available():
        return True
    from ._interpret import requested

    return requested()


def triton_attention(q, k, v, causal=False, scale=None):
    """See :func:`attn_edu.kernels.flash_triton.triton_attention`."""
    from .flash_triton import triton_attention as _impl

    return _impl(q, k, v, causal=causal, scale=scale)


def triton_attention_forward(q, k, v, causal=False, scale=None):
    """See :func:`attn_edu.kernels.flash_triton.triton_attention_forward`."""
    from .flash_triton import triton_attention_forward as _impl

    return _impl(q, k, v, causal=causal, scale=scale)


def block_sparse_attention(q, k, v, mask, block=64, **kwargs):
    """See :func:`attn_edu.kernels.block_sparse_triton.block_sparse_attention`."""
    from .block_sparse_triton import block_sparse_attention as _impl

    return _impl(q, k, v, mask, block, **kwargs)


def make_block_sparse_layout(mask, block_m=64, block_n=None, device=None):
    """See :func:`attn_edu.kernels.block_sparse_triton.make_block_sparse_layout`."""
    from .block_sparse_triton import make_block_sparse_layout as _impl

    return _impl(mask, block_m, block_n, device)
