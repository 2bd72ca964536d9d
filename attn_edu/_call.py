"""One attention call, checked once: the frozen value every attention function carries down.

A public attention function (:func:`attn_edu.reference.scaled_dot_product_attention`,
:func:`attn_edu.flash.flash_attention`, their torch twins) hands its arguments to
:func:`attention_call`, which validates and normalises them once, in one order -- so every
implementation gives the same error, with the same words, for the same mistake -- into an
:class:`AttentionCall`: arrays (k and v repeated for grouped-query attention), lengths,
group size, the mask and its kind, the causal alignment and offset, the scale, the tiles
and the kind of array. Everything below it (the reference's four steps, the tiled loops)
takes that value and checks nothing again, as the Triton kernels' launchers trust
``check_triton_inputs``.

It also holds what the NumPy and torch twins share, one floor below both, so that no
module imports its own twin back: the mask logic (:func:`split_mask`), the tiled loop's
:class:`TileRecord` and :func:`pack_outputs`, and :func:`require_tensor`.

A package-internal module (the leading underscore). Imports NumPy; torch only when given
tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

import numpy as np

from . import _checks
from ._backend import Ops
from .masks import causal_block, causal_offset_or_none
from .masks.tiles import TilePlan, check_plan_causal, default_tiles, split_plan

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class AttentionCall:
    """One attention call's arguments, checked and normalised (built by :func:`attention_call`).

    ``q`` (..., L_q, d_k), ``k`` (..., L_k, d_k) and ``v`` (..., L_k, d_v) are NumPy arrays
    or torch tensors, all of one kind (``torch_like``); k and v are already repeated
    ``group`` times along the head axis for grouped-query attention. ``mask`` is a plain
    array or tensor (a :class:`~attn_edu.masks.CausalMask`'s tag has been read) or None;
    ``mask_kind`` is "bool", "float" or None. ``batch`` is the broadcast leading shape,
    ``align`` the causal alignment (None, "top_left", "bottom_right") and ``offset`` its
    diagonal (:func:`attn_edu.masks.causal_offset_or_none`). ``block_q``, ``block_k`` and
    ``plan`` are set for tiled calls (``plan``: a :class:`~attn_edu.masks.TilePlan` the
    caller passed as ``mask=``, else None).
    """

    q: Any = field(repr=False)
    k: Any = field(repr=False)
    v: Any = field(repr=False)
    mask: Any = field(repr=False)
    mask_kind: Optional[str]
    batch: Shape
    group: int
    align: Optional[str]
    offset: Optional[int]
    scale: float
    torch_like: bool
    block_q: Optional[int] = None
    block_k: Optional[int] = None
    plan: Optional[TilePlan] = field(default=None, repr=False)

    @property
    def lq(self) -> int:
        return self.q.shape[-2]

    @property
    def lk(self) -> int:
        return self.k.shape[-2]

    @property
    def scores_shape(self) -> Shape:
        """(..., L_q, L_k): the shape of the scores (which a tiled loop never builds)."""
        return tuple(self.batch) + (self.lq, self.lk)

    @property
    def device(self) -> Any:
        """q's torch device, or None for NumPy."""
        return self.q.device if self.torch_like else None


def require_tensor(name: str, x: object):
    """``x`` itself when it is a ``torch.Tensor``; a TypeError naming ``name`` otherwise."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor; got {type(x).__module__}.{type(x).__name__}. "
            "Use attn_edu.reference for NumPy arrays, or convert with torch.as_tensor."
        )
    return x


def loop_tiles(torch_like: bool, device: Any = "cpu") -> Tuple[int, int]:
    """The tiled loop's default ``(block_q, block_k)``: :func:`attn_edu.masks.default_tiles`
    of the PyTorch loop on ``device``, or of the NumPy loop."""
    return default_tiles("torch", device) if torch_like else default_tiles("numpy")


def attention_call(q: Any, k: Any, v: Any, mask: Any = None, causal: Any = False, scale: Any = None,
                   enable_gqa: bool = False, *, torch_like: Optional[bool] = None, tiled: bool = False,
                   block_q: Any = None, block_k: Any = None, align_checked: bool = False
                   ) -> AttentionCall:
    """Check and normalise one attention call's arguments, once; returns an :class:`AttentionCall`.

    ``torch_like`` None decides "all NumPy or all torch" from q, k, v
    (:func:`attn_edu._checks.uses_torch`); a torch twin passes True (and a NumPy array then
    gets :func:`require_tensor`'s error). ``tiled=True`` also checks the tiles, and takes a
    :class:`~attn_edu.masks.TilePlan` where a mask goes. ``align_checked=True`` says that
    ``causal`` is already what :func:`attn_edu._checks.check_causal` returns (a caller that
    had to read it first, such as a module with a KV cache).

    The order of the checks is the order of the errors: tiles (and a plan's ``causal``),
    q/k/v (type, dtypes, devices), shapes, ``causal``, ``scale``, the mask (kind, device,
    then dtype, shape, values and "causal given twice" by :func:`attn_edu._checks.check_mask`).
    """
    if torch_like is None:
        torch_like = _checks.uses_torch(q=q, k=k, v=v)
    align: Any = causal if align_checked else None
    plan = None
    if tiled:
        tiles = loop_tiles(torch_like, getattr(q, "device", "cpu"))
        mask, plan, block_q, block_k = split_plan(mask, block_q, block_k, tiles)
        if plan is not None:  # the plan's causality first, as unpack_plan does
            align = align if align_checked else _checks.check_causal(causal)
            check_plan_causal(plan, causal, align)
            align_checked = True
    if torch_like:
        for name, x in (("q", q), ("k", k), ("v", v)):
            require_tensor(name, x)
        _checks.check_float_dtypes(q=_checks.dtype_name(q.dtype), k=_checks.dtype_name(k.dtype),
                                   v=_checks.dtype_name(v.dtype))
        _checks.same_devices(q=q.device, k=k.device, v=v.device)
    else:
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        _checks.check_float_dtypes(q=q.dtype.name, k=k.dtype.name, v=v.dtype.name)
    batch, group = _checks.check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), enable_gqa)
    if not align_checked:
        align = _checks.check_causal(causal)
    s = _checks.check_scale(scale, q.shape[-1])
    if group > 1:  # grouped-query: each k/v head serves `group` consecutive query heads
        if torch_like:
            k = k.repeat_interleave(group, dim=-3)  # (..., Hq, Lk, Dk)
            v = v.repeat_interleave(group, dim=-3)  # (..., Hq, Lk, Dv)
        else:
            k = np.repeat(k, group, axis=-3)  # (..., Hq, Lk, Dk)
            v = np.repeat(v, group, axis=-3)  # (..., Hq, Lk, Dv)
    _checks.check_mask_kind(mask, torch_like)
    lq, lk = q.shape[-2], k.shape[-2]
    kind = None
    if mask is not None:
        if torch_like:
            _checks.same_devices(q=q.device, mask=mask.device)
        else:
            mask = np.asanyarray(mask)  # keeps a CausalMask's alignment tag for check_mask
    if plan is not None and (plan.lq, plan.lk) != (lq, lk):
        raise ValueError(f"the TilePlan is for (L_q, L_k) = {(plan.lq, plan.lk)}; q and k give {(lq, lk)}")
    if mask is not None:
        scores = tuple(batch) + (lq, lk)
        if plan is not None:  # its values were checked when the plan was built
            _checks.check_mask_shape(tuple(mask.shape), scores)
            kind = _checks.check_mask_dtype(_checks.dtype_name(mask))
        else:
            kind = _checks.check_mask(mask, scores, align)
        if not torch_like:
            mask = np.asarray(mask)  # a plain view from here on
    return AttentionCall(q, k, v, mask, kind, tuple(batch), group, align,
                         causal_offset_or_none(lq, lk, align), s, bool(torch_like),
                         block_q if tiled else None, block_k if tiled else None, plan)


# ----------------------------------------------------------------------------- shared by the twins
def split_mask(mask: Any, kind: Optional[str], lq: int, lk: int, offset: Optional[int],
               device: Any = None) -> Tuple[Any, Any]:
    """The mask logic every attention shares, on checked arguments: (allowed bool or None, additive or None).

    Splits a float mask into what it allows (not ``-inf``) and what it adds to the scores
    (0 where blocked, so no ``-inf`` enters the arithmetic), and intersects the causal
    diagonal ``offset`` (:func:`attn_edu.masks.causal_block`). NumPy arrays, or torch
    tensors when ``device`` (q's) is given.
    """
    ops = Ops(device is not None)
    allowed = additive = None
    if mask is not None:
        if kind == "bool":
            allowed = mask
        else:
            allowed = ~ops.isneginf(mask)
            additive = ops.where0(allowed, mask)  # -inf handled by `allowed`
    if offset is not None:
        tri = causal_block(0, lq, 0, lk, offset, device)  # (Lq, Lk)
        allowed = tri if allowed is None else (allowed & tri)
    return allowed, additive


def prepare_mask(mask: Any, scores_shape: Shape, causal: Optional[str], device: Any = None):
    """:func:`split_mask` for a mask not checked yet: checks it (``_checks.check_mask``) first.

    ``causal`` is the checked alignment; for functions with no :class:`AttentionCall`
    (linear attention's masks).
    """
    lq, lk = scores_shape[-2:]
    kind = None if mask is None else _checks.check_mask(mask, scores_shape, causal)
    return split_mask(mask, kind, lq, lk, causal_offset_or_none(lq, lk, causal), device)


@dataclass(frozen=True)
class TileRecord:
    """What one step of the tiled loop did, for teaching (``return_trace=True``).

    Attributes:
        q_block, k_block: tile indices (row block of queries, column block of keys).
        q_rows, k_cols: the half-open ranges ``(start, stop)`` of query rows and key
            columns the tile covers (the last tiles may be smaller than the blocks).
        skipped: True when the mask or causality leaves the tile empty, so it was not
            computed at all (``m``, ``l``, ``o`` are then the previous values).
        masked: True when the element mask had to be applied (a partially allowed tile);
            False for a fully allowed or a skipped tile.
        m: running max of each query row *after* this tile, shape (..., rows).
            ``-inf`` for rows that have seen no allowed key yet.
        l: running sum ``sum_j exp(s_j - m)`` after this tile, shape (..., rows).
        o: the **normalised** partial output ``A / l`` after this tile (0 where l = 0),
            shape (..., rows, d_v): the attention output over the keys seen so far.
            After the last tile of a row block it equals the final output rows.
    """

    q_block: int
    k_block: int
    q_rows: Tuple[int, int]
    k_cols: Tuple[int, int]
    skipped: bool
    masked: bool
    m: Any
    l: Any
    o: Any

    @classmethod
    def capture(cls, i: int, j: int, rows: Tuple[int, int], cols: Tuple[int, int], skipped: bool,
                masked: bool, m: Any, l: Any, acc: Any) -> "TileRecord":
        """A copy of the running statistics after tile (i, j), with ``o = acc / l`` (0 where
        l = 0); NumPy arrays or torch tensors (detached)."""
        if _checks.is_torch_tensor(acc):
            m, l, acc = m.detach().clone(), l.detach().clone(), acc.detach()
            denom = l.clone()
            denom[denom == 0] = 1
        else:
            m, l = m.copy(), l.copy()
            denom = np.where(l == 0, 1, l)
        return cls(i, j, rows, cols, skipped, masked, m, l, acc / denom[..., None])


def pack_outputs(out: Any, lse: Any, trace: list, return_lse: bool, return_trace: bool):
    """``out``, or the tuple ``(out, lse)``, ``(out, trace)`` or ``(out, lse, trace)`` asked for."""
    extras = ([lse] if return_lse else []) + ([trace] if return_trace else [])
    return (out, *extras) if extras else out
