r"""Tiled attention with the online softmax: FlashAttention's forward pass, in NumPy and PyTorch.

:func:`flash_attention` computes exactly what :func:`attn_edu.reference.scaled_dot_product_attention`
computes -- same arguments, same masks, same errors -- but one (block_q x block_k) tile
of scores at a time, so the (L_q, L_k) score matrix never exists. For one block of
queries it keeps three running statistics per query row and updates them tile by tile
(the online softmax, chapter 09):

.. math::
    S^{(j)} &= s \, Q_i K_j^\top + M_{ij}                 && \text{(block\_q, block\_k)} \\
    m^{(j)} &= \max\big(m^{(j-1)}, \operatorname{rowmax} S^{(j)}\big) \\
    P^{(j)} &= e^{S^{(j)} - m^{(j)}} \\
    \ell^{(j)} &= e^{m^{(j-1)} - m^{(j)}} \ell^{(j-1)} + \operatorname{rowsum} P^{(j)} \\
    A^{(j)} &= e^{m^{(j-1)} - m^{(j)}} A^{(j-1)} + P^{(j)} V_j   && \text{(block\_q, d\_v)}

starting from :math:`m^{(0)} = -\infty`, :math:`\ell^{(0)} = 0`, :math:`A^{(0)} = 0`; the
output is :math:`O_i = A / \ell` and the log-sum-exp :math:`m + \log \ell`. These are
:func:`attn_edu.precision.merge_softmax_stats` applied to one tile at a time, written
out inline on the unnormalised accumulator ``A`` so that the exponentials of a tile are
computed once (see the note in :func:`flash_attention`).

Tiles that the mask or causality leave empty are **skipped** (never computed):
:func:`tile_layout` finds them with :func:`attn_edu.masks.causal_block_layout` and
:func:`attn_edu.masks.block_layout`; tiles that are entirely allowed skip the element
mask too (:func:`attn_edu.masks.full_blocks`). Peak extra memory is
O(block_q * block_k + L * d) per batch element, never O(L_q * L_k) (besides a mask
the caller passes in).

NumPy arrays run the NumPy loop; torch tensors (CPU or CUDA) run the PyTorch twin
(same loop, plain differentiable torch ops). ``import attn_edu.flash`` needs NumPy only.
Chapter 09 builds this from scratch; chapter 10 moves it to the GPU.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple, Union

import numpy as np

from . import _checks, masks
from .reference import is_torch_tensor, prepare_inputs, uses_torch

__all__ = ["TilePlan", "TileRecord", "flash_attention", "plan_tiles", "tile_layout"]


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


# ----------------------------------------------------------------------------- planning
def _causal_full_blocks(lq: int, lk: int, block_q: int, block_k: int, align: str) -> np.ndarray:
    """Tiles entirely inside the causal region: the tile's last key is visible to its
    first query, ``min((j+1)*block_k, lk) - 1 <= i*block_q + offset``. Shape (nq, nk)."""
    offset = 0 if align == "top_left" else lk - lq
    nq, nk = -(-lq // block_q), -(-lk // block_k)
    first_query = np.arange(nq) * block_q  # (nq,)
    last_key = np.minimum((np.arange(nk) + 1) * block_k, lk) - 1  # (nk,)
    return last_key[None, :] <= (first_query + offset)[:, None]  # (nq, nk)


def _strip_tiles(mask: np.ndarray, kind: str, i: int, lq: int, lk: int, block_q: int,
                 block_k: int, align: Optional[str]) -> Tuple[np.ndarray, np.ndarray]:
    """(non-empty, full) key tiles of query strip ``i``: two boolean rows of shape (nk,).

    ``mask`` is boolean (``kind="bool"``) or additive float (``-inf`` blocks), with at
    least 2 axes and broadcastable to (..., lq, lk); causality (``align``) is intersected
    within the strip, so only O(block_q * lk) booleans ever exist. A tile is non-empty
    when it is non-empty for *some* batch element (the loop is vectorised over the batch)
    and full when it is full for *every* one. A mask axis of size 1 (e.g. a (B, 1, L_k)
    padding mask) is broadcast, never enlarged.
    """
    nk = -(-lk // block_k)
    r0, r1 = i * block_q, min((i + 1) * block_q, lq)
    strip = mask[..., _sub(mask.shape[-2], lq, r0, r1), :]  # (..., bq or 1, Lk or 1)
    if kind != "bool":
        strip = ~np.isneginf(strip)
    if align is not None:
        offset = 0 if align != "bottom_right" else lk - lq
        tri = np.arange(lk)[None, :] <= np.arange(r0, r1)[:, None] + offset  # (bq, Lk)
        strip = strip & tri  # (..., bq, Lk)
    # Reduce the strip's rows first (contiguous, cheap), then the columns of each tile:
    # the same answer as masks.block_layout / full_blocks on the strip, several times
    # faster. Only a non-empty tile can be full, so "full" is checked on those alone:
    # planning reads the mask about once, which matters for sparse patterns.
    col_any = np.logical_or.reduce(strip, axis=-2)  # (..., Lk or 1)
    lead = tuple(range(col_any.ndim - 1))  # (..., nk or 1) -> (nk or 1,)
    if col_any.shape[-1] != lk or lk == 1:  # the mask broadcasts over keys
        full = np.logical_and.reduce(strip, axis=-2).all(axis=lead)
        return (np.broadcast_to(col_any.any(axis=lead), (nk,)).copy(),
                np.broadcast_to(full, (nk,)).copy())
    pad = nk * block_k - lk  # past the end "any" sees False
    if pad:
        col_any = np.concatenate([col_any, np.zeros(col_any.shape[:-1] + (pad,), bool)], axis=-1)
    layout = col_any.reshape(col_any.shape[:-1] + (nk, block_k)).any(axis=-1).any(axis=lead)
    full = np.zeros(nk, dtype=bool)
    for j in np.flatnonzero(layout):
        full[j] = bool(strip[..., j * block_k:(j + 1) * block_k].all())
    return layout, full


def tile_layout(lq: int, lk: int, block_q: int = 64, block_k: int = 64,
                mask: Optional[np.ndarray] = None, causal: Union[bool, str] = False
                ) -> Tuple[np.ndarray, np.ndarray]:
    """Which tiles :func:`flash_attention` computes, and which of those need the element mask.

    Returns ``(computed, partial)``, boolean arrays of shape
    ``(ceil(lq / block_q), ceil(lk / block_k))``: ``computed[i, j]`` is False for a tile
    that the mask and/or causality leave empty (it is skipped), ``partial[i, j]`` is True
    for a computed tile that is only partly allowed (the mask is applied element-wise;
    a fully allowed tile skips that work). ``mask`` is boolean (True = may attend) or
    float (``-inf`` blocks), broadcastable to (..., lq, lk); with a batch of masks a tile
    is computed when any batch element needs it. Causal layouts come from
    :func:`attn_edu.masks.causal_block_layout` without building the causal mask; with a
    mask too, mask and causality are intersected one strip of rows at a time. Drawn in
    chapter 09.
    """
    lq, lk = _checks.check_length("lq", lq), _checks.check_length("lk", lk)
    block_q = _checks.check_block_size("block_q", block_q)
    block_k = _checks.check_block_size("block_k", block_k)
    align = _checks.check_causal(causal)
    nq, nk = -(-lq // block_q), -(-lk // block_k)
    computed = np.ones((nq, nk), dtype=bool)
    full = np.ones((nq, nk), dtype=bool)
    if align is not None:
        computed &= masks.causal_block_layout(lq, lk, block_q, block_k, align)
        full &= _causal_full_blocks(lq, lk, block_q, block_k, align)
    if mask is not None:
        mask = np.asarray(mask.cpu().numpy() if is_torch_tensor(mask) else mask)
        kind = _checks.check_mask_dtype(mask.dtype.name)
        mask = mask.reshape((1,) * max(0, 2 - mask.ndim) + mask.shape)
        for i in range(nq):  # mask & causal together may empty a tile neither empties alone
            lay, ful = _strip_tiles(mask, kind, i, lq, lk, block_q, block_k, align)
            computed[i] &= lay
            full[i] &= ful
    return computed, computed & ~full


@dataclass(frozen=True)
class TilePlan:
    """A mask together with its tile layout, built once by :func:`plan_tiles`.

    Pass it as ``mask=`` to :func:`flash_attention` to reuse the layout across calls (every
    head, layer and step that shares the pattern), as FlexAttention reuses its block mask:
    the layout then costs nothing per call, where working it out reads the whole
    (L_q, L_k) mask. The plan holds a private, read-only copy of the mask, so the mask
    and its layout cannot drift apart; the block sizes and ``causal`` it was built with
    must match the call (a mismatch is a ValueError).
    """

    mask: np.ndarray  # read-only copy, (..., lq, lk), bool or float
    kind: str  # "bool" or "float"
    block_q: int
    block_k: int
    causal: Optional[str]  # None, "top_left" or "bottom_right"
    computed: np.ndarray  # (nq, nk) bool
    partial: np.ndarray  # (nq, nk) bool

    @property
    def density(self) -> float:
        """The fraction of tiles computed (1.0 = dense)."""
        return masks.block_density(self.computed)


def plan_tiles(mask: np.ndarray, block_q: int = 64, block_k: int = 64,
               causal: Union[bool, str] = False) -> TilePlan:
    """Build a :class:`TilePlan`: a copy of ``mask`` and :func:`tile_layout` of it.

    ``mask`` is a NumPy boolean (True = may attend) or float (``-inf`` blocks) mask whose
    last two axes are the full (L_q, L_k); leading axes may broadcast. Chapter 11 uses
    it for the speed of sparse patterns.
    """
    if is_torch_tensor(mask):
        raise TypeError("plan_tiles takes a NumPy mask (the PyTorch path plans each call)")
    tag = getattr(mask, "causal_alignment", None)  # a CausalMask's alignment (lost in the copy)
    mask = np.array(mask, copy=True)  # private copy: the plan cannot go stale
    kind = _checks.check_mask_dtype(mask.dtype.name)
    if mask.ndim < 2:
        raise ValueError(f"mask must have at least 2 dimensions (..., L_q, L_k); got shape {mask.shape}")
    if kind == "float" and (np.isnan(mask).any() or np.isposinf(mask).any()):
        raise ValueError(_checks.FLOAT_MASK_VALUES)
    align = _checks.check_causal(causal)
    _checks.check_causal_given_once(tag, align)
    mask.flags.writeable = False
    lq, lk = mask.shape[-2:]
    computed, partial = tile_layout(lq, lk, block_q, block_k, mask=mask, causal=align or False)
    computed.flags.writeable = False
    partial.flags.writeable = False
    return TilePlan(mask, kind, int(block_q), int(block_k), align, computed, partial)


def _tile_slices(lq: int, lk: int, block_q: int, block_k: int):
    nq, nk = -(-lq // block_q), -(-lk // block_k)
    rows = [(i * block_q, min((i + 1) * block_q, lq)) for i in range(nq)]
    cols = [(j * block_k, min((j + 1) * block_k, lk)) for j in range(nk)]
    return rows, cols


def _sub(axis_len: int, full_len: int, start: int, stop: int):
    """The slice of a mask axis for [start, stop): all of it when the mask broadcasts (size 1)."""
    return slice(None) if axis_len == 1 and full_len != 1 else slice(start, stop)


# ----------------------------------------------------------------------------- NumPy loop
def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_BLAS_CONTROLLER: Any = None  # threadpoolctl.ThreadpoolController, or False without it
_POOLS: dict = {}


@contextmanager
def _single_threaded_blas():
    """Run the tile loop with one BLAS thread per worker, when threadpoolctl is installed.

    The tiles' matrix products are small; a multi-threaded BLAS splits each one across
    every core and its threads then wait on each other (badly so on a busy machine).
    Like FlashAttention on a GPU, the loop instead runs row blocks in parallel, one
    worker per core. Yields the number of workers to use (1 without threadpoolctl, so
    BLAS keeps its own threads and nothing is oversubscribed).
    """
    global _BLAS_CONTROLLER
    if _BLAS_CONTROLLER is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _BLAS_CONTROLLER = False
        else:  # built once: inspecting the loaded libraries costs about a millisecond
            _BLAS_CONTROLLER = ThreadpoolController()
    if _BLAS_CONTROLLER is False:
        yield 1
        return
    with _BLAS_CONTROLLER.limit(limits=1, user_api="blas"):
        yield _cpu_count()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One long-lived pool of worker threads per worker count (starting threads per call
    costs about a millisecond, a visible share of a sparse run)."""
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="attn_edu.flash")
    return _POOLS[workers]


