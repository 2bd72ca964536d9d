"""How the FlashAttention kernels are launched: block sizes, the autotuner, TMA, the launchers.

Part of :mod:`attn_edu.kernels.flash_triton` (the kernels are in its ``kernels`` module, the
public functions in ``api``). Everything here is decided on the host, before a launch:

* the block sizes (BLOCK_M, BLOCK_N, num_warps, num_stages): on a GPU from compute
  capability 8.0 the forward is autotuned over ``FWD_CONFIGS_CUDA`` pruned per GPU, head
  dimension and dtype (:func:`forward_configs`, from the compile report's spills and shared
  memory), and the two-kernel backward over ``BWD_AUTOTUNE_CONFIGS`` (:func:`backward_configs`);
  before 8.0 and for exact float32 one fixed configuration; under the interpreter
  small fixed blocks; ``backward="atomic_dq"``'s are fixed per GPU (:func:`atomic_backward_configs`);
* what ``tl.dot`` multiplies float32 with (``attn_edu.kernels._targets.input_precision``);
* TMA tensor descriptors on Hopper (:func:`tma_compatible`, :func:`uses_tma`) and the
  scratch memory Triton asks for them;
* the launchers :func:`forward` and :func:`backward`, which trust their arguments: the
  public functions checked them once (``api.check_triton_inputs``).

* the FlashAttention-3 ladder (``FORWARD_VARIANTS``): what each variant turns on for a
  launch (:func:`variant_steps`), its autotune space (:func:`variant_configs`), its
  host-built descriptors and persistent grid.

Why one file of more than 600 lines: every decision a launch makes from shapes, dtypes and
the GPU is here, beside the tables the compile report measured them with, so that a rule
and the numbers behind it are read together.

Explained in chapter 10 (block sizes, the autotuner's cost on a reader's first call, TMA,
the ladder from FlashAttention-2 to -3).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from ... import _checks
from .. import _direct, _targets
from .._autotuned import chosen, launch_autotuned
from .._plans import plan_cache
from .._shared import HAS_TRITON, LOG2E, causal_offset_arg, launch_grid, padded_head_dim, triton
from . import kernels

__all__ = ["forward_configs", "forward_shared_memory", "backward_configs", "atomic_backward_configs",
           "tma_compatible", "BACKWARDS", "BACKWARD_FLOAT32", "TMA_MIN_CAPABILITY", "TMA_EXTRA_SHARED",
           "IEEE_FORWARD_CONFIG", "IEEE_BACKWARD_CONFIG", "FORWARD_VARIANTS", "variant_configs",
           "variant_steps", "warp_specialize_applies"]


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
#: ``python -m attn_edu.kernels.report`` (Triton 3.9, or Colab's 3.6: 64 x 32 with 4 warps
#: and 2 stages spills 8 B on sm_80 at d = 64 there), by (GPU family 80 or 90, head
#: dimension bucket 64 or 128, bytes per input element): left out of the search. Near 255
#: registers a thread, ptxas spills a few bytes in some stage counts and not in others.
FWD_SPILL_CONFIGS: Dict[Tuple[int, int, int], set] = {
    (80, 64, 2): {(64, 32, 4, 2), (64, 32, 4, 4), (64, 64, 4, 4), (128, 64, 4, 2)},
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
#: the same for ``backward="atomic_dq"``'s one kernel, with 4 warps (2 spilled 16 B at d = 128
#: on sm_80 with Colab's Triton 3.6; 4 spill nothing on sm_75, sm_80 or sm_90a with 3.6 or 3.9)
IEEE_ATOMIC_BACKWARD_CONFIG = (16, 16, 4, 1)
#: Under TRITON_INTERPRET=1 every block is a NumPy call, so the blocks are small and fixed
#: and tests with L = 65 or 129 still cross several blocks and a ragged last one.
INTERPRET_BLOCK_M = 32
INTERPRET_BLOCK_N = 32
#: Backward blocks on a GPU. The dK/dV program holds BLOCK_N keys and streams BLOCK_M
#: queries past them; the dQ program mirrors it (BLOCK_N queries, BLOCK_M keys per step).
BWD_BLOCK_M_CUDA, BWD_BLOCK_N_CUDA, BWD_WARPS_CUDA, BWD_STAGES_CUDA = 32, 64, 4, 2
#: The backward's tiles of earlier editions, each (BLOCK_M, BLOCK_N, num_warps, num_stages).
#: The first, the 32 x 64 tile, heads ``BWD_AUTOTUNE_CONFIGS`` from compute capability 8.0
#: (with 8 warps before Hopper); the second, which fits 64 KiB per block (a T4) at head
#: dimension 128, where the first needs ~100 KiB in float32 and ~80 KiB in float16, is the
#: one launched before 8.0 (:func:`~attn_edu.kernels.flash_triton.backward_configs`), and the
#: atomic schedule's second try (:func:`atomic_backward_configs`).
BWD_CONFIGS_CUDA = [
    (BWD_BLOCK_M_CUDA, BWD_BLOCK_N_CUDA, BWD_WARPS_CUDA, BWD_STAGES_CUDA),
    (16, 32, 4, 1),
]


#: The backward's autotune space per GPU family (80 for compute capability 8.x, 90 for 9.0
#: and newer) and head-dimension bucket (64 for d <= 64, 128 above), as (BLOCK_M, BLOCK_N,
#: num_warps, num_stages) of the dK/dV kernel (the dQ kernel swaps the two blocks): the
#: configurations that spill no register in either kernel in ``python -m attn_edu.kernels.report``
#: (Triton 3.9, and Colab's 3.6), at most three, so a reader's first backward compiles at most
#: six kernels. Left out as spilling: 32 x 128 with 4 warps (both families); on sm_80 the
#: 32 x 64 tile with 4 warps (8 B in the dK/dV kernel at d = 64 with Triton 3.6, in 2 and 3
#: stages), so sm_80 runs it with 8 warps; and on sm_80 at d = 128 every tile but 32 x 64 with
#: 8 warps, which stays alone there (nothing to tune).
BWD_AUTOTUNE_CONFIGS: Dict[Tuple[int, int], list] = {
    (80, 64): [(32, 64, 8, 2), (32, 64, 8, 3), (32, 128, 8, 2)],
    (80, 128): [(32, 64, 8, 2)],
    (90, 64): [(32, 64, 4, 2), (32, 128, 8, 2), (64, 64, 8, 2)],
    (90, 128): [(32, 64, 4, 2), (32, 128, 8, 2), (64, 64, 8, 2)],
}


def backward_configs(capability: Tuple[int, int], head_dim: int = 64, precision: str = "tf32") -> list:
    """The backward configurations (BLOCK_M, BLOCK_N, num_warps, num_stages) of the dK/dV
    kernel (the dQ kernel swaps BLOCK_M and BLOCK_N) on a GPU of this compute capability:
    with more than one, the autotuner times them once per key (``BWD_AUTOTUNE_KEY``) and
    launches the fastest; with one, it is launched as is. ``precision="ieee"`` (exact
    float32): ``IEEE_BACKWARD_CONFIG``. Before 8.0 (a T4: FMA code, 64 KiB of shared memory)
    the small last entry of ``BWD_CONFIGS_CUDA``, which spills least there. From 8.0
    ``BWD_AUTOTUNE_CONFIGS`` for the GPU family and head dimension (at most ~100 KiB of
    shared memory, within every such GPU's 99 KiB at d = 64 and an sm_80/sm_90's at d = 128;
    the first entry is the fixed 32 x 64 tile of earlier editions, with 8 warps before
    Hopper; a configuration that does not fit a GPU's shared memory is skipped by the
    autotuner)."""
    if precision == "ieee":
        return [IEEE_BACKWARD_CONFIG]
    cap = tuple(capability)
    if cap < _targets.TENSOR_CORE_MIN_CAPABILITY:
        return [BWD_CONFIGS_CUDA[-1]]
    configs = BWD_AUTOTUNE_CONFIGS[(90 if cap >= (9, 0) else 80, 64 if padded_head_dim(head_dim) <= 64 else 128)]
    return list(configs)


#: What the backward's autotuner keys on, lengths, heads, head dims, causality and precision
#: (Triton adds the dtypes); the two kernels are tuned each on its own.
BWD_AUTOTUNE_KEY = ["H", "LQ", "LK", "HEAD_DK", "HEAD_DV", "CAUSAL", "INPUT_PRECISION"]


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
    d = 64 and 128 on sm_80), then the small tile; for ``precision="ieee"``
    ``IEEE_ATOMIC_BACKWARD_CONFIG``; before 8.0 the two-kernel list
    (:func:`~attn_edu.kernels.flash_triton.backward_configs`)."""
    cap = tuple(capability)
    if precision == "ieee":
        return [IEEE_ATOMIC_BACKWARD_CONFIG]
    if cap < _targets.TENSOR_CORE_MIN_CAPABILITY:
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
    if cap < _targets.TENSOR_CORE_MIN_CAPABILITY:
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
    # nothing left (it should not happen): the pre-Ampere small tile, which fits anywhere
    return kept or [c for c in configs if key(c) in FWD_CONFIGS_PRE_AMPERE]


