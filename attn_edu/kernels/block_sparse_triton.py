r"""Block-sparse attention in Triton: compute only the tiles a mask leaves non-empty.

A sparse pattern (local window, strided, global tokens; Child et al. 2019,
``child2019sparse``) says which keys each query may see. Cut the (L_q, L_k) mask
into tiles of ``block_q`` queries by ``block_k`` keys (the kernel's ``BLOCK_M`` and
``BLOCK_N``). Every tile falls in one of three kinds:

* **empty** -- no allowed entry: its scores would all be ``-inf``, it adds
  ``exp(-inf) = 0`` to every sum, so the kernel never loads it;
* **full** -- every entry allowed: computed exactly as dense attention, with no
  element mask loaded at all;
* **partial** -- some entries allowed: computed with the element mask loaded from
  the boolean ``mask`` and applied as ``-inf``.

The kernel is FlashAttention's forward pass (Dao et al. 2022,
``dao2022flashattention``): one program per (row block, batch, head) keeps the
running maximum :math:`m`, the running sum :math:`\ell` and the unnormalised output
in registers and folds in one key tile at a time (the online softmax of chapter 03),

.. math::
    m' = \max(m, \max_j s_j), \quad
    \ell' = e^{m - m'} \ell + \sum_j e^{s_j - m'}, \quad
    o' = e^{m - m'} o + \sum_j e^{s_j - m'} v_j ,

but it loops only over the key tiles listed for its row block. The lists are the
mask's :class:`~attn_edu.masks.TilePlan` (:func:`attn_edu.masks.plan_tiles`)
compressed row by row, like a CSR matrix (:meth:`~attn_edu.masks.TilePlan.tile_lists`):
per row block a count and the column indices of its full tiles, then of its partial
tiles. That is the same data structure as FlexAttention's ``BlockMask``
(``kv_num_blocks``/``kv_indices`` for the partial tiles,
``full_kv_num_blocks``/``full_kv_indices`` for the full ones; Dong et al. 2024,
``dong2024flexattention``); :func:`flex_reference` runs FlexAttention on the same
boolean mask for comparison. Build the plan once and pass it where the mask goes to
reuse it across calls, as FlexAttention builds its ``BlockMask`` once.

The work is proportional to the number of non-empty tiles, so the ideal speed-up
over dense attention is ``1 / density`` with ``density`` the fraction of tiles
computed (:func:`attn_edu.masks.block_density`).

Scope: **forward pass only** (no autograd); boolean masks only (True = may attend);
float16, bfloat16 and float32 (float32 dot products on TF32 tensor cores from compute
capability 8.0, exact before, the one rule of ``attn_edu.kernels._targets.input_precision``;
``precision="ieee"`` is refused from 8.0); head dimensions 1 to 128 (``LIMITS``); tile
sizes powers of two from 16 to 256.
A fully masked query row gives a zero output row and ``lse = -inf``, never NaN.
It runs on a CUDA GPU, or on the CPU through Triton's interpreter (slow, for tests
and small examples) when the environment variable ``TRITON_INTERPRET=1`` is set
**before triton is first imported**. Triton 3.9 reads the variable whenever
``@triton.jit`` wraps a function: its own library (``tl.max``, ``tl.sum``,
``tl.zeros``) when ``triton`` is imported, this kernel when this module is imported;
set too late, the call stops with an error saying so (the three kernels share one input
check, ``attn_edu.kernels._targets.check_kernel_inputs``). The
interpreter multiplies bfloat16 bit patterns in ``tl.dot`` (triton-lang/triton#11584),
so under it bfloat16 tiles are multiplied in float32 (exact products, float32
accumulation, as on the GPU). Explained in chapters 09 (tiles), 10 (Triton) and 11
(sparse patterns).

The benchmark against FlexAttention is ``attn_edu.bench.block_sparse``
(``python -m attn_edu.bench --block-sparse``, CUDA only).

Why one file of more than 600 lines: the kernel, the launch rules it depends on (tile
plan, row slices, precision) and FlexAttention on the same boolean mask are what chapter
11 compares side by side; split, the tile lists' layout would be defined far from the
kernel that reads them.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _checks
from ..masks import TilePlan, plan_tiles
from ..masks.tiles import unpack_plan
from . import _direct, _interpret, _targets
from ._plans import plan_cache
from ._shared import LN2, LOG2E, AotKernel, launch_grid, padded_head_dim, tl, triton

try:  # guarded: importing attn_edu never needs torch (triton's guard is in _shared)
    import torch
except ImportError:  # pragma: no cover - torch is needed for everything below
    torch = None

__all__ = [
    "block_sparse_attention",
    "flex_available",
    "flex_block_mask_from_bool",
    "flex_reference",
    "aot_kernels",
    "launch_config",
    "LIMITS",
    "BLOCK_SIZES",
]

#: The inputs the kernel takes, checked by ``attn_edu.kernels._targets.check_kernel_inputs``:
#: float16, bfloat16 (multiplied in float32 under the interpreter) or float32; head dimensions
#: 1 to 128 (padded inside to a power of two >= 16); leading axes of size 1 broadcast.
LIMITS = _targets.KernelLimits("block_sparse_attention", "attn_edu.flash_attention with the same mask",
                               broadcast=True, interpreter_bfloat16=True)
#: The tile sizes ``block_q`` and ``block_k`` the kernel accepts, powers of two in this range.
BLOCK_SIZES = (16, 256)

#: True when this module's kernel was wrapped by Triton's interpreter (CPU tensors).
INTERPRETED = triton is not None and _interpret.requested()
#: The names of the Triton kernels this module launches (``attn_edu.bench.host`` replaces them
#: with a no-op to time the package's own Python per call, the launches stubbed out).
LAUNCHED = ("_block_sparse_fwd_kernel",)


# --------------------------------------------------------------------------------------
# The kernel (private). One program = one row block of one (batch, head).
# --------------------------------------------------------------------------------------
if triton is not None:

    @triton.jit
    def _tile_step(q, m_i, l_i, acc, k_base, v_base, m_rows, start_n, row_ok,
                   offs_d, offs_dv, s_kn, s_kd, s_vn, s_vd, s_mn, LK, qk_scale,
                   D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr,
                   APPLY_MASK: tl.constexpr, EVEN: tl.constexpr, PRECISION: tl.constexpr,
                   UPCAST: tl.constexpr):
        """Fold one key tile into the running (m, l, acc) of the online softmax.

        ``APPLY_MASK``: a partial tile, whose element mask is loaded. ``EVEN``: L_k is a
        multiple of BLOCK_N and the head dims are powers of two, so no load needs bounds.
        """
        tile_n = tl.arange(0, BLOCK_N)
        offs_n = start_n + tile_n  # (BLOCK_N,) key positions
        col_ok = offs_n < LK
        col0 = tl.cast(start_n, tl.int64)  # 64-bit: start_n * stride passes 2**31 in long inputs
        k_ptrs = k_base + col0 * s_kn + tile_n[None, :] * s_kn + offs_d[:, None] * s_kd  # (BLOCK_D, BLOCK_N)
        v_ptrs = v_base + col0 * s_vn + tile_n[:, None] * s_vn + offs_dv[None, :] * s_vd  # (BLOCK_N, BLOCK_DV)
        if EVEN:
            k = tl.load(k_ptrs)
        else:
            k = tl.load(k_ptrs, mask=col_ok[None, :] & (offs_d[:, None] < D), other=0.0)
        if UPCAST:  # interpreter only: it cannot multiply bfloat16 (see _upcast_for)
            k = k.to(tl.float32)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), log2 units
        if APPLY_MASK:  # partial tile: load the element mask (True = may attend)
            allowed = tl.load(m_rows + col0 * s_mn + tile_n[None, :] * s_mn,
                              mask=row_ok[:, None] & col_ok[None, :], other=0)
            s = tl.where(allowed != 0, s, float("-inf"))  # keys past L_k read as False
        else:
            if not EVEN:  # a full tile may stick out past L_k (padding counts as allowed)
                s = tl.where(col_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # (BLOCK_M,)
        # a row with nothing allowed so far keeps m = -inf; shift by 0 there so that
        # exp2(-inf - (-inf)) = NaN never happens: every term is exp2(-inf) = 0
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_use)  # rescales what was accumulated so far
        p = tl.math.exp2(s - m_use[:, None])  # (BLOCK_M, BLOCK_N)
        l_i = l_i * alpha + tl.sum(p, 1)
        if EVEN:
            v = tl.load(v_ptrs)
        else:
            v = tl.load(v_ptrs, mask=col_ok[:, None] & (offs_dv[None, :] < DV), other=0.0)
        p = p.to(v_base.dtype.element_ty)  # P in the input dtype, as the GPU feeds it to P @ V
        if UPCAST:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
        return m_new, l_i, acc

    @triton.jit
    def _block_sparse_fwd_kernel(
        Q, K, V, M, O, LSE,
        FULL_NUM, FULL_IDX, PART_NUM, PART_IDX,
        s_qb, s_qh, s_qm, s_qd,
        s_kb, s_kh, s_kn, s_kd,
        s_vb, s_vh, s_vn, s_vd,
        s_ob, s_oh, s_om, s_od,
        s_mb, s_mh, s_mm, s_mn,
        s_lb, s_lh,
        s_cb, s_ch,
        s_ib, s_ih, s_im,
        H, LQ, LK, qk_scale,
        D: tl.constexpr, DV: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
        EVEN: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
        PLAN_M: tl.constexpr,
    ):
        # a program owns BLOCK_M rows of a row block of the plan (PLAN_M rows, a multiple of
        # BLOCK_M): usually the whole block; exact float32 splits it (smaller FMA tiles)
        # grid (B * H * row blocks,): CUDA's x axis (y and z stop at 65,535), row blocks fastest
        n_m = tl.cdiv(LQ, BLOCK_M)
        pid_m = tl.program_id(0) % n_m  # row block
        pid_bh = tl.program_id(0) // n_m  # batch * heads
        b = (pid_bh // H).to(tl.int64)
        h = (pid_bh % H).to(tl.int64)
        row0 = (pid_m * BLOCK_M).to(tl.int64)  # 64-bit: row * stride passes 2**31 (the mask's
        tile_m = tl.arange(0, BLOCK_M)  # row stride is L_k: L = 46,341 is enough)
        offs_m = pid_m * BLOCK_M + tile_m  # (BLOCK_M,) query positions
        offs_d = tl.arange(0, BLOCK_D)
        offs_dv = tl.arange(0, BLOCK_DV)
        row_ok = offs_m < LQ

        q = tl.load(Q + b * s_qb + h * s_qh + row0 * s_qm + tile_m[:, None] * s_qm + offs_d[None, :] * s_qd,
                    mask=row_ok[:, None] & (offs_d[None, :] < D), other=0.0)  # (BLOCK_M, BLOCK_D)
        if UPCAST:
            q = q.to(tl.float32)
        k_base = K + b * s_kb + h * s_kh
        v_base = V + b * s_vb + h * s_vh
        m_rows = M + b * s_mb + h * s_mh + row0 * s_mm + tile_m[:, None] * s_mm  # (BLOCK_M, 1) mask rows

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max (log2 units)
        l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2
        acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)  # unnormalised output

        plan_row = pid_m * BLOCK_M // PLAN_M  # the plan's row block these rows belong to
        lists = b * s_cb + h * s_ch + plan_row  # its entry in the count arrays
        row_idx = b * s_ib + h * s_ih + plan_row * s_im  # ... and its row of column indices
        n_full = tl.load(FULL_NUM + lists)
        for t in range(0, n_full):  # full tiles: no element mask
            start_n = tl.load(FULL_IDX + row_idx + t) * BLOCK_N
            m_i, l_i, acc = _tile_step(q, m_i, l_i, acc, k_base, v_base, m_rows, start_n,
                                       row_ok, offs_d, offs_dv, s_kn, s_kd, s_vn, s_vd, s_mn,
                                       LK, qk_scale, D, DV, BLOCK_N, False, EVEN, PRECISION,
                                       UPCAST)
        n_part = tl.load(PART_NUM + lists)
        for t in range(0, n_part):  # partial tiles: element mask loaded
            start_n = tl.load(PART_IDX + row_idx + t) * BLOCK_N
            m_i, l_i, acc = _tile_step(q, m_i, l_i, acc, k_base, v_base, m_rows, start_n,
                                       row_ok, offs_d, offs_dv, s_kn, s_kd, s_vn, s_vd, s_mn,
                                       LK, qk_scale, D, DV, BLOCK_N, True, EVEN, PRECISION,
                                       UPCAST)

        empty = l_i == 0.0  # fully masked rows (or rows of a row block with no tiles)
        l_safe = tl.where(empty, 1.0, l_i)
        out = acc / l_safe[:, None]  # zeros where empty: acc is 0 there
        tl.store(O + b * s_ob + h * s_oh + row0 * s_om + tile_m[:, None] * s_om + offs_dv[None, :] * s_od,
                 out.to(O.dtype.element_ty), mask=row_ok[:, None] & (offs_dv[None, :] < DV))
        lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN2)
        tl.store(LSE + b * s_lb + h * s_lh + row0 + tile_m, lse, mask=row_ok)


# --------------------------------------------------------------------------------------
# The mask and its tile plan, as the kernel reads them
# --------------------------------------------------------------------------------------
def _mask_as_numpy(mask) -> np.ndarray:
    if torch is not None and isinstance(mask, torch.Tensor):
        if mask.dtype != torch.bool:
            raise TypeError(
                f"mask must be a boolean tensor (True = may attend); got dtype "
                f"{_checks.dtype_name(mask)}. Float masks are not supported by the "
                "block-sparse kernel; a 0/1 mask converts with mask.bool()."
            )
        return mask.detach().cpu().numpy()
    arr = np.asarray(mask)
    if arr.dtype != bool:
        raise TypeError(
            f"mask must be boolean (True = may attend); got dtype {arr.dtype}. "
            "Convert a 0/1 mask with mask.astype(bool)."
        )
    return arr


def _as_4d(shape: Sequence[int], name: str = "mask") -> Tuple[int, int, int, int]:
    if not 2 <= len(shape) <= 4:
        raise ValueError(
            f"{name} must have shape (L_q, L_k) or one broadcastable to (B, H, L_q, L_k); "
            f"got shape {tuple(shape)}"
        )
    return (1,) * (4 - len(shape)) + tuple(int(s) for s in shape)


def _check_tile(name: str, value: object) -> int:
    value = _checks.check_positive_int(name, value)
    lo, hi = BLOCK_SIZES
    if value & (value - 1) or not lo <= value <= hi:
        raise ValueError(
            f"{name} must be a power of two from {lo} to {hi} (tl.arange needs a power of two, "
            f"tl.dot at least 16); got {value}"
        )
    return value


def _on_device(plan: TilePlan, device) -> Tuple[Any, ...]:
    """The plan's mask (uint8 bytes, 4-D) and tile lists on ``device``, built once per device."""
    def build():
        mask = plan.mask if isinstance(plan.mask, torch.Tensor) else torch.from_numpy(plan.mask.copy())
        mask = mask.to(device)
        pad = (1,) * (4 - plan.computed.ndim)  # the lists as (Bm, Hm, nq[, nk])
        lists = [torch.from_numpy(a.reshape(pad + a.shape)).to(device) for a in plan.tile_lists()]
        return (mask.reshape(_as_4d(mask.shape)).view(torch.uint8), *lists)

    return plan.cached(("block_sparse", str(torch.device(device))), build)


