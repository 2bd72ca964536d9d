r"""Ring attention: exact attention over a sequence split across ranks, forward and backward.

Each of ``P`` ranks holds ``L/P`` positions of Q, K and V (:mod:`.sharding`). Its queries
must meet every key, so the K/V blocks travel round a ring: at step ``t`` rank ``r``
computes attention of its queries against the block that started on rank ``(r - t) mod P``
while it already sends that block on to rank ``r + 1`` and receives the next one from
``r - 1`` (communication overlapped with computation). Each block gives a partial output
and its log-sum-exp, and the partials are combined with chapter 09's merge,
:func:`attn_edu.precision.merge_softmax_stats`:

.. math::
    m = \max(m_1, m_2), \quad \ell = \ell_1 e^{m_1 - m} + \ell_2 e^{m_2 - m}, \quad
    o = \frac{o_1 \ell_1 e^{m_1 - m} + o_2 \ell_2 e^{m_2 - m}}{\ell}

which is exact, in any order. Causal masks use global positions: pairs of chunks that are
entirely masked are skipped (:func:`.sharding.ring_schedule`).

The backward pass (FlashAttention's, with the saved log-sum-exp) runs a second ring: K and
V go round again, and the gradients dK, dV of each block travel *with* it, each rank adding
its share, and one hop further back home to the block's owner. Liu et al. (2023), *Ring
Attention with Blockwise Transformers for Near-Infinite Context*. Chapter 14.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Tuple, Union

import torch
import torch.distributed as dist
from torch import Tensor

from .. import _checks
from .._call import attention_call
from ..flash import flash_attention
from ..precision import merge_softmax_stats
from . import comm
from .sharding import check_layout, chunk_count, step_pairs

__all__ = ["ring_attention", "block_backward", "accumulation_dtype", "check_shards", "group_info"]

_KV_TAG, _DKV_TAG = 14, 15  # gloo matches point-to-point messages by tag; NCCL by order


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for 16-bit inputs (partial results are merged, and gradients summed over P
    ranks, in float32), the input dtype otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def group_info(group: Any, who: str) -> Tuple[int, int]:
    """(rank, world size) in ``group``; a RuntimeError that says what to do outside one."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"{who} runs inside a process group: call it from a function started by "
            "attn_edu.distributed.launch (or after torch.distributed.init_process_group)"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def check_shards(q: Tensor, k: Tensor, v: Tensor, causal: object, scale: object, who: str):
    """The argument checks every sequence-parallel attention shares.

    The single-device rules first (``attn_edu._call.attention_call``: tensors, one
    floating dtype, one device, shapes, ``causal``, ``scale``), then what sharding adds:
    q, k and v have the same leading axes (no broadcasting), and a causal mask needs query
    and key shards of the same length (self-attention, sharded alike; ``"bottom_right"``
    is then the same as ``"top_left"``). K and V may have fewer heads than Q (grouped-query
    attention: H_kv dividing H on axis -3); they are returned as they are, not expanded.
    Returns ``(q, k, v, causal: bool, scale: float)``.
    """
    kq = getattr(q, "shape", ()), getattr(k, "shape", ())
    gqa = len(kq[0]) >= 3 and len(kq[1]) == len(kq[0]) and kq[0][:-2] != kq[1][:-2]
    call = attention_call(q, k, v, None, causal, scale, gqa, torch_like=True)  # GQA: H_kv divides H
    align, s = call.align, call.scale
    if gqa and kq[0][:-3] != kq[1][:-3]:
        gqa = False
    if q.shape[:-2] != k.shape[:-2] and not gqa:
        raise ValueError(
            f"{who} needs q, k and v with the same leading (batch, head) axes, or k and v with "
            f"H_kv heads dividing q's H (grouped-query attention); got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    if align is not None and q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"causal {who} needs query and key shards of the same length (self-attention, sharded "
            f"the same way); got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    return q, k, v, align is not None, s


# ----------------------------------------------------------------------------- one block
def block_backward(q: Tensor, k: Tensor, v: Tensor, do: Tensor, lse: Tensor, delta: Tensor,
                   scale: float, causal: bool = False, block_q: Optional[int] = None
                   ) -> Tuple[Tensor, Tensor, Tensor]:
    r"""Gradients of attention for one block of queries against one block of keys.

    FlashAttention's backward: with the rows' *final* log-sum-exp ``lse`` (over every key
    of the sequence, not just this block) the block's softmax weights are recomputed
    exactly, :math:`P = e^{s\,QK^\top - \mathrm{lse}}`, and with
    :math:`\Delta = \operatorname{rowsum}(dO \circ O)`

    .. math::
        dV = P^\top dO, \quad dS = P \circ (dO\,V^\top - \Delta), \quad
        dQ = s\, dS\, K, \quad dK = s\, dS^\top Q .

    These are this block's shares: dQ summed over every key block gives the full
    gradient, and so do dK, dV summed over every query block. Shapes: q, do (..., n_q, d_k/d_v),
    k, v (..., n_k, d), lse and delta (..., n_q). ``causal`` applies a top-left causal
    mask (equal lengths, the same positions: a diagonal block). Computed ``block_q`` query
    rows at a time (default 64), so the scratch memory is O(block_q * n_k), in float32 for
    16-bit inputs (else in the input dtype); returns (dq, dk, dv) in that dtype. Rows with
    ``lse = -inf`` (no key at all) get zero gradients. With grouped-query attention (k, v
    with H_kv heads on axis -3, H_kv dividing q's H) the K/V heads are expanded here, on
    this rank only, and dk, dv summed back over each group: (..., H_kv, n_k, d). Chapter 14.
    """
    acc = accumulation_dtype(q.dtype)
    q, k, v, do, lse, delta = (t.to(acc) for t in (q, k, v, do, lse, delta))
    group = q.shape[-3] // k.shape[-3] if q.dim() >= 3 and k.shape[-3] != q.shape[-3] else 1
    if group > 1:  # each K/V head serves `group` consecutive query heads
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    n_q, n_k = q.shape[-2], k.shape[-2]
    bq = 64 if block_q is None else _checks.check_positive_int("block_q", block_q)
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, math.inf), lse)  # no key: P = 0
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    for r0 in range(0, n_q, bq):
        r1 = min(r0 + bq, n_q)
        end = min(r1, n_k) if causal else n_k  # causal: rows < r1 see only keys < r1
        qi, doi = q[..., r0:r1, :], do[..., r0:r1, :]  # (..., bq, d)
        kk, vv = k[..., :end, :], v[..., :end, :]  # (..., end, d)
        s = (qi @ kk.transpose(-1, -2)) * scale  # (..., bq, end)
        if causal:
            rows = torch.arange(r0, r1, device=q.device)[:, None]
            s = s.masked_fill(torch.arange(end, device=q.device)[None, :] > rows, -math.inf)
        p = torch.exp(s - lse[..., r0:r1, None])  # the final softmax weights (..., bq, end)
        dv[..., :end, :] += p.transpose(-1, -2) @ doi  # (..., end, bq) @ (..., bq, dv)
        ds = p * (doi @ vv.transpose(-1, -2) - delta[..., r0:r1, None])  # (..., bq, end)
        dq[..., r0:r1, :] = (ds @ kk) * scale  # (..., bq, d)
        dk[..., :end, :] += (ds.transpose(-1, -2) @ qi) * scale  # (..., end, d)
    if group > 1:  # (..., H, n_k, d) -> (..., H_kv, n_k, d): a K/V head's gradient sums its group's
        dk = dk.unflatten(-3, (-1, group)).sum(-3)
        dv = dv.unflatten(-3, (-1, group)).sum(-3)
    return dq, dk, dv