if HAS_TRITON and not kernels.BUILT_INTERPRETED:
    # the forward with the autotuner in front, which times the pruned configurations once per
    # FWD_AUTOTUNE_KEY (and dtype) and launches the fastest (bench.autotune_config reads it)
    _attn_fwd = triton.autotune(
        configs=[triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                 for bm, bn, w, s in FWD_CONFIGS_CUDA + FWD_CONFIGS_PRE_AMPERE],
        key=FWD_AUTOTUNE_KEY,
        prune_configs_by={"early_config_prune": _prune_fwd_configs},
    )(kernels.attn_fwd)
else:  # the interpreter (and no triton) launch a fixed configuration only
    _attn_fwd = kernels.attn_fwd


def _prune_bwd_configs(swapped: bool):
    """An autotuner's pruning for one backward kernel: :func:`~attn_edu.kernels.flash_triton.backward_configs`
    for the GPU, head dim and precision in use (``swapped``: the dQ kernel's blocks)."""
    def prune(configs, named_args, **kwargs):
        args = {**named_args, **kwargs}
        wanted = backward_configs(torch.cuda.get_device_capability(), max(args["HEAD_DK"], args["HEAD_DV"]),
                                  args["INPUT_PRECISION"])
        wanted = {(bn, bm, w, st) if swapped else (bm, bn, w, st) for bm, bn, w, st in wanted}
        key = lambda c: (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)  # noqa: E731
        return [c for c in configs if key(c) in wanted] or configs[:1]
    return prune


_BWD_ALL = sorted({c for configs in BWD_AUTOTUNE_CONFIGS.values() for c in configs})
if HAS_TRITON and not kernels.BUILT_INTERPRETED:
    # the backward's two kernels, each with its autotuner (used when backward_configs gives more than one)
    _attn_bwd_dkdv = triton.autotune(
        configs=[triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st) for bm, bn, w, st in _BWD_ALL],
        key=BWD_AUTOTUNE_KEY, prune_configs_by={"early_config_prune": _prune_bwd_configs(False)},
    )(kernels.attn_bwd_dkdv)
    _attn_bwd_dq = triton.autotune(
        configs=[triton.Config({"BLOCK_M": bn, "BLOCK_N": bm}, num_warps=w, num_stages=st) for bm, bn, w, st in _BWD_ALL],
        key=BWD_AUTOTUNE_KEY, prune_configs_by={"early_config_prune": _prune_bwd_configs(True)},
    )(kernels.attn_bwd_dq)
