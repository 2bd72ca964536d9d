"""NumPy attention from scratch: the gold answer.

Computed in float64 these functions are the reference every other implementation in
the book (PyTorch, tiled, Triton, sparse) is checked against. They follow one set of
semantics, which the PyTorch twin :mod:`attn_edu.reference_torch` shares:

* layout ``(..., L, D)``; ``L_q`` may differ from ``L_k`` and ``D_v`` from ``D_k``;
* boolean masks: **True = may attend**; float masks are added to the scores;
* ``causal`` in {False, True, "top_left", "bottom_right"} (True = "top_left");
* a query row with no allowed key gets **zero output and zero weights**, never NaN;
* NaN in unmasked inputs propagates; it is never hidden.

Chapter 01 builds :func:`scaled_dot_product_attention` step by step; chapter 03 explains
the stable softmax and why masks use -inf with an explicit rule rather than -1e9.
"""
from __future__ import annotations

from typing import Optional, Union

import numpy as np

from . import _checks
from ._call import AttentionCall, attention_call, split_mask
from ._call import prepare_mask  # noqa: F401  (linear attention's masks ask here)

__all__ = ["softmax", "scaled_dot_product_attention"]

ArrayLike = Union[np.ndarray, "list", float]


def _float_array(name: str, x: object) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.name not in _checks.FLOAT_DTYPES:
        _checks.check_float_dtypes(**{name: arr.dtype.name})
    return arr


def softmax(x: ArrayLike, axis: int = -1, mask: Optional[np.ndarray] = None) -> np.ndarray:
    r"""Numerically stable softmax along ``axis``.

    .. math:: \operatorname{softmax}(x)_j = \frac{e^{x_j - m}}{\sum_{j'} e^{x_{j'} - m}},
              \qquad m = \max_{j} x_j

    Subtracting the maximum changes nothing mathematically (softmax is shift-invariant)
    but keeps every exponent <= 0, so nothing overflows.

    ``mask`` (boolean, True = keep, broadcastable to ``x``) and entries equal to ``-inf``
    both mean "excluded". A slice with nothing left gives **zeros** (not NaN, not uniform).
    NaN among the kept entries propagates. The dtype of ``x`` is kept. A torch tensor is
    handed to :func:`attn_edu.reference_torch.softmax` (``axis`` becomes ``dim``), which
    keeps the tensor, its device and its gradients.

    Explained in chapter 03.
    """
    if _checks.uses_torch(x=x, mask=mask):
        from . import reference_torch

        return reference_torch.softmax(x, dim=axis, mask=mask)
    x = _float_array("x", x)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise TypeError(f"softmax's mask must be boolean (True = keep); got dtype {mask.dtype}")
        if _checks.broadcast_shapes(mask.shape, x.shape) != x.shape:
            raise ValueError(f"mask of shape {mask.shape} does not broadcast to x of shape {x.shape}")
    if x.ndim == 0:
        raise ValueError("softmax needs at least one axis; got a 0-d input")
    return _softmax(x, axis, mask)


def _softmax(x: np.ndarray, axis: int, mask: Optional[np.ndarray]) -> np.ndarray:
    """:func:`softmax` on checked arguments (a float array with an axis, a boolean mask or None)."""
    if mask is not None:
        x = np.where(mask, x, -np.inf).astype(x.dtype, copy=False)
    if x.shape[axis] == 0:
        return x.copy()
    m = np.max(x, axis=axis, keepdims=True)  # NaN if a kept entry is NaN; -inf if none kept
    m = np.where(np.isneginf(m), 0, m)  # fully excluded slice: every exp below is exactly 0
    e = np.exp(x - m)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(total == 0, 1, total)


def scaled_dot_product_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: Optional[np.ndarray] = None,
    causal: Union[bool, str] = False,
    scale: Optional[float] = None,
    return_weights: bool = False,
    enable_gqa: bool = False,
):
    r"""Scaled dot-product attention, :math:`\operatorname{softmax}(QK^\top \cdot s + M)\,V`.

    Shapes: ``q`` (..., L_q, d_k), ``k`` (..., L_k, d_k), ``v`` (..., L_k, d_v) -> output
    (..., L_q, d_v); weights (..., L_q, L_k). Leading axes broadcast. With
    ``enable_gqa=True`` q's head axis (third from the end) may be a multiple of k's
    (grouped-query attention; each group of query heads shares one k/v head).

    Args:
        mask: boolean (True = may attend) or float (added to the scores), broadcastable
            to (..., L_q, L_k).
        causal: False, True/"top_left" (key j allowed when j <= i), or "bottom_right"
            (j <= i + L_k - L_q). Combined with ``mask`` by intersection.
        scale: multiplies the scores; default 1/sqrt(d_k).
        return_weights: also return the attention weights.

    A query row with no allowed key gets an output row of zeros and weights of zeros.
    float32 in gives float32 out; float64 in gives float64 out. Torch tensors are handed
    to :func:`attn_edu.reference_torch.scaled_dot_product_attention`, which has the same rules.

    Explained in chapter 01 (the four steps), 03 (the softmax) and 05 (masks).
    """
    call = attention_call(q, k, v, mask, causal, scale, enable_gqa)  # every check, once
    if call.torch_like:
        from . import reference_torch

        return reference_torch.attend(call, return_weights)
    return attend(call, return_weights)


def attend(call: AttentionCall, return_weights: bool = False):
    """:func:`scaled_dot_product_attention` on a checked NumPy call (checks nothing again)."""
    q, k, v = call.q, call.k, call.v
    allowed, additive = split_mask(call.mask, call.mask_kind, call.lq, call.lk, call.offset)

    scores = (q @ np.swapaxes(k, -1, -2)) * q.dtype.type(call.scale)  # (..., Lq, Lk)
    if additive is not None:
        scores = scores + additive.astype(q.dtype)
    weights = _softmax(scores, -1, allowed).astype(q.dtype, copy=False)  # (..., Lq, Lk)
    out = weights @ v  # (..., Lq, Dv)
    return (out, weights) if return_weights else out
