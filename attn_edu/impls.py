"""Which implementation computes an attention call on torch tensors: one switch, ``impl=``.

The same attention, ``softmax(q k^T * scale + mask) v`` with the package's semantics (True
= may attend, both causal alignments, a fully masked row gives zeros and finite gradients),
computed four ways:

* ``"naive"`` -- :func:`attn_edu.reference_torch.scaled_dot_product_attention`: matmul,
  softmax, matmul, the (L_q, L_k) weights in memory. The only one that returns the weights;
  the default of :class:`~attn_edu.multihead_torch.MultiHeadAttention` and the tiny
  Transformers, whose numbers the chapters record (chapters 01, 06, 07).
* ``"tiled"`` -- :func:`attn_edu.flash_torch.flash_attention`: chapter 09's tiled loop with
  the online softmax, in PyTorch (slow: a Python loop over tiles; for reading and checking).
* ``"sdpa"`` -- ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's fused
  attention (it picks its own backend: FlashAttention, memory-efficient or math). Masks and
  the bottom-right alignment are handed over as one mask built by the package's mask logic,
  and a fully masked row is given every key and then zeroed, so no NaN reaches the output
  or the gradients whatever SDPA's backend does with such a row (PyTorch 2.13's CPU
  kernels give zeros; older versions and some GPU backends gave NaN).
* ``"triton"`` -- :func:`attn_edu.kernels.flash_triton.triton_attention`, chapter 10's
  kernel, forward and backward. Causal masks only (no mask tensor); a CUDA GPU, or the
  CPU under Triton's interpreter (``TRITON_INTERPRET=1``, for tests).

``impl="auto"`` chooses, by :func:`choose_impl`, in this order (the first rule that applies):

====================================================  ==========  =========================================
the call                                              ``auto``    why
====================================================  ==========  =========================================
the weights are asked for (``return_weights=True``)   ``naive``   only the plain path forms them
tensors on the CPU (or any device but CUDA)           ``sdpa``    PyTorch's fused CPU kernels; the Triton
                                                                  interpreter is for tests, never chosen
triton is not installed                               ``sdpa``    (macOS, Windows: pip has no triton)
a mask tensor                                         ``sdpa``    the kernel applies causal masks only
compute capability below 8.0 (a T4)                   ``sdpa``    Triton 3.9 emits no tensor-core code
                                                                  there (FMA loops); SDPA's kernels do
a dtype the kernel does not take (float64)            ``sdpa``    the kernel's ``LIMITS``
float32                                               ``sdpa``    the kernel would multiply in TF32
                                                                  (float16's mantissa); SDPA keeps float32
a head dimension outside 1 .. 128                     ``sdpa``    the kernel's ``LIMITS``
otherwise (float16 or bfloat16 on a GPU from 8.0)     ``triton``  within the kernel's limits
====================================================  ==========  =========================================

The choice is visible: :func:`choose_impl` returns ``(name, reason)`` for a call, and a
module that takes ``impl=`` records the choice of its latest call in ``last_impl``. A name
other than ``"auto"`` runs that implementation or raises a ValueError saying why it cannot
take the call (``"naive"`` alone returns weights; ``"triton"`` takes no mask tensor; the
kernel itself refuses a device or dtype it cannot run, with its own message).

Importing this module imports torch (not triton: the kernel's module is imported when
``"triton"`` runs or ``"auto"`` looks at a CUDA GPU). Used by chapter 06's and 07's modules;
the benchmarks time the same implementations by their registry names (:mod:`attn_edu.bench`).
"""
from __future__ import annotations

import importlib.util
import math
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from . import _checks
from ._call import AttentionCall, attention_call, split_mask

__all__ = ["IMPLS", "choose_impl", "attention"]

#: The values of ``impl=``, ``"auto"`` and the four implementations (see the module).
IMPLS = ("auto", "naive", "tiled", "sdpa", "triton")


def check_impl(impl: object) -> str:
    """``impl`` itself when it is one of ``IMPLS``; a ValueError naming the argument otherwise."""
    if not isinstance(impl, str) or impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(map(repr, IMPLS))}; got {impl!r}")
    return impl