else:
    _attn_bwd_dkdv, _attn_bwd_dq = kernels.attn_bwd_dkdv, kernels.attn_bwd_dq


# ----------------------------------------------------------------------------
# Launch decisions: precision, a caller's configuration, TMA
# ----------------------------------------------------------------------------
def _capability(x: Tensor) -> Optional[Tuple[int, int]]:
    """The compute capability of ``x``'s GPU; None under the interpreter."""
    return None if kernels.BUILT_INTERPRETED else _targets.device_capability(x.device)


def dot_precision(x: Tensor, precision: Optional[str]) -> str:
    """The launch's ``tl.dot`` input precision: ``attn_edu.kernels._targets.input_precision``."""
    return _targets.input_precision(_checks.dtype_name(x.dtype), _capability(x), precision)


CONFIG_KEYS = ("block_m", "block_n", "num_warps", "num_stages")


def check_config(config) -> Optional[Tuple[int, int, int, int]]:
    """``config=`` of the public functions as a (BLOCK_M, BLOCK_N, num_warps, num_stages) tuple."""
    if config is None:
        return None
    if isinstance(config, dict):
        missing = [key for key in CONFIG_KEYS if key not in config]
        if missing:
            raise ValueError(f"config as a dict needs the keys {', '.join(CONFIG_KEYS)} (what "
                             f"chosen_forward_config returns); got {sorted(config)}")
        config = tuple(config[key] for key in CONFIG_KEYS)
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


def fixed_forward_config(precision: str, config: Optional[Tuple[int, int, int, int]]):
    """The forward's configuration when it is not autotuned, with how it was chosen, else None:
    the interpreter's small blocks (or ``config``'s), a caller's ``config``, or exact float32's
    ``IEEE_FORWARD_CONFIG``."""
    if kernels.BUILT_INTERPRETED:  # (num_warps and num_stages mean nothing there)
        return config or (INTERPRET_BLOCK_M, INTERPRET_BLOCK_N, None, None), "interpreter"
    if config is not None:
        return config, "config"
    if precision == "ieee":
        return IEEE_FORWARD_CONFIG, "ieee"
    return None


def launch_key(q: Tensor, k: Tensor, v: Tensor, causal: bool, precision: str, use_tma: bool) -> tuple:
    """What the forward's autotuner keys on (``FWD_AUTOTUNE_KEY`` and the dtype), plus the device."""
    B, H, LQ, DK = q.shape
    return (str(q.device), str(q.dtype), triton.next_power_of_2(LQ), triton.next_power_of_2(k.shape[2]),
            triton.next_power_of_2(B * H), DK, v.shape[3], causal, precision, use_tma)


def tuned_forward_config(key: tuple, variant: str = "fa2") -> Optional[Tuple[int, int, int, int]]:
    """The autotuner's choice in this process for a forward of :func:`launch_key` ``key`` and
    ``variant``, ``(BLOCK_M, BLOCK_N, warps, stages)``: None before that key's first call
    (and under the interpreter, which launches fixed blocks)."""
    if kernels.BUILT_INTERPRETED or not HAS_TRITON:
        return None
    if variant == "fa2":
        return chosen(_attn_fwd, key)
    tuner = _FA3_TUNERS.get(variant)  # a variant never launched has no autotuner yet, nor a choice
    return None if tuner is None else chosen(tuner, key + (variant,))


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


def uses_tma(q: Tensor, k: Tensor, v: Tensor, precision: str = "tf32") -> bool:
    """The launcher's choice: TMA descriptors on a GPU from ``TMA_MIN_CAPABILITY`` when the
    tensors allow them (:func:`tma_compatible`); never under the interpreter's default, nor
    for exact float32 (FMA code: with descriptors its small tile spills on sm_90a)."""
    return (not kernels.BUILT_INTERPRETED and q.is_cuda and precision != "ieee"
            and tuple(torch.cuda.get_device_capability(q.device)) >= TMA_MIN_CAPABILITY
            and tma_compatible(q, k, v))


