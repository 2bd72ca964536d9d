"""Softmax and floating point: overflow, log-sum-exp, masked fills, online merging.

The reusable pieces of chapter 03 (*Softmax, precision and numerical stability*):

* :func:`overflow_threshold` -- the largest ``x`` whose ``exp(x)`` is finite in a dtype;
* :func:`naive_softmax` -- ``exp(x) / sum(exp(x))`` with **no** max subtraction, kept
  only to show overflow;
* :func:`logsumexp` -- the stable ``log(sum(exp(x)))``; a fully masked slice gives ``-inf``;
* :func:`masked_fill_softmax` -- the "fill the masked scores with a big negative number"
  recipe of many tutorials (``-1e9``, ``-inf`` or ``finfo(dtype).min``), reproduced
  faithfully so its failures can be measured; models should use
  :func:`attn_edu.reference.softmax` / :func:`attn_edu.reference.scaled_dot_product_attention`
  (``attn_edu.softmax`` / ``attn_edu.scaled_dot_product_attention``) instead;
* :func:`softmax_partial` and :func:`merge_softmax_stats` -- the running statistics
  (max ``m``, sum ``l``, normalised output ``o``) of the online softmax, which chapter 09
  builds FlashAttention on.

Every function takes NumPy arrays (float16, float32, float64) or torch tensors
(float16, bfloat16, float32, float64; any device) and computes in the input's dtype.
NumPy has no bfloat16: use torch for it. ``import attn_edu.precision`` needs NumPy only.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _checks
from ._backend import Ops
from ._checks import is_torch_tensor

__all__ = [
    "FLOAT_LIMITS",
    "overflow_threshold",
    "naive_softmax",
    "logsumexp",
    "masked_fill_softmax",
    "softmax_partial",
    "merge_softmax_stats",
]

Array = Any  # a NumPy array or a torch tensor

#: The limits of the four floating formats, by name, as the tuple (largest finite value,
#: machine epsilon, smallest normal positive value, bits of stored mantissa).
FLOAT_LIMITS = {
    "float16": (65504.0, 2.0**-10, 2.0**-14, 10),
    "bfloat16": ((2 - 2.0**-7) * 2.0**127, 2.0**-7, 2.0**-126, 7),
    "float32": ((2 - 2.0**-23) * 2.0**127, 2.0**-23, 2.0**-126, 23),
    "float64": (np.finfo(np.float64).max.item(), 2.0**-52, 2.0**-1022, 52),
}


# --------------------------------------------------------------------------- helpers
def _dtype_name(dtype: object) -> str:
    """``np.float16``, ``np.dtype('float16')``, ``torch.float16`` or ``"float16"`` -> name."""
    if isinstance(dtype, str):
        name = dtype
    elif is_torch_tensor(dtype):
        name = _checks.dtype_name(dtype)
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"dtype must be a floating dtype (NumPy, torch or its name); got {dtype!r}") from None
    if name not in FLOAT_LIMITS:
        raise TypeError(f"dtype must be one of {', '.join(FLOAT_LIMITS)}; got {name}")
    return name


def _as_float(name: str, x: object) -> Array:
    """A floating NumPy array or torch tensor with at least one axis; TypeError otherwise."""
    x = _as_float_any(name, x)
    if x.ndim == 0:
        raise ValueError(f"{name} needs at least one axis; got a 0-d input")
    return x


def _check_axis(name: str, x: Array, axis: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"axis must be an integer; got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for {name} of shape {tuple(x.shape)}")
    return int(axis) % x.ndim


def _check_mask(mask: object, x: Array) -> Array:
    """Boolean mask (True = keep) of the same kind as x that broadcasts to x's shape."""
    if not _checks.uses_torch(x=x, mask=mask):
        mask = np.asarray(mask)
    dt = _checks.dtype_name(mask)
    if dt != "bool":
        raise TypeError(f"mask must be boolean (True = keep); got dtype {dt}")
    b = _checks.broadcast_shapes(tuple(mask.shape), tuple(x.shape))  # type: ignore[attr-defined]
    if b is None or tuple(b) != tuple(x.shape):
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to x of shape {tuple(x.shape)}")
    return mask