def _auto(call: AttentionCall, need_weights: bool) -> Tuple[str, str]:
    """The rules of ``impl="auto"`` (the module's table), on a checked call."""
    if need_weights:
        return "naive", "the attention weights are asked for: only the plain path forms them"
    q = call.q
    if q.device.type != "cuda":
        return "sdpa", (f"tensors on the {q.device.type}: PyTorch's fused attention (the Triton kernel "
                        "runs off a GPU only in its interpreter, for tests)")
    if importlib.util.find_spec("triton") is None:
        return "sdpa", "triton is not installed (pip install triton, on Linux)"
    if call.mask is not None:
        return "sdpa", "a mask tensor: the Triton kernel applies causal masks only (causal=...)"
    from .kernels import _targets  # triton-free: the kernels' rules as data
    from .kernels.flash_triton import LIMITS

    cap = tuple(torch.cuda.get_device_capability(q.device))
    if cap < _targets.TENSOR_CORE_MIN_CAPABILITY:
        return "sdpa", (f"compute capability {cap[0]}.{cap[1]}: before 8.0 Triton 3.9 emits no tensor-core "
                        "code for the kernel (FMA loops), SDPA's kernels use the tensor cores")
    dt = _checks.dtype_name(q)
    problem = LIMITS.dtype_problem(dt)
    if problem:
        return "sdpa", problem
    if dt == "float32" and _targets.input_precision(dt, cap) == "tf32":
        return "sdpa", ("float32: the Triton kernel would multiply in TF32 (float16's 10-bit mantissa, "
                        "attn_edu.kernels._targets.input_precision); SDPA keeps float32's products")
    problem = LIMITS.head_dim_problem(q.shape[-1], call.v.shape[-1])
    if problem:
        return "sdpa", problem
    return "triton", (f"{dt} on a GPU of compute capability {cap[0]}.{cap[1]}, head dimension "
                      f"{q.shape[-1]}: within the Triton kernel's limits (flash_triton.LIMITS)")


def pick(call: AttentionCall, impl: str, need_weights: bool = False) -> Tuple[str, str]:
    """``(name, reason)``: what runs a checked call for ``impl`` (checked by :func:`check_impl`);
    a ValueError when the implementation named cannot take the call."""
    if impl == "auto":
        return _auto(call, need_weights)
    if need_weights and impl != "naive":
        raise ValueError(f"impl={impl!r} returns no attention weights; use impl='naive' (or 'auto', which "
                         "picks it when the weights are asked for)")
    if impl == "triton" and call.mask is not None:
        raise ValueError("impl='triton' takes no mask tensor: the kernel applies causal masks only "
                         "(causal=True, 'top_left' or 'bottom_right'); use impl='sdpa' or 'auto' with a mask")
    return impl, "asked for"


def run(call: AttentionCall, impl: str, need_weights: bool = False
        ) -> Tuple[Tensor, Optional[Tensor], Tuple[str, str]]:
    """Run a checked torch call with ``impl``: ``(out, weights or None, (name, reason))``.

    ``call`` comes from :func:`attn_edu._call.attention_call` with ``torch_like=True`` (and
    ``tiled=True`` for ``impl="tiled"``); nothing is checked again here, except what only the
    Triton kernel knows (its own front door, ``check_triton_inputs``)."""
    name, reason = pick(call, impl, need_weights)
    weights = None
    if name == "naive":
        from .reference_torch import attend

        out = attend(call, need_weights)
        if need_weights:
            out, weights = out
    elif name == "tiled":
        from .flash_torch import flash_loop

        if call.block_q is None:
            raise ValueError("impl='tiled' needs a call checked with tiled=True (its tiles)")
        out = flash_loop(call, False, False)[0]
    elif name == "sdpa":
        out = _sdpa(call)
    else:
        out = _triton(call)
    return out, weights, (name, reason)


