"""PyTorch attention: the twin of :mod:`attn_edu.reference` (same names, same rules).

Same semantics, same argument checks (``attn_edu._checks``), same error messages as
the NumPy reference, but on torch tensors, on any device (CPU or CUDA), differentiable,
and computed in the input dtype (float16, bfloat16, float32 or float64 in, the same
dtype out). This is the "naive_T" of the book's tolerance rule: the plain
matmul -> softmax -> matmul, written so that it can be read top to bottom.

* layout ``(..., L, D)``; ``L_q`` may differ from ``L_k`` and ``D_v`` from ``D_k``;
* boolean masks: **True = may attend**; float masks are added to the scores, ``-inf``
  in a float mask blocks, NaN or ``+inf`` in a float mask is an error;
* ``causal`` in {False, True, "top_left", "bottom_right"} (True = "top_left");
* a query row with no allowed key gets **zero output and zero weights**, and its
  gradients are finite (zero): there is no NaN-producing operation in the graph;
* NaN in unmasked inputs propagates; it is never hidden.

Importing this module imports torch; ``import attn_edu`` does not import it. The NumPy
functions hand torch tensors here (``attn_edu.scaled_dot_product_attention(q, k, v)`` with
tensors runs :func:`scaled_dot_product_attention` below).

Explained in chapter 01 (the four steps), 03 (the stable softmax) and 05 (masks).
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor, nn

from . import _checks
from ._call import AttentionCall, attention_call, require_tensor, split_mask

__all__ = ["softmax", "scaled_dot_product_attention", "ScaledDotProductAttention"]

_NEG_INF = float("-inf")


def _stable_softmax(x: Tensor, dim: int) -> Tensor:
    """Softmax along ``dim`` where ``-inf`` entries are excluded; an all ``-inf`` slice gives 0.

    No NaN-producing operation on a fully excluded slice, forward or backward:
    the row maximum is detached (softmax is shift-invariant, so no gradient is lost)
    and replaced by 0 where the whole slice is ``-inf``, so every exponent there is
    ``exp(-inf) = 0``; the sum is replaced by 1 where it is 0, so nothing divides by 0.
    NaN among the kept entries makes the maximum NaN and propagates to the whole slice.
    """
    if x.shape[dim] == 0:  # no keys at all (L_k = 0): nothing to normalise, like NumPy
        return x.clone()
    m = x.detach().amax(dim=dim, keepdim=True)  # (..., 1): NaN if a kept entry is NaN
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)  # fully excluded -> 0
    e = torch.exp(x - m)  # excluded entries: exp(-inf) = 0 exactly
    total = e.sum(dim=dim, keepdim=True)  # (..., 1)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def softmax(x: Tensor, dim: int = -1, mask: Optional[Tensor] = None) -> Tensor:
    r"""Numerically stable softmax along ``dim`` (the twin of :func:`attn_edu.reference.softmax`).

    .. math:: \operatorname{softmax}(x)_j = \frac{e^{x_j - m}}{\sum_{j'} e^{x_{j'} - m}},
              \qquad m = \max_{j} x_j

    ``mask`` (boolean tensor, True = keep, broadcastable to ``x``, same device) and
    entries equal to ``-inf`` both mean "excluded". A slice with nothing left gives
    **zeros** (not NaN, not uniform), with zero gradients. NaN among the kept entries
    propagates. The dtype and device of ``x`` are kept.

    Explained in chapter 03.
    """
    x = require_tensor("x", x)
    _checks.check_float_dtypes(x=_checks.dtype_name(x.dtype))
    if mask is not None:
        mask = require_tensor("mask", mask)
        if mask.dtype != torch.bool:
            raise TypeError(
                f"softmax's mask must be boolean (True = keep); got dtype {_checks.dtype_name(mask.dtype)}"
            )
        if _checks.broadcast_shapes(tuple(mask.shape), tuple(x.shape)) != tuple(x.shape):
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to x of shape {tuple(x.shape)}"
            )
        _checks.same_devices(x=x.device, mask=mask.device)
        x = x.masked_fill(~mask, _NEG_INF)  # excluded -> -inf (gradient 0 there)
    if x.dim() == 0:
        raise ValueError("softmax needs at least one axis; got a 0-d input")
    return _stable_softmax(x, dim)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Optional[Tensor] = None,
    causal: Union[bool, str] = False,
    scale: Optional[float] = None,
    return_weights: bool = False,
    enable_gqa: bool = False,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    r"""Scaled dot-product attention, :math:`\operatorname{softmax}(QK^\top \cdot s + M)\,V`.

    The PyTorch twin of :func:`attn_edu.reference.scaled_dot_product_attention`: same
    arguments, same semantics, same errors.

    Shapes: ``q`` (..., L_q, d_k), ``k`` (..., L_k, d_k), ``v`` (..., L_k, d_v) -> output
    (..., L_q, d_v); weights (..., L_q, L_k). Leading axes broadcast. With
    ``enable_gqa=True`` q's head axis (third from the end) may be a multiple of k's
    (grouped-query attention; each group of consecutive query heads shares one k/v head,
    as in ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``).

    Args:
        mask: boolean tensor (True = may attend) or float tensor (added to the scores;
            ``-inf`` blocks), broadcastable to (..., L_q, L_k), on the same device as q.
        causal: False, True/"top_left" (key j allowed when j <= i), or "bottom_right"
            (j <= i + L_k - L_q). Combined with ``mask`` by intersection; a mask made by
            :func:`attn_edu.masks.causal_mask` together with ``causal=...`` is an error (stated twice).
        scale: multiplies the scores; default 1/sqrt(d_k).
        return_weights: also return the attention weights.

    A query row with no allowed key gets an output row of zeros, weights of zeros and
    zero (finite) gradients. Everything is computed in the dtype of q, on q's device.

    Explained in chapter 01 (the four steps), 03 (the softmax) and 05 (masks).
    """
    call = attention_call(q, k, v, mask, causal, scale, enable_gqa, torch_like=True)  # every check, once
    return attend(call, return_weights)


def attend(call: AttentionCall, return_weights: bool = False) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """:func:`scaled_dot_product_attention` on a checked torch call (checks nothing again)."""
    q, k, v = call.q, call.k, call.v
    allowed, additive = split_mask(call.mask, call.mask_kind, call.lq, call.lk, call.offset, call.device)

    # 1. scores: every query against every key
    scores = (q @ k.transpose(-1, -2)) * call.scale  # (..., Lq, Dk) @ (..., Dk, Lk) -> (..., Lq, Lk)
    # 2. masks: add the float mask, then exclude what is not allowed
    if additive is not None:
        scores = scores + additive.to(q.dtype)  # (..., Lq, Lk)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, _NEG_INF)  # (..., Lq, Lk); blocked -> -inf
    # 3. softmax over keys (an all -inf row gives zeros, with zero gradients)
    weights = _stable_softmax(scores, dim=-1)  # (..., Lq, Lk)
    # 4. weighted sum of the values
    out = weights @ v  # (..., Lq, Lk) @ (..., Lk, Dv) -> (..., Lq, Dv)
    return (out, weights) if return_weights else out


class ScaledDotProductAttention(nn.Module):
    """``nn.Module`` around :func:`scaled_dot_product_attention` (no parameters).

    >>> attn = ScaledDotProductAttention(causal=True)
    >>> out = attn(q, k, v)                       # doctest: +SKIP
    >>> out, w = attn(q, k, v, return_weights=True)  # doctest: +SKIP
    """

    def __init__(self, causal: Union[bool, str] = False, scale: Optional[float] = None) -> None:
        super().__init__()
        _checks.check_causal(causal)  # fail at construction, not at the first call
        self.causal = causal
        self.scale = scale

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Optional[Tensor] = None,
        return_weights: bool = False,
        enable_gqa: bool = False,
    ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        """:func:`scaled_dot_product_attention` with the module's ``causal`` and ``scale``."""
        return scaled_dot_product_attention(
            q, k, v, mask=mask, causal=self.causal, scale=self.scale,
            return_weights=return_weights, enable_gqa=enable_gqa,
        )

    def extra_repr(self) -> str:
        return f"causal={self.causal!r}, scale={self.scale!r}"