# --------------------------------------------------------------------------- limits
def overflow_threshold(dtype: object) -> float:
    r"""The largest ``x`` for which ``exp(x)`` is finite in ``dtype``: :math:`\ln(\text{max})`.

    About 11.09 for float16, 88.72 for bfloat16 and float32, and 709.78 for float64.
    (A result is rounded to the nearest representable number, so ``exp`` of a value a
    hair above the threshold may still round down to ``max``.)

    ``dtype``: a NumPy or torch floating dtype, or its name ("float16", "bfloat16",
    "float32", "float64"). Explained in chapter 03.
    """
    return math.log(FLOAT_LIMITS[_dtype_name(dtype)][0])


# --------------------------------------------------------------------------- softmax
def naive_softmax(x: Array, axis: int = -1) -> Array:
    r"""Softmax **without** the max subtraction: :math:`e^{x_j} / \sum_{j'} e^{x_{j'}}`.

    Computed in the dtype of ``x`` (NumPy array or torch tensor, any shape, softmax along
    ``axis``). It overflows as soon as one entry exceeds :func:`overflow_threshold`
    (``inf / inf`` = NaN) and underflows to ``0 / 0`` = NaN when every entry is very
    negative. It exists to show that; use :func:`attn_edu.reference.softmax`. NumPy emits its usual
    ``RuntimeWarning`` on overflow; silence it with ``np.errstate`` when the overflow is
    the point. Explained in chapter 03.
    """
    x = _as_float("x", x)
    axis = _check_axis("x", x, axis)
    ops = Ops(is_torch_tensor(x))
    e = ops.exp(x)
    return e / ops.sum(e, axis, True)


def logsumexp(x: Array, axis: int = -1, mask: Optional[Array] = None, keepdims: bool = False) -> Array:
    r"""Stable :math:`\operatorname{LSE}(x) = \log \sum_j e^{x_j} = m + \log \sum_j e^{x_j - m}`, :math:`m = \max_j x_j`.

    Shapes: ``x`` (..., n, ...) -> the same without ``axis`` (kept as size 1 with
    ``keepdims=True``). ``mask`` (boolean, True = keep, broadcastable to ``x``) and
    entries equal to ``-inf`` both mean "excluded"; a slice with nothing left gives
    ``-inf`` (the log of an empty sum, 0), never NaN. ``+inf`` in a slice gives ``+inf``;
    NaN propagates. ``softmax(x) = exp(x - LSE(x))``, and the cross-entropy of a target
    class ``t`` is ``LSE(x) - x_t``. Computed in the dtype of ``x``. Explained in chapter 03.
    """
    x = _as_float("x", x)
    axis = _check_axis("x", x, axis)
    ops = Ops(is_torch_tensor(x))
    if mask is not None:
        x = ops.fill_masked(x, _check_mask(mask, x), float("-inf"))
    if x.shape[axis] == 0:
        raise ValueError(f"logsumexp needs at least one entry along axis {axis}; got shape {tuple(x.shape)}")
    m = ops.amax(x, axis, True)  # (..., 1, ...); NaN if the slice has a NaN
    m_safe = ops.where(ops.isinf(m), 0.0, m)  # -inf (empty) or +inf: shift by 0 instead
    with np.errstate(divide="ignore"):  # log(0) = -inf for an empty slice is the answer
        lse = m_safe + ops.log(ops.sum(ops.exp(x - m_safe), axis, True))
    lse = ops.where(ops.isinf(m), m, lse)
    if not keepdims:
        lse = lse.squeeze(axis)
    return lse