def _flash_numpy(q, k, v, mask, mask_kind, align, s, block_q, block_k, batch,
                 return_trace, return_lse, plan=None):
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    dt = q.dtype.type
    scale, neg_inf = dt(s), dt(-np.inf)
    # Causality's tiles are known up front; a mask's are worked out strip by strip inside
    # each row block (so on every core, and while that strip of the mask is in cache).
    if plan is not None:  # built once by plan_tiles: nothing left to work out (read only)
        computed, partial = plan.computed, plan.partial
    else:
        computed, partial = tile_layout(lq, lk, block_q, block_k, causal=align or False)
    if mask is not None and mask.ndim < 2:
        mask = mask.reshape((1,) * (2 - mask.ndim) + mask.shape)
    offset = 0 if align != "bottom_right" else lk - lq
    rows, cols = _tile_slices(lq, lk, block_q, block_k)
    kt = np.swapaxes(k, -1, -2)  # (..., Dk, Lk): a view, BLAS reads it transposed
    out = np.zeros(tuple(batch) + (lq, dv), dtype=q.dtype)  # (..., Lq, Dv)
    lse = np.full(tuple(batch) + (lq,), -np.inf, dtype=q.dtype) if return_lse else None
    trace: List[TileRecord] = []

    def row_block(i: int) -> None:
        """One block of query rows against every non-empty key tile (the online softmax)."""
        r0, r1 = rows[i]
        if mask is not None and plan is None:  # this strip's tiles: non-empty and full ones
            lay, ful = _strip_tiles(mask, mask_kind, i, lq, lk, block_q, block_k, align)
            computed[i] &= lay
            partial[i] = computed[i] & ~(ful & ~partial[i])
        qi = q[..., r0:r1, :]  # (..., bq, Dk)
        m = np.full(tuple(batch) + (r1 - r0,), neg_inf)  # running max      (..., bq)
        l = np.zeros(tuple(batch) + (r1 - r0,), dtype=q.dtype)  # running sum (..., bq)
        acc = np.zeros(tuple(batch) + (r1 - r0, dv), dtype=q.dtype)  # A    (..., bq, Dv)
        for j, (c0, c1) in enumerate(cols):
            if not computed[i, j]:  # empty tile: exp(-inf) = 0 everywhere, skip it
                if return_trace:
                    trace.append(_record(i, j, r0, r1, c0, c1, True, False, m, l, acc))
                continue
            st = np.matmul(qi, kt[..., c0:c1])  # scores tile (..., bq, bk)
            st *= scale
            keep = None
            if mask is not None:
                mt = mask[..., _sub(mask.shape[-2], lq, r0, r1), _sub(mask.shape[-1], lk, c0, c1)]
                if mask_kind == "float":
                    if partial[i, j]:
                        keep = ~np.isneginf(mt)
                        mt = np.where(keep, mt, 0)
                    st += mt.astype(q.dtype, copy=False)
                elif partial[i, j]:
                    keep = mt
            if align is not None and partial[i, j]:
                tri = (np.arange(c0, c1)[None, :] <= np.arange(r0, r1)[:, None] + offset)  # (bq, bk)
                keep = tri if keep is None else (keep & tri)
            if keep is not None:
                np.copyto(st, neg_inf, where=~keep)  # blocked scores -> -inf
            m_new = np.maximum(m, st.max(axis=-1))  # (..., bq); NaN propagates
            m_safe = np.where(np.isneginf(m_new), dt(0), m_new)  # no key yet: exp(-inf - 0) = 0
            st -= m_safe[..., None]
            p = np.exp(st, out=st)  # P = exp(S - m_new), in place (..., bq, bk)
            alpha = np.exp(m - m_safe)  # rescales the old statistics (..., bq)
            l *= alpha
            l += p.sum(axis=-1)
            acc *= alpha[..., None]
            acc += np.matmul(p, v[..., c0:c1, :])  # (..., bq, bk) @ (..., bk, Dv)
            m = m_new
            if return_trace:
                trace.append(_record(i, j, r0, r1, c0, c1, False, keep is not None, m, l, acc))
        out[..., r0:r1, :] = acc / np.where(l == 0, dt(1), l)[..., None]  # fully masked row -> 0
        if return_lse:
            with np.errstate(divide="ignore"):  # l = 0 only when m = -inf: no allowed key
                lse[..., r0:r1] = m + np.log(l)

    if return_trace or len(rows) < 2 or computed.sum() < 8:  # small or traced: in order
        for i in range(len(rows)):
            row_block(i)
    else:
        with _single_threaded_blas() as workers:
            workers = min(workers, len(rows))
            if workers < 2:
                for i in range(len(rows)):
                    row_block(i)
            else:  # row blocks are independent: each worker owns its own m, l, A and tile
                list(_pool(workers).map(row_block, range(len(rows))))
    return out, lse, trace