# --------------------------------------------------------------------------------------
# The public wrapper
# --------------------------------------------------------------------------------------
def _stride(x, axis: int) -> int:
    """Stride of ``axis``, 0 where the axis has size 1 (so it broadcasts)."""
    return 0 if x.shape[axis] == 1 else x.stride(axis)


def _upcast_for(dtype) -> bool:
    """Whether to multiply in float32 inside the kernel: only for bfloat16 in the interpreter.

    Triton's interpreter stores bfloat16 as uint16 and its ``tl.dot`` multiplies those bit
    patterns (triton-lang/triton#11584; the Triton debugging guide says the interpreter
    does not support bfloat16 arithmetic and to cast to float32). A product of two
    bfloat16 numbers is exact in float32 and the GPU accumulates in float32 too, so the
    upcast changes only the summation order. Compiled GPU kernels never upcast.
    """
    return INTERPRETED and dtype == torch.bfloat16


def _default_warps(block_q: int, block_k: int, d: int) -> int:
    """4 warps, 8 from a 64 x 64 tile at d = 128 on (where 4 spill on sm_80)."""
    return 8 if block_q * max(d, block_k) >= 64 * 128 else 4


#: Exact float32 (``precision="ieee"``, fused multiply-adds, tiles in registers), each
#: program takes this many rows of a row block (the tile lists stay the plan's), with
#: these warps and stages; the plan's 64-row tiles spilled ~115 KB on sm_80 at d = 128.
IEEE_ROWS, IEEE_WARPS, IEEE_STAGES = 16, 4, 1
#: Before Hopper at d > 64, rows per program for half dtypes and for float32 on TF32 (a
#: 128-row bfloat16 tile spilled 196 B on sm_80, a 64-row TF32 one 88 B, compile report).
AMPERE_D128_ROWS = {2: 64, 4: 32}


