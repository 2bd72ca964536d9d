r"""FlashAttention in Triton: a fused forward kernel and a recomputing backward.

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

    delta = rowsum(dO * O)                      (_attn_bwd_preprocess)
    dV_j  = sum_i P_ij^T dO_i                   (_attn_bwd_dkdv, one program per key block)
    dS_ij = P_ij * (dO_i V_j^T - delta_i)
    dK_j  = scale * sum_i dS_ij^T Q_i
    dQ_i  = scale * sum_j dS_ij K_j             (_attn_bwd_dq, one program per query block)

Causal attention *skips* the key blocks above the diagonal through the loop bound
(they are never loaded), and masks only the blocks that straddle the diagonal;
that is where the ~2x speed-up of causal attention comes from. Both alignments of
the book are supported: ``causal=True``/``"top_left"`` (PyTorch's ``is_causal``:
key j is visible to query i when j <= i) and ``"bottom_right"`` (j <= i + L_k - L_q,
what a decoder with a KV cache needs). A query row with no visible key gets an
output of zeros and ``lse = -inf``, never NaN.

Layout of the file, top to bottom, after Triton's fused-attention tutorial:
guarded imports, the kernels (``_attn_fwd_inner``, ``_attn_fwd``, the three
backward kernels), block-size choices, input checks, the launchers, the autograd
wrapper and the public functions :func:`triton_attention_forward` and
:func:`triton_attention`.

Where it runs: on a CUDA GPU, or on the CPU through Triton's interpreter when the
environment variable ``TRITON_INTERPRET=1`` is set. Triton 3.9 reads that variable
(``triton.knobs.runtime.interpret``) when ``@triton.jit`` *decorates* a function,
not at launch: this module's kernels are decorated when it is imported, and
Triton's own library functions (``tl.max``, ``tl.sum``, ...) when ``triton`` is
first imported. So set ``TRITON_INTERPRET=1`` before anything imports triton; if it
came too late, the first CPU call raises a RuntimeError that says so. Under the
interpreter the kernels run on NumPy, one program at a time: correct, slow, good
for tests with small shapes. (bfloat16 is refused there: the interpreter's
``tl.dot`` multiplies the raw bit patterns, triton-lang/triton#11584.)

Why one file of more than 600 lines: the forward kernel, the three backward kernels,
their launchers and the autograd wrapper are one algorithm whose parts share the loop
bounds and the block sizes, and chapter 10 reads them in this order, like Triton's own
fused-attention tutorial; split, the reader would chase the loop bounds across files.

Explained in chapter 10 (FlashAttention II: PyTorch, Triton and memory on a GPU).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from .. import _checks
from ..masks import TilePlan, plan_tiles
from ..masks.tiles import ragged_keys_masked
from . import _interpret, _targets
from ._shared import LN2, LOG2E, AotKernel, causal_offset_arg, kernel_text, launch_grid, padded_head_dim

try:  # guarded: the rest of attn_edu never needs triton
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - triton is in requirements.txt
    triton = None
    tl = None
    HAS_TRITON = False

__all__ = [
    "triton_attention",
    "triton_attention_forward",
    "check_triton_inputs",
    "block_schedule",
    "kernel_source",
    "interpret_mode",
    "forward_configs",
    "chosen_forward_config",
    "forward_shared_memory",
    "backward_configs",
    "atomic_backward_configs",
    "tma_compatible",
    "aot_kernels",
    "BACKWARDS",
    "BACKWARD_FLOAT32",
    "LIMITS",
    "TMA_MIN_CAPABILITY",
    "TMA_EXTRA_SHARED",
    "IEEE_FORWARD_CONFIG",
    "IEEE_BACKWARD_CONFIG",
]

#: The inputs these kernels take, checked by ``attn_edu.kernels._targets.check_kernel_inputs``:
#: float16, bfloat16 or float32; head dimensions 1 to 128 (padded inside to a power of two
#: >= 16); q, k and v with the same batch and head axes.
LIMITS = _targets.KernelLimits("the Triton kernel", "attn_edu.flash_attention")


def interpret_mode() -> bool:
    """True when ``TRITON_INTERPRET=1`` is set now (kernels then run on the CPU)."""
    return _interpret.requested()


# The mode the kernels below were built in (read once, when @triton.jit ran).
_BUILT_INTERPRETED = interpret_mode()


def _jit(fn):
    """``triton.jit`` when triton is installed; the plain function otherwise
    (so this module imports, and :func:`inspect.getsource` works, without triton)."""
    return triton.jit(fn) if HAS_TRITON else fn


# ----------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------
@_jit
def _attn_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs,
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


def _attn_fwd_kernel(Q, K, V, Out, Lse,
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
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
        offs_m, offs_n, offs_dk, offs_dv, 0, full_end, LK, qk_scale, CAUSAL_OFFSET,
        HEAD_DK, HEAD_DV, BLOCK_DK, BLOCK_DV, BLOCK_N, False, CAUSAL,
        INPUT_PRECISION, USE_TMA)
    # blocks [full_end, hi): the diagonal band and a ragged last block (MASKED=True)
    acc, l_i, m_i = _attn_fwd_inner(
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
# Backward (recomputation)
# ----------------------------------------------------------------------------
@_jit
def _attn_bwd_preprocess(O, DO, Delta,
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


@_jit
def _attn_bwd_dkdv(Q, K, V, DO, DK, DV, DQ, Lse, Delta,
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


@_jit
def _attn_bwd_dq(Q, K, V, DO, DQ, Lse, Delta,
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
# Block sizes: autotuned on a GPU, fixed and small under the interpreter
# ----------------------------------------------------------------------------
#: The forward's search space on a GPU of compute capability 8.0 or newer (BLOCK_M,
#: BLOCK_N, num_warps, num_stages), the one of Triton's fused-attention tutorial:
#: BLOCK_M in {64, 128}, BLOCK_N in {32, 64, 128}, 2-4 stages, 4 or 8 warps (36 in all).
#: :func:`~attn_edu.kernels.flash_triton.forward_configs` prunes it to at most 12 per GPU and head dimension.
FWD_CONFIGS_CUDA = [(bm, bn, w, s) for bm in (64, 128) for bn in (32, 64, 128)
                    for w in (4, 8) for s in (2, 3, 4)]
#: (BLOCK_M, BLOCK_N, num_warps) that spill registers at head dimension 128 on sm_80 and
#: sm_90a in every stage count (``python -m attn_edu.kernels.report``): left out for d > 64;
#: before Hopper also the 8-warp 128 x 128 tile (it spills on sm_80).
FWD_SPILL_TILES_D128 = {(64, 128, 4), (128, 64, 4), (128, 128, 4)}
FWD_SPILL_TILES_D128_AMPERE = FWD_SPILL_TILES_D128 | {(128, 128, 8)}
#: float32 on TF32 tensor cores (the default from 8.0), whose tiles of 4-byte operands take twice
#: the registers and shared memory of half ones, so a short list of its own, pruned like
#: the half one. Before Hopper its 64 x 64 tile with 4 warps spills at d = 128 (432 B on
#: sm_80 in the compile report), as do the 4-warp 128-row tiles (not in the list).
FWD_CONFIGS_TF32 = [(bm, bn, w, s) for bm, bn, w in ((64, 32, 4), (64, 64, 4), (128, 64, 8)) for s in (2, 3)]
FWD_SPILL_TILES_TF32_D128_AMPERE = {(64, 64, 4)}
#: Whole configurations (BLOCK_M, BLOCK_N, num_warps, num_stages) that spill registers in
#: ``python -m attn_edu.kernels.report`` (Triton 3.9), by (GPU family 80 or 90, head
#: dimension bucket 64 or 128, bytes per input element): left out of the search. Near 255
#: registers a thread, ptxas spills a few bytes in some stage counts and not in others.
FWD_SPILL_CONFIGS: Dict[Tuple[int, int, int], set] = {
    (80, 64, 2): {(64, 32, 4, 4), (64, 64, 4, 4), (128, 64, 4, 2)},
    (80, 128, 2): {(64, 64, 4, 2), (128, 32, 4, 2), (128, 32, 4, 3), (128, 32, 4, 4), (128, 64, 8, 2)},
}
#: Shared memory per block (bytes, opt-in maximum) assumed for a compute capability that
#: ``attn_edu.kernels._targets.TARGETS`` does not list: 99 KiB, the smallest from 8.0
#: on (8.6 and 8.9, e.g. an RTX 3090 or an L4).
SHARED_MEMORY_FALLBACK = 101376
#: Before compute capability 8.0 (Colab's T4 is 7.5) Triton 3.9 emits no tensor-core
#: instructions: both tl.dot become FMA loops, and num_stages does nothing (no
#: asynchronous copies). One small configuration, so nothing is autotuned on a 2-core
#: Colab VM (one compile per kernel); small, because FMA tiles live in registers: the
#: next size up, 64 x 32, spilled 1.7 KB at d = 64 and 31.6 KB at d = 128 in
#: ``python -m attn_edu.kernels.report``, where 32 x 32 spills none and 2.6 KB.
FWD_CONFIGS_PRE_AMPERE = [
    (32, 32, 4, 1),
]
#: Exact float32 (``precision="ieee"``, and every float32 launch before compute capability
#: 8.0): fused multiply-adds instead of tensor cores, whose tiles live in registers. One
#: fixed small configuration (BLOCK_M, BLOCK_N, num_warps, num_stages) for the forward and
#: one for both backward kernels, never autotuned: autotuning would compile several slow,
#: spilling kernels one after another on the first call.
IEEE_FORWARD_CONFIG = (32, 16, 8, 1)
#: the one (BLOCK_M, BLOCK_N, num_warps, num_stages) of both backward kernels for float32,
#: which the backward always computes exactly (``BACKWARD_FLOAT32``)
IEEE_BACKWARD_CONFIG = (16, 16, 2, 1)
#: Under TRITON_INTERPRET=1 every block is a NumPy call, so the blocks are small and fixed
#: and tests with L = 65 or 129 still cross several blocks and a ragged last one.
INTERPRET_BLOCK_M = 32
INTERPRET_BLOCK_N = 32
#: Backward blocks on a GPU. The dK/dV program holds BLOCK_N keys and streams BLOCK_M
#: queries past them; the dQ program mirrors it (BLOCK_N queries, BLOCK_M keys per step).
BWD_BLOCK_M_CUDA, BWD_BLOCK_N_CUDA, BWD_WARPS_CUDA, BWD_STAGES_CUDA = 32, 64, 4, 2
#: Tried in order (BLOCK_M, BLOCK_N, num_warps, num_stages), the first that fits the GPU's
#: shared memory is used. The second is for GPUs with 64 KiB per block (a T4) and head
#: dimension 128, where the first needs ~100 KiB in float32 and ~80 KiB in float16; from
#: compute capability 8.0 on the first always fits (:func:`~attn_edu.kernels.flash_triton.backward_configs`).
BWD_CONFIGS_CUDA = [
    (BWD_BLOCK_M_CUDA, BWD_BLOCK_N_CUDA, BWD_WARPS_CUDA, BWD_STAGES_CUDA),
    (16, 32, 4, 1),
]


def backward_configs(capability: Tuple[int, int], head_dim: int = 64, precision: str = "tf32") -> list:
    """The backward configurations (BLOCK_M, BLOCK_N, num_warps, num_stages) the launcher
    tries in order on a GPU of this compute capability (fixed: the backward is never
    autotuned). ``precision="ieee"`` (exact float32): ``IEEE_BACKWARD_CONFIG``. Before 8.0
    (a T4: FMA code, 64 KiB of shared memory) the small last entry of ``BWD_CONFIGS_CUDA``,
    which spills least there. From 8.0 the first (at most ~64 KiB of shared memory, the
    smallest of those GPUs has 99 KiB), with 8 warps above d = 64 before Hopper (4 spill
    on sm_80 there)."""
    if precision == "ieee":
        return [IEEE_BACKWARD_CONFIG]
    cap = tuple(capability)
    if cap < (8, 0):
        return [BWD_CONFIGS_CUDA[-1]]
    bm, bn, warps, stages = BWD_CONFIGS_CUDA[0]
    return [(bm, bn, 8 if head_dim > 64 and cap < TMA_MIN_CAPABILITY else warps, stages)]


#: From this compute capability on (Hopper) the forward copies its Q, K and V tiles with
#: TMA tensor descriptors when :func:`tma_compatible` allows; before it, pointer loads.
TMA_MIN_CAPABILITY = (9, 0)


#: Bytes of shared memory a TMA forward needs beyond its tiles, for the copies' barriers
#: (mbarrier objects) and their alignment (at most 1 KiB in every sm_90a row of the report).
TMA_EXTRA_SHARED = 1024


def atomic_backward_configs(capability: Tuple[int, int], head_dim: int = 64, precision: str = "tf32") -> list:
    """The configurations (BLOCK_M, BLOCK_N, num_warps, num_stages) ``backward="atomic_dq"``
    tries in order on a GPU of this compute capability (the compile report's choice).

    From 9.0, 64 x 64 tiles and 8 warps: all five matmuls become ``wgmma`` (the atomic dQ
    product has BLOCK_M rows and wgmma needs 64) with no spills at d = 64 and 128; then
    32 x 64 for GPUs with less shared memory. From 8.0, 32 x 64 with 8 warps (4 spill at
    d = 64 and 128 on sm_80), then the small tile; before 8.0 and for ``precision="ieee"``
    the two-kernel list (:func:`~attn_edu.kernels.flash_triton.backward_configs`)."""
    cap = tuple(capability)
    if precision == "ieee" or cap < (8, 0):
        return backward_configs(cap, head_dim, precision)
    if cap >= TMA_MIN_CAPABILITY:
        return [(64, 64, 8, 2), (32, 64, 8, 2)]
    return [(32, 64, 8, 2), BWD_CONFIGS_CUDA[-1]]


def forward_shared_memory(config: Tuple[int, int, int, int], head_dim: int,
                          dtype_bytes: int = 2, tma: bool = False) -> int:
    """Estimated shared memory (bytes) of one forward program: the Q tile plus ``num_stages``
    buffers of a K and a V tile, ``dtype_bytes * (BLOCK_M * D + stages * BLOCK_N * 2 * D)``
    with D the padded head dimension, plus ``TMA_EXTRA_SHARED`` with ``tma``. An upper
    bound within 1 KiB of what Triton 3.9 allocates on sm_90a (TMA), an upper bound on sm_80
    (``python -m attn_edu.kernels.report`` measures both)."""
    bm, bn, _, stages = config
    d = padded_head_dim(head_dim)
    return dtype_bytes * (bm * d + stages * bn * 2 * d) + (TMA_EXTRA_SHARED if tma else 0)


def forward_configs(capability: Tuple[int, int], head_dim: int = 64,
                    shared_memory: Optional[int] = None, dtype_bytes: int = 2,
                    precision: str = "tf32") -> list:
    """The forward configurations (BLOCK_M, BLOCK_N, num_warps, num_stages) the autotuner
    tries on a GPU of this compute capability for head dimension ``head_dim``.

    ``precision="ieee"`` (exact float32, FMA code): ``[IEEE_FORWARD_CONFIG]``, launched
    without the autotuner. Before 8.0 (a T4, 7.5: no tensor cores in Triton, FMA only) the
    one small ``FWD_CONFIGS_PRE_AMPERE``. From 8.0 on, ``FWD_CONFIGS_CUDA`` pruned by the two
    rules of Triton's fused-attention tutorial, ``BLOCK_N <= max(D, 32)`` (D the padded head
    dimension) and 8 warps only for 128 x 128 tiles (before Hopper, above d = 64, also for
    128 x 64: the A100's tile at d = 128, clean in the report), and by two from the compile report:
    no tile of ``FWD_SPILL_TILES_D128`` (before 9.0 ``FWD_SPILL_TILES_D128_AMPERE``) when
    ``head_dim > 64``, and :func:`forward_shared_memory` (with TMA's barriers from
    ``TMA_MIN_CAPABILITY`` on) within ``shared_memory`` bytes
    (default: the limit of ``attn_edu.kernels._targets.TARGETS`` for this capability,
    else ``SHARED_MEMORY_FALLBACK``). At most 12 configurations at d = 64 and d = 128.
    float32 on TF32 (``dtype_bytes=4``): ``FWD_CONFIGS_TF32`` pruned the same way (its
    spills: ``FWD_SPILL_TILES_TF32_D128_AMPERE``), at most 6.
    """
    cap = tuple(capability)
    if precision == "ieee":
        return [IEEE_FORWARD_CONFIG]
    if cap < (8, 0):
        return list(FWD_CONFIGS_PRE_AMPERE)
    if shared_memory is None:
        known = {divmod(t.capability, 10): t.shared_memory for t in _targets.TARGETS.values()}
        shared_memory = known.get(cap, SHARED_MEMORY_FALLBACK)
    d = padded_head_dim(head_dim)
    measured = FWD_SPILL_CONFIGS.get((90 if cap >= (9, 0) else 80, 64 if d <= 64 else 128, dtype_bytes), set())
    if dtype_bytes == 4:  # float32 on TF32 tensor cores
        spills = set() if cap >= (9, 0) else FWD_SPILL_TILES_TF32_D128_AMPERE
        return [c for c in FWD_CONFIGS_TF32 if c[1] <= max(d, 32) and c not in measured
                and not (head_dim > 64 and c[:3] in spills)
                and forward_shared_memory(c, head_dim, 4, cap >= TMA_MIN_CAPABILITY) <= shared_memory]
    spills = FWD_SPILL_TILES_D128 if cap >= (9, 0) else FWD_SPILL_TILES_D128_AMPERE
    ampere_d128 = head_dim > 64 and cap < (9, 0)  # the A100's 128 x 64 tile with 8 warps
    return [c for c in FWD_CONFIGS_CUDA
            if c[1] <= max(d, 32)
            and (c[2] == 4 or c[0] * c[1] >= 128 * 128 or (ampere_d128 and c[:2] == (128, 64)))
            and not (head_dim > 64 and c[:3] in spills) and c not in measured
            and forward_shared_memory(c, head_dim, dtype_bytes, cap >= TMA_MIN_CAPABILITY) <= shared_memory]


#: What the forward's autotuner keys on, length and batch x heads *buckets* (powers of
#: two: the best tile for B * H = 8 is not the best for 64, where the grid already fills
#: the GPU), head dims, causality, precision, TMA or pointer loads (Triton adds the dtypes).
FWD_AUTOTUNE_KEY = ["LQ_BUCKET", "LK_BUCKET", "BH_BUCKET", "HEAD_DK", "HEAD_DV", "CAUSAL",
                    "INPUT_PRECISION", "USE_TMA"]


def _device_shared_memory() -> Optional[int]:
    """The current GPU's shared memory per block (opt-in maximum), as Triton's driver reports it."""
    try:
        props = triton.runtime.driver.active.utils.get_device_properties(torch.cuda.current_device())
        return int(props["max_shared_mem"])
    except Exception:  # pragma: no cover - no driver: forward_configs' default
        return None


def _prune_fwd_configs(configs, named_args, **kwargs):
    """Keep the configurations of :func:`~attn_edu.kernels.flash_triton.forward_configs` for the GPU, head dim and dtype in use."""
    args = {**named_args, **kwargs}
    head_dim = max(args.get("HEAD_DK", 64), args.get("HEAD_DV", 64))
    q = args.get("Q")
    wanted = set(forward_configs(torch.cuda.get_device_capability(), head_dim, _device_shared_memory(),
                                 q.element_size() if hasattr(q, "element_size") else 2,
                                 args.get("INPUT_PRECISION", "tf32")))
    key = lambda c: (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)  # noqa: E731
    kept = [c for c in configs if key(c) in wanted]
    # nothing left (it should not happen): the two small tiles, which fit anywhere
    return kept or [c for c in configs if key(c) in FWD_CONFIGS_PRE_AMPERE]


if HAS_TRITON:
    _attn_fwd_fixed = triton.jit(_attn_fwd_kernel)  # launched with a given configuration
    if _BUILT_INTERPRETED:
        _attn_fwd = _attn_fwd_fixed
    else:
        _attn_fwd = triton.autotune(
            configs=[triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                     for bm, bn, w, s in FWD_CONFIGS_CUDA + FWD_CONFIGS_PRE_AMPERE],
            key=FWD_AUTOTUNE_KEY,
            prune_configs_by={"early_config_prune": _prune_fwd_configs},
        )(_attn_fwd_fixed)
else:  # pragma: no cover
    _attn_fwd = _attn_fwd_fixed = _attn_fwd_kernel


# ----------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------
def check_triton_inputs(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                        scale: Optional[float] = None) -> Tuple[Optional[str], float]:
    """Validate inputs for the kernels; return (causal alignment or None, scale).

    The one input check of the three kernels, ``attn_edu.kernels._targets.check_kernel_inputs``,
    with this file's ``LIMITS``: the reference's checks (``attn_edu._checks``, the same
    messages), then 4-D (B, H, L, D) tensors with the same B and H, dtype float16, bfloat16
    (on GPUs of compute capability >= 8.0, never in the interpreter) or float32,
    ``1 <= d_k, d_v <= 128``, and a CUDA device (or the CPU with ``TRITON_INTERPRET=1``).
    """
    _targets.check_kernel_inputs(LIMITS, q, k, v, _BUILT_INTERPRETED)
    return _checks.check_causal(causal), _checks.check_scale(scale, q.shape[-1])


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


def kernel_source(kernel: str, start: Optional[str] = None, stop: Optional[str] = None) -> str:
    """The source of one of this file's kernels, or a stretch of it, to read on a page.

    ``kernel`` is one of ``"forward"`` (the program of one query block), ``"forward_inner"``
    (its loop over key blocks), ``"backward_preprocess"``, ``"backward_dkdv"`` and
    ``"backward_dq"``. With ``start`` the text begins at the first line containing it;
    with ``stop`` it ends before the next line containing that. Dedented. Chapter 10
    prints the kernels this way, a few lines at a time.
    """
    return kernel_text({"forward": _attn_fwd_kernel, "forward_inner": _attn_fwd_inner,
                        "backward_preprocess": _attn_bwd_preprocess, "backward_dkdv": _attn_bwd_dkdv,
                        "backward_dq": _attn_bwd_dq}, kernel, start, stop)


# ----------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------
def _strides(x: Tensor):
    return x.stride(0), x.stride(1), x.stride(2), x.stride(3)


def _capability(x: Tensor) -> Optional[Tuple[int, int]]:
    """The compute capability of ``x``'s GPU; None under the interpreter."""
    return None if _BUILT_INTERPRETED else tuple(torch.cuda.get_device_capability(x.device))


def _precision(x: Tensor, precision: Optional[str]) -> str:
    """The launch's ``tl.dot`` input precision: ``attn_edu.kernels._targets.input_precision``."""
    return _targets.input_precision(_checks.dtype_name(x.dtype), _capability(x), precision)


_CONFIG_KEYS = ("block_m", "block_n", "num_warps", "num_stages")


def _check_config(config) -> Optional[Tuple[int, int, int, int]]:
    """``config=`` of the public functions as a (BLOCK_M, BLOCK_N, num_warps, num_stages) tuple."""
    if config is None:
        return None
    if isinstance(config, dict):
        missing = [key for key in _CONFIG_KEYS if key not in config]
        if missing:
            raise ValueError(f"config as a dict needs the keys {', '.join(_CONFIG_KEYS)} (what "
                             f"chosen_forward_config returns); got {sorted(config)}")
        config = tuple(config[key] for key in _CONFIG_KEYS)
    if not (isinstance(config, (tuple, list)) and len(config) == 4
            and all(isinstance(x, int) and not isinstance(x, bool) for x in config)):
        raise ValueError("config must be (BLOCK_M, BLOCK_N, num_warps, num_stages), four ints, or "
                         f"the dict chosen_forward_config returns; got {config!r}")
    bm, bn, warps, stages = config
    pow2 = lambda x, lo, hi: lo <= x <= hi and x & (x - 1) == 0  # noqa: E731
    if not (pow2(bm, 16, 256) and pow2(bn, 16, 256) and pow2(warps, 1, 16) and stages >= 1):
        raise ValueError("config needs BLOCK_M and BLOCK_N powers of two from 16 to 256, num_warps a "
                         f"power of two from 1 to 16 and num_stages >= 1; got {tuple(config)}")
    return tuple(config)


def _fixed_forward_config(precision: str, config: Optional[Tuple[int, int, int, int]]):
    """The forward's configuration when it is not autotuned, with how it was chosen, else None:
    the interpreter's small blocks (or ``config``'s), a caller's ``config``, or exact float32's
    ``IEEE_FORWARD_CONFIG``."""
    if _BUILT_INTERPRETED:  # (num_warps and num_stages mean nothing there)
        return config or (INTERPRET_BLOCK_M, INTERPRET_BLOCK_N, None, None), "interpreter"
    if config is not None:
        return config, "config"
    if precision == "ieee":
        return IEEE_FORWARD_CONFIG, "ieee"
    return None


#: The autotuner's choices in this process, launch key -> (BLOCK_M, BLOCK_N, warps, stages).
_TUNED: dict = {}


def _launch_key(q: Tensor, k: Tensor, v: Tensor, causal: bool, precision: str, use_tma: bool) -> tuple:
    """What the forward's autotuner keys on (``FWD_AUTOTUNE_KEY`` and the dtype), plus the device."""
    B, H, LQ, DK = q.shape
    return (str(q.device), str(q.dtype), triton.next_power_of_2(LQ), triton.next_power_of_2(k.shape[2]),
            triton.next_power_of_2(B * H), DK, v.shape[3], causal, precision, use_tma)


def chosen_forward_config(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                          precision: Optional[str] = None, config=None) -> Optional[dict]:
    """The configuration the forward launches with for these inputs in this process.

    A dict with ``block_m``, ``block_n``, ``num_warps``, ``num_stages`` (None under the
    interpreter), ``precision`` (what ``tl.dot`` computes float32 with) and ``how``:
    ``"interpreter"``, ``"config"`` (the caller's ``config=``), ``"ieee"`` (exact float32's
    one configuration) or ``"autotuned"`` -- the autotuner's choice for the inputs' key
    (``FWD_AUTOTUNE_KEY``), known once a call with that key has run: None before. Give it
    to a later process as ``config=`` to launch the same kernel there (JSON-friendly).
    """
    align, _ = check_triton_inputs(q, k, v, causal, None)
    prec = _precision(q, precision)
    fixed = _fixed_forward_config(prec, _check_config(config))
    if fixed is not None:
        values, how = fixed
    else:
        values = _TUNED.get(_launch_key(q, k, v, align is not None, prec, _use_tma(q, k, v, prec)))
        if values is None:
            return None
        how = "autotuned"
    return {**dict(zip(_CONFIG_KEYS, values)), "precision": prec, "how": how}


def tma_compatible(*tensors: Tensor) -> bool:
    """Whether TMA descriptors can address these (B, H, L, D) tensors: a 16-byte aligned
    start, unit stride along D, and the other strides multiples of 16 bytes (the row
    stride always, the batch and head strides where that dimension has more than one
    entry, since each (b, h) matrix is a descriptor of its own). A contiguous float16 or
    bfloat16 tensor qualifies when D is a multiple of 8; the launcher falls back to pointer
    loads otherwise."""
    for x in tensors:
        size = x.element_size()
        if x.data_ptr() % 16 or (x.shape[3] > 1 and x.stride(3) != 1) or (x.stride(2) * size) % 16:
            return False
        if any(x.shape[i] > 1 and (x.stride(i) * size) % 16 for i in (0, 1)):
            return False
    return True


def _torch_scratch(size: int, alignment: int, stream: Optional[int]) -> Tensor:
    """Global scratch for device-side tensor descriptors, from PyTorch's caching allocator."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_scratch_allocator() -> None:
    """A kernel that builds tensor descriptors on the device needs 128 bytes of global
    memory per program for them, which Triton asks of the allocator given to
    ``triton.set_allocator``; install PyTorch's unless the caller has set one."""
    from triton.runtime import _allocation  # where Triton keeps the current allocator

    current = getattr(_allocation, "_allocator", None)
    if current is None or isinstance(current.get(), getattr(_allocation, "NullAllocator", ())):
        triton.set_allocator(_torch_scratch)


def _use_tma(q: Tensor, k: Tensor, v: Tensor, precision: str = "tf32") -> bool:
    """The launcher's choice: TMA descriptors on a GPU from ``TMA_MIN_CAPABILITY`` when the
    tensors allow them (:func:`tma_compatible`); never under the interpreter's default, nor
    for exact float32 (FMA code: with descriptors its small tile spills on sm_90a)."""
    return (not _BUILT_INTERPRETED and q.is_cuda and precision != "ieee"
            and tuple(torch.cuda.get_device_capability(q.device)) >= TMA_MIN_CAPABILITY
            and tma_compatible(q, k, v))


def _forward(q: Tensor, k: Tensor, v: Tensor, align: Optional[str], scale: float,
             use_tma: Optional[bool] = None, precision: Optional[str] = None, config=None):
    B, H, LQ, DK = q.shape
    LK, DV = k.shape[2], v.shape[3]
    out = torch.empty((B, H, LQ, DV), dtype=q.dtype, device=q.device)  # (B, H, Lq, Dv)
    lse = torch.empty((B, H, LQ), dtype=torch.float32, device=q.device)  # (B, H, Lq)
    if LQ == 0:
        return out, lse
    if LK == 0:  # no keys: every row is empty
        return out.zero_(), lse.fill_(float("-inf"))
    if scale < 0:  # the kernel needs qk_scale > 0 (it takes the max of the raw scores):
        q, scale = -q, -scale  # (-q) k^T * (-scale) is the same product, exactly
    args = (q, k, v, out, lse, *_strides(q), *_strides(k), *_strides(v), *_strides(out),
            H, LQ, LK, scale * LOG2E.value, causal_offset_arg(LQ, LK, align),
            triton.next_power_of_2(LQ), triton.next_power_of_2(LK), triton.next_power_of_2(B * H))
    prec = _precision(q, precision)
    use_tma = _use_tma(q, k, v, prec) if use_tma is None else use_tma
    if use_tma and not _BUILT_INTERPRETED:
        _ensure_scratch_allocator()
    meta = dict(HEAD_DK=DK, HEAD_DV=DV, BLOCK_DK=padded_head_dim(DK), BLOCK_DV=padded_head_dim(DV),
                CAUSAL=align is not None, INPUT_PRECISION=prec, USE_TMA=use_tma)
    # one grid axis, B * H * query blocks: CUDA's x axis takes 2**31 - 1 programs (y: 65,535)
    fixed = _fixed_forward_config(prec, config)
    if fixed is not None:
        (bm, bn, warps, stages), _ = fixed
        extra = {} if _BUILT_INTERPRETED else dict(num_warps=warps, num_stages=stages)
        _attn_fwd_fixed[launch_grid(B * H, LQ, bm)](*args, **meta, BLOCK_M=bm, BLOCK_N=bn, **extra)
    else:
        grid = lambda META: launch_grid(B * H, LQ, META["BLOCK_M"])  # noqa: E731
        _attn_fwd[grid](*args, **meta)
        best = _attn_fwd.best_config
        _TUNED[_launch_key(q, k, v, align is not None, prec, use_tma)] = (
            best.kwargs["BLOCK_M"], best.kwargs["BLOCK_N"], best.num_warps, best.num_stages)
    return out, lse


#: float32 gradients are computed with exact float32 products (FMA code) and
#: ``IEEE_BACKWARD_CONFIG`` on every GPU, whatever ``precision`` the forward used: the
#: backward's TF32 tiles spilled registers on sm_80 and sm_90a in the compile report
#: (144-284 B at 32 x 64), and its kernels are not autotuned.
BACKWARD_FLOAT32 = "ieee"
#: The backward's two schedules, chosen with ``triton_attention(..., backward=...)``.
#: ``"two_kernels"``, a dK/dV kernel and a dQ kernel, each program owning the rows it writes (7 matmuls per
#: tile pair, deterministic); ``"atomic_dq"``, FlashAttention-2's Algorithm 2: one kernel
#: over key blocks adds dQ with float32 atomics (5 matmuls, dQ's rounding order varies).
BACKWARDS = ("two_kernels", "atomic_dq")


def _backward(do: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
              align: Optional[str], scale: float, mode: str = "two_kernels",
              precision: Optional[str] = None):
    B, H, LQ, DK = q.shape
    LK, DV = k.shape[2], v.shape[3]
    dq = torch.zeros((B, H, LQ, DK), dtype=q.dtype, device=q.device)  # contiguous
    dk = torch.zeros((B, H, LK, DK), dtype=k.dtype, device=k.device)
    dv = torch.zeros((B, H, LK, DV), dtype=v.dtype, device=v.device)
    if LQ == 0 or LK == 0:
        return dq, dk, dv
    bdk, bdv = padded_head_dim(DK), padded_head_dim(DV)
    delta = torch.empty((B, H, LQ), dtype=torch.float32, device=q.device)  # (B, H, Lq)
    # every grid is one axis, B * H * blocks, as in the forward: any B * H launches
    _attn_bwd_preprocess[launch_grid(B * H, LQ, 32)](
        out, do, delta, *_strides(out), *_strides(do), H, LQ,
        HEAD_DV=DV, BLOCK_M=32, BLOCK_DV=bdv)
    common = (*_strides(q), *_strides(k), *_strides(v), *_strides(do),
              H, LQ, LK, scale, causal_offset_arg(LQ, LK, align))
    _precision(q, precision)  # (checked; the backward of float32 is exact whatever it says)
    prec = _precision(q, BACKWARD_FLOAT32)
    meta = dict(HEAD_DK=DK, HEAD_DV=DV, BLOCK_DK=bdk, BLOCK_DV=bdv, CAUSAL=align is not None,
                INPUT_PRECISION=prec)
    atomic = mode == "atomic_dq"
    # atomic_dq: dQ accumulates in float32 across programs; otherwise the slot is unused
    dq_acc = torch.zeros((B, H, LQ, DK), dtype=torch.float32, device=q.device) if atomic else delta
    if _BUILT_INTERPRETED:
        configs = [(INTERPRET_BLOCK_M, INTERPRET_BLOCK_N, None, None)]
    else:
        cap = _capability(q)
        pick = atomic_backward_configs if atomic else backward_configs
        configs = pick(cap, max(DK, DV), prec)
    for i, (bm, bn, warps, stages) in enumerate(configs):
        extra = {} if warps is None else dict(num_warps=warps, num_stages=stages)
        try:
            _attn_bwd_dkdv[launch_grid(B * H, LK, bn)](
                q, k, v, do, dk, dv, dq_acc, lse, delta, *common, **meta, ATOMIC_DQ=atomic,
                BLOCK_M=bm, BLOCK_N=bn, **extra)
            if atomic:
                dq = dq_acc.to(q.dtype)
                break
            # the dQ kernel mirrors it: bn query rows per program, bm keys per step (its
            # matmuls then have bn >= 64 rows, what Hopper's wgmma needs)
            _attn_bwd_dq[launch_grid(B * H, LQ, bn)](
                q, k, v, do, dq, lse, delta, *common, **meta, BLOCK_M=bn, BLOCK_N=bm, **extra)
            break
        except _targets.OutOfResources:  # not enough shared memory on this GPU: smaller blocks
            if i == len(configs) - 1:
                raise
    return dq, dk, dv


# ----------------------------------------------------------------------------
# Autograd wrapper and the public functions
# ----------------------------------------------------------------------------
class _TritonAttention(torch.autograd.Function):
    """Forward saves q, k, v, out and lse (O(L) extra memory, not O(L^2));
    backward recomputes the softmax tiles from them."""

    @staticmethod
    def forward(ctx, q, k, v, align, scale, mode, precision, config):
        out, lse = _forward(q, k, v, align, scale, precision=precision, config=config)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.align, ctx.scale, ctx.mode, ctx.precision = align, scale, mode, precision
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(do, q, k, v, out, lse, ctx.align, ctx.scale, ctx.mode, ctx.precision)
        return dq, dk, dv, None, None, None, None, None


def triton_attention_forward(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                             scale: Optional[float] = None, *, precision: Optional[str] = None,
                             config=None) -> Tuple[Tensor, Tensor]:
    r"""Fused attention forward: ``softmax(q k^T * scale) v`` and its log-sum-exp.

    Args:
        q: (B, H, L_q, d_k); k: (B, H, L_k, d_k); v: (B, H, L_k, d_v); one dtype out
            of float16, bfloat16, float32; ``1 <= d_k, d_v <= 128``; any lengths.
        causal: False, True/"top_left" (key j visible to query i when j <= i, like
            PyTorch's ``is_causal``) or "bottom_right" (j <= i + L_k - L_q).
        scale: multiplies the scores; default 1/sqrt(d_k).
        precision: how float32 inputs are multiplied (ignored for float16 and bfloat16, whose
            products are exact in float32 anyway): None (default) = ``"tf32"`` on GPUs of
            compute capability 8.0 and newer (tensor cores, autotuned; the float16
            tolerance rule applies), ``"ieee"`` before 8.0 (a T4 has no TF32) and in the
            interpreter; ``"ieee"``: exact float32 products (the float32 tolerance rule),
            fused multiply-adds with one fixed small configuration, ``IEEE_FORWARD_CONFIG``,
            never autotuned. The rule and the tolerances:
            ``attn_edu.kernels._targets.input_precision``.
        config: launch the forward with this (BLOCK_M, BLOCK_N, num_warps, num_stages),
            or a dict :func:`~attn_edu.kernels.flash_triton.chosen_forward_config` returned, instead of autotuning: the
            way to get the same bits in another process (the interpreter uses only the two
            block sizes). Default None: autotuned (:func:`~attn_edu.kernels.flash_triton.forward_configs`), except for
            exact float32.

    Returns:
        ``out`` (B, H, L_q, d_v) in the input dtype and ``lse`` (B, H, L_q) float32,
        ``lse_i = log sum_j exp(s_ij)`` over the visible keys (``-inf`` for a row with
        none, whose output is zero). No gradient flows through this function; use
        :func:`triton_attention` for training.

    FLOPs (the count benchmarks quote): ``4 * B * H * L_q * L_k * d`` for the two
    matmuls, about half of it when causal.
    """
    align, s = check_triton_inputs(q, k, v, causal, scale)
    _precision(q, precision)  # a bad value fails here, before any launch
    with torch.no_grad():
        return _forward(q, k, v, align, s, precision=precision, config=_check_config(config))


def triton_attention(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                     scale: Optional[float] = None, backward: str = "two_kernels", *,
                     precision: Optional[str] = None, config=None) -> Tensor:
    r"""Fused attention with a backward pass: ``softmax(q k^T * scale) v``.

    Same arguments and semantics as :func:`triton_attention_forward`; returns only
    the output (B, H, L_q, d_v). ``out.backward(...)`` runs the FlashAttention-2
    backward (recomputation from the saved log-sum-exp) and gives dq, dk, dv in
    the input dtype. ``backward``: one of ``BACKWARDS``, ``"two_kernels"`` (default:
    a dK/dV kernel and a dQ kernel, no atomics, the same bits every run) or
    ``"atomic_dq"`` (one kernel, dQ added with float32 atomics: two matmuls fewer per
    tile pair, a float32 dQ buffer, and dQ's last bits may change from run to run).
    ``precision`` and ``config`` as in :func:`triton_attention_forward` (the backward's
    configurations are fixed per GPU, :func:`~attn_edu.kernels.flash_triton.backward_configs`, never autotuned; float32
    gradients always use exact products, ``BACKWARD_FLOAT32``).

    What is deterministic, exactly: on one GPU with one Triton version, the forward with a
    fixed configuration (``config=``, exact float32, or the interpreter) gives the same
    bits in every run and every process, and so does the ``"two_kernels"`` backward after
    it (its configuration is fixed; it reads the forward's output and lse). Autotuned, the
    forward's configuration is chosen by timing, once per key and process: another process
    may choose another tile and get other last bits (within the tolerance rule), so for
    bit-reproducible runs pass ``config=chosen_forward_config(...)`` recorded by the first.
    ``"atomic_dq"``: dK and dV as deterministic as above, dQ not (atomic float32 additions
    in any order).
    """
    if backward not in BACKWARDS:
        raise ValueError(f"backward must be one of {', '.join(map(repr, BACKWARDS))}; got {backward!r}")
    align, s = check_triton_inputs(q, k, v, causal, scale)
    _precision(q, precision)
    return _TritonAttention.apply(q, k, v, align, s, backward, precision, _check_config(config))


# ----------------------------------------------------------------------------
# For the ahead-of-time compile report (attn_edu.kernels.report)
# ----------------------------------------------------------------------------
def aot_kernels() -> list:
    """This file's kernels as ``AotKernel`` (``attn_edu/kernels/_shared.py``) records: what
    ``python -m attn_edu.kernels.report`` compiles for sm_75 / sm_80 / sm_90a without a GPU
    (the forward with the autotuner's configurations for the target and precision, or
    exact float32's one, both backward kernels with :func:`~attn_edu.kernels.flash_triton.backward_configs`, and the dK/dV kernel once more with the atomic
    dQ of ``backward="atomic_dq"``; non-causal, same d for q, k and v; the forward
    with TMA descriptors from ``TMA_MIN_CAPABILITY`` on, as the launcher picks for
    contiguous tensors)."""
    def meta(d, dtype, config, precision):
        bd = padded_head_dim(d)
        return dict(HEAD_DK=d, HEAD_DV=d, BLOCK_DK=bd, BLOCK_DV=bd, CAUSAL=False,
                    INPUT_PRECISION=precision, BLOCK_M=config[0], BLOCK_N=config[1])

    def fwd_configs(capability, d, dtype, precision):
        return forward_configs(capability, d, dtype_bytes=4 if dtype == "float32" else 2, precision=precision)

    def bwd_configs(pick, capability, d, dtype, precision):  # float32: exact only (BACKWARD_FLOAT32)
        return [] if dtype == "float32" and precision != BACKWARD_FLOAT32 else pick(capability, d, precision)

    def dq_configs(capability, d, dtype, precision):  # the dQ launch swaps the two blocks (see _backward)
        return [(bn, bm, w, s) for bm, bn, w, s in bwd_configs(backward_configs, capability, d, dtype, precision)]

    raw = lambda f: getattr(f, "fn", f)  # noqa: E731  (the autotuner wraps the jitted kernel)
    qkv = {"Q": "{dtype}", "K": "{dtype}", "V": "{dtype}"}
    units = ("stride_qd", "stride_kd", "stride_vd", "stride_od", "stride_dod")
    dkdv = {**qkv, "DO": "{dtype}", "DK": "{dtype}", "DV": "{dtype}", "DQ": "fp32", "Lse": "fp32",
            "Delta": "fp32"}  # both backward schedules launch the same dK/dV kernel
    return [
        AotKernel("forward", raw(_attn_fwd), {**qkv, "Out": "{dtype}", "Lse": "fp32"}, ("qk_scale",),
                  meta, fwd_configs, unit_strides=units, needs_tma=True,
                  per_target=lambda cap, prec: {"USE_TMA": tuple(cap) >= TMA_MIN_CAPABILITY and prec != "ieee"}),
        AotKernel("backward_dkdv", _attn_bwd_dkdv, dkdv, ("sm_scale",), meta,
                  lambda cap, d, dtype, prec: bwd_configs(backward_configs, cap, d, dtype, prec), unit_strides=units,
                  per_target=lambda cap, prec: {"ATOMIC_DQ": False}),
        AotKernel("backward_atomic_dq", _attn_bwd_dkdv, dkdv, ("sm_scale",), meta,
                  lambda cap, d, dtype, prec: bwd_configs(atomic_backward_configs, cap, d, dtype, prec),
                  unit_strides=units,
                  per_target=lambda cap, prec: {"ATOMIC_DQ": True}),
        AotKernel("backward_dq", _attn_bwd_dq,
                  {**qkv, "DO": "{dtype}", "DQ": "{dtype}", "Lse": "fp32", "Delta": "fp32"},
                  ("sm_scale",), meta, dq_configs, unit_strides=units),
    ]
