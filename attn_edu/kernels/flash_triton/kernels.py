r"""FlashAttention in Triton, the kernels: a fused forward and a recomputing backward.

The algorithm is FlashAttention {cite}`dao2022flashattention` in the loop order of
FlashAttention-2 {cite}`dao2023flashattention2`: one program owns a block of
``BLOCK_M`` query rows, streams the keys and values past it in blocks of
``BLOCK_N``, and keeps the running softmax statistics in registers::

    m_i   running row maximum of the scores           (BLOCK_M,)
    l_i   running sum of exp(score - m_i)             (BLOCK_M,)
    acc   running sum of exp(score - m_i) * v         (BLOCK_M, D_v)

    for each key block j:                 (the online softmax of chapter 03)
        s      = q @ k_j^T * scale                    (BLOCK_M, BLOCK_N)
        m_new  = max(m_i, rowmax(s))
        p      = exp(s - m_new)
        alpha  = exp(m_i - m_new)                     rescales what came before
        l_i    = alpha * l_i + rowsum(p)
        acc    = alpha * acc + p @ v_j
        m_i    = m_new
    out = acc / l_i,   lse = m_i + log(l_i)

The (L_q, L_k) score matrix never exists in memory: each tile of it lives in
registers for one iteration. The forward also writes the log-sum-exp ``lse``
(natural log, float32, shape (B, H, L_q)), which is all the backward needs to
rebuild any tile of the softmax exactly: ``P = exp(S - lse)``. The backward
(FlashAttention-2, Algorithm 2) therefore recomputes ``S`` and ``P`` tile by tile
instead of storing them:

    delta = rowsum(dO * O)                      (attn_bwd_preprocess)
    dV_j  = sum_i P_ij^T dO_i                   (attn_bwd_dkdv, one program per key block)
    dS_ij = P_ij * (dO_i V_j^T - delta_i)
    dK_j  = scale * sum_i dS_ij^T Q_i
    dQ_i  = scale * sum_j dS_ij K_j             (attn_bwd_dq, one program per query block)

Causal attention *skips* the key blocks above the diagonal through the loop bound
(they are never loaded), and masks only the blocks that straddle the diagonal;
that is where the ~2x speed-up of causal attention comes from. Both alignments of
the book are supported: ``causal=True``/``"top_left"`` (PyTorch's ``is_causal``:
key j is visible to query i when j <= i) and ``"bottom_right"`` (j <= i + L_k - L_q,
what a decoder with a KV cache needs). A query row with no visible key gets an
output of zeros and ``lse = -inf``, never NaN.

The file reads top to bottom, as Triton's fused-attention tutorial does: the guarded
imports (one block for every kernel module, ``attn_edu.kernels._shared``), what the kernels
take (``LIMITS``), the forward (``attn_fwd_inner``, the loop over key blocks, and
``attn_fwd``, the program of one query block), the backward (``attn_bwd_preprocess``,
``attn_bwd_dkdv``, ``attn_bwd_dq``), and what a page reads off them:
:func:`kernel_source` prints a kernel, :func:`block_schedule` gives its loop bounds as a tile
plan. Around the kernels, in the same package (:mod:`attn_edu.kernels.flash_triton`):
``launch`` (block sizes, the autotuner, TMA, the launchers), ``api`` (the input check, the
autograd wrapper, the public functions) and ``aot`` (the records of the compile report).

Where the kernels run (a CUDA GPU, or the CPU under Triton's interpreter with
``TRITON_INTERPRET=1`` set before triton is first imported: they are decorated when this
module is imported) is said in the package's docstring. Without triton installed this
module still imports, its kernels then plain functions whose source :func:`kernel_source`
reads; nothing here needs torch.

Why one file of more than 600 lines: it holds every kernel of chapter 10 in the order the
chapter reads them, FlashAttention-2's forward, the FlashAttention-3 ladder's forward
(``attn_fwd_fa3``, which calls FlashAttention-2's loop for its pointer path) and the
backward, as Triton's tutorial keeps its forward and backward in one file.

Explained in chapter 10 (FlashAttention II: PyTorch, Triton and memory on a GPU).
"""
from __future__ import annotations

from typing import Optional, Union

from ...masks import TilePlan, plan_tiles
from ...masks.tiles import ragged_keys_masked
from .. import _interpret, _targets
from .._shared import LN2, LOG2E, jit, kernel_text, tl

__all__ = ["LIMITS", "block_schedule", "kernel_source"]

#: The inputs these kernels take, checked by ``attn_edu.kernels._targets.check_kernel_inputs``:
#: float16, bfloat16 or float32; head dimensions 1 to 128 (padded inside to a power of two
#: >= 16); q, k and v with the same batch and head axes.
LIMITS = _targets.KernelLimits("the Triton kernel", "attn_edu.flash_attention")
#: Whether the kernels below were built for Triton's CPU interpreter (``TRITON_INTERPRET=1``
#: when ``@triton.jit`` ran, at this module's import): the launchers read it, never the
#: variable's value now.
BUILT_INTERPRETED = _interpret.requested()


