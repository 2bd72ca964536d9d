"""Tiled attention with the online softmax in PyTorch: the twin of :mod:`attn_edu.flash`.

The same loop as the NumPy one -- one (block_q x block_k) tile of scores at a time, the
running max ``m``, sum ``l`` and unnormalised accumulator ``A`` per query row, empty
tiles skipped, full tiles unmasked -- written with plain, differentiable torch ops on
any device. Same arguments, same semantics, same errors as
:func:`attn_edu.flash.flash_attention`, which hands torch tensors here; the argument
checks are those of :func:`attn_edu.reference_torch.scaled_dot_product_attention`.

Autograd goes through the torch ops, so the backward keeps every tile's probabilities:
memory during training is not reduced (chapter 10's Triton kernel recomputes them
instead). Fully masked rows get zero outputs and zero, finite gradients.

Importing this module imports torch. Explained in chapters 09 (the loop) and 10 (on a GPU).
"""
from __future__ import annotations

from typing import Any, List, Optional, Union

import torch

from . import _checks
from .flash import TileRecord, pack_outputs
from .masks import causal_block, causal_offset_or_none
from .masks.tiles import default_tiles, mask_tile, plan_tiles, tile_bounds, unpack_plan
from .reference_torch import prepare_inputs

__all__ = ["flash_attention"]


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[Any] = None,
    causal: Union[bool, str] = False,
    scale: Optional[float] = None,
    block_q: Optional[int] = None,
    block_k: Optional[int] = None,
    return_trace: bool = False,
    return_lse: bool = False,
    enable_gqa: bool = False,
):
    """Tiled attention on torch tensors; see :func:`attn_edu.flash.flash_attention`.

    ``mask`` may be a :class:`~attn_edu.masks.TilePlan` whose mask is a tensor on q's
    device (``plan_tiles(mask_tensor, ...)``), or a plan without a mask.
    """
    tiles = default_tiles("torch", getattr(q, "device", "cpu"))
    mask, plan, block_q, block_k = unpack_plan(mask, causal, block_q, block_k, tiles)
    q, k, v, batch, align, s = prepare_inputs(q, k, v, mask, causal, scale, enable_gqa)
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    kind = None
    if mask is not None:
        kind = _checks.check_mask(mask, tuple(batch) + (lq, lk), None if plan is not None else align)
    if plan is not None:
        if (plan.lq, plan.lk) != (lq, lk):
            raise ValueError(f"the TilePlan is for (L_q, L_k) = {(plan.lq, plan.lk)}; q and k give {(lq, lk)}")
    else:  # the layout is worked out on the host from the (small) boolean pattern
        host = None
        if mask is not None:
            host = (mask if kind == "bool" else ~torch.isneginf(mask.detach())).cpu().numpy()
        plan = plan_tiles(host, block_q, block_k, align or False, lq=lq, lk=lk)
    merged = plan.merged()
    computed, partial = merged.computed, merged.partial  # (nq, nk)
    if mask is not None and mask.dim() < 2:
        mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape))
    offset = causal_offset_or_none(lq, lk, align)
    dev, dtype = q.device, q.dtype
    kt = k.transpose(-1, -2)  # (..., Dk, Lk)
    outs, lses = [], []
    trace: List[TileRecord] = []
    for i, (r0, r1) in enumerate(tile_bounds(lq, block_q)):
        qi = q[..., r0:r1, :]  # (..., bq, Dk)
        shape = tuple(batch) + (r1 - r0,)
        m = torch.full(shape, float("-inf"), dtype=dtype, device=dev)  # (..., bq)
        l = torch.zeros(shape, dtype=dtype, device=dev)  # (..., bq)
        acc = torch.zeros(shape + (dv,), dtype=dtype, device=dev)  # (..., bq, Dv)
        for j, (c0, c1) in enumerate(tile_bounds(lk, block_k)):
            if not computed[i, j]:
                if return_trace:
                    trace.append(TileRecord.capture(i, j, (r0, r1), (c0, c1), True, False, m, l, acc))
                continue
            st = (qi @ kt[..., c0:c1]) * s  # (..., bq, bk)
            keep = None
            if mask is not None:
                mt = mask_tile(mask, lq, lk, r0, r1, c0, c1)  # (..., bq or 1, bk or 1)
                if kind == "float":
                    if partial[i, j]:
                        keep = ~torch.isneginf(mt)
                        mt = torch.where(keep, mt, torch.zeros_like(mt))  # no -inf in the graph
                    st = st + mt.to(dtype)
                elif partial[i, j]:
                    keep = mt
            if offset is not None and partial[i, j]:
                tri = causal_block(r0, r1, c0, c1, offset, device=dev)  # (bq, bk)
                keep = tri if keep is None else (keep & tri)
            if keep is not None:
                st = st.masked_fill(~keep, float("-inf"))  # blocked -> -inf, gradient 0 there
            # the max is only a shift (softmax is shift-invariant): detach it, as reference_torch does
            m_new = torch.maximum(m, st.detach().amax(dim=-1))  # (..., bq)
            m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(st - m_safe[..., None])  # (..., bq, bk); blocked entries exactly 0
            alpha = torch.exp(m - m_safe)  # (..., bq)
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p @ v[..., c0:c1, :]  # (..., bq, Dv)
            m = m_new
            if return_trace:
                trace.append(TileRecord.capture(i, j, (r0, r1), (c0, c1), False, keep is not None,
                                                m, l, acc))
        outs.append(acc / torch.where(l == 0, torch.ones_like(l), l)[..., None])
        if return_lse:
            lse = m + torch.log(torch.where(l == 0, torch.ones_like(l), l))
            lses.append(torch.where(l == 0, torch.full_like(lse, float("-inf")), lse))
    out = torch.cat(outs, dim=-2) if outs else torch.zeros(tuple(batch) + (0, dv), dtype=dtype, device=dev)
    lse = None
    if return_lse:
        lse = torch.cat(lses, dim=-1) if lses else torch.zeros(tuple(batch) + (0,), dtype=dtype, device=dev)
    return pack_outputs(out, lse, trace, return_lse, return_trace)