def launch_config(block_q: int, block_k: int, d: int, precision: str,
                  num_warps: Optional[int] = None, num_stages: Optional[int] = None,
                  capability: Optional[Tuple[int, int]] = None, dtype_bytes: int = 2) -> Tuple[int, int, int, int]:
    """(rows per program, keys per tile, num_warps, num_stages) the launcher uses for a
    ``block_q`` x ``block_k`` tile at head dim ``d`` (the larger of d_k, d_v) on a GPU of
    ``capability`` (None: no limit) with inputs of ``dtype_bytes``: the tile itself with
    ``_default_warps`` and 3 stages; exact float32 ``IEEE_ROWS`` rows at a time; before
    Hopper at d > 64 at most ``AMPERE_D128_ROWS`` rows, with 8 warps. A program takes a slice of a row block and
    the row block's tile lists: the tiles stay the plan's."""
    if precision == "ieee":
        return (min(IEEE_ROWS, block_q), block_k, num_warps or IEEE_WARPS, num_stages or IEEE_STAGES)
    rows, warps = block_q, _default_warps(block_q, block_k, d)
    if capability is not None and tuple(capability) < (9, 0) and d > 64:
        rows, warps = min(rows, AMPERE_D128_ROWS[4 if dtype_bytes == 4 else 2]), 8
    return (rows, block_k, num_warps or warps, num_stages or 3)


