"""Multi-head attention in NumPy: projections, split/merge heads, GQA and MQA, and the arithmetic.

Row-vector convention throughout (``x @ W``, like nanoGPT and ``nn.Linear`` applied to a
row): with ``H`` query heads of size ``d_head`` and ``H_kv`` key/value heads,

.. math::

    Q = x_q W_Q + b_Q,\\quad K = x_{kv} W_K + b_K,\\quad V = x_{kv} W_V + b_V, \\\\
    \\mathrm{head}_h = \\operatorname{softmax}\\!\\Big(\\frac{Q_h K_{g(h)}^\\top}{\\sqrt{d_{head}}} + M\\Big) V_{g(h)},
    \\qquad \\mathrm{out} = [\\mathrm{head}_1, \\dots, \\mathrm{head}_H]\\, W_O + b_O

where ``Q_h`` are columns ``h*d_head:(h+1)*d_head`` of ``Q`` and ``g(h) = h // (H / H_kv)``
is the key/value head that query head ``h`` shares: ``H_kv = H`` is ordinary multi-head
attention (MHA), ``1 < H_kv < H`` grouped-query attention (GQA), ``H_kv = 1`` multi-query
attention (MQA). Consecutive query heads share a key/value head, as in
``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``.

The attention itself is :func:`attn_edu.reference.scaled_dot_product_attention`, so the
masks, the causal alignments and the "fully masked row gives zeros" rule are the
package's. Its PyTorch twin :mod:`attn_edu.multihead_torch` holds the ``nn.Module`` with the same weights
layout (``W = linear.weight.T``) and the KV cache.

Chapter 06 explains multi-head, grouped-query and multi-query attention and tabulates
:func:`count_mha_params`, :func:`mha_flops` and :func:`kv_cache_bytes` for real models.

This module imports NumPy only.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple, Union

import numpy as np

from . import _checks
from ._checks import is_torch_tensor
from .reference import scaled_dot_product_attention

__all__ = [
    "split_heads",
    "merge_heads",
    "init_mha_params",
    "multi_head_attention",
    "count_mha_params",
    "mha_flops",
    "kv_cache_bytes",
    "check_mha_params",
]

Params = Dict[str, np.ndarray]

_WEIGHTS = ("w_q", "w_k", "w_v", "w_o")
_BIASES = ("b_q", "b_k", "b_v", "b_o")


# --------------------------------------------------------------------------- small checks
def check_heads(num_heads: object, num_kv_heads: object) -> Tuple[int, int]:
    """Validate (H, H_kv); H_kv defaults to H and must divide it."""
    h = _checks.check_positive_int("num_heads", num_heads)
    hkv = h if num_kv_heads is None else _checks.check_positive_int("num_kv_heads", num_kv_heads)
    if h % hkv != 0:
        raise ValueError(
            f"num_kv_heads must divide num_heads (each key/value head serves a group of query "
            f"heads); got num_heads={h} and num_kv_heads={hkv}"
        )
    return h, hkv


def head_dim(d_model: int, num_heads: int, d_head: object) -> int:
    """``d_head`` when given, else ``d_model // num_heads`` (which must divide)."""
    if d_head is not None:
        return _checks.check_positive_int("d_head", d_head)
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model must be divisible by num_heads when d_head is not given; got d_model={d_model} "
            f"and num_heads={num_heads} (pass d_head explicitly, e.g. d_head={max(1, d_model // num_heads)})"
        )
    return d_model // num_heads


# --------------------------------------------------------------------------- heads
def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """(..., L, H*d) -> (..., H, L, d): cut the feature axis into ``num_heads`` heads.

    Head ``h`` gets features ``h*d:(h+1)*d``. :func:`merge_heads` is the inverse.
    Raises ValueError if the last axis is not divisible by ``num_heads``.
    """
    h = _checks.check_positive_int("num_heads", num_heads)
    x = np.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions (..., L, H*d); got shape {x.shape}")
    if x.shape[-1] % h != 0:
        raise ValueError(
            f"the last axis of x (size {x.shape[-1]}, shape {x.shape}) is not divisible by "
            f"num_heads={h}"
        )
    d = x.shape[-1] // h
    x = x.reshape(*x.shape[:-1], h, d)  # (..., L, H, d)
    return np.swapaxes(x, -3, -2)  # (..., H, L, d)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(..., H, L, d) -> (..., L, H*d): put the heads side by side again (inverse of :func:`split_heads`)."""
    x = np.asarray(x)
    if x.ndim < 3:
        raise ValueError(f"x must have at least 3 dimensions (..., H, L, d); got shape {x.shape}")
    h, length, d = x.shape[-3:]
    x = np.swapaxes(x, -3, -2)  # (..., L, H, d)
    return x.reshape(*x.shape[:-3], length, h * d)  # (..., L, H*d)