# ----------------------------------------------------------------------------
# FlashAttention-3's steps: the forward's ladder (kernels.attn_fwd_fa3)
# ----------------------------------------------------------------------------
#: The forward's variants, a ladder, each adding one step of FlashAttention-3 to the one
#: before. ``"fa2"``: ``kernels.attn_fwd``, what every call launches by default (on Hopper
#: with descriptors built on the device, ``tl.make_tensor_descriptor``); ``"host_tma"``:
#: ``kernels.attn_fwd_fa3`` with Q, K, V and Out descriptors built on the host
#: (``TensorDescriptor``); ``"wide_tiles"``: plus ``FWD_CONFIGS_WIDE`` in the autotuner's
#: space on Hopper; ``"warp_specialized"``: plus a producer/consumer split of the warps
#: where Triton makes one (:func:`warp_specialize_applies`); ``"persistent"``: plus a grid
#: of :func:`persistent_programs_per_sm` programs per SM looping over tiles, causal ones longest
#: first. What a step needs and does not find (a GPU before Hopper, float32, tensors TMA
#: cannot address) it leaves out, and the launch goes on: :func:`variant_steps`; a launch
#: left with no step (pointer loads, no persistent grid) runs ``"fa2"``'s kernel.
FORWARD_VARIANTS = ("fa2", "host_tma", "wide_tiles", "warp_specialized", "persistent")
#: The wider tiles of ``"wide_tiles"`` on Hopper, (BLOCK_M, BLOCK_N, num_warps, num_stages):
#: 128 x 128 with 8 warps at d = 64 too (``forward_configs`` keeps BLOCK_N <= d), and
#: 128 x 64 with 8 warps (two warpgroups of 64 rows each, one wgmma per warpgroup), pruned
#: like the rest (shared memory, ``FWD_SPILL_CONFIGS``).
FWD_CONFIGS_WIDE = [(128, 128, 8, 2), (128, 128, 8, 3), (128, 64, 8, 2), (128, 64, 8, 3)]
#: The tiles Triton's Hopper warp specialization takes (3.6 and 3.9 alike, in the compile
#: report): 64 query rows and 4 warps, built as three warpgroups (Triton 3.9's TTGIR for
#: sm_90a): the default one issues the TMA copies, and two partitions of 4 warps, 232
#: registers a thread each, run the matmuls and the exponentials and store the output.
#: With 128 rows and 4 warps its pass splits the rows between two consumer warpgroups
#: and fails on the Q tile's copy; with 8 warps it leaves the loop alone. Added to the
#: space of ``"warp_specialized"`` and ``"persistent"`` on Hopper.
FWD_CONFIGS_WS = [(64, 64, 4, 2), (64, 128, 4, 2)]
#: The configurations of the persistent kernel (its loop over tiles adds to the registers
#: of a tile) that spill in ``python -m attn_edu.kernels.report``, by (GPU family,
#: head-dimension bucket, bytes per element), left out of ``"persistent"``'s space. Before
#: Hopper (pointer loads; Triton 3.9, sm_80, bfloat16) 16 to 176 bytes at 255 registers a
#: thread; on Hopper the 128 x 32 tile with 4 stages at d = 128, clean in Triton 3.9 and
#: 56 bytes of spills in Colab's Triton 3.6.
FWD_SPILL_CONFIGS_PERSISTENT: Dict[Tuple[int, int, int], set] = {
    (90, 128, 2): {(128, 32, 4, 4)},
    (80, 64, 2): {(64, 64, 4, 3), (128, 32, 4, 2), (128, 32, 4, 3), (128, 32, 4, 4), (128, 64, 4, 3),
                  (128, 64, 4, 4)},
    (80, 128, 2): {(64, 32, 4, 2), (64, 32, 4, 4), (64, 64, 4, 3), (64, 64, 4, 4), (128, 64, 8, 3),
                   (128, 64, 8, 4)},
}
#: Programs per SM of the persistent grid by BLOCK_M, for a tile launched unspecialized (a
#: 64-row tile leaves room for two on an SM). A warp-specialized tile fills an SM alone:
#: :func:`persistent_programs_per_sm`.
PERSISTENT_PROGRAMS_PER_SM = {64: 2, 128: 1}
#: Under the interpreter the persistent grid has this many programs, so that each one
#: loops over several tiles in the tests.
PERSISTENT_PROGRAMS_INTERPRETED = 3


def persistent_programs_per_sm(block_m: int, warp_specialized: bool) -> int:
    """Programs per SM of the persistent grid: ``PERSISTENT_PROGRAMS_PER_SM[block_m]``, or 1
    for a warp-specialized tile, for which Triton adds warps (its producer's and a second
    consumer's: 384 threads of 168 registers in the compile report, 64,512 of an SM's 65,536
    registers), so a second program per SM would wait for the first to end.
    ``tests/test_kernel_report.py`` holds every recorded persistent compile to its SM's
    registers and shared memory."""
    return 1 if warp_specialized else PERSISTENT_PROGRAMS_PER_SM.get(block_m, 1)


def warp_specialize_applies(config) -> bool:
    """Whether ``"warp_specialized"`` specializes the warps of this (BLOCK_M, BLOCK_N,
    num_warps, num_stages): 64 rows and 4 warps (``FWD_CONFIGS_WS``'s rule; None warps, the
    interpreter's fixed blocks, counts as 4). Other tiles launch unspecialized."""
    return config[0] == 64 and config[2] in (4, None)


def variant_steps(variant: str, capability: Optional[Tuple[int, int]], dtype_bytes: int, tma_ok: bool,
                  precision: str = "tf32") -> Optional[dict]:
    """What ``variant`` (one of ``FORWARD_VARIANTS``) turns on for this launch, as a dict of
    ``host_tma``, ``wide``, ``warp_specialize``, ``persistent`` and ``left_out`` (the steps
    it asked for and did not get, with why) -- or None: launch ``"fa2"``'s kernel (the
    variant is ``"fa2"``, or float32: FlashAttention-3's steps are for 16-bit inputs).
    ``capability`` None: the interpreter, where descriptors are used when ``tma_ok`` (the
    tests force them) and nothing is Hopper's."""
    if variant not in FORWARD_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, FORWARD_VARIANTS))}; got {variant!r}")
    rank = FORWARD_VARIANTS.index(variant)
    if rank == 0 or dtype_bytes == 4 or precision == "ieee":
        return None
    hopper = capability is not None and tuple(capability) >= TMA_MIN_CAPABILITY
    host_tma = tma_ok and (hopper or capability is None)
    left_out = []
    if not host_tma:
        why = ("the interpreter loads through pointers unless use_tma=True" if capability is None
               else "tensors TMA cannot address" if hopper else "TMA needs compute capability 9.0")
        left_out.append(f"host_tma ({why})")
    if rank >= 2 and not hopper:
        left_out.append("wide_tiles (Hopper's space)")
    ws = rank >= 3 and host_tma
    if rank >= 3 and not ws:
        left_out.append("warp_specialized (needs host descriptors on Hopper)")
    return dict(host_tma=host_tma, wide=rank >= 2 and hopper, warp_specialize=ws, persistent=rank >= 4,
                left_out=tuple(left_out))


