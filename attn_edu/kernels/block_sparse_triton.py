r"""Block-sparse attention in Triton: compute only the tiles a mask leaves non-empty.

A sparse pattern (local window, strided, global tokens; Child et al. 2019,
``child2019sparse``) says which keys each query may see. Cut the (L_q, L_k) mask
into tiles of ``block_m`` queries by ``block_n`` keys. Every tile falls in one of
three kinds:

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
block layout (:func:`attn_edu.masks.block_layout`, :func:`attn_edu.masks.full_blocks`)
compressed row by row, like a CSR matrix: per row block a count and the column
indices of its full tiles, then of its partial tiles. That is the same data
structure as FlexAttention's ``BlockMask`` (``kv_num_blocks``/``kv_indices`` for the
partial tiles, ``full_kv_num_blocks``/``full_kv_indices`` for the full ones;
Dong et al. 2024, ``dong2024flexattention``); :func:`flex_reference` runs
FlexAttention on the same boolean mask for comparison.

The work is proportional to the number of non-empty tiles, so the ideal speed-up
over dense attention is ``1 / density`` with ``density`` the fraction of tiles
computed (:func:`attn_edu.masks.block_density`).

Scope: **forward pass only** (no autograd); boolean masks only (True = may attend);
float16, bfloat16 and float32 (the float32 dot products use full IEEE precision,
not TF32); head dimensions 16 to 128; tile sizes powers of two from 16 to 256.
A fully masked query row gives a zero output row and ``lse = -inf``, never NaN.
It runs on a CUDA GPU, or on the CPU through Triton's interpreter (slow, for tests
and small examples) when the environment variable ``TRITON_INTERPRET=1`` is set
**before triton is first imported**. Triton 3.9 reads the variable whenever
``@triton.jit`` wraps a function: its own library (``tl.max``, ``tl.sum``,
``tl.zeros``) when ``triton`` is imported, this kernel when this module is imported.
If the variable is set after this module but before triton was imported, the first
CPU call re-imports this module so the kernel becomes an interpreted one; if triton
itself was imported too early, the call stops with an error saying so. The
interpreter multiplies bfloat16 bit patterns in ``tl.dot`` (triton-lang/triton#11584),
so under it bfloat16 tiles are multiplied in float32 (exact products, float32
accumulation, as on the GPU). Explained in chapters 09 (tiles), 10 (Triton) and 11
(sparse patterns).

``python -m attn_edu.kernels.block_sparse_triton`` runs :func:`bench_block_sparse`
(CUDA only).
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _checks
from . import _interpret
from ..masks import block_density, block_layout, full_blocks

try:  # guarded: importing attn_edu never needs torch or triton
    import torch

    from ..torch_ops import _require_tensor
except ImportError:  # pragma: no cover - torch is needed for everything below
    torch = None

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is missing
    triton = None
    tl = None

__all__ = [
    "BlockSparseLayout",
    "make_block_sparse_layout",
    "block_sparse_attention",
    "flex_available",
    "flex_block_mask_from_bool",
    "flex_reference",
    "bench_block_sparse",
    "HEAD_DIMS",
    "DTYPES",
    "BLOCK_SIZES",
]

#: Head dimensions the kernel accepts (inclusive); not powers of two are padded.
HEAD_DIMS = (16, 128)
#: Input dtypes the kernel accepts.
DTYPES = ("float16", "bfloat16", "float32")
#: Tile sizes (block_m, block_n) the kernel accepts: powers of two in this range.
BLOCK_SIZES = (16, 256)

#: True when this module's kernel was wrapped by Triton's interpreter (CPU tensors).
INTERPRETED = triton is not None and _interpret.requested()

_LOG2E = 1.4426950408889634  # log2(e): the kernel works with exp2


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
        offs_n = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key positions
        col_ok = offs_n < LK
        k_ptrs = k_base + offs_n[None, :] * s_kn + offs_d[:, None] * s_kd  # (BLOCK_D, BLOCK_N)
        v_ptrs = v_base + offs_n[:, None] * s_vn + offs_dv[None, :] * s_vd  # (BLOCK_N, BLOCK_DV)
        if EVEN:
            k = tl.load(k_ptrs)
        else:
            k = tl.load(k_ptrs, mask=col_ok[None, :] & (offs_d[:, None] < D), other=0.0)
        if UPCAST:  # interpreter only: it cannot multiply bfloat16 (see _upcast_for)
            k = k.to(tl.float32)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), log2 units
        if APPLY_MASK:  # partial tile: load the element mask (True = may attend)
            allowed = tl.load(m_rows + offs_n[None, :] * s_mn,
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
    ):
        pid_m = tl.program_id(0)  # row block
        pid_bh = tl.program_id(1)  # batch * heads
        b = (pid_bh // H).to(tl.int64)
        h = (pid_bh % H).to(tl.int64)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query positions
        offs_d = tl.arange(0, BLOCK_D)
        offs_dv = tl.arange(0, BLOCK_DV)
        row_ok = offs_m < LQ

        q = tl.load(Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qm + offs_d[None, :] * s_qd,
                    mask=row_ok[:, None] & (offs_d[None, :] < D), other=0.0)  # (BLOCK_M, BLOCK_D)
        if UPCAST:
            q = q.to(tl.float32)
        k_base = K + b * s_kb + h * s_kh
        v_base = V + b * s_vb + h * s_vh
        m_rows = M + b * s_mb + h * s_mh + offs_m[:, None] * s_mm  # (BLOCK_M, 1) mask rows

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max (log2 units)
        l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2
        acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)  # unnormalised output

        lists = b * s_cb + h * s_ch + pid_m  # this row block's entry in the count arrays
        row_idx = b * s_ib + h * s_ih + pid_m * s_im  # ... and its row of column indices
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
        tl.store(O + b * s_ob + h * s_oh + offs_m[:, None] * s_om + offs_dv[None, :] * s_od,
                 out.to(O.dtype.element_ty), mask=row_ok[:, None] & (offs_dv[None, :] < DV))
        lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
        tl.store(LSE + b * s_lb + h * s_lh + offs_m, lse, mask=row_ok)


# --------------------------------------------------------------------------------------
# The block layout, compressed row by row
# --------------------------------------------------------------------------------------
class BlockSparseLayout(NamedTuple):
    """Which tiles a mask leaves non-empty, as per-row-block lists the kernel walks.

    ``layout`` and ``full`` are NumPy booleans of shape (B_m, H_m, n_q, n_k) with
    ``n_q = ceil(L_q / block_m)``, ``n_k = ceil(L_k / block_n)`` and (B_m, H_m) the
    mask's leading axes (1 where it broadcasts). The four tensors (int32, on the
    kernel's device) hold, per row block, the count and the column indices of its
    full tiles (``full_num`` (B_m, H_m, n_q), ``full_idx`` (B_m, H_m, n_q, n_k)) and of
    its partial tiles (``part_num``, ``part_idx``); only the first ``num`` entries of an
    index row are meaningful.
    """

    block_m: int
    block_n: int
    lq: int
    lk: int
    layout: np.ndarray
    full: np.ndarray
    full_num: Any
    full_idx: Any
    part_num: Any
    part_idx: Any

    @property
    def density(self) -> float:
        """The fraction of tiles that are computed, 1.0 meaning dense (see :func:`attn_edu.masks.block_density`)."""
        return block_density(self.layout)

    def dense(self) -> Tuple[np.ndarray, np.ndarray]:
        """Rebuild (layout, full) from the index lists: the inverse of the compression."""
        nk = self.layout.shape[-1]
        out = []
        for num, idx in ((self.full_num, self.full_idx), (self.part_num, self.part_idx)):
            num, idx = num.cpu().numpy(), idx.cpu().numpy()  # (Bm, Hm, nq), (Bm, Hm, nq, nk)
            listed = np.arange(idx.shape[-1]) < num[..., None]  # first `num` entries per row
            dense = np.zeros(idx.shape[:-1] + (nk,), dtype=bool)
            where = np.nonzero(listed)  # (b, h, row, position) of each listed entry
            dense[where[:-1] + (idx[where],)] = True
            out.append(dense)
        full, part = out
        return full | part, full


def _mask_as_numpy(mask) -> np.ndarray:
    if torch is not None and isinstance(mask, torch.Tensor):
        if mask.dtype != torch.bool:
            raise TypeError(
                f"mask must be a boolean tensor (True = may attend); got dtype "
                f"{str(mask.dtype).replace('torch.', '')}. Float masks are not supported by the "
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
    value = _checks.check_block_size(name, value)
    lo, hi = BLOCK_SIZES
    if value & (value - 1) or not lo <= value <= hi:
        raise ValueError(
            f"{name} must be a power of two from {lo} to {hi} (tl.arange needs a power of two, "
            f"tl.dot at least 16); got {value}"
        )
    return value


def make_block_sparse_layout(mask, block_m: int = 64, block_n: Optional[int] = None,
                             device: Union[str, "torch.device", None] = None) -> BlockSparseLayout:
    """Compress a boolean mask's block layout into per-row-block tile lists.

    ``mask`` (L_q, L_k) or broadcastable to (B, H, L_q, L_k), NumPy or torch, True = may
    attend. The layout comes from :func:`attn_edu.masks.block_layout` and
    :func:`attn_edu.masks.full_blocks` (computed in NumPy: for a 16384 x 16384 mask that
    takes about a second, so build it once and pass ``layout=`` to
    :func:`block_sparse_attention`, as FlexAttention builds its ``BlockMask`` once).
    Tiles are sorted full first, then partial; inside each list by column.
    """
    if torch is None:
        raise ImportError("make_block_sparse_layout needs PyTorch")
    block_m = _check_tile("block_m", block_m)
    block_n = block_m if block_n is None else _check_tile("block_n", block_n)
    if device is None:
        device = mask.device if isinstance(mask, torch.Tensor) else "cpu"
    arr = _mask_as_numpy(mask)
    arr = arr.reshape(_as_4d(arr.shape))  # (Bm, Hm, Lq, Lk)
    lq, lk = arr.shape[-2:]
    if lq == 0 or lk == 0:
        nq, nk = -(-lq // block_m), -(-lk // block_n)
        layout = np.zeros(arr.shape[:2] + (nq, nk), dtype=bool)
        full = layout.copy()
    else:
        layout = block_layout(arr, block_m, block_n)  # (Bm, Hm, nq, nk)
        full = full_blocks(arr, block_m, block_n) & layout
    partial = layout & ~full

    def lists(tiles: np.ndarray):
        num = tiles.sum(axis=-1).astype(np.int32)  # (Bm, Hm, nq)
        idx = np.argsort(~tiles, axis=-1, kind="stable").astype(np.int32)  # listed first
        return (torch.from_numpy(np.ascontiguousarray(num)).to(device),
                torch.from_numpy(np.ascontiguousarray(idx)).to(device))

    full_num, full_idx = lists(full)
    part_num, part_idx = lists(partial)
    return BlockSparseLayout(block_m, block_n, lq, lk, layout, full,
                             full_num, full_idx, part_num, part_idx)


# --------------------------------------------------------------------------------------
# The public wrapper
# --------------------------------------------------------------------------------------
def _check_inputs(q, k, v) -> Tuple[int, int]:
    """Validate q, k, v for the kernel; return the broadcast (B, H)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _require_tensor(name, x)
        if x.dim() != 4:
            raise ValueError(f"{name} must have shape (B, H, L, D); got shape {tuple(x.shape)}")
    batch, _ = _checks.check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    dt = _checks.check_float_dtypes(q=_checks.dtype_name(q.dtype), k=_checks.dtype_name(k.dtype),
                                    v=_checks.dtype_name(v.dtype))
    if dt not in DTYPES:
        raise TypeError(f"block_sparse_attention supports dtypes {', '.join(DTYPES)}; got {dt}")
    lo, hi = HEAD_DIMS
    for name, d in (("q/k head dim d_k", q.shape[-1]), ("v head dim d_v", v.shape[-1])):
        if not lo <= d <= hi:
            raise ValueError(
                f"block_sparse_attention supports head dimensions {lo} to {hi}; got {name} = {d}"
            )
    _checks.same_devices(q=q.device, k=k.device, v=v.device)
    if q.device.type == "cuda" or (q.device.type == "cpu" and (INTERPRETED or _interpret_now())):
        return tuple(batch)
    if q.device.type == "cpu":
        raise RuntimeError(
            "block_sparse_attention got CPU tensors, but Triton kernels need a CUDA GPU. To run "
            "them on the CPU through Triton's interpreter, set the environment variable "
            "TRITON_INTERPRET=1 before importing attn_edu.kernels.block_sparse_triton (Triton "
            "reads it when @triton.jit wraps the kernel)."
        )
    raise RuntimeError(f"block_sparse_attention runs on CUDA (or the CPU interpreter); got device {q.device}")