# --------------------------------------------------------------------------- parameters
def init_mha_params(
    d_model: int,
    num_heads: int,
    num_kv_heads: Optional[int] = None,
    d_head: Optional[int] = None,
    bias: bool = False,
    rng: Union[np.random.Generator, int, None] = None,
    dtype=np.float64,
) -> Params:
    """Random weights for :func:`multi_head_attention`, as a dict of arrays.

    Shapes (row-vector convention, ``y = x @ W + b``)::

        w_q (d_model, H*d_head)     b_q (H*d_head,)
        w_k (d_model, H_kv*d_head)  b_k (H_kv*d_head,)
        w_v (d_model, H_kv*d_head)  b_v (H_kv*d_head,)
        w_o (H*d_head, d_model)     b_o (d_model,)

    Biases only with ``bias=True``. ``d_head`` defaults to ``d_model // num_heads`` (an
    error if that does not divide); ``num_kv_heads`` defaults to ``num_heads`` and must
    divide it.

    Init: every weight entry is drawn from a normal distribution with mean 0 and
    standard deviation ``1/sqrt(d_model)`` (so ``x @ w_q`` keeps roughly unit scale for
    unit-scale ``x``); biases the same, for tests that must see them matter. ``rng`` is
    a ``np.random.Generator`` or an integer seed (``None``: fresh entropy).
    """
    d_model = _checks.check_positive_int("d_model", d_model)
    h, hkv = check_heads(num_heads, num_kv_heads)
    dh = head_dim(d_model, h, d_head)
    rng = _checks.check_seed(rng, "rng")
    dtype = np.dtype(dtype)
    if dtype.name not in _checks.FLOAT_DTYPES:
        raise TypeError(f"dtype must be a floating dtype ({', '.join(_checks.FLOAT_DTYPES)}); got {dtype}")
    std = 1.0 / math.sqrt(d_model)

    def draw(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(dtype)

    params = {
        "w_q": draw(d_model, h * dh),
        "w_k": draw(d_model, hkv * dh),
        "w_v": draw(d_model, hkv * dh),
        "w_o": draw(h * dh, d_model),
    }
    if bias:
        params.update(b_q=draw(h * dh), b_k=draw(hkv * dh), b_v=draw(hkv * dh), b_o=draw(d_model))
    return params


def check_mha_params(params: Params, num_heads: int, num_kv_heads: Optional[int] = None) -> Dict[str, int]:
    """Check a parameter dict; returns its sizes ``{"d_model", "num_heads", "num_kv_heads", "d_head", "bias"}``.

    Raises TypeError for a non-dict or non-array entries, ValueError for missing or unknown
    keys, shapes that do not fit together, mixed dtypes, or some biases without the others.
    """
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays (see init_mha_params); got {type(params).__name__}")
    h, hkv = check_heads(num_heads, num_kv_heads)
    missing = [k for k in _WEIGHTS if k not in params]
    if missing:
        raise ValueError(f"params is missing {missing}; it needs {list(_WEIGHTS)} (and optionally {list(_BIASES)}); "
                         f"got keys {sorted(params)}")
    unknown = [k for k in params if k not in _WEIGHTS + _BIASES]
    if unknown:
        raise ValueError(f"params has unknown keys {unknown}; allowed are {list(_WEIGHTS + _BIASES)}")
    biases = [k for k in _BIASES if k in params]
    if biases and len(biases) != len(_BIASES):
        raise ValueError(f"params must have all of {list(_BIASES)} or none; got only {biases}")
    arrays = {}
    for key, value in params.items():
        if is_torch_tensor(value):
            raise TypeError(f"params[{key!r}] is a torch tensor; multi_head_attention takes NumPy arrays "
                            "(use attn_edu.multihead_torch.MultiHeadAttention for torch)")
        arr = np.asarray(value)
        if arr.dtype.name not in _checks.FLOAT_DTYPES:
            raise TypeError(f"params[{key!r}] must be a floating array; got dtype {arr.dtype}")
        arrays[key] = arr
    dtypes = {arr.dtype.name for arr in arrays.values()}
    if len(dtypes) > 1:
        listing = ", ".join(f"{k} {a.dtype}" for k, a in arrays.items())
        raise TypeError(f"all params must have the same dtype; got {listing}")
    for key in _WEIGHTS:
        if arrays[key].ndim != 2:
            raise ValueError(f"params[{key!r}] must be a 2-D matrix; got shape {arrays[key].shape}")
    w_q, w_k, w_v, w_o = (arrays[k] for k in _WEIGHTS)
    d_model, hd = w_q.shape
    if hd % h != 0:
        raise ValueError(f"params['w_q'] has shape {w_q.shape}: its {hd} columns are not divisible by "
                         f"num_heads={h}")
    dh = hd // h
    expected = {"w_q": (d_model, h * dh), "w_k": (d_model, hkv * dh), "w_v": (d_model, hkv * dh),
                "w_o": (h * dh, d_model)}
    if biases:
        expected.update(b_q=(h * dh,), b_k=(hkv * dh,), b_v=(hkv * dh,), b_o=(d_model,))
    for key, shape in expected.items():
        if arrays[key].shape != shape:
            raise ValueError(
                f"params[{key!r}] has shape {arrays[key].shape} but {shape} was expected for "
                f"d_model={d_model}, num_heads={h}, num_kv_heads={hkv}, d_head={dh} "
                f"(read from params['w_q'] of shape {w_q.shape})"
            )
    return {"d_model": d_model, "num_heads": h, "num_kv_heads": hkv, "d_head": dh, "bias": int(bool(biases))}


# --------------------------------------------------------------------------- attention
def check_mask_rank(mask: object, scores_ndim: int) -> None:
    """Refuse masks whose axes are ambiguous in a multi-head setting.

    Scores are (..., H, L_q, L_k). A (L_q, L_k) mask is clear, and so is one with all the
    scores' axes (1 where it broadcasts). A mask in between, e.g. (B, L_q, L_k) or the
    (B, 1, L_k) of ``key_mask(valid)`` without ``heads=True``, would line its batch axis
    up with the head axis: silently wrong when B == H. It is an error instead.
    """
    if mask is None:
        return
    ndim = len(getattr(mask, "shape", np.shape(mask)))
    if scores_ndim >= 4 and 2 < ndim < scores_ndim:
        raise ValueError(
            f"mask of shape {tuple(np.shape(mask))} is ambiguous for multi-head scores of {scores_ndim} "
            f"dimensions (..., H, L_q, L_k): its first axis would line up with the head axis. Give "
            f"either a (L_q, L_k) mask or one with all {scores_ndim} axes, e.g. (B, 1, 1, L_k) from "
            f"attn_edu.masks.key_mask(valid, heads=True) or mask[:, None] for a (B, L_q, L_k) mask"
        )


def multi_head_attention(
    x_q: np.ndarray,
    x_kv: np.ndarray,
    params: Params,
    num_heads: int,
    num_kv_heads: Optional[int] = None,
    mask: Optional[np.ndarray] = None,
    causal: Union[bool, str] = False,
    scale: Optional[float] = None,
    return_weights: bool = False,
):
    r"""Multi-head (grouped-query, multi-query) attention in NumPy.

    Args:
        x_q: queries' inputs, (..., L_q, d_model), e.g. (B, L_q, d_model).
        x_kv: keys'/values' inputs, (..., L_k, d_model). Pass ``x_q`` again for
            self-attention; another sequence for cross-attention (L_k may differ).
        params: dict from :func:`init_mha_params` (or
            :meth:`attn_edu.multihead_torch.MultiHeadAttention.to_numpy_params`).
        num_heads: H, the number of query heads.
        num_kv_heads: H_kv, the number of key/value heads (default H; must divide H).
        mask: boolean (True = may attend) or float (added), broadcastable to the scores
            (..., H, L_q, L_k). Either a (L_q, L_k) mask (e.g. ``causal_mask``), or one
            with all the scores' axes, e.g. (B, 1, 1, L_k) from
            ``attn_edu.masks.key_mask(valid, heads=True)`` or (B, 1, L_q, L_k) from
            ``query_key_mask(..., heads=True)``. A 3-D mask for 4-D scores is refused as
            ambiguous (its batch axis would meet the head axis).
        causal: False, True/"top_left" or "bottom_right", as in
            :func:`attn_edu.reference.scaled_dot_product_attention`.
        scale: default 1/sqrt(d_head).
        return_weights: also return the weights (..., H, L_q, L_k) (each allowed row sums to 1).

    Returns:
        out (..., L_q, d_model), or ``(out, weights)``.

    Steps (shapes for x_q (B, L_q, d_model)): project, split into heads, attend per head
    (GQA/MQA: each key/value head serves H/H_kv consecutive query heads, via
    ``enable_gqa=True``), merge heads, project out. Explained in chapter 06.
    """
    sizes = check_mha_params(params, num_heads, num_kv_heads)
    h, hkv, d_model = sizes["num_heads"], sizes["num_kv_heads"], sizes["d_model"]
    for name, x in (("x_q", x_q), ("x_kv", x_kv)):
        if is_torch_tensor(x):
            raise TypeError(f"{name} is a torch tensor; use attn_edu.multihead_torch.MultiHeadAttention for torch")
    x_q, x_kv = np.asarray(x_q), np.asarray(x_kv)
    dtype = params["w_q"].dtype
    for name, x in (("x_q", x_q), ("x_kv", x_kv)):
        if x.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., L, d_model); got shape {x.shape}")
        if x.shape[-1] != d_model:
            raise ValueError(
                f"{name} has last dimension {x.shape[-1]} (shape {x.shape}) but params expect "
                f"d_model={d_model} (params['w_q'] has shape {params['w_q'].shape})"
            )
        if x.dtype.name not in _checks.FLOAT_DTYPES:
            _checks.check_float_dtypes(**{name: x.dtype.name})
        if x.dtype != dtype:
            raise TypeError(f"{name} has dtype {x.dtype} but params have dtype {dtype}; convert one of them")
    if mask is not None and not is_torch_tensor(mask):
        mask = np.asanyarray(mask)  # keeps a CausalMask's alignment tag
    scores_ndim = max(x_q.ndim, x_kv.ndim) + 1  # (..., H, Lq, Lk)
    check_mask_rank(mask, scores_ndim)

    # 1. projections (row vectors times matrices)
    q = x_q @ params["w_q"]  # (..., Lq, d_model) @ (d_model, H*dh) -> (..., Lq, H*dh)
    k = x_kv @ params["w_k"]  # (..., Lk, d_model) @ (d_model, Hkv*dh) -> (..., Lk, Hkv*dh)
    v = x_kv @ params["w_v"]  # (..., Lk, d_model) @ (d_model, Hkv*dh) -> (..., Lk, Hkv*dh)
    if sizes["bias"]:
        q, k, v = q + params["b_q"], k + params["b_k"], v + params["b_v"]
    # 2. split into heads
    q = split_heads(q, h)  # (..., H, Lq, dh)
    k = split_heads(k, hkv)  # (..., Hkv, Lk, dh)
    v = split_heads(v, hkv)  # (..., Hkv, Lk, dh)
    # 3. attention per head; query head i uses key/value head i // (H // Hkv)
    out, weights = scaled_dot_product_attention(
        q, k, v, mask=mask, causal=causal, scale=scale, return_weights=True, enable_gqa=True,
    )  # out (..., H, Lq, dh), weights (..., H, Lq, Lk)
    # 4. merge heads and project out
    out = merge_heads(out)  # (..., H, Lq, dh) -> (..., Lq, H*dh)
    out = out @ params["w_o"]  # (..., Lq, H*dh) @ (H*dh, d_model) -> (..., Lq, d_model)
    if sizes["bias"]:
        out = out + params["b_o"]
    return (out, weights) if return_weights else out