def variant_configs(variant: str, capability: Tuple[int, int], head_dim: int = 64,
                    shared_memory: Optional[int] = None, dtype_bytes: int = 2) -> list:
    """The autotuner's space of a variant on a GPU: :func:`forward_configs` (``"fa2"``'s,
    with TMA's barriers from 9.0), on Hopper plus ``FWD_CONFIGS_WIDE`` from ``"wide_tiles"``
    and ``FWD_CONFIGS_WS`` from ``"warp_specialized"`` on, pruned like the rest (shared
    memory, ``FWD_SPILL_CONFIGS``, ``FWD_SPILL_TILES_D128``, BLOCK_N at most twice the
    padded head dimension). ``"persistent"``: without ``FWD_SPILL_CONFIGS_PERSISTENT``,
    before Hopper (pointer loads) ``"fa2"``'s space without them."""
    base = forward_configs(capability, head_dim, shared_memory, dtype_bytes)
    steps = variant_steps(variant, capability, dtype_bytes, True)
    cap = tuple(capability)
    if steps is not None and steps["persistent"] and not steps["host_tma"]:  # before Hopper
        family = (90 if cap >= (9, 0) else 80, 64 if padded_head_dim(head_dim) <= 64 else 128, dtype_bytes)
        spills = FWD_SPILL_CONFIGS_PERSISTENT.get(family, set())
        return [c for c in base if c not in spills] or base[:1]
    if steps is None or not steps["wide"]:
        return base
    if shared_memory is None:
        known = {divmod(t.capability, 10): t.shared_memory for t in _targets.TARGETS.values()}
        shared_memory = known.get(cap, SHARED_MEMORY_FALLBACK)
    d = padded_head_dim(head_dim)
    measured = FWD_SPILL_CONFIGS.get((90, 64 if d <= 64 else 128, dtype_bytes), set())
    extra = FWD_CONFIGS_WIDE + (FWD_CONFIGS_WS if steps["warp_specialize"] else [])
    configs = base + [c for c in extra if c not in base and c not in measured
                      and c[1] <= max(2 * d, 64) and not (head_dim > 64 and c[:3] in FWD_SPILL_TILES_D128)
                      and forward_shared_memory(c, head_dim, dtype_bytes, True) <= shared_memory]
    if steps["persistent"]:
        spills = FWD_SPILL_CONFIGS_PERSISTENT.get((90, 64 if d <= 64 else 128, dtype_bytes), set())
        configs = [c for c in configs if c not in spills]
    return configs


# ----------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------
def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@plan_cache
def _forward_plan(device: torch.device, capability: Optional[Tuple[int, int]], dtype: torch.dtype,
                  q_shape: Tuple[int, ...], k_shape: Tuple[int, ...], v_shape: Tuple[int, ...],
                  tma_ok: bool, use_tma: Optional[bool], align: Optional[str], precision: Optional[str],
                  config: Optional[Tuple[int, int, int, int]]):
    """What :func:`forward` decides from shapes, dtype and GPU, once per key: ``(dot
    precision, use_tma, meta-parameters, fixed configuration or None, the kernel's
    trailing int arguments, the autotuner's launch key)``. ``tma_ok``: the tensors allow
    TMA descriptors (:func:`tma_compatible`, which reads their alignment: a per-call fact,
    so it is part of the key). Raises for a bad ``precision``."""
    B, H, LQ, DK = q_shape
    LK, DV = k_shape[2], v_shape[3]
    prec = _targets.input_precision(_checks.dtype_name(dtype), capability, precision)
    if use_tma is None:  # uses_tma's rule
        use_tma = (not kernels.BUILT_INTERPRETED and device.type == "cuda" and prec != "ieee"
                   and capability is not None and tuple(capability) >= TMA_MIN_CAPABILITY and tma_ok)
    meta = dict(HEAD_DK=DK, HEAD_DV=DV, BLOCK_DK=padded_head_dim(DK), BLOCK_DV=padded_head_dim(DV),
                CAUSAL=align is not None, INPUT_PRECISION=prec, USE_TMA=use_tma)
    ints = (H, LQ, LK)
    tail = (causal_offset_arg(LQ, LK, align), _next_pow2(LQ), _next_pow2(LK), _next_pow2(B * H))
    key = (str(device), str(dtype), tail[1], tail[2], tail[3], DK, DV, align is not None, prec, use_tma)
    return prec, use_tma, meta, fixed_forward_config(prec, config), ints, tail, key


def forward(q: Tensor, k: Tensor, v: Tensor, align: Optional[str], scale: float,
            use_tma: Optional[bool] = None, precision: Optional[str] = None, config=None,
            variant: str = "fa2"):
    """Launch the forward on checked inputs: ``(out, lse)``, (B, H, L_q, d_v) and (B, H, L_q).

    ``align`` and ``scale`` as ``api.check_triton_inputs`` returns them; ``use_tma`` None:
    :func:`uses_tma`; ``config`` as :func:`check_config` returns it (None: autotuned, or the
    fixed configuration of :func:`fixed_forward_config`; its choice: :func:`tuned_forward_config`).
    What follows from shapes, dtype and GPU is decided once per key (:func:`_forward_plan`).
    ``variant``: one of ``FORWARD_VARIANTS``; past ``"fa2"`` the FlashAttention-3 kernel
    (:func:`_forward_fa3`), whose ``use_tma`` means host-built descriptors.
    """
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
    cap = _capability(q)
    if variant != "fa2":
        steps = launch_steps(q, k, v, variant, precision, use_tma)
        if steps is not None:
            return _forward_fa3(q, k, v, out, lse, align, scale, cap, precision, config, variant, steps)
    tma_ok = (use_tma is None and cap is not None and cap >= TMA_MIN_CAPABILITY and q.is_cuda
              and tma_compatible(q, k, v))
    prec, use_tma, meta, fixed, ints, tail, key = _forward_plan(
        q.device, cap, q.dtype, tuple(q.shape), tuple(k.shape), tuple(v.shape), tma_ok, use_tma, align,
        precision, config)
    args = (q, k, v, out, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
            *ints, scale * LOG2E.value, *tail)
    if use_tma and not kernels.BUILT_INTERPRETED:
        _ensure_scratch_allocator()
    # one grid axis, B * H * query blocks: CUDA's x axis takes 2**31 - 1 programs (y: 65,535)
    if fixed is not None:
        (bm, bn, warps, stages), _ = fixed
        extra = {} if kernels.BUILT_INTERPRETED else dict(num_warps=warps, num_stages=stages)
        _direct.launch(kernels.attn_fwd, launch_grid(B * H, LQ, bm), *args, **meta, BLOCK_M=bm, BLOCK_N=bn, **extra)
    else:
        # a key's first call compiles its configurations in parallel and tunes; later ones
        # launch the autotuner's choice directly
        launch_autotuned(_attn_fwd, lambda META: launch_grid(B * H, LQ, META["BLOCK_M"]), args, meta, key)
    return out, lse