def _interpret_now() -> bool:
    """What ``@triton.jit`` would choose now (it reads ``TRITON_INTERPRET`` each time)."""
    return triton is not None and _interpret.requested()


def _reload_if_mode_changed() -> bool:
    """If ``TRITON_INTERPRET=1`` was set after this module was imported, import it again
    so that the kernel is rebuilt as an interpreted one (as :mod:`.flash_triton` does)."""
    if INTERPRETED or not _interpret_now():
        return False
    import importlib
    import sys

    importlib.reload(sys.modules[__name__])
    return True


def _check_interpreter_complete() -> None:
    """The interpreter also needs Triton's own library (``tl.max``, ``tl.sum``, ``tl.zeros``
    are ``@triton.jit`` functions) built in interpreter mode, i.e. ``TRITON_INTERPRET=1``
    set before the first ``import triton`` of the process."""
    if not _interpret.library_interpreted():
        raise RuntimeError(
            "Triton was imported before TRITON_INTERPRET=1 was set, so its library functions "
            "(tl.max, tl.sum, tl.zeros) were built for the GPU and the CPU interpreter cannot "
            "call them. Set TRITON_INTERPRET=1 before the first `import triton` (in the shell, "
            "or with os.environ at the very top of the script or notebook) and restart."
        )


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