@plan_cache
def _sparse_launch(capability, dtype_bytes: int, q_shape, k_shape, v_shape, q_strides, k_strides, v_strides,
                   m_shape, m_strides, num_shape, num_strides, idx_shape, idx_strides, bm: int, bn: int,
                   dot_precision: str, num_warps, num_stages, upcast: bool):
    """What :func:`block_sparse_attention` launches with, decided once per key (shapes and
    strides of the expanded q, k, v, of the mask and tile lists, the tile, the GPU, the
    launch options): ``(grid, the kernel's int arguments before qk_scale, meta-parameters)``."""
    B, H, lq, dk = q_shape
    lk, dv = k_shape[2], v_shape[3]
    rows, _, warps, stages = launch_config(bm, bn, max(dk, dv), dot_precision, num_warps, num_stages,
                                           capability, dtype_bytes)
    grid = launch_grid(B * H, lq, rows)  # one axis: any B * H launches
    block_d, block_dv = padded_head_dim(dk), padded_head_dim(dv)
    even = lk % bn == 0 and block_d == dk and block_dv == dv
    size1 = lambda shape, strides, axis: 0 if shape[axis] == 1 else strides[axis]  # noqa: E731  (_stride)
    b_h = lambda shape, strides: (size1(shape, strides, 0), size1(shape, strides, 1))  # noqa: E731
    ints = (*b_h(q_shape, q_strides), q_strides[2], q_strides[3],
            *b_h(k_shape, k_strides), k_strides[2], k_strides[3],
            *b_h(v_shape, v_strides), v_strides[2], v_strides[3],
            # out (B, H, Lq, Dv) and lse (B, H, Lq), both fresh and contiguous
            H * lq * dv, lq * dv, dv, 1,
            *b_h(m_shape, m_strides), size1(m_shape, m_strides, 2), size1(m_shape, m_strides, 3),
            H * lq, lq,
            *b_h(num_shape, num_strides),
            *b_h(idx_shape, idx_strides), idx_strides[2],
            H, lq, lk)
    meta = dict(D=dk, DV=dv, BLOCK_M=rows, BLOCK_N=bn, PLAN_M=bm, BLOCK_D=block_d, BLOCK_DV=block_dv,
                EVEN=even, PRECISION=dot_precision, UPCAST=upcast)
    if not INTERPRETED:
        meta.update(num_warps=warps, num_stages=stages)
    return grid, ints, meta