def _tma_ok_fa3(q: Tensor, k: Tensor, v: Tensor, cap, use_tma: Optional[bool]) -> bool:
    """Host descriptors for the FlashAttention-3 kernel: ``use_tma`` when given (the tests force
    them under the interpreter, which runs them), else on Hopper for :func:`tma_compatible`
    tensors whose output rows (d_v elements) are a multiple of 16 bytes too."""
    if use_tma is not None:
        return bool(use_tma)
    return (cap is not None and cap >= TMA_MIN_CAPABILITY and q.is_cuda and tma_compatible(q, k, v)
            and (v.shape[3] * v.element_size()) % 16 == 0)


_STEPS = ("host_tma", "wide", "warp_specialize", "persistent")  # variant_steps' keys of the steps


@plan_cache
def _variant_plan(variant: str, capability, dtype: torch.dtype, precision: Optional[str], tma_ok: bool):
    """:func:`variant_steps` for a launch, once per key. None: ``"fa2"``'s kernel, also where
    the variant is left with no step (pointer loads without the persistent grid: before
    Hopper, under the interpreter, tensors TMA cannot address), which is what that kernel
    does, in the configurations the compile report checks for each GPU."""
    name = _checks.dtype_name(dtype)
    prec = _targets.input_precision(name, capability, precision)
    steps = variant_steps(variant, capability, torch.empty((), dtype=dtype).element_size(), tma_ok, prec)
    return steps if steps is not None and any(steps[s] for s in _STEPS) else None


def launch_steps(q: Tensor, k: Tensor, v: Tensor, variant: str, precision: Optional[str] = None,
                 use_tma: Optional[bool] = None) -> Optional[dict]:
    """The steps :func:`forward` launches ``variant`` with for these inputs (:func:`_variant_plan`,
    once per key), or None where it runs ``"fa2"``'s kernel."""
    cap = _capability(q)
    return _variant_plan(variant, cap, q.dtype, precision, _tma_ok_fa3(q, k, v, cap, use_tma))


def launched_variant(q: Tensor, k: Tensor, v: Tensor, variant: str, precision: Optional[str] = None,
                     use_tma: Optional[bool] = None) -> str:
    """The variant whose kernel and autotuner :func:`forward` uses for these inputs: ``variant``,
    or ``"fa2"`` where :func:`launch_steps` sends it to ``"fa2"``'s kernel (float32, exact
    products, or no step left to turn on)."""
    return "fa2" if variant == "fa2" or launch_steps(q, k, v, variant, precision, use_tma) is None else variant


def _set_block_shapes(nargs: dict) -> None:
    """An autotuner's pre-hook: the host descriptors' block shapes for the configuration
    about to launch (Q and Out: BLOCK_M rows; K and V: BLOCK_N), as Triton's tutorial does."""
    if not isinstance(nargs["Q"], _TensorDescriptor):
        return
    bm, bn = nargs["BLOCK_M"], nargs["BLOCK_N"]
    nargs["Q"].block_shape = [1, 1, bm, nargs["BLOCK_DK"]]
    nargs["K"].block_shape = [1, 1, bn, nargs["BLOCK_DK"]]
    nargs["V"].block_shape = [1, 1, bn, nargs["BLOCK_DV"]]
    nargs["Out"].block_shape = [1, 1, bm, nargs["BLOCK_DV"]]


try:
    from triton.tools.tensor_descriptor import TensorDescriptor as _TensorDescriptor
except Exception:  # pragma: no cover - no triton, or one without host descriptors
    _TensorDescriptor = None

#: The autotuners of the FlashAttention-3 kernel, one per variant (made on first use).
_FA3_TUNERS: dict = {}


