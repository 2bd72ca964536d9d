"""Triton kernels (chapters 10 and 11), imported lazily: ``import attn_edu.kernels`` never
needs triton (or torch).

* :func:`~attn_edu.kernels.flash_triton.triton_attention` (q, k, v, causal=False, scale=None) -> out, differentiable;
* :func:`~attn_edu.kernels.flash_triton.triton_attention_forward` (q, k, v, causal=False, scale=None) -> (out, lse);
* :func:`~attn_edu.kernels.block_sparse_triton.block_sparse_attention` (q, k, v, mask, block_q, block_k, ...)
  -> out, forward only (chapter 11); pass a :class:`attn_edu.masks.TilePlan` as the mask to
  reuse its tile lists;
* :func:`~attn_edu.kernels.decode_triton.split_kv_decode` (q, k, v, num_splits=None, ...) -> out,
  split-KV (Flash-Decoding) attention of a few queries over a KV cache (chapter 13);
* :func:`available` -- can the kernels run here (triton installed, and a CUDA GPU or
  ``TRITON_INTERPRET=1`` for the CPU interpreter)?

``attn_edu.kernels.triton_attention`` and the others are the functions of those modules,
imported on first access. Triton 3.9 decides between compiled and interpreted kernels
when ``@triton.jit`` runs, i.e. when a kernel module is first imported; set
``TRITON_INTERPRET=1`` before that on a machine without a GPU.

The FlashAttention kernels are a package split by job (``flash_triton/``: ``kernels``,
``launch``, ``api``, ``aot``, see :mod:`attn_edu.kernels.flash_triton`); the block-sparse and
decode kernels are one file each, kernels, launcher and input check. All three take triton
from one guarded import (``attn_edu.kernels._shared``) and check their inputs with one
function (``attn_edu.kernels._targets.check_kernel_inputs``). The benchmarks are in
:mod:`attn_edu.bench`.
"""
from __future__ import annotations

import importlib
import importlib.util

__all__ = ["triton_attention", "triton_attention_forward", "block_sparse_attention", "split_kv_decode",
           "available"]

_LAZY = {
    "triton_attention": "flash_triton",
    "triton_attention_forward": "flash_triton",
    "block_sparse_attention": "block_sparse_triton",
    "split_kv_decode": "decode_triton",
}


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


def __getattr__(name: str):  # PEP 562: the kernel modules load on first use
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'attn_edu.kernels' has no attribute {name!r}")


def __dir__():  # the lazy names too (documentation tools list a module's names this way)
    return sorted(set(globals()) | set(_LAZY))