def block_sparse_attention(q, k, v, mask, block_q: Optional[int] = None,
                           block_k: Optional[int] = None, *, scale: Optional[float] = None,
                           return_lse: bool = False, num_warps: Optional[int] = None,
                           num_stages: Optional[int] = None, precision: Optional[str] = None):
    r"""Attention :math:`\operatorname{softmax}(QK^\top s + M)V` computing only non-empty tiles.

    Args:
        q: (B, H, L_q, d_k); k: (B, H, L_k, d_k); v: (B, H, L_k, d_v) torch tensors of one
            dtype (float16, bfloat16 or float32) with 1 <= d_k, d_v <= 128, on CUDA (or the
            CPU with ``TRITON_INTERPRET=1``). Leading axes of size 1 broadcast.
        mask: boolean, True = may attend, (L_q, L_k) or broadcastable to (B, H, L_q, L_k);
            a torch tensor or a NumPy array. Or a :class:`~attn_edu.masks.TilePlan` of
            such a mask (:func:`attn_edu.masks.plan_tiles`), reused across calls: its
            tiles win, and its mask and tile lists are copied to the device once.
        block_q, block_k: the tile (the kernel's BLOCK_M x BLOCK_N), powers of two from 16
            to 256; default ``attn_edu.masks.DEFAULT_BLOCK_Q`` x ``DEFAULT_BLOCK_K`` (64 x 64).
        scale: multiplies the scores; default 1/sqrt(d_k).
        return_lse: also return the log-sum-exp of each row's scaled scores, float32
            (B, H, L_q) (``-inf`` for a fully masked row).
        num_warps, num_stages: Triton launch options (ignored by the interpreter).
        precision: float32 inputs only, ``"tf32"`` (tensor cores; the default from compute
            capability 8.0) or ``"ieee"`` (exact float32 products; the default, and the only
            choice, before 8.0; the default in the interpreter, which runs ``"tf32"`` too when
            asked; refused from 8.0, where its FMA tiles spill): ``attn_edu.kernels._targets.input_precision``, whose docstring states
            the tolerance of each. Exact float32 runs ``IEEE_ROWS`` query rows per program.

    Returns:
        out (B, H, L_q, d_v) in the input dtype, or ``(out, lse)``.

    Forward only (no gradient). Fully masked rows give zeros. A tile too big for the GPU's
    shared memory (128 x 64 at head dim 128 on a T4) falls back to 64 x 64 with a warning.
    Explained in chapter 11.
    """
    if torch is None or triton is None:
        raise ImportError("block_sparse_attention needs PyTorch and Triton (pip install triton)")
    dtype, batch, _ = _targets.check_kernel_inputs(LIMITS, q, k, v, INTERPRETED)
    upcast = _upcast_for(q.dtype)
    capability = _targets.device_capability(q.device) if q.device.type == "cuda" else None
    # an upcast tile is multiplied in float32: the float32 rule applies to it
    dot_precision = _targets.input_precision("float32" if upcast else dtype, capability, precision)
    if dot_precision == "ieee" and _targets.has_tf32(capability):
        raise ValueError(
            "block_sparse_attention does not offer precision='ieee' on a GPU with TF32 tensor cores "
            f"(compute capability {capability[0]}.{capability[1]}): exact float32 products of a key "
            "tile are fused multiply-adds whose registers spill (tens of KB per thread at d = 128). "
            "Use the default TF32 (precision=None), or float16/bfloat16 inputs.")
    raw, plan, bq, bk = unpack_plan(mask, False, block_q, block_k)
    lq, lk = q.shape[-2], k.shape[-2]
    scores = tuple(batch) + (lq, lk)
    if raw is None:
        raise ValueError("block_sparse_attention needs a mask (or a TilePlan of one)")
    if plan is not None and (plan.lq, plan.lk) != (lq, lk):
        raise ValueError(f"the TilePlan is for (L_q, L_k) = {(plan.lq, plan.lk)}; the scores here "
                         f"have shape {scores}")
    if plan is None and _checks.is_torch_tensor(raw):
        _checks.same_devices(q=q.device, mask=raw.device)
    if _checks.dtype_name(raw) != "bool":
        _mask_as_numpy(raw)  # raises the dtype error
    _as_4d(raw.shape)
    _checks.check_mask_shape(tuple(raw.shape), scores)
    s = _checks.check_scale(scale, q.shape[-1])
    bm, bn = _check_tile("block_q", bq), _check_tile("block_k", bk)
    if plan is None:
        plan = plan_tiles(raw, bm, bn)
    m8, full_num, full_idx, part_num, part_idx = _on_device(plan, q.device)

    B, H = batch
    dk, dv = q.shape[-1], v.shape[-1]
    out = torch.empty((B, H, lq, dv), dtype=q.dtype, device=q.device)  # (B, H, Lq, Dv)
    lse = torch.empty((B, H, lq), dtype=torch.float32, device=q.device)  # (B, H, Lq)
    if lq == 0:
        return (out, lse) if return_lse else out
    # (expand only where an axis broadcasts: a view per call otherwise)
    q4 = q if q.shape[:2] == (B, H) else q.expand(B, H, lq, dk)
    k4 = k if k.shape[:2] == (B, H) else k.expand(B, H, lk, dk)
    v4 = v if v.shape[:2] == (B, H) else v.expand(B, H, lk, dv)
    grid, ints, meta = _sparse_launch(
        capability, q.element_size(), tuple(q4.shape), tuple(k4.shape), tuple(v4.shape), q4.stride(),
        k4.stride(), v4.stride(), tuple(m8.shape), m8.stride(), tuple(full_num.shape), full_num.stride(),
        tuple(full_idx.shape), full_idx.stride(), bm, bn, dot_precision, num_warps, num_stages, upcast)
    try:
        _direct.launch(  # _block_sparse_fwd_kernel[grid](...), Triton's dispatch skipped once seen
            _block_sparse_fwd_kernel, grid, q4, k4, v4, m8, out, lse, full_num, full_idx, part_num, part_idx,
            *ints, s * LOG2E.value, **meta)
    except _targets.OutOfResources as err:  # the tile does not fit this GPU's shared memory
        small = (min(bm, 64), min(bn, 64))
        if small == (bm, bn):
            raise ValueError(f"block_sparse_attention: a {bm} x {bn} tile at head dim {max(dk, dv)} "
                             f"needs more shared memory than this GPU has ({err})") from err
        warnings.warn(f"block_sparse_attention: a {bm} x {bn} tile at head dim {max(dk, dv)} needs "
                      f"more shared memory than this GPU has; using {small[0]} x {small[1]} tiles")
        return block_sparse_attention(q, k, v, raw, *small, scale=scale, return_lse=return_lse,
                                      num_warps=None, num_stages=num_stages, precision=precision)
    return (out, lse) if return_lse else out