def _default_warps(block_m: int, block_n: int, d: int) -> int:
    return 8 if block_m * max(d, block_n) >= 128 * 128 else 4


def block_sparse_attention(q, k, v, mask, block: int = 64, *, block_m: Optional[int] = None,
                           block_n: Optional[int] = None, scale: Optional[float] = None,
                           return_lse: bool = False, layout: Optional[BlockSparseLayout] = None,
                           num_warps: Optional[int] = None, num_stages: Optional[int] = None):
    r"""Attention :math:`\operatorname{softmax}(QK^\top s + M)V` computing only non-empty tiles.

    Args:
        q: (B, H, L_q, d_k); k: (B, H, L_k, d_k); v: (B, H, L_k, d_v) torch tensors of one
            dtype (float16, bfloat16 or float32) with 16 <= d_k, d_v <= 128, on CUDA (or the
            CPU with ``TRITON_INTERPRET=1``). Leading axes of size 1 broadcast.
        mask: boolean, True = may attend, (L_q, L_k) or broadcastable to (B, H, L_q, L_k);
            a torch tensor or a NumPy array.
        block: tile size used for both ``block_m`` (queries) and ``block_n`` (keys)
            unless those are given; powers of two from 16 to 256.
        scale: multiplies the scores; default 1/sqrt(d_k).
        return_lse: also return the log-sum-exp of each row's scaled scores, float32
            (B, H, L_q) (``-inf`` for a fully masked row).
        layout: a :func:`make_block_sparse_layout` of this same ``mask`` to reuse (its
            tile sizes win); otherwise it is built here.
        num_warps, num_stages: Triton launch options (ignored by the interpreter).

    Returns:
        out (B, H, L_q, d_v) in the input dtype, or ``(out, lse)``.

    Forward only (no gradient). Fully masked rows give zeros. Explained in chapter 11.
    """
    if torch is None or triton is None:
        raise ImportError("block_sparse_attention needs PyTorch and Triton (pip install triton)")
    batch = _check_inputs(q, k, v)
    if q.device.type == "cpu" and _reload_if_mode_changed():  # the kernel is rebuilt
        return globals()["block_sparse_attention"](
            q, k, v, mask, block, block_m=block_m, block_n=block_n, scale=scale,
            return_lse=return_lse, layout=layout, num_warps=num_warps, num_stages=num_stages)
    if q.device.type == "cpu":
        _check_interpreter_complete()
    if isinstance(mask, np.ndarray):
        if mask.dtype != bool:
            _mask_as_numpy(mask)  # raises the dtype error
        mask = torch.from_numpy(np.ascontiguousarray(mask)).to(q.device)
    _require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        _mask_as_numpy(mask)  # raises the dtype error
    _checks.same_devices(q=q.device, mask=mask.device)
    lq, lk = q.shape[-2], k.shape[-2]
    scores = tuple(batch) + (lq, lk)
    _as_4d(mask.shape)
    _checks.check_mask_shape(tuple(mask.shape), scores)
    s = _checks.check_scale(scale, q.shape[-1])

    if layout is None:
        bm = _check_tile("block_m", block if block_m is None else block_m)
        bn = _check_tile("block_n", block if block_n is None else block_n)
        layout = make_block_sparse_layout(mask, bm, bn, device=q.device)
    else:
        if type(layout).__name__ != "BlockSparseLayout":  # (a reload makes a new class)
            raise TypeError(f"layout must come from make_block_sparse_layout; got {type(layout).__name__}")
        for name, given, have in (("block_m", block_m, layout.block_m), ("block_n", block_n, layout.block_n)):
            if given is not None and given != have:
                raise ValueError(f"{name}={given} disagrees with the layout's {name}={have}")
        if (layout.lq, layout.lk) != (lq, lk) or _checks.broadcast_shapes(
                layout.layout.shape[:2], tuple(batch)) != tuple(batch):
            raise ValueError(
                f"layout was built for a mask of shape {layout.layout.shape[:2] + (layout.lq, layout.lk)}"
                f"; the scores here have shape {scores}"
            )
        if layout.full_num.device != q.device:
            raise ValueError(f"layout lives on {layout.full_num.device}, q on {q.device}")
    bm, bn = layout.block_m, layout.block_n

    B, H = batch
    dk, dv = q.shape[-1], v.shape[-1]
    out = torch.empty((B, H, lq, dv), dtype=q.dtype, device=q.device)  # (B, H, Lq, Dv)
    lse = torch.empty((B, H, lq), dtype=torch.float32, device=q.device)  # (B, H, Lq)
    if lq == 0:
        return (out, lse) if return_lse else out
    q4, k4, v4 = q.expand(B, H, lq, dk), k.expand(B, H, lk, dk), v.expand(B, H, lk, dv)
    m4 = mask.reshape(_as_4d(mask.shape))
    m8 = m4.view(torch.uint8)  # same bytes, any strides (an expanded mask stays unexpanded)

    grid = (triton.cdiv(lq, bm), B * H)
    upcast = _upcast_for(q.dtype)
    precision = "ieee" if q.dtype == torch.float32 or upcast else None
    block_d = max(16, triton.next_power_of_2(dk))
    block_dv = max(16, triton.next_power_of_2(dv))
    even = lk % bn == 0 and block_d == dk and block_dv == dv
    launch: Dict[str, int] = {}
    if not INTERPRETED:
        launch["num_warps"] = num_warps or _default_warps(bm, bn, max(dk, dv))
        launch["num_stages"] = num_stages or 3
    _block_sparse_fwd_kernel[grid](
        q4, k4, v4, m8, out, lse,
        layout.full_num, layout.full_idx, layout.part_num, layout.part_idx,
        _stride(q4, 0), _stride(q4, 1), q4.stride(2), q4.stride(3),
        _stride(k4, 0), _stride(k4, 1), k4.stride(2), k4.stride(3),
        _stride(v4, 0), _stride(v4, 1), v4.stride(2), v4.stride(3),
        out.stride(0), out.stride(1), out.stride(2), out.stride(3),
        _stride(m8, 0), _stride(m8, 1), _stride(m8, 2), _stride(m8, 3),
        lse.stride(0), lse.stride(1),
        _stride(layout.full_num, 0), _stride(layout.full_num, 1),
        _stride(layout.full_idx, 0), _stride(layout.full_idx, 1), layout.full_idx.stride(2),
        H, lq, lk, s * _LOG2E,
        D=dk, DV=dv, BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_D=block_d, BLOCK_DV=block_dv, EVEN=even,
        PRECISION=precision, UPCAST=upcast, **launch,
    )
    return (out, lse) if return_lse else out


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