def _record(i, j, r0, r1, c0, c1, skipped, masked, m, l, acc) -> TileRecord:
    if is_torch_tensor(acc):
        denom = l.detach().clone()
        denom[denom == 0] = 1
        o = acc.detach() / denom[..., None]
        return TileRecord(i, j, (r0, r1), (c0, c1), skipped, masked,
                          m.detach().clone(), l.detach().clone(), o)
    o = acc / np.where(l == 0, 1, l)[..., None]
    return TileRecord(i, j, (r0, r1), (c0, c1), skipped, masked, m.copy(), l.copy(), o)


# ----------------------------------------------------------------------------- PyTorch twin
def _flash_torch(q, k, v, mask, causal, scale, block_q, block_k, return_trace, return_lse,
                 enable_gqa):
    """The PyTorch twin: same checks as :func:`attn_edu.torch_ops.scaled_dot_product_attention`, same loop as the NumPy one."""
    import torch

    from .torch_ops import prepare_inputs

    q, k, v, batch, align, s = prepare_inputs(q, k, v, mask, causal, scale, enable_gqa)
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    scores_shape = tuple(batch) + (lq, lk)
    kind = None
    if mask is not None:
        kind = _checks.check_mask(_checks.dtype_name(mask.dtype), tuple(mask.shape), scores_shape,
                                  getattr(mask, "causal_alignment", None), align)
        if kind == "float" and (bool(torch.isnan(mask).any()) or bool(torch.isposinf(mask).any())):
            raise ValueError(_checks.FLOAT_MASK_VALUES)
    block_q = _checks.check_block_size("block_q", block_q)
    block_k = _checks.check_block_size("block_k", block_k)

    layout_mask = None
    if mask is not None:  # the layout is computed on the host from the (small) boolean pattern
        layout_mask = (mask if kind == "bool" else ~torch.isneginf(mask.detach())).cpu().numpy()
    computed, partial = tile_layout(lq, lk, block_q, block_k, mask=layout_mask, causal=align or False)
    if mask is not None and mask.dim() < 2:
        mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape))
    offset = 0 if align != "bottom_right" else lk - lq
    rows, cols = _tile_slices(lq, lk, block_q, block_k)
    dev, dtype = q.device, q.dtype
    kt = k.transpose(-1, -2)  # (..., Dk, Lk)
    outs, lses = [], []
    trace: List[TileRecord] = []
    for i, (r0, r1) in enumerate(rows):
        qi = q[..., r0:r1, :]  # (..., bq, Dk)
        shape = tuple(batch) + (r1 - r0,)
        m = torch.full(shape, float("-inf"), dtype=dtype, device=dev)  # (..., bq)
        l = torch.zeros(shape, dtype=dtype, device=dev)  # (..., bq)
        acc = torch.zeros(shape + (dv,), dtype=dtype, device=dev)  # (..., bq, Dv)
        for j, (c0, c1) in enumerate(cols):
            if not computed[i, j]:
                if return_trace:
                    trace.append(_record(i, j, r0, r1, c0, c1, True, False, m, l, acc))
                continue
            st = (qi @ kt[..., c0:c1]) * s  # (..., bq, bk)
            keep = None
            if mask is not None:
                mt = mask[..., _sub(mask.shape[-2], lq, r0, r1), _sub(mask.shape[-1], lk, c0, c1)]
                if kind == "float":
                    if partial[i, j]:
                        keep = ~torch.isneginf(mt)
                        mt = torch.where(keep, mt, torch.zeros_like(mt))  # no -inf in the graph
                    st = st + mt.to(dtype)
                elif partial[i, j]:
                    keep = mt
            if align is not None and partial[i, j]:
                ri = torch.arange(r0, r1, device=dev)[:, None]
                ci = torch.arange(c0, c1, device=dev)[None, :]
                tri = ci <= ri + offset  # (bq, bk)
                keep = tri if keep is None else (keep & tri)
            if keep is not None:
                st = st.masked_fill(~keep, float("-inf"))  # blocked -> -inf, gradient 0 there
            # the max is only a shift (softmax is shift-invariant): detach it, as torch_ops does
            m_new = torch.maximum(m, st.detach().amax(dim=-1))  # (..., bq)
            m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(st - m_safe[..., None])  # (..., bq, bk); blocked entries exactly 0
            alpha = torch.exp(m - m_safe)  # (..., bq)
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p @ v[..., c0:c1, :]  # (..., bq, Dv)
            m = m_new
            if return_trace:
                trace.append(_record(i, j, r0, r1, c0, c1, False, keep is not None, m, l, acc))
        outs.append(acc / torch.where(l == 0, torch.ones_like(l), l)[..., None])
        if return_lse:
            lse = m + torch.log(torch.where(l == 0, torch.ones_like(l), l))
            lses.append(torch.where(l == 0, torch.full_like(lse, float("-inf")), lse))
    out = torch.cat(outs, dim=-2) if outs else torch.zeros(tuple(batch) + (0, dv), dtype=dtype, device=dev)
    lse = None
    if return_lse:
        lse = torch.cat(lses, dim=-1) if lses else torch.zeros(tuple(batch) + (0,), dtype=dtype, device=dev)
    return out, lse, trace


