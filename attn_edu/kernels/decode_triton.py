r"""Split-KV decoding in Triton (Flash-Decoding): a few queries against a long KV cache.

At decode time each sequence brings ``L_q = 1`` new query (or a few, e.g. speculative
tokens) per head, and attends to all ``L_k`` cached keys. Chapter 10's kernel gives one
program to each block of queries of each (batch, head): with one query that is
``B * H`` programs, too few to fill a GPU of 100+ SMs when the batch is small, and each
one streams the whole cache alone. Flash-Decoding {cite}`dao2023flashdecoding` also
splits the keys into ``num_splits`` chunks:

1. ``_split_kernel``, grid ``(B * H_kv, num_splits, row blocks)``: one program takes one
   chunk of one sequence's keys for one K/V head, and **all** the query rows that read
   that head -- the ``g = H_q / H_kv`` query heads of its group times the ``L_q``
   queries, packed into blocks of ``BLOCK_M`` rows, 16 to 64 (:func:`block_m_for`; more
   rows than 64 take further row blocks, the grid's third axis), so grouped-query
   attention reads each K/V tile once for up to 64 of the group's rows. It runs chapter 09's online softmax
   over its chunk in blocks of ``BLOCK_N`` keys and writes the chunk's softmax state
   (float32): running max ``m_c``, sum ``l_c`` and normalised output ``o_c``; an empty
   or fully masked chunk writes ``m_c = -inf``, ``l_c = 0``, ``o_c = 0``.
2. ``_reduce_kernel``, one program per (batch, query head, query): chapter 09's merge
   of (m, l, o) states across the chunks, with ``M = max_c m_c``,
   :math:`w_c = \ell_c e^{m_c - M}`, :math:`o = \sum_c w_c o_c / \sum_c w_c` and
   :math:`\operatorname{lse} = M + \log \sum_c w_c` --
   :func:`attn_edu.precision.merge_softmax_stats` over all chunks at once. (Keeping
   ``m_c`` and ``l_c`` apart, rather than one ``lse_c = m_c + log l_c`` as
   :func:`attn_edu.decoding.merge_partials` takes, spares float32 the rounding
   of ``exp(lse_c - lse)``, whose relative error grows with ``|lse_c|``.)

Chunks start on ``BLOCK_N`` boundaries (:func:`attn_edu.decoding.chunk_size`). Optional
per-sequence cache lengths ``seqlens`` (B,) let a batch of different lengths share one
padded cache; splits past a sequence's end are empty. Causal alignment is per sequence:
bottom-right (the queries are the last ``L_q`` positions of each sequence, what decoding
needs) or top-left. Batch and head offsets are computed in 64-bit, so caches past
2^31 elements are addressed correctly.

Launch configurations (``BLOCK_N``, ``num_warps``, ``num_stages``) are listed per GPU
target in ``DECODE_CONFIGS`` and chosen by :func:`pick_config`;
:func:`compile_specs` lists everything there is to compile ahead of time for a target
(``triton.compile`` with a ``GPUTarget``, no GPU needed). The L_q = 1 benchmark
against PyTorch's SDPA lives with the other benchmarks (:func:`attn_edu.bench.decode_sweep`).

Runs on a CUDA GPU, or on the CPU under ``TRITON_INTERPRET=1`` (set before triton is
first imported). Explained in chapter 13.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from .. import _checks
from .._call import require_tensor
from . import _direct, _interpret, _targets
from ._plans import plan_cache
from ._shared import HAS_TRITON, LN2, LOG2E, TRITON_DTYPES, causal_offset_arg, jit, padded_head_dim, tl

__all__ = ["split_kv_decode", "check_decode_inputs", "DecodeConfig", "DECODE_CONFIGS", "INTERPRET_CONFIG",
           "pick_config", "choose_num_splits", "block_m_for", "compile_specs", "LIMITS",
           "MAX_SPLITS", "SPLIT_TOLERANCE", "kernel_source"]

#: Most splits the reduction merges (its block of lse values).
MAX_SPLITS = 128
#: :func:`choose_num_splits` takes the fewest splits whose modelled time is within this
#: fraction of the best split count's.
SPLIT_TOLERANCE = 0.05


# The mode the kernels below were built in (read once, when @triton.jit runs).
_BUILT_INTERPRETED = _interpret.requested()

#: The inputs these kernels take, checked by ``attn_edu.kernels._targets.check_kernel_inputs``:
#: float16, bfloat16 or float32; head dimensions 1 to 128 (padded inside to a power of two
#: >= 16); q, k and v with the same batch axis, H_q a multiple of H_kv with ``enable_gqa=True``.
LIMITS = _targets.KernelLimits("the Triton decode kernel", "attn_edu.decoding.split_kv_attention", gqa=True)


# ----------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------
#: The names of the Triton kernels this module launches (``attn_edu.bench.host`` replaces them
#: with a no-op to time the package's own Python per call, the launches stubbed out).
LAUNCHED = ("_split_kernel", "_reduce_kernel")


@jit
def _split_kernel(Q, K, V, SeqLens, OPart, MPart, LPart,
                  stride_qb, stride_qh, stride_qm, stride_qd,
                  stride_kb, stride_kh, stride_kn, stride_kd,
                  stride_vb, stride_vh, stride_vn, stride_vd,
                  HKV, LQ, LK, OFFSET, CHUNK, NUM_SPLITS, qk_scale,
                  GROUP: tl.constexpr, HEAD_DK: tl.constexpr, HEAD_DV: tl.constexpr,
                  BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr, BOTTOM_RIGHT: tl.constexpr, HAS_SEQLENS: tl.constexpr,
                  INPUT_PRECISION: tl.constexpr):
    """One program = one chunk of keys x one (batch, K/V head) x one block of query rows.

    Row r of the block is query ``r % LQ`` of query head ``kv_head * GROUP + r // LQ``.
    Writes OPart (B, H_q, L_q, NUM_SPLITS, HEAD_DV), MPart and LPart (B, H_q, L_q,
    NUM_SPLITS), float32, contiguous: the chunk's (m, l, o) state, m in base 2.
    """
    # 1. who am I: a (batch, K/V head), a split, a block of packed query rows; B * H_kv on
    # the grid's x axis (up to 2**31 - 1; y and z stop at 65,535)
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    off_b = (pid_bh // HKV).to(tl.int64)  # 64-bit: b * stride_b may pass 2^31
    off_kvh = (pid_bh % HKV).to(tl.int64)
    rows = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    row_ok = rows < GROUP * LQ
    head = off_kvh * GROUP + rows // LQ  # (BLOCK_M,) query head of each row
    qi = rows % LQ  # (BLOCK_M,) query index of each row
    offs_n = tl.arange(0, BLOCK_N)
    offs_dk = tl.arange(0, BLOCK_DK)
    offs_dv = tl.arange(0, BLOCK_DV)

    # 2. this sequence's length, this split's keys [lo, hi), and the causal offset
    if HAS_SEQLENS:  # clamped into 0 .. LK here: the launcher does not check on the host
        lk = tl.minimum(tl.maximum(tl.load(SeqLens + off_b), 0), LK)
    else:
        lk = LK
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, lk)
    if CAUSAL:
        # key j is visible to query i when j <= i + offset; OFFSET is masks.causal_offset for
        # (LQ, LK) at launch. Bottom-right, a sequence shorter than LK ends earlier, so its
        # diagonal moves with its length; top-left it does not move.
        offset = OFFSET
        if BOTTOM_RIGHT and HAS_SEQLENS:
            offset += lk - LK
        hi = tl.minimum(hi, LQ + offset)  # keys the last query cannot see: never loaded

    # 3. the queries stay in registers; running statistics in float32
    q = tl.load(Q + off_b * stride_qb + head[:, None] * stride_qh
                + qi[:, None] * stride_qm + offs_dk[None, :] * stride_qd,
                mask=row_ok[:, None] & (offs_dk[None, :] < HEAD_DK), other=0.0)  # (BLOCK_M, BLOCK_DK)
    k_base = K + off_b * stride_kb + off_kvh * stride_kh
    v_base = V + off_b * stride_vb + off_kvh * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    # 4. the online softmax over this chunk, BLOCK_N keys at a time
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n  # (BLOCK_N,)
        col_ok = cols < hi
        col0 = tl.cast(start_n, tl.int64)  # 64-bit: start_n * stride passes 2**31 in long caches
        kT = tl.load(k_base + col0 * stride_kn + offs_n[None, :] * stride_kn + offs_dk[:, None] * stride_kd,
                     mask=col_ok[None, :] & (offs_dk[:, None] < HEAD_DK), other=0.0)  # (BLOCK_DK, BLOCK_N)
        s = tl.dot(q, kT, input_precision=INPUT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), base 2
        allowed = col_ok[None, :]
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= qi[:, None] + offset)
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key yet: no -inf - -inf
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + col0 * stride_vn + offs_n[:, None] * stride_vn + offs_dv[None, :] * stride_vd,
                    mask=col_ok[:, None] & (offs_dv[None, :] < HEAD_DV), other=0.0)  # (BLOCK_N, BLOCK_DV)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
        m_i = m_new

    # 5. this split's state (m, l, o): o normalised, m in base 2 (-inf, 0, 0 if empty)
    o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    part = ((off_b * (HKV * GROUP) + head) * LQ + qi) * NUM_SPLITS + split  # (BLOCK_M,) int64
    tl.store(OPart + part[:, None] * HEAD_DV + offs_dv[None, :], o,
             mask=row_ok[:, None] & (offs_dv[None, :] < HEAD_DV))
    tl.store(MPart + part, m_i, mask=row_ok)
    tl.store(LPart + part, l_i, mask=row_ok)


@jit
def _reduce_kernel(OPart, MPart, LPart, Out, Lse,
                   stride_ob, stride_oh, stride_om, stride_od,
                   HQ, LQ, NUM_SPLITS, HEAD_DV: tl.constexpr,
                   BLOCK_S: tl.constexpr, BLOCK_DV: tl.constexpr):
    """One program = one query row (b, h, i): merge its NUM_SPLITS states.

    Out (B, H_q, L_q, HEAD_DV), input dtype; Lse (B*H_q*L_q,) float32, base 2.
    """
    row = tl.program_id(0).to(tl.int64)
    off_b, off_h, qi = row // (HQ * LQ), (row // LQ) % HQ, row % LQ
    offs_s = tl.arange(0, BLOCK_S)  # (BLOCK_S,) the splits
    offs_dv = tl.arange(0, BLOCK_DV)
    s_ok = offs_s < NUM_SPLITS
    part = row * NUM_SPLITS + offs_s  # (BLOCK_S,) this row's states
    m = tl.load(MPart + part, mask=s_ok, other=float("-inf"))
    ell = tl.load(LPart + part, mask=s_ok, other=0.0)
    m_max = tl.max(m, 0)  # -inf when every split is empty
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = ell * tl.math.exp2(m - m_safe)  # l_c 2^(m_c - M), m in base 2: 0 for an empty split
    total = tl.sum(w, 0)
    o = tl.load(OPart + part[:, None] * HEAD_DV + offs_dv[None, :],
                mask=s_ok[:, None] & (offs_dv[None, :] < HEAD_DV),
                other=0.0)  # (BLOCK_S, BLOCK_DV) the normalised outputs
    t_safe = tl.where(total == 0.0, 1.0, total)
    out = tl.sum(w[:, None] * o, 0) / t_safe  # (BLOCK_DV,); no split: 0
    out_ptrs = (Out + off_b * stride_ob + off_h * stride_oh
                + qi * stride_om + offs_dv * stride_od)
    tl.store(out_ptrs, out.to(Out.dtype.element_ty), mask=offs_dv < HEAD_DV)
    lse_out = m_safe + tl.math.log2(t_safe)
    tl.store(Lse + row, tl.where(total == 0.0, float("-inf"), lse_out))


# ----------------------------------------------------------------------------
# Launch configurations: enumerable per target
# ----------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeConfig:
    """How the split kernel is launched: keys per step, warps, software-pipeline stages."""

    block_k: int
    num_warps: int
    num_stages: int


#: Split-kernel configurations per target (compute capability major*10+minor of the
#: families in ``attn_edu.kernels._targets.TARGETS``): ``[for head dims > 64, for <= 64]``.
#: :func:`pick_config` chooses one and :func:`compile_specs` compiles it ahead of time.
#: sm_80/sm_90a: tensor cores (``mma.sync``) and a 3-stage ``cp.async`` pipeline in 70 KiB
#: of shared memory (it also fits the 99 KiB of sm_86/sm_89 GPUs). sm_75 (a T4): Triton
#: 3.9 emits FMA code there, which holds the products in registers, so the key blocks are
#: small and there is no pipeline; every entry compiles with no register spills.
DECODE_CONFIGS: Dict[int, List[DecodeConfig]] = {
    75: [DecodeConfig(32, 8, 1), DecodeConfig(32, 4, 1)],
    80: [DecodeConfig(64, 4, 3), DecodeConfig(128, 4, 3)],
    90: [DecodeConfig(64, 4, 3), DecodeConfig(128, 4, 3)],
}
#: The configuration under ``TRITON_INTERPRET=1``, where each block is a NumPy call. Its blocks
#: are small so that tests with short caches still cross several blocks, chunks and a ragged last block.
INTERPRET_CONFIG = DecodeConfig(16, 1, 1)
#: Warps of the reduction (one row, NUM_SPLITS x d_v numbers).
REDUCE_NUM_WARPS = 4


def _family(capability: Union[int, Tuple[int, int]]) -> int:
    """The ``DECODE_CONFIGS`` key for a compute capability: 90 for 9.0 and newer, 80 for
    8.x (A100, A10, L4, RTX 30xx/40xx), 75 below."""
    cc = capability[0] * 10 + capability[1] if isinstance(capability, tuple) else int(capability)
    return 90 if cc >= 90 else 80 if cc >= 80 else 75


def pick_config(capability: Union[int, Tuple[int, int], None], head_dim: int,
                precision: str = "tf32") -> DecodeConfig:
    """The launch configuration for a GPU of ``capability`` (None: the interpreter) and a
    (padded) head dimension: ``DECODE_CONFIGS``' first entry above 64, second otherwise.
    ``precision="ieee"`` (exact float32 products: fused multiply-adds, no tensor cores)
    takes the FMA configurations of sm_75 on every GPU."""
    if capability is None:
        return INTERPRET_CONFIG
    configs = DECODE_CONFIGS[75 if precision == "ieee" else _family(capability)]
    return configs[0] if padded_head_dim(head_dim) > 64 else configs[-1]


def block_m_for(group: int, lq: int) -> int:
    """Rows per program: the ``group * lq`` packed query rows, rounded up to a power of two,
    at least 16 (``tl.dot``'s smallest tile) and at most 64 (more rows: more programs)."""
    rows = _checks.check_length("group", group, minimum=1) * _checks.check_length("lq", lq, minimum=1)
    return max(16, min(64, 1 << (rows - 1).bit_length()))


def choose_num_splits(programs: int, lk: int, block_k: int, num_sms: int, max_splits: int = MAX_SPLITS) -> int:
    """How many ways to split the keys: the fewest splits that fill whole waves of SMs.

    ``programs`` is what the grid has without splitting (``B * H_kv * row blocks``). The
    choice follows the occupancy model of :func:`attn_edu.decoding.split_waves`: a split
    count ``s`` runs ``programs * s`` programs in ``ceil(programs * s / num_sms)`` waves, each
    program reading a chunk of keys that starts on a ``block_k`` boundary, so the step takes
    ``waves * chunk`` key reads per SM. The answer is the smallest ``s`` (from 1 to
    ``max_splits``, and no more than there are ``block_k`` blocks of keys) whose modelled
    time is within ``SPLIT_TOLERANCE`` of the best: more splits only add reduction work once
    the waves are full. 8 programs on 132 SMs give 16 splits (128 programs, one wave), not
    17 (136 programs: a second wave for 4 of them).
    """
    programs = _checks.check_length("programs", programs, minimum=1)
    lk = _checks.check_length("lk", lk)
    block_k = _checks.check_length("block_k", block_k, minimum=1)
    num_sms = _checks.check_length("num_sms", num_sms, minimum=1)
    max_splits = _checks.check_length("max_splits", max_splits, minimum=1)
    return _best_num_splits(programs, -(-lk // block_k), num_sms, max_splits)


@plan_cache
def _best_num_splits(programs: int, key_blocks: int, num_sms: int, max_splits: int) -> int:
    """:func:`choose_num_splits` on checked ints, decided once per key. The model reads keys
    in whole blocks (a chunk starts on a ``block_k`` boundary, so ``chunk_size(lk, s,
    block_k) = block_k * ceil(key_blocks / s)`` for every ``lk`` with that many blocks): the
    key holds the number of key blocks, neither ``lk`` nor ``block_k``. A cache that grows
    by a key each step searches again once every ``block_k`` steps; the search models up to
    ``max_splits`` candidates (0.34 ms of Python at 64k keys on an H100's host when it called
    :func:`attn_edu.decoding.split_waves`, with its checks, for each)."""
    candidates = range(1, min(max(1, key_blocks), max_splits) + 1)
    # split_waves' model counted in blocks: ceil(programs * s / num_sms) waves, each program
    # reading ceil(key_blocks / s) blocks (tests/test_plan_cache.py holds the choice to a
    # search with split_waves itself at the true length)
    cost = {s: -(-programs * s // num_sms) * -(-key_blocks // s) for s in candidates}
    best = min(cost.values())
    return next(s for s in candidates if cost[s] <= (1 + SPLIT_TOLERANCE) * best)


@plan_cache
def _decode_config(capability: Optional[Tuple[int, int]], dtype: torch.dtype, precision: Optional[str],
                   group: int, LQ: int, DK: int, DV: int, align: Optional[str], has_seqlens: bool):
    """What :func:`decode` launches with that the cache's length and the batch leave alone,
    decided once per key: ``(DecodeConfig, row blocks, the split kernel's keywords, the
    reduction's but BLOCK_S)``. The split count is decided per number of key blocks
    (:func:`_best_num_splits`), so that a decode loop, whose ``L_k`` grows by one each step,
    finds both in their caches. Raises for a bad ``precision``."""
    dot_precision = _targets.input_precision(_checks.dtype_name(dtype), capability, precision)
    cfg = pick_config(capability, max(DK, DV), dot_precision)
    block_m = block_m_for(group, LQ)
    gpu = capability is not None  # the interpreter takes no launch options
    split_kw = dict(GROUP=group, HEAD_DK=DK, HEAD_DV=DV, BLOCK_DK=padded_head_dim(DK), BLOCK_DV=padded_head_dim(DV),
                    BLOCK_M=block_m, BLOCK_N=cfg.block_k, CAUSAL=align is not None,
                    BOTTOM_RIGHT=align == "bottom_right", HAS_SEQLENS=has_seqlens, INPUT_PRECISION=dot_precision,
                    **(dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages) if gpu else {}))
    reduce_kw = dict(HEAD_DV=DV, BLOCK_DV=padded_head_dim(DV), **(dict(num_warps=REDUCE_NUM_WARPS) if gpu else {}))
    return cfg, -(-group * LQ // block_m), split_kw, reduce_kw


def kernel_source(kernel: str, start: Optional[str] = None, stop: Optional[str] = None) -> str:
    """The source of one of this file's two kernels, or a stretch of it, to read on a page.

    ``kernel`` is ``"split"`` (one chunk of keys for one K/V head's packed query rows) or
    ``"reduce"`` (the merge of every chunk's state for one query row). With ``start`` the
    text begins at the first line containing it; with ``stop`` it ends before the next line
    containing that. Dedented. Read from this module's file, so it works without triton
    installed (chapter 13 prints the reduction this way).
    """
    from ._shared import kernel_text

    return kernel_text({"split": _split_kernel, "reduce": _reduce_kernel}, kernel, start, stop)


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


# ----------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------
def check_decode_inputs(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                        scale: Optional[float] = None, seqlens: Optional[Tensor] = None,
                        enable_gqa: bool = False) -> Tuple[Optional[str], float, int]:
    """Validate the kernel's inputs; return (causal alignment or None, scale, group size).

    The one input check of the three kernels, ``attn_edu.kernels._targets.check_kernel_inputs``,
    with this file's ``LIMITS``: the reference's checks (``attn_edu._checks``, the same
    messages), then 4-D (B, H, L, D) tensors with the same B, H_q a multiple of H_kv (with
    ``enable_gqa=True``), dtype float16, bfloat16 (on compute capability >= 8.0, never
    interpreted) or float32, ``1 <= d_k, d_v <= 128``, and a CUDA device (or the CPU with
    ``TRITON_INTERPRET=1``); then ``seqlens``, an integer tensor (B,) on the same device with
    values in ``0 .. L_k`` (checked for CPU tensors; CUDA ones are not read on the host, the
    kernel clamps them into that range).
    """
    _, _, group = _targets.check_kernel_inputs(LIMITS, q, k, v, _BUILT_INTERPRETED, enable_gqa)
    if seqlens is not None:
        require_tensor("seqlens", seqlens)
        if seqlens.dtype.is_floating_point or seqlens.dtype == torch.bool or seqlens.is_complex():
            raise TypeError(f"seqlens must be an integer tensor (B,); got dtype {_checks.dtype_name(seqlens)}")
        if tuple(seqlens.shape) != (q.shape[0],):
            raise ValueError(f"seqlens must have shape (B,) = ({q.shape[0]},); got {tuple(seqlens.shape)}")
        _checks.same_devices(q=q.device, seqlens=seqlens.device)
        # checked where it is free (the CPU); on a GPU the check would be a host sync per
        # call, so the kernel clamps the lengths into 0 .. L_k instead
        if seqlens.device.type == "cpu" and seqlens.numel() and (
                int(seqlens.min()) < 0 or int(seqlens.max()) > k.shape[2]):
            raise ValueError(f"seqlens must lie in 0 .. L_k = {k.shape[2]} (keys past a sequence's "
                             f"length are ignored); got {seqlens.tolist()}")
    return _checks.check_causal(causal), _checks.check_scale(scale, q.shape[-1]), group


# ----------------------------------------------------------------------------
# Launcher and public function
# ----------------------------------------------------------------------------
def split_kv_decode(q: Tensor, k: Tensor, v: Tensor, num_splits: Optional[int] = None,
                    causal: Union[bool, str] = False, scale: Optional[float] = None,
                    seqlens: Optional[Tensor] = None, enable_gqa: bool = False,
                    return_lse: bool = False, precision: Optional[str] = None):
    r"""Split-KV attention of a few queries over a KV cache: ``softmax(q k^T * scale) v``.

    Args:
        q: (B, H_q, L_q, d_k), the newest ``L_q`` positions (``L_q = 1`` when decoding);
            k: (B, H_kv, L_k, d_k); v: (B, H_kv, L_k, d_v). float16, bfloat16 or float32;
            ``1 <= d_k, d_v <= 128``; H_q a multiple of H_kv with ``enable_gqa=True``.
        num_splits: chunks of keys, 1 .. 128; default :func:`~attn_edu.kernels.decode_triton.choose_num_splits` for this GPU
            (8 SMs under the interpreter).
        causal: False, True/"top_left" or "bottom_right" (query i is position
            ``i + L - L_q`` of its sequence of length L: what decoding with a cache needs).
        scale: multiplies the scores; default 1/sqrt(d_k).
        seqlens: optional int tensor (B,): sequence b holds ``seqlens[b]`` keys, the rest of
            its cache is ignored (a row that sees no key gets zeros).
        return_lse: also return the natural-log log-sum-exp (B, H_q, L_q), float32.
        precision: float32 inputs only, ``"tf32"`` (tensor cores, the default from compute
            capability 8.0) or ``"ieee"`` (exact products, the default before 8.0 and in the
            interpreter): ``attn_edu.kernels._targets.input_precision``, which states the
            tolerance of each.

    No host synchronisation: nothing is read back from the GPU (``seqlens`` included, see
    :func:`~attn_edu.kernels.decode_triton.check_decode_inputs`), and the only buffers the launcher fills are those the
    kernels write completely, so a call can be captured in a CUDA graph.

    Returns ``out`` (B, H_q, L_q, d_v) in the input dtype (and ``lse``). Forward only.
    Equal to :func:`attn_edu.decoding.split_kv_attention` within the tolerance rule.
    """
    align, s, group = check_decode_inputs(q, k, v, causal, scale, seqlens, enable_gqa)
    if num_splits is not None:
        num_splits = _checks.check_length("num_splits", num_splits, minimum=1)
    return decode(q, k, v, align, s, group, num_splits, seqlens, return_lse, precision)


@plan_cache
def _no_seqlens(device: torch.device) -> Tensor:
    """The ``SeqLens`` argument of a launch without ``seqlens`` (the kernel never reads it):
    one int32 tensor per device, made once."""
    return torch.zeros(1, dtype=torch.int32, device=device)


def _workspace_sizes(rows: int, num_splits: int, dv: int) -> Tuple[int, int, int, int]:
    """The lengths of a launch's float32 buffers in its one workspace, ``(o_part, m_part,
    l_part, lse)``, each rounded up to a multiple of 32 elements (128 bytes: every part as
    aligned as an allocation of its own, which the kernels' loads are specialized on)."""
    up = lambda n: -(-n // 32) * 32  # noqa: E731
    return up(rows * num_splits * dv), up(rows * num_splits), up(rows * num_splits), up(rows)


def decode(q: Tensor, k: Tensor, v: Tensor, align: Optional[str], scale: float, group: int,
           num_splits: Optional[int] = None, seqlens: Optional[Tensor] = None, return_lse: bool = False,
           precision: Optional[str] = None):
    """The launcher of :func:`split_kv_decode` on checked inputs (``align``, ``scale`` and
    ``group`` as :func:`check_decode_inputs` returns them; ``num_splits`` None or checked
    >= 1): two allocations, the output and one float32 workspace for every chunk's state,
    then the two kernels."""
    B, HQ, LQ, DK = q.shape
    HKV, LK, DV = k.shape[1], k.shape[2], v.shape[3]
    device = q.device
    # every element is written by the reduction: no memset (torch.empty)
    out = torch.empty((B, HQ, LQ, DV), dtype=q.dtype, device=device)  # (B, H_q, L_q, d_v)
    if LQ == 0 or LK == 0 or B == 0:  # nothing to attend to: zeros, lse = -inf
        lse = torch.full((B, HQ, LQ), float("-inf"), dtype=torch.float32, device=device)
        return (out.zero_(), lse) if return_lse else out.zero_()
    capability, sms = ((None, 8) if _BUILT_INTERPRETED else
                       (_targets.device_capability(device), _targets.sm_count(device)))
    cfg, row_blocks, split_meta, reduce_meta = _decode_config(
        capability, q.dtype, precision, group, LQ, DK, DV, align, seqlens is not None)
    key_blocks = -(-LK // cfg.block_k)
    if num_splits is None:
        num_splits = _best_num_splits(B * HKV * row_blocks, key_blocks, sms, MAX_SPLITS)
    elif num_splits > MAX_SPLITS:
        raise ValueError(f"num_splits must be at most {MAX_SPLITS}; got {num_splits}")
    # chunks of whole blocks: chunk_size(LK, num_splits, block_k), ceil(ceil(LK / s) / b) = ceil(LK / (s b))
    chunk = cfg.block_k * -(-key_blocks // num_splits)
    # each chunk's (m, l, o) and the base-2 lse, float32, in one allocation: (B, H_q, L_q,
    # splits, d_v), (B, H_q, L_q, splits) twice, (B * H_q * L_q,); the kernels index them flat
    sizes = _workspace_sizes(B * HQ * LQ, num_splits, DV)
    work = torch.empty((sum(sizes),), dtype=torch.float32, device=device)
    o_part, m_part, l_part, lse2 = work.split_with_sizes(sizes)  # one call, four views
    lens = (seqlens.to(device=device, dtype=torch.int32) if seqlens is not None
            else _no_seqlens(device))  # unused without seqlens
    _direct.launch(  # _split_kernel[grid](...), Triton's dispatch skipped once the key is seen
        _split_kernel, (B * HKV, num_splits, row_blocks),
        q, k, v, lens, o_part, m_part, l_part, *q.stride(), *k.stride(), *v.stride(),
        HKV, LQ, LK, causal_offset_arg(LQ, LK, align), chunk, num_splits, scale * LOG2E.value, **split_meta)
    _direct.launch(
        _reduce_kernel, (B * HQ * LQ,), o_part, m_part, l_part, out, lse2, *out.stride(), HQ, LQ, num_splits,
        BLOCK_S=max(2, _pow2(num_splits)), **reduce_meta)
    if return_lse:
        return out, (lse2[:B * HQ * LQ] * LN2.value).reshape(B, HQ, LQ)
    return out


# ----------------------------------------------------------------------------
# Ahead-of-time compilation: what there is to compile for a target
# ----------------------------------------------------------------------------
def compile_specs(arch: str = "sm_90a", dtype: str = "float16", head_dim: int = 128, group: int = 8,
                  lq: int = 1, precision: Optional[str] = None) -> List[Dict[str, Any]]:
    """What to hand ``triton.compile`` to build this kernel for ``arch`` without a GPU.

    Two entries: the split kernel in the configuration :func:`pick_config` launches for
    ``head_dim`` and float32 ``precision`` (None: the default there,
    ``attn_edu.kernels._targets.input_precision``) on ``arch`` (a key of ``attn_edu.kernels._targets.TARGETS``), and the
    reduction. Each is a dict with ``name``, ``fn`` (the ``JITFunction``), ``signature``,
    ``constexprs`` and ``attrs`` (for ``triton.compiler.ASTSource``), ``options``
    (``num_warps``, ``num_stages``), ``config`` and ``capability`` (for
    ``GPUTarget("cuda", capability, 32)``)::

        for spec in compile_specs("sm_80", "bfloat16", 128, group=8):
            src = ASTSource(fn=spec["fn"], signature=spec["signature"],
                            constexprs=spec["constexprs"], attrs=spec["attrs"])
            kernel = triton.compile(src, target=GPUTarget("cuda", spec["capability"], 32),
                                    options=spec["options"])

    The signature mirrors what a launch on a contiguous (B, H, L, d) cache specializes:
    the last-axis strides are 1 (constants), pointers and, when ``d`` is a multiple of 16,
    the other strides are 16-divisible, and ``L_q = 1`` is a constant when ``lq`` is 1.
    Without that the compiler cannot vectorise the loads and the numbers (registers,
    spills) describe a kernel that never runs. The head dimension is the same for keys and
    values. Needs this module imported without ``TRITON_INTERPRET=1``.
    """
    if arch not in _targets.TARGETS:
        raise ValueError(f"arch must be one of {', '.join(_targets.TARGETS)}; got {arch!r}")
    if dtype not in TRITON_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(TRITON_DTYPES)}; got {dtype!r}")
    target = _targets.TARGETS[arch]
    problem = _targets.cuda_dtype_problem(dtype, divmod(target.capability, 10))
    if problem:
        raise TypeError(problem)
    if not (HAS_TRITON and type(_split_kernel).__name__ == "JITFunction"):
        raise RuntimeError("compile_specs needs the compiled (not interpreted) kernels: import this "
                           "module without TRITON_INTERPRET=1")
    d = _checks.check_length("head_dim", head_dim, minimum=1)
    lq = _checks.check_length("lq", lq, minimum=1)
    tdt = TRITON_DTYPES[dtype]
    block_m = block_m_for(group, lq)
    dot_precision = _targets.input_precision(dtype, divmod(target.capability, 10), precision)
    cfg = pick_config(target.capability, d, dot_precision)
    ones = ("stride_qd", "stride_kd", "stride_vd") + (("LQ",) if lq == 1 else ())
    divisible = ["Q", "K", "V", "SeqLens", "OPart", "MPart", "LPart", "CHUNK"]
    if d % 16 == 0:
        divisible += ["stride_qb", "stride_qh", "stride_qm", "stride_kb", "stride_kh", "stride_kn",
                      "stride_vb", "stride_vh", "stride_vn"]
    consts = dict(GROUP=group, HEAD_DK=d, HEAD_DV=d, BLOCK_DK=padded_head_dim(d), BLOCK_DV=padded_head_dim(d),
                  BLOCK_M=block_m, BLOCK_N=cfg.block_k, CAUSAL=True, BOTTOM_RIGHT=True,
                  HAS_SEQLENS=True, INPUT_PRECISION=dot_precision,
                  **{name: 1 for name in ones})
    split = dict(name=f"_split_kernel[BLOCK_M={block_m},BLOCK_N={cfg.block_k},warps={cfg.num_warps},"
                      f"stages={cfg.num_stages}]", fn=_split_kernel, config=cfg, precision=dot_precision,
                 signature=_signature(_split_kernel, consts, Q="*" + tdt, K="*" + tdt, V="*" + tdt,
                                      SeqLens="*i32", OPart="*fp32", MPart="*fp32", LPart="*fp32",
                                      qk_scale="fp32"),
                 constexprs=consts, attrs=_divisible(_split_kernel, divisible),
                 options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages),
                 capability=target.capability)
    consts = dict(HEAD_DV=d, BLOCK_S=16, BLOCK_DV=padded_head_dim(d), stride_od=1)
    reduce = dict(name="_reduce_kernel[BLOCK_S=16]", fn=_reduce_kernel, config=None,
                  signature=_signature(_reduce_kernel, consts, OPart="*fp32", MPart="*fp32",
                                       LPart="*fp32", Out="*" + tdt, Lse="*fp32"),
                  constexprs=consts,
                  attrs=_divisible(_reduce_kernel, ["OPart", "MPart", "LPart", "Out", "Lse"]),
                  options=dict(num_warps=REDUCE_NUM_WARPS, num_stages=1), capability=target.capability)
    return [split, reduce]


def _signature(fn, constexprs: Dict[str, Any], **types: str) -> Dict[str, str]:
    """Every argument is an i32 unless typed here or a compile-time constant."""
    sig = {name: "i32" for name in fn.arg_names}
    sig.update(types)
    sig.update({name: "constexpr" for name in constexprs})
    return sig


def _divisible(fn, names: List[str]) -> Dict[Tuple[int], list]:
    """Triton's "multiple of 16" attribute for these arguments (what a launch infers)."""
    return {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in names}