#: (block_q, block_k) the report compiles, the default tile and the benchmark's 128 x 64
#: (half dtypes and TF32; exact float32 the default tile only), each with the launch of
#: :func:`launch_config`.
AOT_TILES = [(64, 64), (128, 64)]


def aot_kernels() -> list:
    """The block-sparse forward as an ``AotKernel`` (``attn_edu/kernels/_shared.py``) record for
    ``python -m attn_edu.kernels.report`` (``AOT_TILES`` launched as :func:`launch_config`
    does, head dims powers of two; a row's BLOCK_M is the rows per program)."""
    def meta(d, dtype, config, precision):
        plan_m = max(64, config[0])  # the plan's rows: a tile of AOT_TILES that has these rows
        return dict(D=d, DV=d, BLOCK_M=config[0], BLOCK_N=config[1], BLOCK_D=padded_head_dim(d),
                    BLOCK_DV=padded_head_dim(d), EVEN=True, PRECISION=precision, UPCAST=False,
                    PLAN_M=plan_m)

    def configs(capability, d, dtype, precision):
        if precision == "ieee" and _targets.has_tf32(capability):
            return []  # refused there (see block_sparse_attention)
        tiles = AOT_TILES[:1] if precision == "ieee" else AOT_TILES
        size = 4 if dtype == "float32" else 2
        return [launch_config(bq, bk, d, precision, capability=capability, dtype_bytes=size) for bq, bk in tiles]

    pointers = {"Q": "{dtype}", "K": "{dtype}", "V": "{dtype}", "M": "u8", "O": "{dtype}",
                "LSE": "fp32", "FULL_NUM": "i32", "FULL_IDX": "i32", "PART_NUM": "i32",
                "PART_IDX": "i32"}
    return [AotKernel("block_sparse_forward", _block_sparse_fwd_kernel, pointers, ("qk_scale",),
                      meta, configs,
                      unit_strides=("s_qd", "s_kd", "s_vd", "s_od", "s_mn"))]