def _fa3_tuner(variant: str):
    """The FlashAttention-3 kernel behind an autotuner over ``variant``'s space: every
    candidate of :func:`variant_configs`, each with ``WARP_SPECIALIZE`` set where the
    variant has it and :func:`warp_specialize_applies`, pruned per GPU at launch."""
    if variant in _FA3_TUNERS:
        return _FA3_TUNERS[variant]
    ws_variant = FORWARD_VARIANTS.index(variant) >= 3
    candidates = sorted(set(FWD_CONFIGS_CUDA + FWD_CONFIGS_WIDE + FWD_CONFIGS_WS + FWD_CONFIGS_PRE_AMPERE))

    def prune(configs, named_args, **kwargs):
        args = {**named_args, **kwargs}
        q = args.get("Q")
        elem = q.base.element_size() if hasattr(q, "base") else q.element_size()
        wanted = set(variant_configs(variant, torch.cuda.get_device_capability(),
                                     max(args["HEAD_DK"], args["HEAD_DV"]), _device_shared_memory(), elem))
        key = lambda c: (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)  # noqa: E731
        ws = args.get("HOST_TMA", False)
        kept = [c for c in configs if key(c) in wanted and c.kwargs["WARP_SPECIALIZE"] == (
            ws_variant and ws and warp_specialize_applies(key(c)))]
        return kept or [c for c in configs if key(c) in FWD_CONFIGS_PRE_AMPERE and not c.kwargs["WARP_SPECIALIZE"]]

    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "WARP_SPECIALIZE": wsp}, num_warps=w, num_stages=st,
                             pre_hook=_set_block_shapes)
               for bm, bn, w, st in candidates for wsp in (False, True)
               if not wsp or (ws_variant and warp_specialize_applies((bm, bn, w, st)))]
    key = [name for name in FWD_AUTOTUNE_KEY if name != "USE_TMA"] + ["HOST_TMA", "PERSISTENT"]  # its arguments
    _FA3_TUNERS[variant] = triton.autotune(configs=configs, key=key,
                                           prune_configs_by={"early_config_prune": prune})(kernels.attn_fwd_fa3)
    return _FA3_TUNERS[variant]


def autotuned_kernels(variants=()) -> list:
    """The autotuners the launchers launch through (``triton.autotune`` kernels): the
    forward's, the backward's two, then those of the FlashAttention-3 ``variants`` named
    (each made on first use). Empty under the interpreter, which launches fixed blocks."""
    if kernels.BUILT_INTERPRETED or not HAS_TRITON:
        return []
    return [_attn_fwd, _attn_bwd_dkdv, _attn_bwd_dq, *(_fa3_tuner(v) for v in variants)]