# ----------------------------------------------------------------------------- the ring
def _pack(k: Tensor, v: Tensor) -> Tensor:
    """K and V in one flat buffer, so each hop is a single message."""
    return torch.cat([k.reshape(-1), v.reshape(-1)])


def _unpack(buf: Tensor, k_shape: torch.Size, v_shape: torch.Size) -> Tuple[Tensor, Tensor]:
    nk = math.prod(k_shape)
    return buf[:nk].view(k_shape), buf[nk:].view(v_shape)


def _lse(m: Tensor, l: Tensor) -> Tensor:
    """log-sum-exp from the merged (m, l): m + log l, and -inf where no key was seen."""
    has = l > 0
    return torch.where(has, m + torch.log(torch.where(has, l, torch.ones_like(l))), torch.full_like(m, -math.inf))


def _ring_steps(k: Tensor, v: Tensor, rank: int, p: int, per: int, group: Any, overlap: bool):
    """Yield ``(step, source rank, its K chunks, its V chunks)`` round the ring.

    The block this rank holds is passed on to rank + 1 (and the next one received from
    rank - 1) *before* it is handed to the caller, so the transfer runs while the caller
    computes; the wait comes when the caller asks for the next step.
    """
    nxt, prv = (rank + 1) % p, (rank - 1) % p
    kv = _pack(k, v)
    for t in range(p):
        transfer = None
        if t < p - 1:
            incoming = torch.empty_like(kv)
            transfer = comm.exchange(kv, nxt, incoming, prv, group, _KV_TAG)
            if not overlap:
                transfer.wait()
        kt, vt = _unpack(kv, k.shape, v.shape)
        yield t, (rank - t) % p, kt.chunk(per, dim=-2), vt.chunk(per, dim=-2)
        if transfer is not None:
            transfer.wait()
            kv = incoming


