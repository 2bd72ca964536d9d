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

Tiles that the mask or causality leave empty are **skipped** (never computed), and tiles
that are entirely allowed skip the element mask too: the tile plan of
``attn_edu.masks.tiles`` (:class:`~attn_edu.masks.TilePlan`), worked out one row
block at a time inside the loop, or built once with :func:`attn_edu.masks.plan_tiles`
and passed as ``mask=``. Peak extra memory is the output, O(L_q * d_v), plus one set of
tile buffers (O(block_q * (block_k + d))) for each of the :func:`numpy_workers` threads that
run row blocks at once, per batch element; never O(L_q * L_k) (besides a mask the caller
passes in, and what a plan keeps of its partial tiles, at most that mask's size).

NumPy arrays run the NumPy loop here; torch tensors (CPU or CUDA) run the PyTorch twin,
:func:`attn_edu.flash_torch.flash_attention` (same loop, plain differentiable torch ops).
``import attn_edu.flash`` needs NumPy only. Chapter 09 builds this from scratch; chapter
10 moves it to the GPU.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, List, Optional, Union

import numpy as np

from ._call import AttentionCall, TileRecord, attention_call, pack_outputs
from ._checks import check_positive_int
from .masks import causal_block, causal_offset_or_none
from .masks.tiles import mask_tile, plan_checked, row_block_tiles, tile_bounds

__all__ = ["TileRecord", "flash_attention", "numpy_workers"]


# ----------------------------------------------------------------------------- NumPy loop
def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_BLAS_CONTROLLER: Any = None  # threadpoolctl.ThreadpoolController, or False without it
_POOLS: dict = {}


def _blas_controller() -> Any:
    """threadpoolctl's controller, built once (inspecting the loaded libraries costs about a
    millisecond), or False when threadpoolctl is not installed."""
    global _BLAS_CONTROLLER
    if _BLAS_CONTROLLER is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _BLAS_CONTROLLER = False
        else:
            _BLAS_CONTROLLER = ThreadpoolController()
    return _BLAS_CONTROLLER


def numpy_workers(lq: int, block_q: int) -> int:
    """How many threads the NumPy loop of :func:`flash_attention` runs row blocks on at once.

    ``min(usable CPU cores, ceil(lq / block_q))`` when threadpoolctl is installed, else 1
    (BLAS then keeps its own threads and nothing is oversubscribed). A traced call, and one
    with fewer than 8 tiles to compute, runs in order on one thread whatever this says.
    Each worker holds its own tile buffers, so the loop's extra memory besides the output
    grows with this number (up to the core count), not with the sequence length: chapter 09
    measures it.

    >>> numpy_workers(100, 128)   # one row block: one thread
    1
    """
    lq, block_q = check_positive_int("lq", lq), check_positive_int("block_q", block_q)
    row_blocks = -(-lq // block_q)
    if row_blocks < 2 or _blas_controller() is False:
        return 1
    return min(_cpu_count(), row_blocks)


@contextmanager
def _single_threaded_blas():
    """One BLAS thread per worker while the row blocks run in parallel.

    The tiles' matrix products are small; a multi-threaded BLAS splits each one across
    every core and its threads then wait on each other (badly so on a busy machine).
    Like FlashAttention on a GPU, the loop instead runs row blocks in parallel, one
    worker per core (:func:`numpy_workers`).
    """
    with _blas_controller().limit(limits=1, user_api="blas"):
        yield


def _pool(workers: int) -> ThreadPoolExecutor:
    """One long-lived pool of worker threads per worker count (starting threads per call
    costs about a millisecond, a visible share of a sparse run)."""
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="attn_edu.flash")
    return _POOLS[workers]


#: What a plan may keep of its partial tiles' element masks (:class:`_BlockedTiles`) when
#: it carries no mask, or a smaller one; with a mask, up to that mask's own size.
_BLOCKED_TILES_BYTES = 16 << 20


class _BlockedTiles:
    """The blocked entries (True = the score becomes -inf) of a plan's partial tiles, one
    contiguous boolean array per tile ``(i, j)``, kept with the :class:`~attn_edu.masks.TilePlan`.

    A partial tile's element mask is the same on every call that reuses the plan, but
    cutting it out of the (L_q, L_k) mask reads one short row from each of ``block_q``
    rows far apart in memory, then inverts it: on a sliding window (chapter 11) that took
    a tenth of the whole call. The first call that computes a tile keeps its blocked
    entries here; later calls apply them with one ``copyto``. Nothing is kept past
    ``budget`` bytes (those tiles are cut out of the mask every time, as without a plan),
    so a plan never holds more than its own mask's size again (or 16 MiB without a mask).
    Boolean masks and causality only; a float mask's values are added on every call.
    """

    def __init__(self, budget: int):
        self.budget, self.nbytes, self.tiles = budget, 0, {}
        self._lock = threading.Lock()  # the row blocks' workers add tiles at once

    def get(self, key):
        return self.tiles.get(key)

    def add(self, key, blocked: np.ndarray) -> None:
        with self._lock:
            if key in self.tiles or self.nbytes + blocked.nbytes > self.budget:
                return
            tile = np.ascontiguousarray(blocked)
            tile.flags.writeable = False
            self.tiles[key] = tile
            self.nbytes += tile.nbytes


def _flash_numpy(q, k, v, mask, mask_kind, align, s, block_q, block_k, batch,
                 return_trace, return_lse, plan=None):
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    dt = q.dtype.type
    scale, neg_inf = dt(s), dt(-np.inf)
    offset = causal_offset_or_none(lq, lk, align)
    # Causality's tiles are known up front; a mask's are worked out strip by strip inside
    # each row block (so on every core, and while that strip of the mask is in cache).
    kept = None  # a plan's partial tiles, as _BlockedTiles (not for a float mask)
    if plan is not None:  # built once by plan_tiles: nothing left to work out (read only)
        merged = plan.merged()
        computed, partial = merged.computed, merged.partial
        if mask_kind != "float":
            budget = max(_BLOCKED_TILES_BYTES, 0 if mask is None else mask.nbytes)
            kept = plan.cached("numpy_blocked_tiles", lambda: _BlockedTiles(budget))
    else:
        causal_plan = plan_checked(None, lq, lk, block_q, block_k, align)
        computed, partial = causal_plan.computed.copy(), causal_plan.partial.copy()
    if mask is not None and mask.ndim < 2:
        mask = mask.reshape((1,) * (2 - mask.ndim) + mask.shape)
    rows, cols = tile_bounds(lq, block_q), tile_bounds(lk, block_k)
    kt = np.swapaxes(k, -1, -2)  # (..., Dk, Lk): a view, BLAS reads it transposed
    out = np.zeros(tuple(batch) + (lq, dv), dtype=q.dtype)  # (..., Lq, Dv)
    lse = np.full(tuple(batch) + (lq,), -np.inf, dtype=q.dtype) if return_lse else None
    trace: List[TileRecord] = []
    ones = np.ones(block_k, dtype=q.dtype)  # row sums as P_j @ 1: BLAS, ~5x a sum(axis=-1) (read only)

    def row_block(i: int) -> None:
        """One block of query rows against every non-empty key tile (the online softmax)."""
        r0, r1 = rows[i]
        if mask is not None and plan is None:  # this strip's tiles: non-empty and full ones
            lay, ful = row_block_tiles(mask, i, lq, lk, block_q, block_k, offset)  # (..., nk)
            lead = tuple(range(lay.ndim - 1))  # non-empty for some batch element, full for all
            computed[i] = lay.any(axis=lead)
            partial[i] = computed[i] & ~ful.all(axis=lead)
        qi = q[..., r0:r1, :] * scale  # s Q_i once per row block, not s (Q_i K_j^T) per tile
        m = np.full(tuple(batch) + (r1 - r0,), neg_inf)  # running max      (..., bq)
        l = np.zeros(tuple(batch) + (r1 - r0,), dtype=q.dtype)  # running sum (..., bq)
        acc = np.zeros(tuple(batch) + (r1 - r0, dv), dtype=q.dtype)  # A    (..., bq, Dv)
        # Buffers reused by every full-width tile of the strip (the loop allocates nothing
        # per tile; the last, narrower tile of a row gets fresh arrays).
        s_buf = np.empty(tuple(batch) + (r1 - r0, block_k), dtype=q.dtype)  # (..., bq, bk)
        pv_buf = np.empty_like(acc)  # P_j V_j                              (..., bq, Dv)
        for j, (c0, c1) in enumerate(cols):
            if not computed[i, j]:  # empty tile: exp(-inf) = 0 everywhere, skip it
                if return_trace:
                    trace.append(TileRecord.capture(i, j, (r0, r1), (c0, c1), True, False, m, l, acc))
                continue
            full_width = c1 - c0 == block_k
            st = np.matmul(qi, kt[..., c0:c1], out=s_buf if full_width else None)  # (..., bq, bk)
            blocked = kept.get((i, j)) if kept is not None else None  # a plan's, from an earlier call
            if blocked is None:
                keep = None
                if mask is not None and (mask_kind == "float" or partial[i, j]):  # a full tile's is all True
                    mt = mask_tile(mask, lq, lk, r0, r1, c0, c1)  # (..., bq or 1, bk or 1)
                    if mask_kind == "float":
                        if partial[i, j]:
                            keep = ~np.isneginf(mt)
                            mt = np.where(keep, mt, 0)
                        st += mt.astype(q.dtype, copy=False)
                    elif partial[i, j]:
                        keep = mt
                if offset is not None and partial[i, j]:
                    tri = causal_block(r0, r1, c0, c1, offset)  # (bq, bk)
                    keep = tri if keep is None else (keep & tri)
                if keep is not None:
                    blocked = ~keep  # (..., bq or 1, bk or 1)
                    if kept is not None:
                        kept.add((i, j), blocked)
            if blocked is not None:
                np.copyto(st, neg_inf, where=blocked)  # blocked scores -> -inf
            m_new = np.maximum(m, st.max(axis=-1))  # (..., bq); NaN propagates
            m_safe = np.where(np.isneginf(m_new), dt(0), m_new)  # no key yet: exp(-inf - 0) = 0
            st -= m_safe[..., None]
            p = np.exp(st, out=st)  # P = exp(S - m_new), in place (..., bq, bk)
            alpha = np.exp(m - m_safe)  # rescales the old statistics (..., bq)
            l *= alpha
            l += p @ ones[: c1 - c0]  # rowsum P                               (..., bq)
            acc *= alpha[..., None]
            acc += np.matmul(p, v[..., c0:c1, :], out=pv_buf if full_width else None)  # (..., bq, Dv)
            m = m_new
            if return_trace:
                trace.append(TileRecord.capture(i, j, (r0, r1), (c0, c1), False, blocked is not None,
                                                m, l, acc))
        out[..., r0:r1, :] = acc / np.where(l == 0, dt(1), l)[..., None]  # fully masked row -> 0
        if return_lse:
            with np.errstate(divide="ignore"):  # l = 0 only when m = -inf: no allowed key
                lse[..., r0:r1] = m + np.log(l)

    small = return_trace or computed.sum() < 8  # small or traced: in order
    workers = 1 if small else numpy_workers(lq, block_q)
    if workers < 2:
        for i in range(len(rows)):
            row_block(i)
    else:  # row blocks are independent: each worker owns its own m, l, A and tile buffers
        with _single_threaded_blas():
            _run_row_blocks(row_block, computed.sum(axis=-1), workers)
    return out, lse, trace


def _run_row_blocks(row_block: Any, tiles: np.ndarray, workers: int) -> None:
    """``row_block(i)`` for every row block on ``workers`` threads, the most tiles first.

    Each worker takes the next row block when it is done with one (one task per worker,
    not one per row block: a task costs tens of microseconds, a visible share of a sparse
    call), so the threads finish together; the longest row blocks go first so that the
    short ones (a window's first rows, causal attention's top rows) fill the end.
    ``tiles`` is each row block's count of computed tiles as known before the loop.
    """
    order = iter(np.argsort(-tiles, kind="stable").tolist())  # most tiles first
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(order, None)
            if i is None:
                return
            row_block(i)

    for task in [_pool(workers).submit(worker) for _ in range(workers)]:
        task.result()  # a worker's exception is raised here


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
        mask: as in the reference, or a :class:`~attn_edu.masks.TilePlan` from
            :func:`attn_edu.masks.plan_tiles`, which carries the mask and its tile layout
            so repeated calls skip the planning. From the first call on, a plan with a
            boolean mask (or causality only) also keeps its partial tiles' element masks,
            contiguous, so later calls do not cut them out of the mask again (at most the
            mask's own size, or 16 MiB without a mask).
        block_q, block_k: tile sizes (positive integers; default the backend's,
            :func:`attn_edu.masks.default_tiles`: large tiles, since every tile costs
            Python calls; or the plan's).
        return_lse: also return the log-sum-exp of each query row's scores,
            ``m + log(l)``, shape (..., L_q) (``-inf`` for a fully masked row). The
            backward pass of FlashAttention needs only this, not the weights.
        return_trace: also return a list of :class:`TileRecord` in processing order
            (row block by row block, key block by key block), one per tile, skipped
            tiles included; ``o`` in each record is the *normalised* partial output.
            The trace holds a copy of the statistics per tile: use it on small inputs.

    Returns ``out``, or a tuple ``(out, lse)``, ``(out, trace)`` or ``(out, lse, trace)``.

    Skipped work: tiles that the mask or causality leave empty are never computed
    (see :class:`~attn_edu.masks.TilePlan`), and fully allowed tiles skip the element mask. Peak
    extra memory is O(block_q * block_k + L * d) per batch element. NumPy arrays are
    computed in the input dtype (float32 stays float32); torch float16 / bfloat16 tensors
    keep the scores, statistics and accumulator in float32 (as FlashAttention does), round
    only the output to the input dtype, and return the log-sum-exp in float32.

    Torch tensors (CPU or CUDA) run the PyTorch twin :func:`attn_edu.flash_torch.flash_attention`,
    with the errors of :func:`attn_edu.reference_torch.scaled_dot_product_attention` and
    autograd through plain torch ops (its backward keeps
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
    call = attention_call(q, k, v, mask, causal, scale, enable_gqa, tiled=True,
                          block_q=block_q, block_k=block_k)  # every check, once
    return pack_outputs(*flash_loop(call, return_trace, return_lse), return_lse, return_trace)


def flash_loop(call: AttentionCall, return_trace: bool = False, return_lse: bool = False):
    """The tiled loop on a checked call, NumPy or torch: ``(out, lse or None, trace)``; checks nothing again."""
    if call.torch_like:
        from . import flash_torch

        return flash_torch.flash_loop(call, return_trace, return_lse)
    return _flash_numpy(call.q, call.k, call.v, call.mask, call.mask_kind, call.align, call.scale,
                        call.block_q, call.block_k, call.batch, return_trace, return_lse, call.plan)
