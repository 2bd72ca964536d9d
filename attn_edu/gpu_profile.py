r"""A GPU profile (run the GPU at hand under a T4's limits) and the sizes of the chapters' GPU branches.

**The profile.** ``ATTN_EDU_GPU_PROFILE=t4`` (:data:`PROFILE_ENV`) makes a bigger GPU behave,
for this package, as Colab's default GPU, an NVIDIA T4 (:data:`PROFILES`): when it is applied,

* memory is capped to 15 GB (10^9 bytes, ``GPUProfile.memory_bytes``: a T4 has 16 GB,
  of which the driver and the CUDA context take some) with
  ``torch.cuda.set_per_process_memory_fraction(15e9 / total)`` on every visible GPU, so an
  allocation past 15 GB fails with ``OutOfMemoryError`` as it would on a T4;
* ``torch.cuda.get_device_capability`` says ``(7, 5)`` and ``torch.cuda.get_device_properties``
  says 7.5, 40 SMs, 15 GB, and the name ``"<the GPU> (T4 profile)"``: every per-GPU choice the
  package makes reads these two functions, so all of them are made as for a T4 (the half type
  float16, :func:`attn_edu.bench.gpu_half_dtype`; ``impl="auto"`` picks SDPA,
  :func:`attn_edu.impls.choose_impl`; the Triton kernels' one pre-Ampere configuration,
  ``flash_triton.forward_configs``, no TMA, the decode kernel's sm_75 configuration and its
  split count for 40 SMs; bfloat16 refused by the kernels' limits), and so are the
  chapters' (``CC``) and the labels of every figure (the name says the profile);
* PyTorch's SDPA loses the backends a T4 does not have (FlashAttention-2 and cuDNN attention
  need compute capability 8.0): ``torch.backends.cuda.enable_flash_sdp(False)`` and
  ``enable_cudnn_sdp(False)`` for its own choice, and :func:`attn_edu.bench.sdpa_backends`
  leaves them out (``GPUProfile.sdpa_missing``).

What it does not change: Triton compiles for the GPU it runs on (its driver is started
before the patch and keeps torch's own capability; an H200's kernels use its tensor cores
whatever configuration the package chose), so the *times* measured under the profile are the
bigger GPU's. A T4's time is estimated instead (:func:`t4_estimates`). The profile is applied
once per process, by :func:`attn_edu.notebook.setup_notebook` (every chapter's first cell), by
``python -m attn_edu.bench`` and at the first :func:`gpu_info` (a branch's sizes); later calls
do nothing, :func:`remove_profile` undoes it. Without the variable nothing changes; a value
that is not a profile's name is a ValueError.

**The GPU branches.** Each ``if GPU:`` branch of chapters 08, 09, 10 and 13 takes its sizes
from :func:`branch_sizes` (:data:`BRANCHES`): the lengths of the H100 runs, less every length
at which an implementation would not fit in 90% of the GPU's memory (the profile's 15 GB, or
the GPU's own), from :data:`PEAK_MATRICES` (the n x n matrices the naive paths hold at once,
as measured on the H100) and :func:`attn_edu.profiling.attention_peak_bytes` for the tiled ones.

**T4 time.** :func:`estimate_seconds` adds, over a branch's calls, the roofline time on a T4
from its datasheet (:data:`T4_FIGURES`: 65 TFLOP/s float16 on tensor cores, 8.1 TFLOP/s
float32, 320 GB/s [nvidia2018t4]; Triton's ``tl.dot`` runs on the FMA units before 8.0, so our
kernels get the float32 rate), divided by the share of its roofline each implementation reached
on the H100 (:data:`H100_ATTAINMENT`, from the recorded sweeps), the host's time per tile of the
PyTorch loop (:data:`TILED_LOOP_HOST_S`, measured), the L2 flush before each timed call, and
the Triton compiles (the recorded compile report's mean for sm_75). ``python -m attn_edu.bench
--t4-estimates`` prints the table; the aim is :data:`T4_SECONDS_AIM` per chapter, and
:func:`branch_sizes` drops the longest lengths of a branch whose estimate passes it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from . import profiling
from .decoding.roofline import GPUS

__all__ = ["PROFILE_ENV", "GPUProfile", "PROFILES", "active_profile", "apply_profile", "remove_profile",
           "applied_profile", "missing_sdpa_backends", "GPUInfo", "gpu_info", "PEAK_MATRICES", "MEMORY_SHARE",
           "BranchSizes", "BRANCHES", "branch_sizes", "T4_FIGURES", "H100_ATTAINMENT", "TILED_LOOP_HOST_S",
           "T4_SECONDS_AIM", "estimate_seconds", "t4_estimates", "format_estimates"]

#: The environment variable that names a GPU profile (unset or empty for none).
PROFILE_ENV = "ATTN_EDU_GPU_PROFILE"


@dataclass(frozen=True)
class GPUProfile:
    """What a profile makes the GPU at hand look like to the package (see the module)."""

    name: str  # the value of ATTN_EDU_GPU_PROFILE
    gpu: str  # the GPU it stands for
    capability: Tuple[int, int]
    memory_bytes: int  # the cap, through torch.cuda.set_per_process_memory_fraction
    sms: int
    half_dtype: str  # what gpu_half_dtype gives under it (follows from the capability)
    sdpa_missing: Tuple[str, ...]  # SDPA backends that GPU does not have


#: The profiles, by the value of :data:`PROFILE_ENV`; ``t4`` is Colab's default GPU (compute
#: capability 7.5, 40 SMs, 16 GB of which 15 are capped; no bfloat16, no FlashAttention-2 in SDPA).
PROFILES: Dict[str, GPUProfile] = {
    "t4": GPUProfile("t4", "T4", (7, 5), 15 * 10**9, 40, "float16", ("flash", "cudnn")),
}


def active_profile() -> Optional[GPUProfile]:
    """The profile :data:`PROFILE_ENV` names, or None when it is unset or empty; a ValueError
    naming the variable and the valid values for anything else."""
    value = os.environ.get(PROFILE_ENV, "")
    if value.strip() == "":
        return None
    if value not in PROFILES:
        raise ValueError(f"{PROFILE_ENV} must be one of {', '.join(map(repr, PROFILES))} (or unset); "
                         f"got {value!r}")
    return PROFILES[value]


# the state of an applied profile: the originals it replaced, so that remove_profile restores them
_STATE: Dict[str, Any] = {}


class _ProfiledProperties:
    """``torch.cuda.get_device_properties`` of a GPU seen through a profile: the profile's
    capability, SMs, memory (at most the GPU's) and a name that says so; the rest the GPU's."""

    def __init__(self, real: Any, profile: GPUProfile):
        self._real, self._profile = real, profile
        self.major, self.minor = profile.capability
        self.multi_processor_count = profile.sms
        self.total_memory = min(int(real.total_memory), profile.memory_bytes)
        self.name = f"{real.name} ({profile.gpu} profile)"

    def __getattr__(self, attr: str) -> Any:  # what the profile leaves as the GPU's own
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._real, attr)

    def __repr__(self) -> str:
        return (f"_ProfiledProperties(name={self.name!r}, major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory}, multi_processor_count={self.multi_processor_count})")


def applied_profile() -> Optional[GPUProfile]:
    """The profile applied in this process (by :func:`apply_profile`), or None."""
    return _STATE.get("profile")


def apply_profile() -> Optional[GPUProfile]:
    """Apply the profile :data:`PROFILE_ENV` names to this process's GPUs, once; return it.

    Caps each visible GPU's memory to the profile's (``set_per_process_memory_fraction`` of
    ``memory_bytes / total_memory``, at most 1), makes ``torch.cuda.get_device_capability``
    and ``get_device_properties`` report the profile's GPU and turns off the SDPA backends it
    lacks (the module docstring says why and what it leaves alone). Returns None, changing
    nothing, without the variable; the profile without touching torch when torch or a GPU is
    missing (nothing to cap). A second call returns the applied profile. ValueError: see
    :func:`active_profile`.
    """
    profile = active_profile()
    if profile is None or _STATE:
        return profile if not _STATE else _STATE["profile"]
    try:
        import torch
    except ImportError:
        return profile
    if not torch.cuda.is_available():
        return profile
    cuda = torch.cuda
    real_props, real_cap = cuda.get_device_properties, cuda.get_device_capability
    _start_triton_driver()
    fractions = {}
    for index in range(cuda.device_count()):
        fractions[index] = min(1.0, profile.memory_bytes / real_props(index).total_memory)
        cuda.set_per_process_memory_fraction(fractions[index], index)
    backends = torch.backends.cuda
    sdp = {name: getattr(backends, f"{name}_sdp_enabled")() for name in ("flash", "cudnn")
           if hasattr(backends, f"{name}_sdp_enabled")}
    for name in sdp:
        getattr(backends, f"enable_{name}_sdp")(False)
    _STATE.update(profile=profile, get_device_properties=real_props, get_device_capability=real_cap,
                  fractions=fractions, sdp=sdp)
    cuda.get_device_properties = lambda device=None: _ProfiledProperties(real_props(device), profile)
    cuda.get_device_capability = lambda device=None: tuple(profile.capability)
    return profile


def _start_triton_driver() -> None:
    """Start Triton's CUDA driver before torch's functions are replaced. Its ``GPUDriver``
    binds ``torch.cuda.get_device_capability`` when it starts and compiles for what that
    says: started under the profile, it would compile for sm_75, whose code a newer GPU
    cannot load. Started here, it keeps torch's own function: Triton compiles for the GPU
    it runs on. Nothing without triton."""
    try:
        import importlib.util

        if importlib.util.find_spec("triton") is None:
            return
        import triton

        triton.runtime.driver.active.get_current_target()
    except Exception:  # no triton, no driver (its interpreter): nothing to start
        pass


def remove_profile() -> bool:
    """Undo :func:`apply_profile` (the memory fraction back to 1, torch's functions and SDPA's
    backends as they were); False when no profile was applied."""
    if not _STATE:
        return False
    import torch

    torch.cuda.get_device_properties = _STATE["get_device_properties"]
    torch.cuda.get_device_capability = _STATE["get_device_capability"]
    for index in _STATE["fractions"]:
        torch.cuda.set_per_process_memory_fraction(1.0, index)
    for name, was in _STATE["sdp"].items():
        getattr(torch.backends.cuda, f"enable_{name}_sdp")(was)
    _STATE.clear()
    return True


def missing_sdpa_backends() -> Tuple[str, ...]:
    """The SDPA backends the applied profile's GPU lacks (``("flash", "cudnn")`` under ``t4``);
    ``()`` without one. :func:`attn_edu.bench.sdpa_backends` leaves them out."""
    profile = applied_profile()
    return profile.sdpa_missing if profile else ()


@dataclass(frozen=True)
class GPUInfo:
    """What a branch's sizes depend on: the GPU's name, capability, memory and SMs."""

    name: str
    capability: Tuple[int, int]
    memory_bytes: int
    sms: int


def gpu_info(device: Any = None) -> GPUInfo:
    """The GPU ``device`` (default the current one) as the package sees it: through the
    profile when one is set (applied here if it was not yet, :func:`apply_profile`)."""
    apply_profile()
    import torch

    props = torch.cuda.get_device_properties(device)
    return GPUInfo(props.name, (props.major, props.minor), int(props.total_memory), props.multi_processor_count)


# ----------------------------------------------------------------------------- memory model
#: What a naive path holds at its peak above its inputs, as ``(a, b)``, ``a`` n x n matrices
#: and ``b`` n x d ones per head, in the inputs' type (the scores, the weights, a copy). Fitted
#: to the peaks measured on the H100 (``attn_edu/data/bench/gpu_*_d64.json`` and ``_d128``,
#: n = 1024-8192): ``torch_naive`` 3 n^2 + 3 n (row statistics), SDPA's ``math`` 4.5 n^2 + 8 n d and
#: a few kB; within 3% of every recorded peak.
PEAK_MATRICES = {"naive": (3.0, 0.05), "sdpa_math": (4.5, 8.5)}
#: The share of the GPU's memory a branch plans to use (the rest for the CUDA context's
#: workspaces, the allocator's rounding, the last cell's leftovers).
MEMORY_SHARE = 0.9

#: The tiles each tiled implementation runs with, for its traffic (tiled_hbm_bytes), the
#: Triton forward's before 8.0 (FWD_CONFIGS_PRE_AMPERE), SDPA memory-efficient's 64 x 64.
_TILES = {"triton": (32, 32), "sdpa_efficient": (64, 64), "sdpa_flash": (128, 64)}


def _itemsize(dtype: str) -> int:
    return {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}[dtype]


def _peak_bytes(kind: str, batch: int, heads: int, n: int, d: int, itemsize: int) -> int:
    """Inputs plus what ``kind`` allocates above them at length n (the module's memory model)."""
    inputs = 3 * batch * heads * n * d * itemsize
    if kind in _DECODE_HOST_S:  # the cache (heads: the K/V heads) and its float64 copies for the gold answer
        return 2 * batch * heads * n * d * (itemsize + 8)
    if kind in PEAK_MATRICES:
        a, b = PEAK_MATRICES[kind]
        return int(inputs + batch * heads * itemsize * (a * n * n + b * n * d))
    return inputs + profiling.attention_peak_bytes(n, d, itemsize, batch, heads, tiled=True)


# ----------------------------------------------------------------------------- the branches
@dataclass(frozen=True)
class BranchSizes:
    """The sizes of one chapter's GPU branch, and how much it runs (for its T4 estimate).

    ``impls``: the implementations it runs, as the estimate knows them (``naive``, ``tiled``
    (chapter 09's PyTorch loop, ``tiles`` queries x keys), ``triton``, ``sdpa`` (SDPA's own
    choice), ``sdpa_flash``, ``sdpa_efficient``, ``sdpa_math``, and the decode ones);
    ``lengths``: the sequence (or cache) lengths; ``max_n``: the longest length each
    implementation runs at (:meth:`fits`); ``calls``: calls per implementation and length
    (warm-up, timed, memory); ``compiles``: Triton compiles it causes.
    """

    chapter: str
    branch: str
    cell: str  # the id of the chapter's cell that runs it
    impls: Tuple[str, ...]
    lengths: Tuple[int, ...]
    batch: int
    heads: int
    d: int
    dtype: str
    repeat: int
    warmup: int
    calls: int
    compiles: int = 0
    causal: Tuple[bool, ...] = (False,)
    tiles: Tuple[int, int] = (256, 256)
    kv_heads: Optional[int] = None  # decode: the K/V heads the query heads share
    max_n: Dict[str, int] = field(default_factory=dict)

    def fits(self, impl: str, n: int) -> bool:
        """Whether ``impl`` runs at length ``n`` in this plan."""
        return n in self.lengths and n <= self.max_n.get(impl, max(self.lengths))


def _sdpa_choice(capability: Tuple[int, int]) -> str:
    """SDPA's own backend for 16-bit inputs on a GPU of this capability (flash from 8.0)."""
    return "sdpa_flash" if tuple(capability) >= (8, 0) else "sdpa_efficient"


#: Every GPU branch of the chapters, at the sizes it has on a big GPU (an H100), by chapter,
#: branch, the cell, and the plan before :func:`branch_sizes` fits it to a GPU.
BRANCHES: Dict[Tuple[str, str], BranchSizes] = {(p.chapter, p.branch): p for p in [
    BranchSizes("08", "sweep", "a88237cd", ("naive", "sdpa", "tiled", "triton"),
               (1024, 2048, 4096, 8192, 16384), 1, 4, 64, "float16", 5, 2, 8, compiles=1),
    BranchSizes("09", "peak_memory", "ch09-33", ("naive", "tiled"), (2048, 4096, 8192), 1, 1, 64, "float32",
               0, 0, 1, tiles=(128, 128)),
    BranchSizes("10", "throughput", "704edece", ("triton", "sdpa_flash", "sdpa_efficient", "sdpa_math"),
               (1024, 2048, 4096, 8192, 16384), 4, 16, 64, "half", 5, 2, 7, compiles=1),
    BranchSizes("10", "causal", "43c0485e", ("triton",), (8192,), 4, 16, 64, "half", 10, 2, 12, compiles=1,
               causal=(False, True)),
    BranchSizes("10", "memory", "eb5ccf78", ("naive", "tiled", "triton", "sdpa_flash", "sdpa_efficient"),
               (1024, 2048, 4096, 8192, 16384), 1, 16, 64, "half", 1, 1, 2, tiles=(128, 128)),
    BranchSizes("13", "decode", "ch13-32c", ("triton_split_kv", "triton_one_split", "torch_sdpa", "torch_split_kv"),
               (4096, 16384, 65536), 1, 32, 128, "half", 10, 3, 36, compiles=3, kv_heads=8),
]}


def _resolve(plan: BranchSizes, gpu: GPUInfo) -> BranchSizes:
    """The plan's implementations and dtype for this GPU (SDPA's backends, the half type)."""
    sdpa = _sdpa_choice(gpu.capability)
    have_flash = tuple(gpu.capability) >= (8, 0)
    impls = tuple(sdpa if i == "sdpa" else i for i in plan.impls if i != "sdpa_flash" or have_flash)
    if plan.chapter == "10" and plan.branch == "memory":  # the library's one kernel: flash, else efficient
        impls = tuple(i for i in impls if i != "sdpa_efficient" or not have_flash)
    dtype = plan.dtype if plan.dtype != "half" else ("bfloat16" if have_flash else "float16")
    return replace(plan, impls=impls, dtype=dtype)


def branch_sizes(chapter: str, branch: str, gpu: Optional[GPUInfo] = None,
                aim_s: Optional[float] = None) -> BranchSizes:
    """The sizes of chapter ``chapter``'s GPU branch ``branch`` (a key of :data:`BRANCHES`) on
    ``gpu`` (default :func:`gpu_info`: the GPU at hand, through the profile when one is set).

    From the branch's H100 sizes: its SDPA backends and half type for ``gpu.capability``
    (FlashAttention and bfloat16 from 8.0), and for each implementation the longest length
    whose memory (:data:`PEAK_MATRICES`, :func:`attn_edu.profiling.attention_peak_bytes`, the
    inputs) fits in :data:`MEMORY_SHARE` of ``gpu.memory_bytes`` (``max_n``; lengths no
    implementation fits at are dropped). On a T4 (capability 7.5, or ``aim_s`` given), the
    longest lengths are then dropped while :func:`estimate_seconds` exceeds ``aim_s``
    (default :data:`T4_SECONDS_AIM`), keeping at least one.
    """
    key = (str(chapter), str(branch))
    if key not in BRANCHES:
        raise ValueError(f"(chapter, branch) must be one of {', '.join(map(str, BRANCHES))}; got {key}")
    gpu = gpu_info() if gpu is None else gpu
    if not isinstance(gpu, GPUInfo):
        raise TypeError(f"gpu must be a GPUInfo (gpu_info()); got {type(gpu).__name__}")
    plan = _resolve(BRANCHES[key], gpu)
    budget = MEMORY_SHARE * gpu.memory_bytes
    s = _itemsize(plan.dtype)
    max_n = {}
    for impl in plan.impls:
        heads = plan.kv_heads or plan.heads
        ok = [n for n in plan.lengths if _peak_bytes(impl, plan.batch, heads, n, plan.d, s) <= budget]
        max_n[impl] = max(ok) if ok else 0
    lengths = tuple(n for n in plan.lengths if any(n <= m for m in max_n.values()))
    plan = replace(plan, lengths=lengths or plan.lengths[:1], max_n=max_n)
    if aim_s is None and tuple(gpu.capability) == PROFILES["t4"].capability:
        aim_s = T4_SECONDS_AIM
    while aim_s is not None and len(plan.lengths) > 1 and estimate_seconds(plan) > aim_s:
        plan = replace(plan, lengths=plan.lengths[:-1])
    return plan


# ----------------------------------------------------------------------------- T4 time
#: The T4's datasheet figures [nvidia2018t4], FLOP/s float16 on tensor cores and float32 on
#: the FMA units, bytes/s of GDDR6 (``attn_edu.decoding.GPUS["T4"]`` holds the first and last).
T4_FIGURES = {"tensor_flops": GPUS["T4"].flops_16bit, "fma_flops": 8.1e12, "bandwidth": GPUS["T4"].bandwidth}
#: The share of its roofline each implementation reached on the H100 (its datasheet's
#: ``attn_edu.decoding.GPUS["H100 SXM"]``) at n = 8192, d = 64, B = 4, H = 16, bfloat16
#: (``gpu_NVIDIA_H100_80GB_HBM3_d64.json``, 2026-11-26; tests/test_gpu_profile.py derives them
#: again): of the FLOP roofline for the tiled kernels, of the byte roofline
#: (:func:`attn_edu.profiling.naive_hbm_bytes`) for the naive ones; the decode kernels' share
#: of the bandwidth, from the decode sweep (65,536 keys, batch 8). Taken as each one's share on
#: a T4, where nothing is measured; with the tiled kernels' bytes counted as if every K/V
#: re-read came from memory (an L2 serves some), the estimate errs long.
H100_ATTAINMENT = {"triton": 0.455, "sdpa_flash": 0.315, "sdpa_efficient": 0.138, "sdpa_math": 0.130,
                   "naive": 0.211, "decode": 0.65}
#: Host seconds per tile of the PyTorch tile loop (``torch_flash``, 128 x 128 tiles), 3.47 s for
#: the 16,384 tiles of n = 16384 on the H100's host (its GPU waited on it), 0.212 ms a tile.
TILED_LOOP_HOST_S = 0.212e-3
#: Host seconds per decode call (the recorded decode sweep's ``host_median_ms``, batch 1,
#: 65,536 keys): the split-KV loop in PyTorch launches a few dozen kernels.
_DECODE_HOST_S = {"triton_split_kv": 0.60e-3, "triton_one_split": 0.13e-3, "torch_sdpa": 0.03e-3,
                  "torch_split_kv": 5.97e-3}
#: What a reader should wait for a chapter's GPU branches on a T4, in seconds (3 minutes).
T4_SECONDS_AIM = 180.0
_REPORT = Path(__file__).resolve().parent / "data" / "kernels" / "compile_report.json"


def _compile_seconds() -> float:
    """The mean seconds of one sm_75 compile in the recorded compile report (2 CPU cores)."""
    try:
        rows = json.loads(_REPORT.read_text())["rows"]
    except (OSError, ValueError, KeyError):  # pragma: no cover - an install without the data
        return 1.5
    seconds = [r["seconds"] for r in rows if r.get("target") == "sm_75" and r.get("seconds")]
    return sum(seconds) / len(seconds) if seconds else 1.5


def _roofline_s(impl: str, batch: int, heads: int, n: int, d: int, itemsize: int, causal: bool,
                tiles: Tuple[int, int], figures: Dict[str, float], fma_only: bool) -> Tuple[int, int, float]:
    """(FLOPs, bytes, roofline seconds) of one forward of ``impl`` on a GPU of ``figures``:
    the matmul FLOPs (:func:`attn_edu.profiling.attention_flops`) at the tensor-core rate, or the
    FMA rate when ``fma_only``; the bytes of the naive algorithm
    (:func:`~attn_edu.profiling.naive_hbm_bytes`) or of a tiled one with its tiles
    (:func:`~attn_edu.profiling.tiled_hbm_bytes`) at the bandwidth; the larger time."""
    flops = profiling.attention_flops(batch, heads, n, n, d, causal=causal)
    if impl in ("naive", "sdpa_math"):
        nbytes = profiling.naive_hbm_bytes(n, d, itemsize, batch, heads)
    else:
        bq, bk = tiles if impl == "tiled" else _TILES[impl]
        nbytes = profiling.tiled_hbm_bytes(n, d, bq, bk, itemsize, causal, batch, heads)
    peak = figures["fma_flops"] if fma_only else figures["tensor_flops"]
    return flops, nbytes, max(flops / peak, nbytes / figures["bandwidth"])


def _call_cost(plan: BranchSizes, impl: str, n: int, causal: bool) -> Tuple[int, int, float]:
    """(FLOPs, bytes, seconds on a T4) of one call of ``impl`` at length ``n``: the roofline
    over the implementation's share of it (:data:`H100_ATTAINMENT`), the host's time where
    it waits on the host."""
    s = _itemsize(plan.dtype)
    t4 = T4_FIGURES
    if impl in _DECODE_HOST_S:  # one decoding step: read the cache once
        flops = profiling.attention_flops(plan.batch, plan.heads, 1, n, plan.d)
        nbytes = 2 * plan.batch * plan.kv_heads * n * plan.d * s
        device = nbytes / (t4["bandwidth"] * H100_ATTAINMENT["decode"])
        return flops, nbytes, max(device, _DECODE_HOST_S[impl])
    fma_only = impl == "triton" or plan.dtype == "float32"  # Triton before 8.0; float32 everywhere on a T4
    flops, nbytes, roof = _roofline_s(impl, plan.batch, plan.heads, n, plan.d, s, causal, plan.tiles, t4, fma_only)
    seconds = roof / H100_ATTAINMENT["naive" if impl == "tiled" else impl]
    if impl == "tiled":  # launch-bound: the host's time per tile
        seconds = max(seconds, -(-n // plan.tiles[0]) * -(-n // plan.tiles[1]) * TILED_LOOP_HOST_S)
    return flops, nbytes, seconds


def estimate_seconds(plan: BranchSizes, detail: bool = False) -> Any:
    """A T4's seconds for ``plan`` (the module docstring's model): every call of every
    implementation at every length it fits at, each with the L2 flush before it, plus the
    Triton compiles. ``detail=True``: ``{"flops", "bytes", "seconds"}`` totals instead."""
    if not isinstance(plan, BranchSizes):
        raise TypeError(f"plan must be a BranchSizes (branch_sizes()); got {type(plan).__name__}")
    flush = profiling.L2_FLUSH_BYTES / T4_FIGURES["bandwidth"] if plan.repeat else 0.0
    flops = nbytes = 0
    seconds = plan.compiles * _compile_seconds()
    for impl in plan.impls:
        for n in plan.lengths:
            if not plan.fits(impl, n):
                continue
            for causal in plan.causal:
                f, b, t = _call_cost(plan, impl, n, causal)
                flops, nbytes, seconds = flops + plan.calls * f, nbytes + plan.calls * b, \
                    seconds + plan.calls * (t + flush)
    return {"flops": flops, "bytes": nbytes, "seconds": seconds} if detail else seconds


def t4_estimates() -> List[Dict[str, Any]]:
    """One row per GPU branch of :data:`BRANCHES`, sized for a T4 under the ``t4`` profile
    (:func:`branch_sizes` with the profile's capability, memory and SMs): chapter, branch,
    FLOPs, bytes, estimated seconds, whether the chapter's branches together stay within
    :data:`T4_SECONDS_AIM`, and the lengths kept."""
    t4 = PROFILES["t4"]
    gpu = GPUInfo("T4 (profile)", t4.capability, t4.memory_bytes, t4.sms)
    rows = []
    for chapter, branch in BRANCHES:
        plan = branch_sizes(chapter, branch, gpu)
        est = estimate_seconds(plan, detail=True)
        rows.append({"chapter": chapter, "branch": branch, "cell": plan.cell, **est,
                     "lengths": list(plan.lengths), "max_n": dict(plan.max_n), "impls": list(plan.impls)})
    totals: Dict[str, float] = {}
    for r in rows:
        totals[r["chapter"]] = totals.get(r["chapter"], 0.0) + r["seconds"]
    for r in rows:
        r["chapter_seconds"] = totals[r["chapter"]]
        r["within_aim"] = totals[r["chapter"]] <= T4_SECONDS_AIM
    return rows


def format_estimates(rows: Optional[List[Dict[str, Any]]] = None) -> str:
    """:func:`t4_estimates` as text, one line per branch, then one per chapter."""
    rows = t4_estimates() if rows is None else rows
    lines = [f"{'chapter':7s} {'branch':12s} {'FLOPs':>10s} {'bytes':>10s} {'T4 s':>7s} "
             f"{'within 3 min':12s} lengths (longest per impl where shorter)"]
    for r in rows:
        cut = {i: m for i, m in r["max_n"].items() if r["lengths"] and m < max(r["lengths"])}
        extra = f"; {', '.join(f'{i} <= {m}' for i, m in cut.items())}" if cut else ""
        lines.append(f"{r['chapter']:7s} {r['branch']:12s} {r['flops']:10.3g} {r['bytes']:10.3g} "
                     f"{r['seconds']:7.1f} {'yes' if r['seconds'] <= T4_SECONDS_AIM else 'no':12s} "
                     f"{' '.join(map(str, r['lengths']))}{extra}")
    seen: Dict[str, Dict[str, Any]] = {r["chapter"]: r for r in rows}
    for chapter, r in seen.items():
        lines.append(f"# chapter {chapter}: {r['chapter_seconds']:.1f} s of GPU branches on a T4 "
                     f"(estimated), within {T4_SECONDS_AIM:.0f} s: {'yes' if r['within_aim'] else 'no'}")
    return "\n".join(lines)