def flex_block_mask_from_bool(mask, block: Union[int, Tuple[int, int]] = 128,
                              device: Union[str, "torch.device", None] = None):
    """A FlexAttention ``BlockMask`` for a boolean mask, via a ``mask_mod`` that indexes it.

    ``mask`` (L_q, L_k) or broadcastable to (B, H, L_q, L_k), True = may attend (torch or
    NumPy). ``block`` is FlexAttention's ``BLOCK_SIZE`` (an int or (block_q, block_kv)).
    ``create_block_mask`` evaluates ``mask_mod(b, h, q_idx, kv_idx)`` on every entry and
    keeps, like :func:`make_block_sparse_layout`, lists of partial and of full tiles.
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
                             lq, lk, device=device, BLOCK_SIZE=block)


_COMPILED_FLEX = None


def _flex_fn(compiled: bool):
    global _COMPILED_FLEX
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled:
        return flex_attention
    if _COMPILED_FLEX is None:
        _COMPILED_FLEX = torch.compile(flex_attention, dynamic=False)
    return _COMPILED_FLEX


def flex_reference(q, k, v, mask=None, block: Union[int, Tuple[int, int]] = 128,
                   scale: Optional[float] = None, return_lse: bool = False, block_mask=None,
                   compiled: Optional[bool] = None):
    """FlexAttention on the same inputs as :func:`block_sparse_attention`.

    Give ``mask`` (boolean, converted by :func:`flex_block_mask_from_bool`) or a ready
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
        block_mask = flex_block_mask_from_bool(mask, block, device=q.device)
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