def masked_fill_softmax(
    scores: Array,
    mask: Array,
    fill: Union[float, str] = -1e9,
    how: str = "fill",
    axis: int = -1,
) -> Array:
    r"""Softmax of masked scores, done the way many tutorials do it (for the lab only).

    * ``how="fill"``: the excluded scores (``mask`` False) are *replaced* by ``fill``,
      like ``scores.masked_fill(mask == 0, -1e9)``;
    * ``how="add"``: ``fill`` is *added* to the excluded scores, like an additive float
      mask ``scores + (1 - mask) * fill``.

    then the ordinary max-subtracted softmax :math:`e^{x_j - m} / \sum_{j'} e^{x_{j'} - m}`
    along ``axis``, **with no rule for a fully masked row**. ``fill`` is a number or
    ``"finfo.min"`` (the most negative finite value of the scores' dtype). Everything
    happens in the dtype of ``scores`` with the library's own casting: torch refuses a
    fill that does not fit (``RuntimeError``), NumPy turns it into ``-inf``.

    Outcomes (chapter 03 measures them): a fully masked row is NaN with ``-inf``
    (``-inf - (-inf)``) and *uniform* with a finite fill (all scores equal). Use
    :func:`attn_edu.reference.softmax` with a boolean mask instead, which gives that row zeros.

    Shapes: ``scores`` (..., n), ``mask`` boolean (True = keep) broadcastable to it;
    returns the weights, same shape and dtype as ``scores``.
    """
    scores = _as_float("scores", scores)
    axis = _check_axis("scores", scores, axis)
    mask = _check_mask(mask, scores)
    if how not in ("fill", "add"):
        raise ValueError(f"how must be 'fill' or 'add'; got {how!r}")
    ops = Ops(is_torch_tensor(scores))
    if isinstance(fill, str):
        if fill != "finfo.min":
            raise ValueError(f"fill must be a number or 'finfo.min'; got {fill!r}")
        fill = -FLOAT_LIMITS[_dtype_name(scores.dtype)][0]
    elif isinstance(fill, bool) or not isinstance(fill, numbers.Real):
        raise TypeError(f"fill must be a real number or 'finfo.min'; got {fill!r}")
    elif math.isnan(fill) or fill == math.inf:
        raise ValueError(f"fill must be a negative number or -inf (it excludes scores); got {fill}")
    fill = float(fill)
    if how == "fill":
        x = ops.fill_masked(scores, mask, fill)
    else:
        zeros = ops.zeros_like(scores)
        x = scores + ops.fill_masked(zeros, mask, fill)  # 0 where kept, fill where excluded
    m = ops.amax(x, axis, True)
    e = ops.exp(x - m)  # a fully -inf row: -inf - (-inf) = NaN
    return e / ops.sum(e, axis, True)


# --------------------------------------------------------------------------- online softmax
def softmax_partial(x: Array, axis: int = -1, mask: Optional[Array] = None) -> Tuple[Array, Array]:
    r"""The statistics of one block of scores: :math:`m = \max_j x_j`, :math:`\ell = \sum_j e^{x_j - m}`.

    Shapes: ``x`` (..., n) (the block along ``axis``) -> ``m`` and ``l`` (...,) (``axis``
    removed). ``softmax(x) = exp(x - m) / l`` and ``logsumexp(x) = m + log(l)``.
    An empty or fully masked block (``mask`` False / ``-inf`` everywhere, or ``n = 0``)
    gives ``m = -inf`` and ``l = 0``, which :func:`merge_softmax_stats` treats as "no
    keys here". Computed in the dtype of ``x``. Explained in chapter 03; chapter 09
    builds the online softmax of FlashAttention on it.
    """
    x = _as_float("x", x)
    axis = _check_axis("x", x, axis)
    ops = Ops(is_torch_tensor(x))
    if mask is not None:
        x = ops.fill_masked(x, _check_mask(mask, x), float("-inf"))
    if x.shape[axis] == 0:  # no keys at all: the empty block
        shape = tuple(s for i, s in enumerate(x.shape) if i != axis)
        if ops.torch:
            t = ops.t
            return (t.full(shape, float("-inf"), dtype=x.dtype, device=x.device),
                    t.zeros(shape, dtype=x.dtype, device=x.device))
        return np.full(shape, -np.inf, dtype=x.dtype), np.zeros(shape, dtype=x.dtype)
    m = ops.amax(x, axis, True)  # (..., 1)
    m_safe = ops.where(ops.isneginf(m), 0.0, m)  # empty block: exp(-inf - 0) = 0, no NaN
    l = ops.sum(ops.exp(x - m_safe), axis, False)  # (...,)
    return m.squeeze(axis), l