# --------------------------------------------------------------------------- arithmetic
def count_mha_params(
    d_model: int,
    num_heads: int,
    num_kv_heads: Optional[int] = None,
    d_head: Optional[int] = None,
    bias: bool = False,
) -> int:
    """Number of parameters of one attention layer.

    ``d_model*H*d_head`` (W_Q) + ``2*d_model*H_kv*d_head`` (W_K, W_V) + ``H*d_head*d_model``
    (W_O), plus ``H*d_head + 2*H_kv*d_head + d_model`` with biases. GQA/MQA shrink only
    W_K and W_V. Equals ``sum(p.numel() for p in MultiHeadAttention(...).parameters())``.
    """
    d_model = _checks.check_positive_int("d_model", d_model)
    h, hkv = check_heads(num_heads, num_kv_heads)
    dh = head_dim(d_model, h, d_head)
    n = d_model * h * dh + 2 * d_model * hkv * dh + h * dh * d_model
    if bias:
        n += h * dh + 2 * hkv * dh + d_model
    return n


def mha_flops(
    batch: int,
    lq: int,
    lk: int,
    d_model: int,
    num_heads: int,
    num_kv_heads: Optional[int] = None,
    d_head: Optional[int] = None,
) -> Dict[str, int]:
    """Floating-point operations of one forward pass of :func:`multi_head_attention`.

    One multiply-add counts as **2 FLOPs**; a (m, n) @ (n, p) product is ``2*m*n*p``.
    Softmax, scaling, masking and biases are left out (they are O(L_q*L_k) or O(L*d), not
    a matmul). Returns a dict with

    * ``"projections"``: ``2*B*(L_q*d_model*H*d_head + 2*L_k*d_model*H_kv*d_head)`` (Q, K, V);
    * ``"scores"``: ``2*B*H*L_q*L_k*d_head`` (Q K^T);
    * ``"weighted_sum"``: ``2*B*H*L_q*L_k*d_head`` (weights @ V);
    * ``"output_projection"``: ``2*B*L_q*H*d_head*d_model``;
    * ``"total"``: their sum.

    With a causal mask the naive computation still does all of ``scores`` and
    ``weighted_sum``; a kernel that skips masked tiles does about half.
    """
    b = _checks.check_positive_int("batch", batch)
    lq = _checks.check_positive_int("lq", lq)
    lk = _checks.check_positive_int("lk", lk)
    d_model = _checks.check_positive_int("d_model", d_model)
    h, hkv = check_heads(num_heads, num_kv_heads)
    dh = head_dim(d_model, h, d_head)
    out = {
        "projections": 2 * b * (lq * d_model * h * dh + 2 * lk * d_model * hkv * dh),
        "scores": 2 * b * h * lq * lk * dh,
        "weighted_sum": 2 * b * h * lq * lk * dh,
        "output_projection": 2 * b * lq * h * dh * d_model,
    }
    out["total"] = sum(out.values())
    return out


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    d_head: int,
    seq_len: int,
    batch: int = 1,
    bytes_per_elem: int = 2,
) -> int:
    """Bytes a KV cache holds: ``2 * num_layers * batch * num_kv_heads * seq_len * d_head * bytes_per_elem``.

    The 2 is for the two tensors, K and V, each (batch, H_kv, seq_len, d_head) per layer.
    ``bytes_per_elem`` is 2 for float16/bfloat16 (the default), 4 for float32, 8 for
    float64. Grouped-query and multi-query attention shrink it by ``H / H_kv``.
    """
    return (
        2
        * _checks.check_positive_int("num_layers", num_layers)
        * _checks.check_positive_int("batch", batch)
        * _checks.check_positive_int("num_kv_heads", num_kv_heads)
        * _checks.check_length("seq_len", seq_len)
        * _checks.check_positive_int("d_head", d_head)
        * _checks.check_positive_int("bytes_per_elem", bytes_per_elem)
    )