def _ring_forward(q, k, v, causal, scale, layout, group, block_q, block_k, overlap):
    rank, p = group_info(group, "ring_attention")
    per = chunk_count(layout)
    acc = accumulation_dtype(q.dtype)
    gqa = k.shape[-3] != q.shape[-3] if q.dim() >= 3 else False  # K/V with H_kv < H heads
    # 16-bit inputs: each block's output and log-sum-exp in float32 (the casts are exact), so the
    # only rounding to the input dtype is the final output's, as in a single FlashAttention call
    qc = [c.to(acc) for c in q.chunk(per, dim=-2)]  # this rank's query chunks, each (..., c, d_k)
    m = [torch.full(c.shape[:-1], -math.inf, dtype=acc, device=q.device) for c in qc]  # (..., c)
    l = [torch.zeros(c.shape[:-1], dtype=acc, device=q.device) for c in qc]  # (..., c)
    o = [torch.zeros(c.shape[:-1] + v.shape[-1:], dtype=acc, device=q.device) for c in qc]  # (..., c, d_v)
    for t, source, kc, vc in _ring_steps(k, v, rank, p, per, group, overlap):
        pairs = step_pairs(rank, source, p, layout, causal)  # source: whose K, V this rank holds
        with comm.compute_timer([(t, w.q_chunk, w.k_chunk, w.kind) for w in pairs]):
            for w in pairs:
                ob, lse_b = flash_attention(qc[w.q_local], kc[w.k_local].to(acc), vc[w.k_local].to(acc),
                                            causal=w.kind == "diagonal", scale=scale,
                                            block_q=block_q, block_k=block_k, return_lse=True,
                                            enable_gqa=gqa)
                lse_b = lse_b.to(acc)  # a block's (m, l) is (lse, 1), or (-inf, 0) without keys
                i = w.q_local
                m[i], l[i], o[i] = merge_softmax_stats(m[i], l[i], o[i], lse_b,
                                                       (~torch.isneginf(lse_b)).to(acc), ob.to(acc))
    out = torch.cat(o, dim=-2).to(q.dtype)  # (..., n, d_v)
    lse = torch.cat([_lse(mi, li) for mi, li in zip(m, l)], dim=-1)  # (..., n)
    return out, lse


