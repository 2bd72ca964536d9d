"""Tiled attention with the online softmax in PyTorch: the twin of :mod:`attn_edu.flash`.

The same loop as the NumPy one -- one (block_q x block_k) tile of scores at a time, the
running max ``m``, sum ``l`` and unnormalised accumulator ``A`` per query row, empty
tiles skipped, full tiles unmasked -- written with plain, differentiable torch ops on
any device. For float16 and bfloat16 inputs the scores, the statistics (``m``, ``l``,
the log-sum-exp) and the accumulator are float32 from the start, as in FlashAttention
and torch's own SDPA kernels; only the output is rounded to the input dtype (the
log-sum-exp stays float32). Other dtypes compute in their own. Same arguments, same semantics, same errors as
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

from ._call import AttentionCall, TileRecord, attention_call, pack_outputs
from .masks import causal_block
from .masks.tiles import mask_tile, plan_checked, tile_bounds

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
    call = attention_call(q, k, v, mask, causal, scale, enable_gqa, torch_like=True, tiled=True,
                          block_q=block_q, block_k=block_k)  # every check, once
    return pack_outputs(*flash_loop(call, return_trace, return_lse), return_lse, return_trace)


def flash_loop(call: AttentionCall, return_trace: bool, return_lse: bool):
    """The tiled loop on a checked torch call: ``(out, lse or None, trace)``; checks nothing again."""
    q, k, v, mask, kind, align = call.q, call.k, call.v, call.mask, call.mask_kind, call.align
    s, block_q, block_k, batch, plan = call.scale, call.block_q, call.block_k, call.batch, call.plan
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    if plan is None:  # the layout is worked out on the host from the (small) boolean pattern
        host = None
        if mask is not None:
            host = (mask if kind == "bool" else ~torch.isneginf(mask.detach())).cpu().numpy()
            host = host.reshape((1,) * max(0, 2 - host.ndim) + host.shape)  # (..., Lq or 1, Lk or 1)
        plan = plan_checked(host, lq, lk, block_q, block_k, align)
    merged = plan.merged()
    computed, partial = merged.computed, merged.partial  # (nq, nk)
    if mask is not None and mask.dim() < 2:
        mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape))
    offset = call.offset
    dev, dtype = q.device, q.dtype
    # 16-bit inputs: float32 scores, statistics and accumulator, as FlashAttention; the tiles are
    # cast as they are used (extra memory O(tile), as the tiled memory model says)
    cdt = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    kt = k.transpose(-1, -2)  # (..., Dk, Lk)
    outs, lses = [], []
    trace: List[TileRecord] = []
    for i, (r0, r1) in enumerate(tile_bounds(lq, block_q)):
        qi = q[..., r0:r1, :].to(cdt)  # (..., bq, Dk)
        shape = tuple(batch) + (r1 - r0,)
        m = torch.full(shape, float("-inf"), dtype=cdt, device=dev)  # (..., bq)
        l = torch.zeros(shape, dtype=cdt, device=dev)  # (..., bq)
        acc = torch.zeros(shape + (dv,), dtype=cdt, device=dev)  # (..., bq, Dv)
        for j, (c0, c1) in enumerate(tile_bounds(lk, block_k)):
            if not computed[i, j]:
                if return_trace:
                    trace.append(TileRecord.capture(i, j, (r0, r1), (c0, c1), True, False, m, l, acc))
                continue
            st = (qi @ kt[..., c0:c1].to(cdt)) * s  # (..., bq, bk)
            keep = None
            if mask is not None:
                mt = mask_tile(mask, lq, lk, r0, r1, c0, c1)  # (..., bq or 1, bk or 1)
                if kind == "float":
                    if partial[i, j]:
                        keep = ~torch.isneginf(mt)
                        mt = torch.where(keep, mt, torch.zeros_like(mt))  # no -inf in the graph
                    st = st + mt.to(dtype).to(cdt)  # the mask rounded like the reference's
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
            acc = acc * alpha[..., None] + p @ v[..., c0:c1, :].to(cdt)  # (..., bq, Dv)
            m = m_new
            if return_trace:
                trace.append(TileRecord.capture(i, j, (r0, r1), (c0, c1), False, keep is not None,
                                                m, l, acc))
        outs.append((acc / torch.where(l == 0, torch.ones_like(l), l)[..., None]).to(dtype))
        if return_lse:
            lse = m + torch.log(torch.where(l == 0, torch.ones_like(l), l))
            lses.append(torch.where(l == 0, torch.full_like(lse, float("-inf")), lse))
    out = torch.cat(outs, dim=-2) if outs else torch.zeros(tuple(batch) + (0, dv), dtype=dtype, device=dev)
    lse = None
    if return_lse:
        lse = torch.cat(lses, dim=-1) if lses else torch.zeros(tuple(batch) + (0,), dtype=cdt, device=dev)
    return out, lse, trace