# --------------------------------------------------------------------------------------
# FlexAttention on the same boolean mask (the comparison)
# --------------------------------------------------------------------------------------
def flex_available() -> bool:
    """Whether ``torch.nn.attention.flex_attention`` can be imported (torch >= 2.5).

    With torch 2.13 on the CPU, eager ``flex_attention`` works (an unfused reference
    that materialises the scores, with a warning we silence); the fused kernel needs
    ``torch.compile``, which :func:`flex_reference` uses on CUDA.
    """
    if torch is None:
        return False
    try:
        import torch.nn.attention.flex_attention as flex
    except Exception:
        return False
    return hasattr(flex, "flex_attention") and hasattr(flex, "create_block_mask")


def flex_block_mask_from_bool(mask, block_q: int = 128, block_k: Optional[int] = None,
                              device: Union[str, "torch.device", None] = None):
    """A FlexAttention ``BlockMask`` for a boolean mask, via a ``mask_mod`` that indexes it.

    ``mask`` (L_q, L_k) or broadcastable to (B, H, L_q, L_k), True = may attend (torch or
    NumPy). ``block_q`` x ``block_k`` (default ``block_k = block_q``) is FlexAttention's
    ``BLOCK_SIZE``; 128 is FlexAttention's own default.
    ``create_block_mask`` evaluates ``mask_mod(b, h, q_idx, kv_idx)`` on every entry and
    keeps, like :meth:`attn_edu.masks.TilePlan.tile_lists`, lists of partial and of full tiles.
    """
    if not flex_available():
        raise ImportError("FlexAttention needs torch >= 2.5 (torch.nn.attention.flex_attention)")
    from torch.nn.attention.flex_attention import create_block_mask

    if not isinstance(mask, torch.Tensor):
        mask = torch.from_numpy(np.ascontiguousarray(_mask_as_numpy(mask)))
    elif mask.dtype != torch.bool:
        _mask_as_numpy(mask)  # raises the dtype error
    device = mask.device if device is None else torch.device(device)
    m4 = mask.reshape(_as_4d(mask.shape)).to(device)  # (Bm, Hm, Lq, Lk)
    bm, hm, lq, lk = m4.shape

    def mask_mod(b, h, q_idx, kv_idx):
        return m4[b if bm > 1 else 0, h if hm > 1 else 0, q_idx, kv_idx]

    return create_block_mask(mask_mod, bm if bm > 1 else None, hm if hm > 1 else None,
                             lq, lk, device=device,
                             BLOCK_SIZE=(block_q, block_q if block_k is None else block_k))


