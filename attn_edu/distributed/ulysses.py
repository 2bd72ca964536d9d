r"""Ulysses attention: re-shard from sequence to heads with all-to-all, attend, and back.

Each of ``P`` ranks holds ``L/P`` positions of all ``H`` heads. One all-to-all per tensor
turns that into **all** ``L`` positions of ``H/P`` heads; heads are independent, so each
rank then runs ordinary attention on its heads over the whole sequence, and a last
all-to-all turns the output back into sequence shards. The backward pass does the same
with the gradients. It needs ``H`` divisible by ``P`` (at most ``H`` ranks). With
grouped-query attention K and V have ``H_kv`` heads: they travel as they are when ``P``
divides ``H_kv``, and when ``P > H_kv`` (``H_kv`` dividing ``P``) each K/V head is first
copied ``P / H_kv`` times, so that every rank receives the one its query heads use.
Jacobs et al. (2023), *DeepSpeed Ulysses*. Chapter 14.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor

from .. import _checks
from ..flash import flash_attention
from . import comm
from .ring import accumulation_dtype, block_backward, check_shards, group_info
from .sharding import check_layout, positions

__all__ = ["ulysses_attention", "seq_to_heads", "heads_to_seq"]


def seq_to_heads(x: Tensor, group: Any = None) -> Tensor:
    """All-to-all: (..., H, L/P, d) sequence shard -> (..., H/P, L, d) head shard.

    Rank ``g`` receives head group ``g`` (heads ``g H/P`` to ``(g+1) H/P - 1``) from every
    rank, and the sequence comes out in rank order (rank 0's positions first). Chapter 14.
    """
    p = torch.distributed.get_world_size(group)
    *lead, h, n, d = x.shape
    b = math.prod(lead)
    inp = x.reshape(b, p, h // p, n, d).transpose(0, 1).contiguous()  # (P, b, H/P, n, d): chunk g -> rank g
    out = comm.all_to_all(torch.empty_like(inp), inp, group)  # out[s]: rank s's positions of my heads
    return out.permute(1, 2, 0, 3, 4).reshape(*lead, h // p, p * n, d)  # (..., H/P, P n, d)


def heads_to_seq(y: Tensor, group: Any = None) -> Tensor:
    """The inverse all-to-all: (..., H/P, L, d) head shard -> (..., H, L/P, d) sequence shard."""
    p = torch.distributed.get_world_size(group)
    *lead, hp, length, d = y.shape
    b, n = math.prod(lead), length // p
    inp = y.reshape(b, hp, p, n, d).permute(2, 0, 1, 3, 4).contiguous()  # (P, b, H/P, n, d): positions of s -> s
    out = comm.all_to_all(torch.empty_like(inp), inp, group)  # out[g]: my positions of head group g
    return out.transpose(0, 1).reshape(*lead, p * hp, n, d)  # (..., H, n, d)


def _orders(n: int, p: int, layout: str, device: torch.device):
    """Index tensors between rank order (shards concatenated) and sequence order, or None."""
    if layout == "contiguous":
        return None, None
    pos = np.concatenate([positions(n * p, r, p, layout) for r in range(p)])  # rank order -> position
    return (torch.as_tensor(np.argsort(pos), device=device),  # sequence[i] = rank_order[to_seq[i]]
            torch.as_tensor(pos, device=device))  # rank_order[i] = sequence[pos[i]]


def _gather(x, group, to_seq):
    y = seq_to_heads(x, group)
    return y if to_seq is None else y.index_select(-2, to_seq)


def _scatter(y, group, to_rank):
    return heads_to_seq(y if to_rank is None else y.index_select(-2, to_rank), group)


class _Ulysses(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout, group, block_q, block_k):  # type: ignore[override]
        to_seq, to_rank = _orders(q.shape[-2], torch.distributed.get_world_size(group), layout, q.device)
        qh, kh, vh = (_gather(x, group, to_seq) for x in (q, k, v))  # (..., H/P or H_kv/P, L, d)
        with comm.compute_timer():
            oh, lse = flash_attention(qh, kh, vh, causal=causal, scale=scale, block_q=block_q,
                                      block_k=block_k, return_lse=True,
                                      enable_gqa=kh.shape[-3] != qh.shape[-3])
        ctx.save_for_backward(qh, kh, vh, oh, lse)
        ctx.options = (causal, scale, group, block_q, to_seq, to_rank)
        return _scatter(oh, group, to_rank)

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        qh, kh, vh, oh, lse = ctx.saved_tensors
        causal, scale, group, block_q, to_seq, to_rank = ctx.options
        doh = _gather(dout, group, to_seq)
        acc = accumulation_dtype(doh.dtype)
        delta = (doh.to(acc) * oh.to(acc)).sum(dim=-1)  # rowsum(dO * O), (..., H/P, L)
        dq, dk, dv = block_backward(qh, kh, vh, doh, lse, delta, scale, causal=causal, block_q=block_q)
        grads = [_scatter(g.to(x.dtype), group, to_rank) for g, x in ((dq, qh), (dk, kh), (dv, vh))]
        return (*grads, None, None, None, None, None, None)


def ulysses_attention(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                      scale: Optional[float] = None, group: Any = None, *, layout: str = "contiguous",
                      block_q: Optional[int] = None, block_k: Optional[int] = None) -> Tensor:
    r"""Exact attention over a sequence sharded across ranks, by re-sharding to heads.

    Call it on every rank with that rank's shards ``q``, ``k``, ``v`` of shape
    (..., H, L/P, d) (made by :func:`.shard`; ``layout`` says which). Four all-to-alls:
    Q, K, V from sequence shards to head shards (..., H/P, L, d), then attention over the
    whole sequence for this rank's H/P heads (:func:`attn_edu.flash.flash_attention`, tiles of
    ``block_q`` x ``block_k``), then the output back to (..., H, L/P, d_v). Equal to the
    single-device reference up to rounding (<= 1e-10 in float64), causal masks included.

    Needs the number of heads H divisible by the number of ranks P (a ValueError
    otherwise). K and V may have H_kv < H heads (grouped-query attention, H_kv dividing
    H): sent as they are when P divides H_kv; when P > H_kv (and H_kv divides P) each K/V
    head is copied P / H_kv times before the all-to-all, which sends those copies (counted
    by :func:`.ulysses_bytes`); their gradients are summed back. Differentiable: the backward
    moves dO in and dQ, dK, dV back with four more all-to-alls. Works with gloo and NCCL.
    Explained in chapter 14.
    """
    q, k, v, causal_b, s = check_shards(q, k, v, causal, scale, "ulysses_attention")
    layout = check_layout(layout)
    _, p = group_info(group, "ulysses_attention")
    if q.dim() < 3:
        raise ValueError(f"ulysses_attention needs a head axis: q of shape (..., H, L/P, d); got {tuple(q.shape)}")
    h = q.shape[-3]
    if h % p:
        raise ValueError(
            f"ulysses_attention gives each rank H/P whole heads, so the number of heads must be "
            f"divisible by the number of ranks; got H = {h} heads (q {tuple(q.shape)}) and P = {p}"
        )
    hkv = k.shape[-3]
    if hkv % p and p % hkv:
        raise ValueError(
            f"ulysses_attention gives each rank H_kv/P K/V heads, or copies each K/V head P/H_kv "
            f"times when P > H_kv; got H_kv = {hkv} K/V heads (k {tuple(k.shape)}) and P = {p}, "
            "neither dividing the other"
        )
    if layout == "zigzag" and q.shape[-2] % 2:
        raise ValueError(f"a zigzag shard holds two equal chunks, so its length must be even; got "
                         f"q {tuple(q.shape)}")
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if b is not None:
            _checks.check_positive_int(name, b)
    if hkv < p:  # too few K/V heads to split: copy each so that every rank receives its own
        k, v = k.repeat_interleave(p // hkv, dim=-3), v.repeat_interleave(p // hkv, dim=-3)
    return _Ulysses.apply(q, k, v, causal_b, s, layout, group, block_q, block_k)