def merge_softmax_stats(
    m1: Array, l1: Array, o1: Optional[Array], m2: Array, l2: Array, o2: Optional[Array]
) -> Tuple[Array, Array, Optional[Array]]:
    r"""Merge the softmax statistics of two disjoint blocks of keys (the online softmax).

    .. math::
        m = \max(m_1, m_2), \quad
        \ell = \ell_1 e^{m_1 - m} + \ell_2 e^{m_2 - m}, \quad
        o = \frac{o_1 \ell_1 e^{m_1 - m} + o_2 \ell_2 e^{m_2 - m}}{\ell}

    where block ``i`` has running max ``m_i``, sum ``l_i`` = :math:`\sum_j e^{x_j - m_i}`
    and *normalised* output ``o_i`` = :math:`\sum_j \operatorname{softmax}(x)_j v_j`
    over its own keys. The result is exactly what one softmax over both blocks gives
    (up to rounding), so blocks can be merged in any order and any grouping.

    Shapes: ``m``, ``l`` (...,) and ``o`` (..., d) (one row of outputs per query); pass
    ``o1 = o2 = None`` to merge only (m, l), e.g. for a log-sum-exp. An empty block
    (``m = -inf``, ``l = 0``, from :func:`softmax_partial`) contributes nothing, and two
    empty blocks give ``m = -inf``, ``l = 0`` and ``o = 0`` -- never NaN (the package's
    rule for a fully masked row). NaN in a block propagates. NumPy or torch, computed
    in the inputs' dtype. Explained in chapter 03; extended in chapter 09.
    """
    names = ("m1", "l1", "m2", "l2")
    arrays = [_as_float_any(n, a) for n, a in zip(names, (m1, l1, m2, l2))]
    m1, l1, m2, l2 = arrays
    if (o1 is None) != (o2 is None):
        raise ValueError("pass both o1 and o2, or neither")
    if o1 is not None:
        o1, o2 = _as_float("o1", o1), _as_float("o2", o2)
    _checks.uses_torch(m1=m1, l1=l1, o1=o1, m2=m2, l2=l2, o2=o2)
    shape = tuple(m1.shape)
    for n, a in zip(names[1:], (l1, m2, l2)):
        if tuple(a.shape) != shape:
            raise ValueError(f"m1, l1, m2 and l2 must have the same shape; got m1 {shape} and {n} {tuple(a.shape)}")
    if o1 is not None:
        for n, o in (("o1", o1), ("o2", o2)):
            if tuple(o.shape[:-1]) != shape:
                raise ValueError(
                    f"{n} must have shape (*m.shape, d) = {shape + ('d',)}; got {tuple(o.shape)}"
                )
        if o1.shape[-1] != o2.shape[-1]:
            raise ValueError(f"o1 and o2 must have the same last dimension d; got {tuple(o1.shape)} and {tuple(o2.shape)}")
    ops = Ops(is_torch_tensor(m1))
    m = ops.maximum(m1, m2)  # NaN propagates
    m_safe = ops.where(ops.isneginf(m), 0.0, m)  # both empty: exp(-inf - 0) = 0, no NaN
    a1 = l1 * ops.exp(m1 - m_safe)  # block 1's share of the new sum
    a2 = l2 * ops.exp(m2 - m_safe)
    l = a1 + a2
    if o1 is None:
        return m, l, None
    denom = ops.where(l == 0, 1.0, l)  # both empty: o = 0 / 1 = 0
    o = (o1 * a1[..., None] + o2 * a2[..., None]) / denom[..., None]
    return m, l, o


def _as_float_any(name: str, x: object) -> Array:
    """A floating NumPy array or torch tensor (0-d allowed); TypeError for anything else."""
    if is_torch_tensor(x):
        dt = _checks.dtype_name(x)
    else:
        if isinstance(x, (str, bytes)) or x is None:
            raise TypeError(f"{name} must be a floating array or tensor; got {type(x).__name__}")
        x = np.asarray(x)
        dt = x.dtype.name
    if dt not in _checks.FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating array or tensor (float16, bfloat16, float32 or float64); "
            f"got dtype {dt}"
        )
    return x