# ----------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------
@jit
def attn_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs,
                   stride_kn, stride_vn,
                   offs_m, offs_n, offs_dk, offs_dv,
                   lo, hi, LK, qk_scale, CAUSAL_OFFSET,
                   HEAD_DK: tl.constexpr, HEAD_DV: tl.constexpr,
                   BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
                   BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                   CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                   USE_TMA: tl.constexpr):
    """Key blocks ``lo, lo + BLOCK_N, ..., < hi`` through the online softmax.

    ``MASKED=False`` is the fast path for blocks that lie wholly inside the key
    range and wholly below the causal diagonal: no comparisons at all.
    ``MASKED=True`` handles the ragged last block (keys >= L_k) and the blocks
    that straddle the diagonal; a row whose entries are all masked so far keeps
    ``m_i = -inf`` and contributes nothing (no ``-inf - (-inf)`` = NaN).
    ``USE_TMA``: ``k_ptrs``/``v_ptrs`` are tensor descriptors (Hopper's TMA copies a
    whole tile; rows past L_k and padded head dims arrive as zeros, no load masks).
    A block's row offset ``start_n * stride`` is 64-bit: it passes 2**31 elements in a
    long packed (B, L, 3, H, D) qkv view; the offsets inside a tile stay 32-bit.
    """
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n  # (BLOCK_N,) key positions of this block
        # k is loaded transposed, (BLOCK_DK, BLOCK_N), so that q @ k is a plain dot
        if USE_TMA:
            kT = tl.trans(k_ptrs.load([start_n, 0]))
        elif MASKED:
            kT = tl.load(k_ptrs + tl.cast(start_n, tl.int64) * stride_kn,
                         mask=(offs_dk[:, None] < HEAD_DK) & (cols[None, :] < LK),
                         other=0.0)
        elif HEAD_DK == BLOCK_DK:  # the fast path: no comparisons at all
            kT = tl.load(k_ptrs + tl.cast(start_n, tl.int64) * stride_kn)
        else:  # head dim padded (e.g. 48 -> 64): mask the padding only
            kT = tl.load(k_ptrs + tl.cast(start_n, tl.int64) * stride_kn,
                         mask=offs_dk[:, None] < HEAD_DK, other=0.0)
        # raw scores q.k; the scale (scale * log2(e) > 0) is folded in below
        qk = tl.dot(q, kT, input_precision=INPUT_PRECISION)  # (BLOCK_M, BLOCK_N)
        if MASKED:
            allowed = cols[None, :] < LK
            if CAUSAL:
                allowed = allowed & (cols[None, :]
                                     <= offs_m[:, None] + CAUSAL_OFFSET)
            qk = tl.where(allowed, qk, float("-inf"))
        # m_i is in base-2 units: the row maximum of the RAW scores times qk_scale
        # (a positive factor commutes with max), one multiply per row, not per score
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # (BLOCK_M,)
        if MASKED:  # rows with nothing visible yet: subtract 0 instead of -inf
            m_new_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_new_safe = m_new
        # p = 2^(qk * qk_scale - m): one fused multiply-add per score, then exp2
        # (a masked -inf score gives 2^-inf = 0)
        p = tl.math.exp2(tl.fma(qk, qk_scale, -m_new_safe[:, None]))  # (BLOCK_M, BLOCK_N)
        alpha = tl.math.exp2(m_i - m_new_safe)  # (BLOCK_M,) rescales the old sums
        l_i = l_i * alpha + tl.sum(p, 1)
        if USE_TMA:
            v = v_ptrs.load([start_n, 0])
        elif MASKED:
            v = tl.load(v_ptrs + tl.cast(start_n, tl.int64) * stride_vn,
                        mask=(cols[:, None] < LK) & (offs_dv[None, :] < HEAD_DV),
                        other=0.0)
        elif HEAD_DV == BLOCK_DV:
            v = tl.load(v_ptrs + tl.cast(start_n, tl.int64) * stride_vn)
        else:
            v = tl.load(v_ptrs + tl.cast(start_n, tl.int64) * stride_vn,
                        mask=offs_dv[None, :] < HEAD_DV, other=0.0)
        acc = acc * alpha[:, None]
        # acc += p @ v  (BLOCK_M, BLOCK_DV); p in the input dtype: tensor cores
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=INPUT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@jit
def attn_fwd(Q, K, V, Out, Lse,
             stride_qb, stride_qh, stride_qm, stride_qd,
             stride_kb, stride_kh, stride_kn, stride_kd,
             stride_vb, stride_vh, stride_vn, stride_vd,
             stride_ob, stride_oh, stride_om, stride_od,
             H, LQ, LK, qk_scale, CAUSAL_OFFSET,
             LQ_BUCKET, LK_BUCKET, BH_BUCKET,  # the autotuner's key only (powers of two)
             HEAD_DK: tl.constexpr, HEAD_DV: tl.constexpr,
             BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
             CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
             USE_TMA: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program = one block of BLOCK_M query rows of one (batch, head).

    Grid: (B * H * cdiv(L_q, BLOCK_M),), one axis (CUDA's x: up to 2**31 - 1 programs; y and
    z stop at 65,535), query blocks varying fastest. Writes Out (B, H, L_q, D_v) and
    Lse (B * H, L_q), the natural-log log-sum-exp of each query row.
    ``USE_TMA`` (Hopper, when :func:`tma_compatible`): Q, K and V tiles are copied by
    tensor descriptors, one (L, D) matrix per (batch, head), instead of pointer loads.
    """
    # 1. who am I: a query block and a (batch, head) pair
    n_m = tl.cdiv(LQ, BLOCK_M)  # query blocks per (batch, head)
    off_hz = tl.program_id(0) // n_m
    start_m = tl.program_id(0) % n_m * BLOCK_M
    off_b = (off_hz // H).to(tl.int64)  # int64: b * stride_b and row * stride_m pass
    off_h = (off_hz % H).to(tl.int64)  # 2**31 in big tensors (or a packed qkv view)
    row0 = start_m.to(tl.int64)  # the block's first row; offsets inside a tile stay 32-bit
    tile_m = tl.arange(0, BLOCK_M)  # (BLOCK_M,) rows inside the block
    offs_m = start_m + tile_m  # (BLOCK_M,) query rows
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,) key offsets inside a block
    offs_dk = tl.arange(0, BLOCK_DK)  # head dims, padded to a power of two
    offs_dv = tl.arange(0, BLOCK_DV)

    # 2. pointer arithmetic: base of this (b, h) + row * stride + col * stride
    q_ptrs = (Q + off_b * stride_qb + off_h * stride_qh + row0 * stride_qm  # (BLOCK_M, BLOCK_DK)
              + tile_m[:, None] * stride_qm + offs_dk[None, :] * stride_qd)
    k_ptrs = (K + off_b * stride_kb + off_h * stride_kh  # (BLOCK_DK, BLOCK_N): K^T
              + offs_n[None, :] * stride_kn + offs_dk[:, None] * stride_kd)
    v_ptrs = (V + off_b * stride_vb + off_h * stride_vh  # (BLOCK_N, BLOCK_DV)
              + offs_n[:, None] * stride_vn + offs_dv[None, :] * stride_vd)

    # 3. running statistics, in registers (float32 whatever the input dtype)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    if USE_TMA:  # Hopper: descriptors of this (b, h)'s (L, D) matrices; the copy engine
        # (TMA) moves whole tiles, zero-filling rows and columns outside the matrix
        q = tl.make_tensor_descriptor(Q + off_b * stride_qb + off_h * stride_qh, [LQ, HEAD_DK],
                                      [stride_qm, 1], [BLOCK_M, BLOCK_DK]).load([start_m, 0])
        k_ptrs = tl.make_tensor_descriptor(K + off_b * stride_kb + off_h * stride_kh,
                                           [LK, HEAD_DK], [stride_kn, 1], [BLOCK_N, BLOCK_DK])
        v_ptrs = tl.make_tensor_descriptor(V + off_b * stride_vb + off_h * stride_vh,
                                           [LK, HEAD_DV], [stride_vn, 1], [BLOCK_N, BLOCK_DV])
    else:
        q = tl.load(q_ptrs,  # stays in registers for the whole loop
                    mask=(offs_m[:, None] < LQ) & (offs_dk[None, :] < HEAD_DK),
                    other=0.0)

    # 4. which key blocks: [0, full_end) need no mask, [full_end, hi) do
    if CAUSAL:
        # the last key any (real) row of this block may see is
        # min(start_m + BLOCK_M, LQ) - 1 + offset: blocks beyond it are SKIPPED
        # (never loaded), not masked
        last_row_end = tl.minimum(start_m + BLOCK_M, LQ)
        hi = tl.minimum(tl.maximum(last_row_end + CAUSAL_OFFSET, 0), LK)
        # blocks ending at or before the FIRST row's last key are fully visible
        full_end = tl.maximum(start_m + CAUSAL_OFFSET + 1, 0) // BLOCK_N * BLOCK_N
        full_end = tl.minimum(full_end, LK // BLOCK_N * BLOCK_N)
    else:
        hi = LK
        full_end = LK // BLOCK_N * BLOCK_N
    # blocks [0, full_end): no mask (MASKED=False)
    acc, l_i, m_i = attn_fwd_inner(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
        offs_m, offs_n, offs_dk, offs_dv, 0, full_end, LK, qk_scale, CAUSAL_OFFSET,
        HEAD_DK, HEAD_DV, BLOCK_DK, BLOCK_DV, BLOCK_N, False, CAUSAL,
        INPUT_PRECISION, USE_TMA)
    # blocks [full_end, hi): the diagonal band and a ragged last block (MASKED=True)
    acc, l_i, m_i = attn_fwd_inner(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
        offs_m, offs_n, offs_dk, offs_dv, full_end, hi, LK, qk_scale, CAUSAL_OFFSET,
        HEAD_DK, HEAD_DV, BLOCK_DK, BLOCK_DV, BLOCK_N, True, CAUSAL,
        INPUT_PRECISION, USE_TMA)

    # 5. epilogue: normalise once, write the output and the log-sum-exp
    empty = l_i == 0.0  # rows that saw no key: output 0, lse -inf
    l_safe = tl.where(empty, 1.0, l_i)
    acc = acc / l_safe[:, None]
    lse = (m_i + tl.math.log2(l_safe)) * LN2  # base 2 -> natural log
    lse = tl.where(empty, float("-inf"), lse)
    tl.store(Lse + off_hz.to(tl.int64) * LQ + offs_m, lse, mask=offs_m < LQ)
    o_ptrs = (Out + off_b * stride_ob + off_h * stride_oh + row0 * stride_om
              + tile_m[:, None] * stride_om + offs_dv[None, :] * stride_od)
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty),
             mask=(offs_m[:, None] < LQ) & (offs_dv[None, :] < HEAD_DV))


# ----------------------------------------------------------------------------
# Forward, FlashAttention-3's way: the ladder of chapter 10
# ----------------------------------------------------------------------------
# FlashAttention-3 {cite}`shah2024flashattention3` keeps the algorithm above and changes how
# a Hopper GPU runs it. ``attn_fwd_fa3`` takes its steps as switches (the launcher's
# ``FORWARD_VARIANTS`` turns them on one at a time):
#   HOST_TMA         Q, K, V and Out are host-built tensor descriptors (4-D, (B, H, L, D)):
#                    the copy engine (TMA) moves whole tiles; nothing is built per program
#   WARP_SPECIALIZE  tl.range(..., warp_specialize=True): the compiler splits the warps into
#                    a producer (issues the TMA copies) and consumers (the matmuls and the
#                    softmax), with registers moved from the one to the others (setmaxnreg)
#   PERSISTENT       one program per SM loops over tiles; causal: the longest tiles first
@jit
def attn_fwd_fa3_inner(acc, l_i, m_i, q, desc_k, desc_v, off_b, off_h, offs_m, offs_n,
                       lo, hi, LK, qk_scale, CAUSAL_OFFSET,
                       BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_N: tl.constexpr,
                       MASKED: tl.constexpr, CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                       WARP_SPECIALIZE: tl.constexpr):
    """``attn_fwd_inner``'s loop with host-built descriptors: a K or V tile is one TMA copy
    at (b, h, start_n, 0), keys past L_k and padded head dims arriving as zeros."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        kT = tl.trans(desc_k.load([off_b, off_h, start_n, 0]).reshape(BLOCK_N, BLOCK_DK))
        qk = tl.dot(q, kT, input_precision=INPUT_PRECISION)  # (BLOCK_M, BLOCK_N)
        if MASKED:
            cols = start_n + offs_n
            allowed = cols[None, :] < LK
            if CAUSAL:
                allowed = allowed & (cols[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)
            qk = tl.where(allowed, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        if MASKED:
            m_new_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_new_safe = m_new
        p = tl.math.exp2(tl.fma(qk, qk_scale, -m_new_safe[:, None]))
        alpha = tl.math.exp2(m_i - m_new_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = desc_v.load([off_b, off_h, start_n, 0]).reshape(BLOCK_N, BLOCK_DV)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@jit
def attn_fwd_fa3_tile(Q, K, V, Out, Lse,
                      stride_qb, stride_qh, stride_qm, stride_qd,
                      stride_kb, stride_kh, stride_kn, stride_kd,
                      stride_vb, stride_vh, stride_vn, stride_vd,
                      stride_ob, stride_oh, stride_om, stride_od,
                      off_hz, start_m, H, LQ, LK, qk_scale, CAUSAL_OFFSET,
                      HEAD_DK: tl.constexpr, HEAD_DV: tl.constexpr,
                      BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
                      CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                      HOST_TMA: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One tile of ``attn_fwd_fa3``: ``attn_fwd``'s steps 2-5 for query block ``start_m`` of
    (batch, head) ``off_hz``, with descriptors (``HOST_TMA``) or ``attn_fwd``'s pointers."""
    off_b = off_hz // H  # int32: descriptor coordinates (TMA computes the addresses)
    off_h = off_hz % H
    tile_m = tl.arange(0, BLOCK_M)
    offs_m = start_m + tile_m
    offs_n = tl.arange(0, BLOCK_N)
    offs_dk = tl.arange(0, BLOCK_DK)
    offs_dv = tl.arange(0, BLOCK_DV)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    if CAUSAL:  # attn_fwd's loop bounds
        hi = tl.minimum(tl.maximum(tl.minimum(start_m + BLOCK_M, LQ) + CAUSAL_OFFSET, 0), LK)
        full_end = tl.maximum(start_m + CAUSAL_OFFSET + 1, 0) // BLOCK_N * BLOCK_N
        full_end = tl.minimum(full_end, LK // BLOCK_N * BLOCK_N)
    else:
        hi = LK
        full_end = LK // BLOCK_N * BLOCK_N
    if HOST_TMA:
        q = Q.load([off_b, off_h, start_m, 0]).reshape(BLOCK_M, BLOCK_DK)
        if WARP_SPECIALIZE:  # one loop, every block masked: Triton's Hopper warp
            # specialization takes one specialized loop per kernel, with nothing after it
            acc, l_i, m_i = attn_fwd_fa3_inner(
                acc, l_i, m_i, q, K, V, off_b, off_h, offs_m, offs_n, 0, hi, LK, qk_scale,
                CAUSAL_OFFSET, BLOCK_DK, BLOCK_DV, BLOCK_N, True, CAUSAL, INPUT_PRECISION, True)
        else:
            acc, l_i, m_i = attn_fwd_fa3_inner(
                acc, l_i, m_i, q, K, V, off_b, off_h, offs_m, offs_n, 0, full_end, LK, qk_scale,
                CAUSAL_OFFSET, BLOCK_DK, BLOCK_DV, BLOCK_N, False, CAUSAL, INPUT_PRECISION, False)
            acc, l_i, m_i = attn_fwd_fa3_inner(
                acc, l_i, m_i, q, K, V, off_b, off_h, offs_m, offs_n, full_end, hi, LK, qk_scale,
                CAUSAL_OFFSET, BLOCK_DK, BLOCK_DV, BLOCK_N, True, CAUSAL, INPUT_PRECISION, False)
    else:  # no TMA (before Hopper, or tensors TMA cannot address): attn_fwd's pointer loads
        b64 = off_b.to(tl.int64)
        h64 = off_h.to(tl.int64)
        q = tl.load(Q + b64 * stride_qb + h64 * stride_qh + start_m.to(tl.int64) * stride_qm
                    + tile_m[:, None] * stride_qm + offs_dk[None, :] * stride_qd,
                    mask=(offs_m[:, None] < LQ) & (offs_dk[None, :] < HEAD_DK), other=0.0)
        k_ptrs = (K + b64 * stride_kb + h64 * stride_kh
                  + offs_n[None, :] * stride_kn + offs_dk[:, None] * stride_kd)
        v_ptrs = (V + b64 * stride_vb + h64 * stride_vh
                  + offs_n[:, None] * stride_vn + offs_dv[None, :] * stride_vd)
        acc, l_i, m_i = attn_fwd_inner(
            acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
            offs_m, offs_n, offs_dk, offs_dv, 0, full_end, LK, qk_scale, CAUSAL_OFFSET,
            HEAD_DK, HEAD_DV, BLOCK_DK, BLOCK_DV, BLOCK_N, False, CAUSAL, INPUT_PRECISION, False)
        acc, l_i, m_i = attn_fwd_inner(
            acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
            offs_m, offs_n, offs_dk, offs_dv, full_end, hi, LK, qk_scale, CAUSAL_OFFSET,
            HEAD_DK, HEAD_DV, BLOCK_DK, BLOCK_DV, BLOCK_N, True, CAUSAL, INPUT_PRECISION, False)
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    acc = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN2)
    tl.store(Lse + off_hz.to(tl.int64) * LQ + offs_m, lse, mask=offs_m < LQ)
    if HOST_TMA:  # one TMA store; rows past L_q and padded head dims are not written
        Out.store([off_b, off_h, start_m, 0],
                  acc.to(Out.dtype).reshape(1, 1, BLOCK_M, BLOCK_DV))
    else:
        o_ptrs = (Out + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
                  + start_m.to(tl.int64) * stride_om
                  + tile_m[:, None] * stride_om + offs_dv[None, :] * stride_od)
        tl.store(o_ptrs, acc.to(Out.dtype.element_ty),
                 mask=(offs_m[:, None] < LQ) & (offs_dv[None, :] < HEAD_DV))


@jit
def attn_fwd_fa3(Q, K, V, Out, Lse,
                 stride_qb, stride_qh, stride_qm, stride_qd,
                 stride_kb, stride_kh, stride_kn, stride_kd,
                 stride_vb, stride_vh, stride_vn, stride_vd,
                 stride_ob, stride_oh, stride_om, stride_od,
                 BH, H, LQ, LK, qk_scale, CAUSAL_OFFSET,
                 LQ_BUCKET, LK_BUCKET, BH_BUCKET,  # the autotuner's key only (powers of two)
                 HEAD_DK: tl.constexpr, HEAD_DV: tl.constexpr,
                 BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
                 CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                 HOST_TMA: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                 PERSISTENT: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The forward of FlashAttention-3's steps: ``attn_fwd``'s arithmetic, tile by tile.

    Not ``PERSISTENT``: one program per tile, as ``attn_fwd`` (grid ``BH * cdiv(L_q,
    BLOCK_M)``). ``PERSISTENT``: a grid of about one program per SM, each taking tiles
    ``pid, pid + programs, ...``; causal, in the order longest first: the last query block
    of every (batch, head) (which sees the most keys) first, the first block last, so the
    short tiles fill in at the end instead of a long one starting last.
    """
    n_m = tl.cdiv(LQ, BLOCK_M)
    n_tiles = BH * n_m
    if PERSISTENT:
        for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
            if CAUSAL:  # longest first: query blocks from the last, (batch, head) fastest
                off_hz = tile % BH
                start_m = (n_m - 1 - tile // BH) * BLOCK_M
            else:  # query blocks fastest: neighbouring programs share a (b, h)'s K and V
                off_hz = tile // n_m
                start_m = tile % n_m * BLOCK_M
            attn_fwd_fa3_tile(
                Q, K, V, Out, Lse, stride_qb, stride_qh, stride_qm, stride_qd,
                stride_kb, stride_kh, stride_kn, stride_kd, stride_vb, stride_vh, stride_vn, stride_vd,
                stride_ob, stride_oh, stride_om, stride_od, off_hz, start_m, H, LQ, LK, qk_scale,
                CAUSAL_OFFSET, HEAD_DK, HEAD_DV, BLOCK_DK, BLOCK_DV, CAUSAL, INPUT_PRECISION,
                HOST_TMA, WARP_SPECIALIZE, BLOCK_M, BLOCK_N)
    else:
        attn_fwd_fa3_tile(
            Q, K, V, Out, Lse, stride_qb, stride_qh, stride_qm, stride_qd,
            stride_kb, stride_kh, stride_kn, stride_kd, stride_vb, stride_vh, stride_vn, stride_vd,
            stride_ob, stride_oh, stride_om, stride_od, tl.program_id(0) // n_m,
            tl.program_id(0) % n_m * BLOCK_M, H, LQ, LK, qk_scale,
            CAUSAL_OFFSET, HEAD_DK, HEAD_DV, BLOCK_DK, BLOCK_DV, CAUSAL, INPUT_PRECISION,
            HOST_TMA, WARP_SPECIALIZE, BLOCK_M, BLOCK_N)


# ----------------------------------------------------------------------------
# Backward (recomputation)
# ----------------------------------------------------------------------------
@jit
def attn_bwd_preprocess(O, DO, Delta,
                        stride_ob, stride_oh, stride_om, stride_od,
                        stride_dob, stride_doh, stride_dom, stride_dod,
                        H, LQ, HEAD_DV: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr):
    """delta_i = sum_d dO_id * O_id, shape (B * H, L_q), float32.

    Grid: (B * H * cdiv(L_q, BLOCK_M),), like the forward's."""
    n_m = tl.cdiv(LQ, BLOCK_M)
    off_hz = tl.program_id(0) // n_m
    start_m = tl.program_id(0) % n_m * BLOCK_M
    off_b = (off_hz // H).to(tl.int64)  # int64: b * stride_b and row * stride_m pass
    off_h = (off_hz % H).to(tl.int64)  # 2**31 in big tensors (or a packed qkv view)
    row0 = start_m.to(tl.int64)
    tile_m = tl.arange(0, BLOCK_M)
    offs_m = start_m + tile_m
    offs_d = tl.arange(0, BLOCK_DV)
    mask = (offs_m[:, None] < LQ) & (offs_d[None, :] < HEAD_DV)
    o = tl.load(O + off_b * stride_ob + off_h * stride_oh + row0 * stride_om
                + tile_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + off_b * stride_dob + off_h * stride_doh + row0 * stride_dom
                 + tile_m[:, None] * stride_dom + offs_d[None, :] * stride_dod,
                 mask=mask, other=0.0).to(tl.float32)
    tl.store(Delta + off_hz.to(tl.int64) * LQ + offs_m, tl.sum(o * do, 1), mask=offs_m < LQ)


@jit
def attn_bwd_dkdv(Q, K, V, DO, DK, DV, DQ, Lse, Delta,
                  stride_qb, stride_qh, stride_qm, stride_qd,
                  stride_kb, stride_kh, stride_kn, stride_kd,
                  stride_vb, stride_vh, stride_vn, stride_vd,
                  stride_dob, stride_doh, stride_dom, stride_dod,
                  H, LQ, LK, sm_scale, CAUSAL_OFFSET,
                  HEAD_DK: tl.constexpr, HEAD_DV: tl.constexpr,
                  BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
                  CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                  ATOMIC_DQ: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program = one block of BLOCK_N keys; the query blocks stream past it.

    Recomputes P^T = exp(K Q^T * scale - lse) tile by tile and accumulates
    dV = P^T dO and dK = scale * dS^T Q in float32 registers. dK and dV are
    contiguous (B, H, L_k, D). ``ATOMIC_DQ`` (FlashAttention-2's Algorithm 2): each
    tile also adds its share scale * dS K to DQ, a zeroed float32 (B, H, L_q, D_k)
    buffer, with atomic additions; without it DQ is not touched (the dQ kernel runs).
    Grid: (B * H * cdiv(L_k, BLOCK_N),), key blocks varying fastest.
    """
    n_n = tl.cdiv(LK, BLOCK_N)
    off_hz = tl.program_id(0) // n_n
    start_n = tl.program_id(0) % n_n * BLOCK_N
    off_b = (off_hz // H).to(tl.int64)  # int64: b * stride_b and row * stride_n pass
    off_h = (off_hz % H).to(tl.int64)  # 2**31 in big tensors (or a packed qkv view)
    col0 = start_n.to(tl.int64)
    tile_n = tl.arange(0, BLOCK_N)
    offs_n = start_n + tile_n  # (BLOCK_N,) keys of this program
    offs_m = tl.arange(0, BLOCK_M)
    offs_dk = tl.arange(0, BLOCK_DK)
    offs_dv = tl.arange(0, BLOCK_DV)
    qk_scale = sm_scale * LOG2E  # base-2 units, as in the forward

    k = tl.load(K + off_b * stride_kb + off_h * stride_kh + col0 * stride_kn
                + tile_n[:, None] * stride_kn + offs_dk[None, :] * stride_kd,
                mask=(offs_n[:, None] < LK) & (offs_dk[None, :] < HEAD_DK),
                other=0.0)
    v = tl.load(V + off_b * stride_vb + off_h * stride_vh + col0 * stride_vn
                + tile_n[:, None] * stride_vn + offs_dv[None, :] * stride_vd,
                mask=(offs_n[:, None] < LK) & (offs_dv[None, :] < HEAD_DV),
                other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_DK], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)

    qT_ptrs = (Q + off_b * stride_qb + off_h * stride_qh  # (BLOCK_DK, BLOCK_M)
               + offs_m[None, :] * stride_qm + offs_dk[:, None] * stride_qd)
    do_ptrs = (DO + off_b * stride_dob + off_h * stride_doh  # (BLOCK_M, BLOCK_DV)
               + offs_m[:, None] * stride_dom + offs_dv[None, :] * stride_dod)

    # causal: query rows before the first one that can see key start_n are skipped
    if CAUSAL:
        lo = tl.maximum(start_n - CAUSAL_OFFSET, 0) // BLOCK_M * BLOCK_M
    else:
        lo = 0
    for start_m in range(lo, LQ, BLOCK_M):
        rows = start_m + offs_m  # (BLOCK_M,)
        qT = tl.load(qT_ptrs + tl.cast(start_m, tl.int64) * stride_qm,
                     mask=(offs_dk[:, None] < HEAD_DK) & (rows[None, :] < LQ),
                     other=0.0)
        # rows past L_q and rows that saw no key get lse = +inf, hence P = 0
        lse = tl.load(Lse + off_hz.to(tl.int64) * LQ + rows, mask=rows < LQ, other=float("inf"))
        lse = tl.where(lse == float("-inf"), float("inf"), lse)
        sT = tl.dot(k, qT, input_precision=INPUT_PRECISION)  # (BLOCK_N, BLOCK_M)
        pT = tl.math.exp2(sT * qk_scale - lse[None, :] * LOG2E)
        allowed = offs_n[:, None] < LK
        if CAUSAL:
            allowed = allowed & (offs_n[:, None] <= rows[None, :] + CAUSAL_OFFSET)
        pT = tl.where(allowed, pT, 0.0)
        do = tl.load(do_ptrs + tl.cast(start_m, tl.int64) * stride_dom,
                     mask=(rows[:, None] < LQ) & (offs_dv[None, :] < HEAD_DV),
                     other=0.0)
        # dV += P^T dO  (BLOCK_N, BLOCK_DV)
        dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=INPUT_PRECISION)
        delta = tl.load(Delta + off_hz.to(tl.int64) * LQ + rows, mask=rows < LQ, other=0.0)
        # dP^T = V dO^T  (BLOCK_N, BLOCK_M), then dS^T = P^T * (dP^T - delta)
        dpT = tl.dot(v, tl.trans(do), input_precision=INPUT_PRECISION)
        dsT = pT * (dpT - delta[None, :])
        # dK += dS^T Q  (BLOCK_N, BLOCK_DK); times the scale after the loop
        dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk,
                    input_precision=INPUT_PRECISION)
        if ATOMIC_DQ:  # dQ[rows] += scale * dS K  (BLOCK_M, BLOCK_DK): every key block
            # adds to the same rows, so the additions are atomic (float32, in any order)
            dq = tl.dot(tl.trans(dsT).to(k.dtype), k, input_precision=INPUT_PRECISION)
            tl.atomic_add(DQ + (off_hz.to(tl.int64) * LQ + rows[:, None]) * HEAD_DK
                          + offs_dk[None, :], dq * sm_scale,
                          mask=(rows[:, None] < LQ) & (offs_dk[None, :] < HEAD_DK), sem="relaxed")

    dk = dk * sm_scale
    out_off = off_hz.to(tl.int64) * LK  # dK, dV are contiguous (B * H, L_k, D)
    tl.store(DK + (out_off + offs_n[:, None]) * HEAD_DK + offs_dk[None, :],
             dk.to(DK.dtype.element_ty),
             mask=(offs_n[:, None] < LK) & (offs_dk[None, :] < HEAD_DK))
    tl.store(DV + (out_off + offs_n[:, None]) * HEAD_DV + offs_dv[None, :],
             dv.to(DV.dtype.element_ty),
             mask=(offs_n[:, None] < LK) & (offs_dv[None, :] < HEAD_DV))


@jit
def attn_bwd_dq(Q, K, V, DO, DQ, Lse, Delta,
                stride_qb, stride_qh, stride_qm, stride_qd,
                stride_kb, stride_kh, stride_kn, stride_kd,
                stride_vb, stride_vh, stride_vn, stride_vd,
                stride_dob, stride_doh, stride_dom, stride_dod,
                H, LQ, LK, sm_scale, CAUSAL_OFFSET,
                HEAD_DK: tl.constexpr, HEAD_DV: tl.constexpr,
                BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
                CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program = one block of BLOCK_M queries; the key blocks stream past it.

    dQ = scale * sum_j dS_j K_j, with the same causal loop bound as the forward.
    dQ is contiguous (B, H, L_q, D_k). Grid: (B * H * cdiv(L_q, BLOCK_M),).
    """
    n_m = tl.cdiv(LQ, BLOCK_M)
    off_hz = tl.program_id(0) // n_m
    start_m = tl.program_id(0) % n_m * BLOCK_M
    off_b = (off_hz // H).to(tl.int64)  # int64: b * stride_b and row * stride_m pass
    off_h = (off_hz % H).to(tl.int64)  # 2**31 in big tensors (or a packed qkv view)
    row0 = start_m.to(tl.int64)
    tile_m = tl.arange(0, BLOCK_M)
    offs_m = start_m + tile_m
    offs_n = tl.arange(0, BLOCK_N)
    offs_dk = tl.arange(0, BLOCK_DK)
    offs_dv = tl.arange(0, BLOCK_DV)
    qk_scale = sm_scale * LOG2E

    row_ok = offs_m < LQ
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + row0 * stride_qm
                + tile_m[:, None] * stride_qm + offs_dk[None, :] * stride_qd,
                mask=row_ok[:, None] & (offs_dk[None, :] < HEAD_DK), other=0.0)
    do = tl.load(DO + off_b * stride_dob + off_h * stride_doh + row0 * stride_dom
                 + tile_m[:, None] * stride_dom + offs_dv[None, :] * stride_dod,
                 mask=row_ok[:, None] & (offs_dv[None, :] < HEAD_DV), other=0.0)
    lse = tl.load(Lse + off_hz.to(tl.int64) * LQ + offs_m, mask=row_ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse)
    delta = tl.load(Delta + off_hz.to(tl.int64) * LQ + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_DK], dtype=tl.float32)

    kT_ptrs = (K + off_b * stride_kb + off_h * stride_kh
               + offs_n[None, :] * stride_kn + offs_dk[:, None] * stride_kd)  # (BLOCK_DK, BLOCK_N)
    vT_ptrs = (V + off_b * stride_vb + off_h * stride_vh
               + offs_n[None, :] * stride_vn + offs_dv[:, None] * stride_vd)  # (BLOCK_DV, BLOCK_N)
    if CAUSAL:  # the forward's loop bound
        hi = tl.minimum(tl.maximum(tl.minimum(start_m + BLOCK_M, LQ) + CAUSAL_OFFSET, 0), LK)
    else:
        hi = LK
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kT = tl.load(kT_ptrs + tl.cast(start_n, tl.int64) * stride_kn,
                     mask=(offs_dk[:, None] < HEAD_DK) & (cols[None, :] < LK), other=0.0)
        vT = tl.load(vT_ptrs + tl.cast(start_n, tl.int64) * stride_vn,
                     mask=(offs_dv[:, None] < HEAD_DV) & (cols[None, :] < LK), other=0.0)
        s = tl.dot(q, kT, input_precision=INPUT_PRECISION)  # (BLOCK_M, BLOCK_N)
        p = tl.math.exp2(s * qk_scale - lse[:, None] * LOG2E)
        allowed = cols[None, :] < LK
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)
        p = tl.where(allowed, p, 0.0)
        dp = tl.dot(do, vT, input_precision=INPUT_PRECISION)  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq, input_precision=INPUT_PRECISION)

    dq = dq * sm_scale
    out_off = off_hz.to(tl.int64) * LQ  # dQ is contiguous (B * H, L_q, D_k)
    tl.store(DQ + (out_off + offs_m[:, None]) * HEAD_DK + offs_dk[None, :],
             dq.to(DQ.dtype.element_ty),
             mask=row_ok[:, None] & (offs_dk[None, :] < HEAD_DK))


# ----------------------------------------------------------------------------
# What a page reads off the kernels
# ----------------------------------------------------------------------------
def kernel_source(kernel: str, start: Optional[str] = None, stop: Optional[str] = None) -> str:
    """The source of one of this file's kernels, or a stretch of it, to read on a page.

    ``kernel`` is one of ``"forward"`` (the program of one query block), ``"forward_inner"``
    (its loop over key blocks), ``"backward_preprocess"``, ``"backward_dkdv"`` and
    ``"backward_dq"``. With ``start`` the text begins at the first line containing it;
    with ``stop`` it ends before the next line containing that. Dedented. Chapter 10
    prints the kernels this way, a few lines at a time.
    """
    return kernel_text({"forward": attn_fwd, "forward_inner": attn_fwd_inner,
                        "forward_fa3": attn_fwd_fa3, "forward_fa3_tile": attn_fwd_fa3_tile,
                        "forward_fa3_inner": attn_fwd_fa3_inner,
                        "backward_preprocess": attn_bwd_preprocess, "backward_dkdv": attn_bwd_dkdv,
                        "backward_dq": attn_bwd_dq}, kernel, start, stop)


def block_schedule(lq: int, lk: int, block_q: int, block_k: int,
                   causal: Union[bool, str] = False) -> TilePlan:
    """What the forward kernel does with each (query block, key block) tile, as a :class:`~attn_edu.masks.TilePlan`.

    The kernel's loop bounds: tiles below ``hi`` are computed, tiles below ``full_end``
    with no mask at all, the rest of them masked (the blocks that straddle the causal
    diagonal, and a ragged last key block, whose keys past L_k the mask cuts off); tiles
    past ``hi`` are skipped, never loaded. That is :func:`attn_edu.masks.plan_tiles` of the
    causal layout with the ragged key block masked (``attn_edu.masks.tiles.ragged_keys_masked``;
    tests hold it to the kernel's bounds). ``plan.schedule`` gives 0 = skipped, 1 = masked,
    2 = full per tile; ``block_q``/``block_k`` are the kernel's ``BLOCK_M``/``BLOCK_N``. For
    pictures and tests; the kernel computes the same bounds from ``tl.program_id``.
    """
    return ragged_keys_masked(plan_tiles(None, block_q, block_k, causal, lq=lq, lk=lk))