def _forward_fa3(q, k, v, out, lse, align, scale, cap, precision, config, variant, steps):
    """:func:`forward` for a variant past ``"fa2"``: ``kernels.attn_fwd_fa3`` with the steps
    :func:`variant_steps` gave, the descriptors built here around this call's tensors (their
    geometry is the tensors' own; the block shapes follow the configuration)."""
    B, H, LQ, DK = q.shape
    prec, _, meta, fixed, ints, tail, key = _forward_plan(
        q.device, cap, q.dtype, tuple(q.shape), tuple(k.shape), tuple(v.shape), False, False, align,
        precision, config)
    meta = {n: x for n, x in meta.items() if n != "USE_TMA"}
    host, persistent = steps["host_tma"], steps["persistent"]
    meta.update(HOST_TMA=host, PERSISTENT=persistent)
    if host:  # (b, h, row, d) descriptors; block shapes are set per configuration
        bd = dict(q=meta["BLOCK_DK"], k=meta["BLOCK_DK"], v=meta["BLOCK_DV"], out=meta["BLOCK_DV"])
        descs = [_TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 1, 16, bd[n]])
                 for n, x in zip(("q", "k", "v", "out"), (q, k, v, out))]
    else:
        descs = [q, k, v, out]
    args = (*descs, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(), B * H,
            *ints, scale * LOG2E.value, *tail)
    n_tiles = lambda bm: B * H * -(-LQ // bm)  # noqa: E731

    def grid_for(bm, ws):
        if not persistent:
            return launch_grid(B * H, LQ, bm)
        if kernels.BUILT_INTERPRETED:
            return (min(n_tiles(bm), PERSISTENT_PROGRAMS_INTERPRETED),)
        return (min(n_tiles(bm), _targets.sm_count(q.device) * persistent_programs_per_sm(bm, ws)),)

    if fixed is not None:
        (bm, bn, warps, stages), _ = fixed
        ws = steps["warp_specialize"] and warp_specialize_applies((bm, bn, warps, stages))
        nargs = dict(Q=descs[0], K=descs[1], V=descs[2], Out=descs[3], BLOCK_M=bm, BLOCK_N=bn, **meta)
        _set_block_shapes(nargs)
        extra = {} if kernels.BUILT_INTERPRETED else dict(num_warps=warps, num_stages=stages)
        _direct.launch(kernels.attn_fwd_fa3, grid_for(bm, ws), *args, **meta, WARP_SPECIALIZE=ws, BLOCK_M=bm,
                       BLOCK_N=bn, **extra)
    else:
        launch_autotuned(_fa3_tuner(variant), lambda META: grid_for(META["BLOCK_M"], META["WARP_SPECIALIZE"]),
                         args, meta, key + (variant,))
    return out, lse


#: float32 gradients are computed with exact float32 products (FMA code) and
#: ``IEEE_BACKWARD_CONFIG`` on every GPU, whatever ``precision`` the forward used: the
#: backward's TF32 tiles spilled registers on sm_80 and sm_90a in the compile report
#: (144-284 B at 32 x 64), and float32's backward is not autotuned.
BACKWARD_FLOAT32 = "ieee"
#: The backward's two schedules, chosen with ``triton_attention(..., backward=...)``.
#: ``"two_kernels"``, a dK/dV kernel and a dQ kernel, each program owning the rows it writes (7 matmuls per
#: tile pair, deterministic); ``"atomic_dq"``, FlashAttention-2's Algorithm 2: one kernel
#: over key blocks adds dQ with float32 atomics (5 matmuls, dQ's rounding order varies).
BACKWARDS = ("two_kernels", "atomic_dq")


@plan_cache
def _backward_plan(capability: Optional[Tuple[int, int]], dtype: torch.dtype, q_shape: Tuple[int, ...],
                   k_shape: Tuple[int, ...], v_shape: Tuple[int, ...], align: Optional[str], mode: str,
                   precision: Optional[str]):
    """What :func:`backward` decides from shapes, dtype and GPU, once per key: ``(the
    kernels' trailing int arguments, the causal offset, meta-parameters, configurations to
    try, the tuning's key)``; the last, with the device, names the tuning that
    :func:`backward` tunes once. Raises for a bad ``precision``
    (checked though the backward of float32 is exact whatever it says)."""
    B, H, LQ, DK = q_shape
    LK, DV = k_shape[2], v_shape[3]
    name = _checks.dtype_name(dtype)
    _targets.input_precision(name, capability, precision)
    prec = _targets.input_precision(name, capability, BACKWARD_FLOAT32)
    meta = dict(HEAD_DK=DK, HEAD_DV=DV, BLOCK_DK=padded_head_dim(DK), BLOCK_DV=padded_head_dim(DV),
                CAUSAL=align is not None, INPUT_PRECISION=prec)
    if kernels.BUILT_INTERPRETED:
        configs = [(INTERPRET_BLOCK_M, INTERPRET_BLOCK_N, None, None)]
    else:
        pick = atomic_backward_configs if mode == "atomic_dq" else backward_configs
        configs = pick(capability, max(DK, DV), prec)
    ints = (H, LQ, LK)
    return ints, causal_offset_arg(LQ, LK, align), meta, configs, (dtype, *ints, tuple(sorted(meta.items())))


def backward(do: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
             align: Optional[str], scale: float, mode: str = "two_kernels",
             precision: Optional[str] = None):
    """Launch the backward of ``mode`` (one of ``BACKWARDS``) on the forward's saved tensors:
    ``(dq, dk, dv)`` in the input dtype. ``"two_kernels"``: autotuned over
    :func:`backward_configs` where it lists more than one configuration, else that one;
    ``"atomic_dq"``: :func:`atomic_backward_configs`, fixed per GPU, tried in order until
    one fits. What follows from shapes, dtype and GPU is decided once per key (:func:`_backward_plan`)."""
    B, H, LQ, DK = q.shape
    LK, DV = k.shape[2], v.shape[3]
    # no memset: the kernels store every element of dQ, dK and dV (each program the rows it
    # owns, masked to the tensors' extents; a row or key that sees nothing gets zeros)
    dq = torch.empty((B, H, LQ, DK), dtype=q.dtype, device=q.device)  # contiguous
    dk = torch.empty((B, H, LK, DK), dtype=k.dtype, device=k.device)
    dv = torch.empty((B, H, LK, DV), dtype=v.dtype, device=v.device)
    if LQ == 0 or LK == 0:  # no product to take a gradient through: zeros
        return dq.zero_(), dk.zero_(), dv.zero_()
    ints, offset, meta, configs, tuning = _backward_plan(_capability(q), q.dtype, tuple(q.shape), tuple(k.shape),
                                                 tuple(v.shape), align, mode, precision)
    delta = torch.empty((B, H, LQ), dtype=torch.float32, device=q.device)  # (B, H, Lq)
    # every grid is one axis, B * H * blocks, as in the forward: any B * H launches
    _direct.launch(  # kernels.attn_bwd_preprocess[grid](...), without Triton's dispatch once seen
        kernels.attn_bwd_preprocess, launch_grid(B * H, LQ, 32), out, do, delta, *out.stride(), *do.stride(), H, LQ,
        HEAD_DV=DV, BLOCK_M=32, BLOCK_DV=meta["BLOCK_DV"])
    common = (*q.stride(), *k.stride(), *v.stride(), *do.stride(), *ints, scale, offset)
    atomic = mode == "atomic_dq"
    # atomic_dq: dQ accumulates in float32 across programs; otherwise the slot is unused
    dq_acc = torch.zeros((B, H, LQ, DK), dtype=torch.float32, device=q.device) if atomic else delta
    if not atomic and len(configs) > 1:  # autotuned: each kernel times backward_configs once per key
        dkdv_args, dq_args = (q, k, v, do, dk, dv, dq_acc, lse, delta, *common), (q, k, v, do, dq, lse, delta, *common)
        tuned, dkdv_meta = (q.device, do.dtype, tuning), {**meta, "ATOMIC_DQ": False}
        # this key's first call: both kernels' configurations compile in one pool
        launch_autotuned(_attn_bwd_dkdv, lambda META: launch_grid(B * H, LK, META["BLOCK_N"]), dkdv_args,
                         dkdv_meta, tuned,
                         ahead=((_attn_bwd_dkdv, dkdv_args, dkdv_meta), (_attn_bwd_dq, dq_args, meta)))
        launch_autotuned(_attn_bwd_dq, lambda META: launch_grid(B * H, LQ, META["BLOCK_M"]), dq_args, meta, tuned,
                         ahead=())
        return dq, dk, dv
    for i, (bm, bn, warps, stages) in enumerate(configs):
        extra = {} if warps is None else dict(num_warps=warps, num_stages=stages)
        try:
            _direct.launch(
                kernels.attn_bwd_dkdv, launch_grid(B * H, LK, bn),
                q, k, v, do, dk, dv, dq_acc, lse, delta, *common, **meta, ATOMIC_DQ=atomic,
                BLOCK_M=bm, BLOCK_N=bn, **extra)
            if atomic:
                dq = dq_acc.to(q.dtype)
                break
            # the dQ kernel mirrors it: bn query rows per program, bm keys per step (its
            # matmuls then have bn >= 64 rows, what Hopper's wgmma needs)
            _direct.launch(
                kernels.attn_bwd_dq, launch_grid(B * H, LQ, bn),
                q, k, v, do, dq, lse, delta, *common, **meta, BLOCK_M=bn, BLOCK_N=bm, **extra)
            break
        except _targets.OutOfResources:  # not enough shared memory on this GPU: smaller blocks
            if i == len(configs) - 1:
                raise
    return dq, dk, dv