def _ring_backward(do, q, k, v, out, lse, causal, scale, layout, group, block_q, overlap):
    rank, p = group_info(group, "ring_attention")
    nxt, prv = (rank + 1) % p, (rank - 1) % p
    per = chunk_count(layout)
    acc = accumulation_dtype(q.dtype)
    delta = (do.to(acc) * out.to(acc)).sum(dim=-1)  # Delta = rowsum(dO * O), (..., n)
    qc, doc = q.chunk(per, dim=-2), do.chunk(per, dim=-2)
    lsec, dc = lse.chunk(per, dim=-1), delta.chunk(per, dim=-1)
    dq = [torch.zeros(c.shape, dtype=acc, device=q.device) for c in qc]
    grads_in: Optional[Tuple[comm.Transfer, Tensor, Tensor]] = None  # (transfer, buffer, buffer sent)
    for t, source, kc, vc in _ring_steps(k, v, rank, p, per, group, overlap):
        dkv = torch.zeros(k.numel() + v.numel(), dtype=acc, device=q.device)  # share for `source`
        dkt, dvt = _unpack(dkv, k.shape, v.shape)
        dkc, dvc = dkt.chunk(per, dim=-2), dvt.chunk(per, dim=-2)  # views into dkv
        pairs = step_pairs(rank, source, p, layout, causal)
        with comm.compute_timer([(t, w.q_chunk, w.k_chunk, w.kind) for w in pairs]):
            for w in pairs:
                i, j = w.q_local, w.k_local
                gq, gk, gv = block_backward(qc[i], kc[j], vc[j], doc[i], lsec[i], dc[i], scale,
                                            causal=w.kind == "diagonal", block_q=block_q)
                dq[i] += gq
                dkc[j].add_(gk)  # in place: dkc, dvc are views into dkv
                dvc[j].add_(gv)
        if grads_in is not None:  # what the ranks before this one added for the same block
            grads_in[0].wait()
            dkv += grads_in[1]
        if p > 1:  # on to the next rank; after the last step that is the block's owner
            buf = torch.empty_like(dkv)
            grads_in = (comm.exchange(dkv, nxt, buf, prv, group, _DKV_TAG), buf, dkv)
    if grads_in is not None:
        grads_in[0].wait()
        dkv = grads_in[1]  # this rank's own dK, dV, summed over every rank's queries
    dk, dv = _unpack(dkv, k.shape, v.shape)
    return torch.cat(dq, dim=-2).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    """Forward: one ring pass. Backward: a second ring pass with dK, dV travelling home."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout, group, block_q, block_k, overlap):  # type: ignore[override]
        out, lse = _ring_forward(q, k, v, causal, scale, layout, group, block_q, block_k, overlap)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (causal, scale, layout, group, block_q, overlap)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        causal, scale, layout, group, block_q, overlap = ctx.options
        dq, dk, dv = _ring_backward(dout, q, k, v, out, lse, causal, scale, layout, group, block_q, overlap)
        return dq, dk, dv, None, None, None, None, None, None, None


def ring_attention(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                   layout: str = "contiguous", scale: Optional[float] = None, group: Any = None,
                   *, block_q: Optional[int] = None, block_k: Optional[int] = None,
                   overlap: bool = True, return_lse: bool = False):
    r"""Exact attention over a sequence sharded across the ranks of ``group``, by a ring.

    Call it on every rank with that rank's shards (made by :func:`.shard` with the same
    ``layout``): ``q`` (..., L/P, d_k), ``k`` (..., L/P, d_k), ``v`` (..., L/P, d_v), e.g.
    (B, H, L/P, d). Returns this rank's shard of
    :math:`\operatorname{softmax}(s\,QK^\top + M)\,V` over the *whole* sequence,
    (..., L/P, d_v) -- equal to the single-device reference up to rounding (<= 1e-10 in
    float64) -- and with ``return_lse=True`` also its log-sum-exp (..., L/P).

    Args:
        causal: False, or True / "top_left" (equal lengths, so "bottom_right" is the same):
            key position j visible to query position i when j <= i, in *global* positions
            for both layouts. Blocks of chunks that are entirely masked are skipped.
        layout: "contiguous" or "zigzag" (balances the causal work; see :func:`.ring_schedule`).
        scale: default 1/sqrt(d_k).
        group: a ``torch.distributed`` process group (None: the default one).
        block_q, block_k: tile sizes of the computation on each rank
            (:func:`attn_edu.flash.flash_attention`; default 64).
        overlap: send the next block while computing with this one (True), or wait for
            each transfer first (False; the same numbers, for measuring what overlap buys).

    Grouped-query attention: ``k`` and ``v`` may have H_kv heads (axis -3) dividing q's H;
    they travel round the ring as they are (H_kv heads: :func:`.ring_bytes` with
    ``heads=H_kv``), are expanded only inside each rank's computation, and their gradients
    come back with H_kv heads.

    Differentiable: the backward pass runs a second ring (every rank must call backward).
    Works with gloo (CPU tensors) and NCCL (CUDA tensors) alike. 16-bit inputs: each
    block's output, log-sum-exp and running statistics are float32, merged in float32, and
    gradients summed in float32; only the results are rounded to the input dtype. Every rank must pass shards of the same shape
    (the transfers are sized from the local shard). Explained in chapter 14.
    """
    q, k, v, causal_b, s = check_shards(q, k, v, causal, scale, "ring_attention")
    layout = check_layout(layout)
    if layout == "zigzag" and q.shape[-2] % 2:
        raise ValueError(f"a zigzag shard holds two equal chunks, so its length must be even; got "
                         f"q {tuple(q.shape)}")
    if block_q is not None:
        _checks.check_positive_int("block_q", block_q)
    if block_k is not None:
        _checks.check_positive_int("block_k", block_k)
    group_info(group, "ring_attention")
    out, lse = _RingAttention.apply(q, k, v, causal_b, s, layout, group, block_q, block_k, bool(overlap))
    return (out, lse) if return_lse else out