# ----------------------------------------------------------------------------- public API
def flash_attention(
    q: Any,
    k: Any,
    v: Any,
    mask: Optional[Any] = None,
    causal: Union[bool, str] = False,
    scale: Optional[float] = None,
    block_q: Optional[int] = None,
    block_k: Optional[int] = None,
    return_trace: bool = False,
    return_lse: bool = False,
    enable_gqa: bool = False,
):
    r"""Tiled attention with the online softmax (FlashAttention's forward pass).

    Returns exactly :math:`\operatorname{softmax}(QK^\top s + M)\,V`, the result of
    :func:`attn_edu.reference.scaled_dot_product_attention` with the same arguments (up to
    rounding: <= 1e-10 in float64), computed one (block_q x block_k) tile of scores at
    a time with the running max ``m``, sum ``l`` and accumulator ``A`` of the module
    docstring.

    Shapes: ``q`` (..., L_q, d_k), ``k`` (..., L_k, d_k), ``v`` (..., L_k, d_v) ->
    output (..., L_q, d_v). Leading axes broadcast; the loop is vectorised over them.
    ``mask`` (bool, True = may attend; or float, added, ``-inf`` blocks), ``causal``
    (False, True/"top_left", "bottom_right"), ``scale`` (default 1/sqrt(d_k)) and
    ``enable_gqa`` mean what they mean in the reference; a fully masked query row gives
    zeros, never NaN. Any lengths work, including ones the blocks do not divide.

    Args:
        mask: as in the reference, or a :class:`TilePlan` from :func:`plan_tiles` (NumPy
            only), which carries the mask and its tile layout so repeated calls skip the
            planning.
        block_q, block_k: tile sizes (positive integers; default 64, or the plan's).
        return_lse: also return the log-sum-exp of each query row's scores,
            ``m + log(l)``, shape (..., L_q) (``-inf`` for a fully masked row). The
            backward pass of FlashAttention needs only this, not the weights.
        return_trace: also return a list of :class:`TileRecord` in processing order
            (row block by row block, key block by key block), one per tile, skipped
            tiles included; ``o`` in each record is the *normalised* partial output.
            The trace holds a copy of the statistics per tile: use it on small inputs.

    Returns ``out``, or a tuple ``(out, lse)``, ``(out, trace)`` or ``(out, lse, trace)``.

    Skipped work: tiles that the mask or causality leave empty are never computed
    (see :func:`tile_layout`), and fully allowed tiles skip the element mask. Peak
    extra memory is O(block_q * block_k + L * d) per batch element. Everything is
    computed in the input dtype (float32 stays float32).

    Torch tensors (CPU or CUDA) run the PyTorch twin, with the errors of
    :func:`attn_edu.torch_ops.scaled_dot_product_attention` and autograd through plain torch ops (its backward keeps
    every tile's probabilities, so memory during training is not reduced; chapter 10's
    Triton kernel recomputes them instead); fully masked rows get zero outputs and zero,
    finite gradients.

    One deliberate difference from the reference: NaN or inf in a *masked* value row
    of ``v`` poisons the reference's output (``0 * NaN`` in ``weights @ v``); here a
    skipped tile never reads it (a computed, partially masked tile still does).

    Why the update is inline rather than a call to
    :func:`attn_edu.precision.merge_softmax_stats`: that function merges *normalised*
    outputs ``o = A / l`` and would need ``softmax_partial`` to compute the tile's
    exponentials a second time; the loop keeps the unnormalised ``A`` and divides once
    at the end. The two give the same numbers (tests/test_flash.py checks it).

    Explained in chapter 09.
    """
    plan = mask if isinstance(mask, TilePlan) else None
    if plan is not None:
        mask = plan.mask
        for name, given, planned in (("block_q", block_q, plan.block_q),
                                     ("block_k", block_k, plan.block_k)):
            if given is not None and _checks.check_block_size(name, given) != planned:
                raise ValueError(f"{name}={given} but the TilePlan was built with {name}={planned}")
        block_q, block_k = plan.block_q, plan.block_k
        if _checks.check_causal(causal) != plan.causal:
            raise ValueError(f"causal={causal!r} but the TilePlan was built with causal={plan.causal!r}")
    block_q = 64 if block_q is None else block_q
    block_k = 64 if block_k is None else block_k
    if uses_torch(q, k, v):
        if plan is not None:
            raise TypeError("a TilePlan is for NumPy inputs; pass the mask itself with torch tensors")
        out, lse, trace = _flash_torch(q, k, v, mask, causal, scale, block_q, block_k,
                                       return_trace, return_lse, enable_gqa)
        return _pack(out, lse, trace, return_lse, return_trace)
    q, k, v, mask, batch, align, s = prepare_inputs(q, k, v, mask, causal, scale, enable_gqa)
    lq, lk = q.shape[-2], k.shape[-2]
    kind = None
    if plan is not None and plan.mask.shape[-2:] != (lq, lk):
        raise ValueError(f"the TilePlan is for (L_q, L_k) = {plan.mask.shape[-2:]}; "
                         f"q and k give {(lq, lk)}")
    if plan is not None:
        kind = _checks.check_mask(mask.dtype.name, tuple(mask.shape), tuple(batch) + (lq, lk),
                                  None, align)
    elif mask is not None:
        kind = _checks.check_mask(mask.dtype.name, tuple(mask.shape), tuple(batch) + (lq, lk),
                                  getattr(mask, "causal_alignment", None), align)
        mask = np.asarray(mask)
        if kind == "float" and (np.isnan(mask).any() or np.isposinf(mask).any()):
            raise ValueError(_checks.FLOAT_MASK_VALUES)
    block_q = _checks.check_block_size("block_q", block_q)
    block_k = _checks.check_block_size("block_k", block_k)
    out, lse, trace = _flash_numpy(q, k, v, mask, kind, align, s, block_q, block_k, batch,
                                   return_trace, return_lse, plan)
    return _pack(out, lse, trace, return_lse, return_trace)


def _pack(out, lse, trace, return_lse, return_trace):
    extras = ([lse] if return_lse else []) + ([trace] if return_trace else [])
    return (out, *extras) if extras else out