def _sdpa(call: AttentionCall) -> Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` with the package's semantics."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = call.q, call.k, call.v
    if call.mask is None and call.align != "bottom_right" and call.lk > 0:
        # no mask, or top-left causality (PyTorch's is_causal): every row sees key 0, no empty row
        return sdpa(q, k, v, is_causal=call.align == "top_left", scale=call.scale)
    allowed, additive = split_mask(call.mask, call.mask_kind, call.lq, call.lk, call.offset, call.device)
    if allowed is None:  # no key at all (L_k = 0)
        allowed = torch.ones(call.lq, call.lk, dtype=torch.bool, device=q.device)
    empty = ~allowed.any(dim=-1, keepdim=True)  # (..., L_q, 1): rows that see no key
    allowed = allowed | empty  # they see every key instead (finite), and are zeroed below
    if additive is None:
        attn_mask = allowed  # (..., L_q, L_k), True = may attend, as SDPA reads it
    else:  # a float mask: its values where allowed (0 in the empty rows), -inf elsewhere
        attn_mask = torch.where(allowed, additive.to(q.dtype), float("-inf"))
    if call.lk == 0:
        out = q.new_zeros(tuple(call.batch) + (call.lq, v.shape[-1]))
    else:
        out = sdpa(q, k, v, attn_mask=attn_mask, scale=call.scale)  # (..., L_q, d_v)
    return out.masked_fill(empty, 0.0)  # a row with no key: zeros, and zero gradients


def _as_bhld(x: Tensor) -> Tensor:
    """(..., L, D) as the kernel's (B, H, L, D): the last leading axis the heads, the others the batch."""
    lead = tuple(x.shape[:-2])
    return x.reshape(math.prod(lead[:-1]), lead[-1] if lead else 1, *x.shape[-2:])


def _triton(call: AttentionCall) -> Tensor:
    """Chapter 10's kernel on a checked call: leading axes broadcast and folded into (B, H)."""
    from .kernels.flash_triton import triton_attention

    batch = tuple(call.batch)
    q, k, v = (x.expand(*batch, *x.shape[-2:]) for x in (call.q, call.k, call.v))
    out = triton_attention(_as_bhld(q), _as_bhld(k), _as_bhld(v), causal=call.align or False, scale=call.scale)
    return out.reshape(*batch, call.lq, call.v.shape[-1])  # (B', H, L_q, d_v) -> (..., L_q, d_v)


# ----------------------------------------------------------------------------- the public functions
def choose_impl(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Any] = None, causal: Any = False, *,
                enable_gqa: bool = False, need_weights: bool = False, impl: str = "auto") -> Tuple[str, str]:
    """What ``impl`` runs for this call, and why: ``(name, reason)``.

    ``name`` is one of ``"naive"``, ``"tiled"``, ``"sdpa"``, ``"triton"``; for ``impl="auto"``
    the first rule of the table in :mod:`attn_edu.impls` that applies (``need_weights``: the
    caller wants the attention weights), for a name that name, ``reason`` ``"asked for"``.
    Arguments as in :func:`attention`, checked the same way; nothing is computed.
    """
    impl = check_impl(impl)
    call = attention_call(q, k, v, mask, causal, None, enable_gqa, torch_like=True, tiled=impl == "tiled")
    return pick(call, impl, need_weights)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Any] = None, causal: Any = False,
              scale: Optional[float] = None, enable_gqa: bool = False, *, impl: str = "auto") -> Tensor:
    r"""Scaled dot-product attention on torch tensors by the implementation ``impl`` chooses.

    :math:`\operatorname{softmax}(QK^\top s + M)\,V`: the arguments, shapes and semantics of
    :func:`attn_edu.reference_torch.scaled_dot_product_attention` (``q`` (..., L_q, d_k), ``k``
    (..., L_k, d_k), ``v`` (..., L_k, d_v) -> (..., L_q, d_v); ``mask`` boolean, True = may
    attend, or float, added; ``causal`` False, True/"top_left" or "bottom_right"), checked
    once, then computed by ``impl``: ``"auto"`` (default), ``"naive"``, ``"tiled"``,
    ``"sdpa"`` or ``"triton"`` (the table of :mod:`attn_edu.impls`; :func:`choose_impl` says
    which and why). Differentiable with every implementation. Each is held to the tolerance
    rule of :mod:`attn_edu.testing` against the float64 reference (TF32 would be held to
    float16's; ``"auto"`` does not choose it).
    """
    impl = check_impl(impl)
    call = attention_call(q, k, v, mask, causal, scale, enable_gqa, torch_like=True, tiled=impl == "tiled")
    return run(call, impl)[0]