_COMPILED_FLEX = None


def _flex_fn(compiled: bool):
    global _COMPILED_FLEX
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled:
        return flex_attention
    if _COMPILED_FLEX is None:
        _COMPILED_FLEX = torch.compile(flex_attention, dynamic=False)
    return _COMPILED_FLEX


def flex_reference(q, k, v, mask=None, block_q: int = 128, block_k: Optional[int] = None,
                   scale: Optional[float] = None, return_lse: bool = False, block_mask=None,
                   compiled: Optional[bool] = None):
    """FlexAttention on the same inputs as :func:`block_sparse_attention`.

    Give ``mask`` (boolean, converted by :func:`flex_block_mask_from_bool` with tiles
    ``block_q`` x ``block_k``) or a ready
    ``block_mask``. ``compiled`` defaults to ``q.is_cuda``: ``torch.compile`` generates
    FlexAttention's fused block-sparse kernel there; eager mode (the CPU here) runs an
    unfused implementation that is correct but materialises the scores. Fully masked rows
    give zeros and ``lse = -inf``, as in this package.
    """
    if not flex_available():
        raise ImportError("FlexAttention needs torch >= 2.5 (torch.nn.attention.flex_attention)")
    if block_mask is None:
        if mask is None:
            raise ValueError("flex_reference needs mask or block_mask")
        block_mask = flex_block_mask_from_bool(mask, block_q, block_k, device=q.device)
    compiled = q.is_cuda if compiled is None else bool(compiled)
    fn = _flex_fn(compiled)
    with warnings.catch_warnings():  # eager mode warns that it is unfused; we know
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
        if not return_lse:
            return fn(q, k, v, block_mask=block_mask, scale=scale)
        try:  # torch >= 2.9 asks for the lse this way; return_lse= is deprecated
            from torch.nn.attention.flex_attention import AuxRequest
        except ImportError:
            return fn(q, k, v, block_mask=block_mask, scale=scale, return_lse=True)
        out, aux = fn(q, k, v, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True))
        return out, aux.lse