# --------------------------------------------------------------------------------------
# Benchmark (CUDA only)
# --------------------------------------------------------------------------------------
def _pattern_mask(pattern: str, n: int, density: float, granule: int, seed: int, device):
    """A boolean (n, n) mask of about ``density`` allowed entries.

    ``"blocks"``: each row of ``granule``-sized tiles keeps ``round(density * tiles)``
    random key tiles (always its diagonal), so every tile is full or empty and the tile
    density equals ``density``. ``"window"``: a causal sliding window of
    ``density * n`` keys, whose diagonal tiles are partial.
    """
    if pattern == "blocks":
        nb = -(-n // granule)
        keep = max(1, round(density * nb))
        gen = torch.Generator().manual_seed(seed)
        lay = torch.zeros(nb, nb, dtype=torch.bool)
        for i in range(nb):
            others = torch.randperm(nb - 1, generator=gen)[: keep - 1]
            others = others + (others >= i).long()  # skip the diagonal, added below
            lay[i, others] = True
            lay[i, i] = True
        lay = lay.to(device)
        m = lay.repeat_interleave(granule, 0).repeat_interleave(granule, 1)
        return m[:n, :n].contiguous()
    if pattern == "window":
        w = max(1, round(density * n))
        i = torch.arange(n, device=device)
        d = i[:, None] - i[None, :]
        return (d >= 0) & (d < w)
    raise ValueError(f"pattern must be 'blocks' or 'window'; got {pattern!r}")


_BENCH_DEVICE = "cuda"


def _default_bench_dtype() -> str:
    """``"bfloat16"`` on GPUs with native bfloat16 (compute capability 8.0+: A100, H100,
    RTX 30xx and later), ``"float16"`` before that (a Colab T4 is 7.5).

    Not :func:`torch.cuda.is_bf16_supported`: by default it also says True when bfloat16
    is merely *emulated* (a T4), but Triton kernels need it natively.
    """
    return "bfloat16" if torch.cuda.get_device_capability() >= (8, 0) else "float16"


def bench_block_sparse(n_list: Sequence[int] = (8192, 16384), d: int = 64,
                       densities: Sequence[float] = (1.0, 0.5, 0.25, 0.125, 0.0625),
                       dtype: Optional[str] = None, batch: int = 1, heads: int = 16,
                       block_m: int = 128, block_n: int = 64, flex_block: int = 128,
                       patterns: Sequence[str] = ("blocks", "window"), seed: int = 0,
                       configs: Sequence[Tuple[int, int]] = ((4, 2), (4, 3), (8, 2), (8, 3)),
                       json_path: Optional[str] = None, verbose: bool = True) -> List[dict]:
    """Time the block-sparse kernel against itself on a full layout and against FlexAttention.

    For every n, pattern and density it prints (and returns as dicts):

    * ``t_sparse`` -- :func:`block_sparse_attention` with a prebuilt layout (ms, median of
      ``triton.testing.do_bench``; best of ``configs`` = (num_warps, num_stages));
    * ``t_full`` -- the same kernel on an all-True mask: every tile full, nothing skipped;
    * ``speedup = t_full / t_sparse`` next to the ideal ``1 / tile_density``, and
      ``efficiency = speedup * tile_density`` (goal: >= 0.8 for density >= 1/8, n >= 8192);
    * ``t_flex`` -- ``torch.compile(flex_attention)`` on a BlockMask of the same boolean
      mask (``flex_block`` tiles), and ``t_sparse / t_flex`` (goal: <= 1.25);
    * ``tflops`` -- 4 * B * H * (computed tiles * block_m * block_n) * d / t_sparse:
      the FLOPs of the tiles actually computed (two matmuls of 2 * d FLOPs per score).

    Before timing, each case checks the kernel against FlexAttention (max abs difference
    ``err_vs_flex``); a small case (n = 512) is checked against the float64 reference with
    the tolerance rule of :mod:`attn_edu.testing`. ``dtype`` defaults to bfloat16 where the
    GPU has it natively (compute capability 8.0+) and float16 elsewhere (a T4). If
    FlexAttention cannot be compiled here (old torch, or a GPU with too little shared memory
    for its kernel), that is printed and the rows carry no ``t_flex``. Needs a CUDA GPU: on
    any other machine it prints that it was skipped and returns ``[]``.
    """
    if torch is None or triton is None or not torch.cuda.is_available() or INTERPRETED:
        why = ("torch/triton missing" if torch is None or triton is None else
               "TRITON_INTERPRET=1 is set (interpreter timings mean nothing)" if INTERPRETED
               and torch.cuda.is_available() else "no CUDA GPU (torch.cuda.is_available() is False)")
        print(f"bench_block_sparse: SKIPPED, {why}. It measures GPU kernels only; "
              "no timings were taken.")
        return []
    import json
    import platform
    import time
    from triton.testing import do_bench

    from ..reference import scaled_dot_product_attention
    from ..testing import assert_close_to_reference

    dev = torch.device(_BENCH_DEVICE)
    dtype = _default_bench_dtype() if dtype is None else dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    dt = getattr(torch, dtype)
    have_flex = flex_available()
    granule = math.lcm(block_m, block_n, flex_block)

    def timed(fn):
        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    def best_of(q, k, v, mask, lay):
        best = None
        for nw, ns in configs:
            def fn():
                return block_sparse_attention(q, k, v, mask, layout=lay, num_warps=nw, num_stages=ns)
            try:
                fn()
                t = timed(fn)
            except Exception as e:  # a config that does not fit (shared memory) is skipped
                if verbose:
                    print(f"  config num_warps={nw} num_stages={ns} failed: {type(e).__name__}")
                continue
            if best is None or t < best[0]:
                best = (t, nw, ns)
        if best is None:
            raise RuntimeError("no launch configuration ran")
        return best

    # correctness on a small case against the float64 reference (the tolerance rule)
    g = torch.Generator(device="cpu").manual_seed(seed)
    small = 512
    q, k, v = (torch.randn(1, 2, small, d, generator=g).to(dev, dt) for _ in range(3))
    m = _pattern_mask("window", small, 0.25, granule, seed, dev)
    out = block_sparse_attention(q, k, v, m, block_m=block_m, block_n=block_n)
    gold = scaled_dot_product_attention(*(x.double().cpu().numpy() for x in (q, k, v)), mask=m.cpu().numpy())
    naive = scaled_dot_product_attention(q, k, v, mask=m)
    err = assert_close_to_reference(out, gold, naive)
    if verbose:
        print(f"check n={small} {dtype} vs float64 reference: max err {err:.2e} (passes the rule)")

    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "dtype": dtype, "batch": batch,
            "heads": heads, "d": d, "block_m": block_m, "block_n": block_n, "flex_block": flex_block}
    if verbose:
        print(f"{meta['device']}  torch {meta['torch']}  triton {meta['triton']}  {dtype}  "
              f"B={batch} H={heads} d={d}  tiles {block_m}x{block_n}, flex {flex_block}")
    rows: List[dict] = []
    for n in n_list:
        q, k, v = (torch.randn(batch, heads, n, d, device=dev, dtype=dt) for _ in range(3))
        ones = torch.ones(n, n, dtype=torch.bool, device=dev)
        full_lay = make_block_sparse_layout(ones, block_m, block_n, device=dev)
        t_full, *_ = best_of(q, k, v, ones, full_lay)
        base = {"t_full": t_full}
        try:  # the dense kernel of chapter 10, for context
            from .flash_triton import triton_attention_forward

            triton_attention_forward(q, k, v)
            base["t_dense_flash_triton"] = timed(lambda: triton_attention_forward(q, k, v))
        except Exception as e:  # noqa: BLE001 - context only
            print(f"  (flash_triton dense kernel not timed: {type(e).__name__}: {e})")
        if have_flex:
            try:  # compiling FlexAttention can fail where ours runs (e.g. shared memory)
                ones_bm = flex_block_mask_from_bool(ones, flex_block, device=dev)
                flex_reference(q, k, v, block_mask=ones_bm, compiled=True)
                base["t_flex_full"] = timed(lambda: flex_reference(q, k, v, block_mask=ones_bm,
                                                                   compiled=True))
            except Exception as e:  # noqa: BLE001 - the comparison is optional
                have_flex = False
                print(f"  FlexAttention not compared here: {type(e).__name__}: "
                      f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}")
        if verbose:
            print(f"n={n}: dense baselines (ms): " + ", ".join(f"{a} {b:.3f}" for a, b in base.items()))
            print(f"{'n':>6} {'pattern':>7} {'density':>8} {'tiles':>6} {'t_sparse':>9} {'t_full':>8} "
                  f"{'speedup':>8} {'ideal':>6} {'effic.':>7} {'t_flex':>8} {'sp/flex':>8} "
                  f"{'TFLOP/s':>8} {'cfg':>5} {'goal':>5}")
        for pattern in patterns:
            for rho in densities:
                mask = _pattern_mask(pattern, n, rho, granule, seed, dev)
                lay = make_block_sparse_layout(mask, block_m, block_n, device=dev)
                t_sparse, nw, ns = best_of(q, k, v, mask, lay)
                tile_density = lay.density
                row = {"n": n, "pattern": pattern, "density": float(mask.float().mean()),
                       "tile_density": tile_density, "t_sparse": t_sparse, "t_full": t_full,
                       "speedup": t_full / t_sparse, "ideal": 1.0 / tile_density, **base,
                       "efficiency": t_full / t_sparse * tile_density, "num_warps": nw,
                       "num_stages": ns,
                       "tflops": 4 * batch * heads * int(lay.layout.sum()) * block_m * block_n * d
                       / (t_sparse * 1e-3) / 1e12}
                if have_flex:
                    try:
                        bmask = flex_block_mask_from_bool(mask, flex_block, device=dev)
                        ref = flex_reference(q, k, v, block_mask=bmask, compiled=True)
                        ours = block_sparse_attention(q, k, v, mask, layout=lay, num_warps=nw,
                                                      num_stages=ns)
                        err_flex = float((ours.float() - ref.float()).abs().max())
                        t_flex = timed(lambda: flex_reference(q, k, v, block_mask=bmask,
                                                              compiled=True))
                        row.update(err_vs_flex=err_flex, t_flex=t_flex,
                                   sparse_over_flex=t_sparse / t_flex,
                                   flex_speedup=row["t_flex_full"] / t_flex)
                    except Exception as e:  # noqa: BLE001 - the comparison is optional
                        print(f"  FlexAttention failed on this case: {type(e).__name__}")
                goal = []
                if rho >= 1 / 8 and rho < 1 and n >= 8192:
                    goal.append(row["efficiency"] >= 0.8)
                if "sparse_over_flex" in row:
                    goal.append(row["sparse_over_flex"] <= 1.25)
                row["meets_goal"] = all(goal) if goal else None
                rows.append(row)
                if verbose:
                    fl = (f"{row['t_flex']:8.3f} {row['sparse_over_flex']:8.2f}" if "t_flex" in row
                          else f"{'n/a':>8} {'n/a':>8}")
                    verdict = {True: "yes", False: "NO", None: "-"}[row["meets_goal"]]
                    print(f"{n:6d} {pattern:>7} {row['density']:8.4f} {tile_density:6.3f} "
                          f"{t_sparse:9.3f} {t_full:8.3f} {row['speedup']:8.2f} {row['ideal']:6.2f} "
                          f"{row['efficiency']:7.1%} {fl} {row['tflops']:8.1f} {nw}/{ns:<3} {verdict:>5}")
        torch.cuda.empty_cache()
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        if verbose:
            print(f"wrote {json_path}")
    return rows


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    """``python -m attn_edu.kernels.block_sparse_triton [--n 8192 16384] [--json out.json]``."""
    import argparse

    p = argparse.ArgumentParser(description=bench_block_sparse.__doc__.split("\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[8192, 16384])
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--densities", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.125, 0.0625])
    p.add_argument("--dtype", default=None, choices=list(DTYPES),
                   help="default: bfloat16 on compute capability 8.0+, else float16")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--block-m", type=int, default=128)
    p.add_argument("--block-n", type=int, default=64)
    p.add_argument("--flex-block", type=int, default=128)
    p.add_argument("--patterns", nargs="+", default=["blocks", "window"])
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    return bench_block_sparse(a.n, a.d, a.densities, a.dtype, a.batch, a.heads, a.block_m,
                              a.block_n, a.flex_block, a.patterns, json_path=a.json)


if __name__ == "__main__":
    main()
