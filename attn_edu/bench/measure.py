"""The measurements the recorded sweeps lack: ``python -m attn_edu.bench --measure NAME``.

Each of :data:`MEASURES` writes one document (schema ``attn_edu.bench/1``, the
:func:`~attn_edu.bench.environment` header, ``"kind"`` = the measurement's name,
``config``, ``results``: one row per implementation and point, ``skipped``: what cannot
run here and why). A point that fails (out of memory, an error) is kept as a row with its
``error`` and ``reason`` (:func:`~attn_edu.bench.failure_reason`) and the run goes on; the
document is written again after every point, so a run cut short keeps what it measured.

* ``backward`` -- both schedules of the Triton backward (``flash_triton.BACKWARDS``)
  against the backward of SDPA's flash and cuDNN backends (pinned with
  ``torch.nn.attention.sdpa_kernel``; a backend that does not run here is under
  ``skipped`` with PyTorch's reason), timed interleaved at each point on the same inputs
  (:func:`attn_edu.profiling.time_interleaved_ms`, the forward outside the timing). FLOPs:
  :func:`attn_edu.profiling.attention_flops` with ``backward=True``, 2.5 times the forward
  (FlashAttention's count: five matmuls of the forward's size against its two), the same
  for every implementation whatever it computes (the ``"two_kernels"`` schedule does
  seven matmuls per tile pair).
* ``forward_cudnn`` -- the Triton forward against SDPA's cuDNN and flash backends, one
  interleaved sweep (:func:`~attn_edu.bench.run_sweep`, ``interleave=True``) per head dim.
* ``causal_d128`` -- the causal sweep at head dim 128: Triton against every SDPA backend
  that runs (flash, cuDNN, efficient), interleaved.
* ``host_time`` -- every implementation of the registry: the host's time from call to
  return without synchronising (``host_median_ms``) beside the device's time
  (``device_median_ms``, CUDA events); ``launch_bound`` when the host is the slower. On
  the CPU a call computes before it returns, so the host's time is the whole call: in a
  dry run it is the Python (and the interpreter's) time.
* ``decode_graph`` -- one decoding step (:func:`~attn_edu.bench.decode_sweep`, batch 1,
  KV caches of 16k to 64k) eager against its replay from a CUDA graph, call by call after
  an L2 flush (``graph_speedup`` = eager / graph; the flush gives the host a head start, so
  it hides a host time shorter than the flush) and in a loop of steps back to back, as a
  decoder runs (``loop_speedup`` = eager loop / graph loop, per step: the host's time
  shows wherever it is longer than the GPU's).
* ``fa3_ladder`` -- the forward's variants (``flash_triton.FORWARD_VARIANTS``: FlashAttention-2's
  kernel, then host-built TMA descriptors, wider tiles, warp specialization, a persistent
  grid in causal order), non-causal and causal, beside SDPA's cuDNN and flash backends
  (FlashAttention-2; on the CPU PyTorch's fused kernel), interleaved at
  each point on the same inputs. Each row keeps the steps its launch took (``steps``:
  :func:`~attn_edu.kernels.flash_triton.variant_steps`, with what it left out and why; None
  where FlashAttention-2's kernel ran: ``"fa2"``, or a variant left with no step) and
  the autotuner's choice (``config``); a causal row has ``causal_over_noncausal``, its time
  over the non-causal time of the same variant and point (the tile-count ideal is about
  one half). A dry run uses float16 (FlashAttention-3's steps are for 16-bit inputs). One
  length on a GPU, n = 8192: every variant autotunes on its own, per head dim and causality,
  and the first run compiles each variant's whole space (268 kernels in all on an H100).
* ``memory`` -- peak memory above the inputs (:func:`attn_edu.profiling.peak_memory`) of
  the block-sparse kernel (a causal sliding window, its plan built once) beside the dense
  Triton forward and SDPA (``part: "block_sparse"``), and of every decode implementation
  (``part: "decode"``).
* ``profile`` -- the calls behind the GPU goals at one length (n = 8192; decode over
  ``decode_scale`` times n keys, 16k): the
  Triton forward beside SDPA's cuDNN and flash at d = 64 and 128 and causal at 64, both backward
  schedules, the split-KV decode step and the block-sparse kernel (a causal window of 512, density
  about 1/16). Each row has the GPU's time, the host's time per call taken apart by whose code
  spent it (:func:`attn_edu.bench.diagnose.host_breakdown`), ``launch_bound``, and where Nsight
  Compute reads the GPU's counters ``kernels``: each kernel's duration, throughputs against the
  peaks, occupancy, registers and stall reasons (attn_edu/bench/_profile_measure.py).

Sizes: :data:`MEASURE_SIZES` (``"gpu"``: B = 4, H = 16, n = 4k-16k, d = 64 and 128 in the
GPU's half type; ``"dry_run"``: the CPU through Triton's interpreter, float32, d = 16, one
head, in seconds). Without ``dry_run`` a measurement needs a CUDA GPU.

**The dry-run rule: one length.** A dry run proves the pipeline (every implementation
called, timed, recorded, the document written), not the numbers, so each measurement runs
at one length there (n = 32; decode: one KV-cache length); a GPU run measures every length
of its ``"gpu"`` sizes. Where a test needs several points of a dry run (a failure at one
length, the others measured), it passes ``n`` (``--n``).
"""
from __future__ import annotations

import sys
from dataclasses import asdict, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .. import profiling
from ..kernels._interpret import requested as interpret_requested
from ._measure_kit import (CAUSAL_SDPA as _CAUSAL_SDPA, FORWARD_SDPA as _FORWARD_SDPA, Run as _Run,
                           backward_call as _backward_call, backward_forwards as _backward_forwards,
                           config as _config, document as _document, failed as _failed,
                           print_row as _print_row, save as _save, sdpa_names as _sdpa_names, skip as _skip,
                           timed_point as _timed_point)
from ._profile_measure import measure_profile
from .decode import DECODE_IMPLS, decode_sweep
from .env import SDPA_BACKENDS, gpu_half_dtype
from .goals import cuda_available
from .registry import BenchConfig, ImplUnavailable, impl_names, make_inputs
from .sweep import FLOP_FORMULA, run_sweep

__all__ = ["MEASURES", "MEASURE_SIZES", "BACKWARD_FLOP_FORMULA", "run_measure"]

#: The measurements ``--measure NAME`` takes, each the ``kind`` of the document it writes.
MEASURES: Dict[str, str] = {
    "backward": "the Triton backward (both schedules) against SDPA flash's and cuDNN's backward, interleaved",
    "forward_cudnn": "the Triton forward against SDPA cuDNN and flash, side by side in one interleaved sweep",
    "causal_d128": "the causal sweep at head dim 128: Triton against every SDPA backend that runs, interleaved",
    "host_time": "host time per call (no synchronisation) beside device time, every implementation",
    "decode_graph": "one decoding step (L_q = 1), eager against its CUDA-graph replay",
    "memory": "peak memory above the inputs of the block-sparse kernel and of decoding",
    "fa3_ladder": "the forward's ladder from FlashAttention-2 to -3 (host TMA, wide tiles, warp specialization, "
                  "persistent causal order), each step beside SDPA cuDNN and flash, causal and not, interleaved",
    "profile": "the calls behind the GPU goals, each timed, its host time taken apart by whose code spent it, and "
               "its kernels read by Nsight Compute (ncu) where the GPU's counters can be read",
}

_LONG = (4096, 8192, 16384)
# a dry run's sizes: one length (the dry-run rule above) and the interpreter's tiny shapes
_DRY = {"n": (32,), "d": (16,), "batch": 1, "heads": 1, "repeat": 2, "warmup": 1}
#: The sizes of each measurement on a GPU (``"gpu"``) and in a dry run on the CPU
#: (``"dry_run"``): lengths ``n`` (decode: KV-cache lengths), head dims ``d``, ``batch``,
#: ``heads`` (decode: query heads sharing ``kv_heads``), ``repeat``, ``warmup``, and for
#: ``memory`` the block-sparse window and the decode lengths and batches.
MEASURE_SIZES: Dict[str, Dict[str, Dict[str, Any]]] = {
    "backward": {"gpu": {"n": _LONG, "d": (64, 128), "batch": 4, "heads": 16, "repeat": 10, "warmup": 2},
                 "dry_run": dict(_DRY)},
    "forward_cudnn": {"gpu": {"n": _LONG, "d": (64, 128), "batch": 4, "heads": 16, "repeat": 10, "warmup": 2},
                      "dry_run": dict(_DRY)},
    "causal_d128": {"gpu": {"n": _LONG, "d": (128,), "batch": 4, "heads": 16, "repeat": 10, "warmup": 2},
                    "dry_run": dict(_DRY)},
    "host_time": {"gpu": {"n": (256, 1024, 4096), "d": (64,), "batch": 1, "heads": 16, "window": 128,
                          "repeat": 20, "warmup": 3},
                  "dry_run": dict(_DRY, window=16)},
    "decode_graph": {"gpu": {"n": (16384, 32768, 65536), "d": (128,), "batch": 1, "heads": 32, "kv_heads": 8,
                             "repeat": 20, "warmup": 3},
                     "dry_run": dict(_DRY, kv_heads=1)},
    "memory": {"gpu": {"n": (8192, 16384), "d": (64,), "batch": 4, "heads": 16, "window": 1024,
                       "decode_n": (16384, 65536), "decode_batch": (1, 8), "decode_heads": 32, "kv_heads": 8,
                       "decode_d": 128, "repeat": 3, "warmup": 1},
               "dry_run": dict(_DRY, window=16, block=16, decode_n=(32,), decode_batch=(1,), decode_heads=1,
                               kv_heads=1, decode_d=16)},
    "fa3_ladder": {"gpu": {"n": (8192,), "d": (64, 128), "batch": 4, "heads": 16, "repeat": 10, "warmup": 2},
                   "dry_run": dict(_DRY, dtype="float16")},
    "profile": {"gpu": {"n": (8192,), "d": (64, 128), "batch": 4, "heads": 16, "repeat": 10, "warmup": 2,
                        "calls": 50, "decode_scale": 2, "decode_heads": 32, "kv_heads": 8, "decode_d": 128,
                        "sparse_batch": 1, "window": 512, "block_q": 128, "block_k": 64, "ncu_timeout": 420},
                "dry_run": dict(_DRY, calls=3, decode_scale=1, decode_heads=2, kv_heads=1, decode_d=16, sparse_batch=1,
                                window=16, block_q=16, block_k=16, ncu_timeout=300)},
}
#: How the ``backward`` rows count FLOPs (written into its document).
BACKWARD_FLOP_FORMULA = (
    "attention_flops(B, H, n, n, d, causal, backward=True) = 2.5 x the forward's "
    "2*B*H*n*n*(d + d) (FlashAttention's count: the backward's five matmuls QK^T (recomputed), "
    "dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q against the forward's two), half of that "
    "when causal; the same count for every implementation (the Triton two_kernels schedule really does "
    "seven matmuls, 7/5 of the count, its dQ kernel recomputing S and dP; atomic_dq does the five). "
    "tflops = flops / (median_ms * 1e-3) / 1e12"
)



def run_measure(name: str, dry_run: bool = False, out: Optional[str] = None,
                n: Optional[Sequence[int]] = None, d: Optional[Sequence[int]] = None,
                batch: Optional[int] = None, heads: Optional[int] = None, dtype: Optional[str] = None,
                repeat: Optional[int] = None, warmup: Optional[int] = None, causal: Optional[bool] = None,
                command: Optional[str] = None, progress: Any = False, stream=None) -> Tuple[Dict[str, Any], int]:
    """Run the measurement ``name`` (a key of :data:`MEASURES`); return (document, exit code).

    The sizes are :data:`MEASURE_SIZES` ``[name]["gpu"]``, or ``["dry_run"]`` with
    ``dry_run=True`` (the CPU, Triton's interpreter: ``TRITON_INTERPRET=1`` must be set
    before triton is imported); ``n``, ``d``, ``batch``, ``heads``, ``repeat``, ``warmup``
    replace them, ``causal=True`` makes ``backward`` causal. ``dtype`` defaults to the GPU's
    half type (:func:`~attn_edu.bench.gpu_half_dtype`), float32 in a dry run. ``out``: the
    document is written there after every point. The exit code is 1 when a point failed, the
    run was interrupted or nothing ran, else 0. RuntimeError when it cannot start here (no
    CUDA GPU without ``dry_run``; a dry run without ``TRITON_INTERPRET=1``).
    """
    if name not in MEASURES:
        raise ValueError(f"name must be one of {', '.join(MEASURES)}; got {name!r}")
    if dry_run and not interpret_requested():
        raise ImplUnavailable("a dry run runs the Triton kernels in Triton's interpreter: set TRITON_INTERPRET=1 "
                           "before the command (before anything imports triton)")
    if not dry_run and not cuda_available():
        raise ImplUnavailable(f"--measure {name} measures a CUDA GPU, and PyTorch sees none here "
                           "(torch.cuda.is_available() is False); --dry-run runs it on the CPU at tiny sizes")
    sizes = dict(MEASURE_SIZES[name]["dry_run" if dry_run else "gpu"])
    device = "cpu" if dry_run else "cuda"
    run = _Run(name, MEASURES[name], bool(dry_run), device,
               dtype or sizes.get("dtype") or ("float32" if dry_run else gpu_half_dtype(device)),
               tuple(n or sizes["n"]), tuple(d or sizes["d"]), batch or sizes["batch"], heads or sizes["heads"],
               sizes["repeat"] if repeat is None else repeat, sizes["warmup"] if warmup is None else warmup,
               bool(causal), sizes, out, command, progress, stream or sys.stdout)
    doc = _MEASURE_FNS[name](run)
    for r in doc["results"]:
        _print_row(r, run.stream)
    for what, why in doc["skipped"].items():
        print(f"  {what:24s} skipped: {why[:200]}", file=run.stream)
    if "stopped" in doc:
        print(f"STOPPED: {doc['stopped']}", file=run.stream)
    _save(doc, run)
    if out:
        print(f"wrote {out}", file=run.stream)
    failed = any("error" in r for r in doc["results"]) or "stopped" in doc
    return doc, int(failed or not any("error" not in r for r in doc["results"]))


# --------------------------------------------------------------------------- shared
def _sweeps(run: _Run, doc: Dict[str, Any], impls_at: Callable[[int], List[str]],
            config: BenchConfig, memory: bool = False, interleave: bool = True,
            part: Optional[str] = None) -> None:
    """One :func:`run_sweep` per head dim, its rows (with ``d``) appended to ``doc``."""
    for d in run.ds:
        cfg = replace(config, d=d)
        impls = impls_at(d)
        try:
            sub = run_sweep(impls, run.ns, cfg, repeat=run.repeat, warmup=run.warmup, memory=memory,
                            progress=run.progress, command=run.command, interleave=interleave,
                            dry_run=run.dry_run)
        except KeyboardInterrupt:  # the interleaved sweep keeps nothing: the earlier head dims stay
            doc["stopped"] = f"interrupted in the sweep at d={d}"
            break
        for r in sub["results"]:
            doc["results"].append({**({"part": part} if part else {}), "d": d, **r})
        for what, why in sub["skipped"].items():
            _skip(doc, what, why, d if len(run.ds) > 1 else None)
        doc.setdefault("sdpa_backend", {})[str(d)] = sub.get("sdpa_backend")
        if "stopped" in sub:
            doc["stopped"] = f"d={d}: {sub['stopped']}"
        _save(doc, run)
        if "stopped" in doc:
            break



# --------------------------------------------------------------------------- backward

def _measure_backward(run: _Run) -> Dict[str, Any]:
    cfg = _config(run, causal=run.causal)
    doc = _document(run, {**asdict(cfg), "d": list(run.ds), "n": list(run.ns)}, flop_formula=BACKWARD_FLOP_FORMULA,
                    timed="the backward only (out.backward(dout, retain_graph=True), gradients reset before each "
                          "call); the forward runs once per point, untimed; implementations interleaved per point")
    points = [(d, n) for d in run.ds for n in run.ns]
    done = 0
    try:
        for d in run.ds:
            forwards = _backward_forwards(run, doc, d)
            for n in run.ns:
                _backward_point(run, doc, replace(cfg, d=d), n, forwards)
                done += 1
                _save(doc, run)
    except KeyboardInterrupt:  # SIGTERM through the command line: keep what ran
        doc["stopped"] = f"interrupted after {done} of {len(points)} points"
    return doc


def _backward_point(run: _Run, doc: Dict[str, Any], cfg: BenchConfig, n: int,
                    forwards: Dict[str, Tuple[Callable, Dict[str, Any]]]) -> None:
    flops = profiling.attention_flops(cfg.batch, cfg.heads, n, n, cfg.d, causal=cfg.causal, backward=True)
    rows = {name: {"impl": name, **fields, "n": n, "d": cfg.d, "causal": cfg.causal, "flops": flops}
            for name, (_, fields) in forwards.items()}
    calls: Dict[str, Callable[[], None]] = {}
    with _timed_point(run, doc, rows, calls, flops):
        q, k, v = (x.requires_grad_() for x in make_inputs("torch", n, cfg))
        dout = make_inputs("torch", n, cfg, seed=1)[0]
        for name, (forward, _) in forwards.items():
            try:
                call = _backward_call(forward(q, k, v), dout, (q, k, v))
                for _ in range(max(1, run.warmup)):  # at least once: the first call compiles
                    call()
                calls[name] = call
            except Exception as err:  # this implementation failed here; the others still run
                _failed(rows[name], err)


# --------------------------------------------------------------------------- forward sweeps
def _measure_forward_cudnn(run: _Run) -> Dict[str, Any]:
    cfg = _config(run)
    doc = _document(run, {**asdict(cfg), "d": list(run.ds), "n": list(run.ns)}, flop_formula=FLOP_FORMULA,
                    interleave=True)
    _sweeps(run, doc, lambda d: ["triton"] + _sdpa_names(run, doc, _FORWARD_SDPA, d), cfg)
    return doc


def _measure_causal_d128(run: _Run) -> Dict[str, Any]:
    cfg = _config(run, causal=True)
    doc = _document(run, {**asdict(cfg), "d": list(run.ds), "n": list(run.ns)}, flop_formula=FLOP_FORMULA,
                    interleave=True)
    _sweeps(run, doc, lambda d: ["triton"] + _sdpa_names(run, doc, _CAUSAL_SDPA, d), cfg)
    return doc


def _measure_host_time(run: _Run) -> Dict[str, Any]:
    cfg = _config(run, window=run.sizes["window"])
    doc = _document(run, {**asdict(cfg), "d": list(run.ds), "n": list(run.ns)}, flop_formula=FLOP_FORMULA,
                    interleave=True, host_timer=(
                        "perf_counter around the call, no synchronisation (the GPU's time: CUDA events)"
                        if run.device == "cuda" else
                        "perf_counter around the call: on the CPU the call computes before it returns, so "
                        "the host's time is the whole call (in a dry run, Python and Triton's interpreter)"))
    sdpa = {f"torch_sdpa_{b}" for b in SDPA_BACKENDS}

    def impls(d: int) -> List[str]:
        probed = set(_sdpa_names(run, doc, list(SDPA_BACKENDS), d))
        return [x for x in impl_names() if x not in sdpa or x in probed]

    _sweeps(run, doc, impls, cfg)
    for r in doc["results"]:
        if "error" in r:
            continue
        r["device_median_ms"] = r["median_ms"]
        if r.get("host_median_ms") is None:  # the CPU: the call is the work
            r["host_median_ms"] = r["median_ms"]
        r["host_over_device"] = r["host_median_ms"] / r["median_ms"]
        r["launch_bound"] = r["host_median_ms"] >= r["median_ms"] if run.device == "cuda" else None
    return doc


# --------------------------------------------------------------------------- decode and memory
def _decode(run: _Run, contexts, batches, heads, d, memory: bool) -> Dict[str, Any]:
    """:func:`decode_sweep` with the run's settings: the CUDA graph when timing, else the peak."""
    return decode_sweep(contexts=tuple(contexts), batches=tuple(batches), heads=heads,
                        kv_heads=run.sizes["kv_heads"], d=d, dtype=run.dtype, device=run.device,
                        repeat=run.repeat, warmup=run.warmup, memory=memory, graph=not memory,
                        dry_run=run.dry_run)


def _measure_decode_graph(run: _Run) -> Dict[str, Any]:
    doc = _document(run, {"contexts": list(run.ns), "batch": run.batch, "heads": run.heads,
                          "kv_heads": run.sizes["kv_heads"], "d": run.ds[0], "dtype": run.dtype,
                          "device": run.device, "lq": 1, "impls": list(DECODE_IMPLS)},
                    graph_timer="profiling.time_cuda_graph_ms: one capture, replays timed with CUDA events")
    try:
        sub = _decode(run, run.ns, (run.batch,), run.heads, run.ds[0], memory=False)
    except KeyboardInterrupt:
        doc["stopped"] = "interrupted in the decode sweep"
        return doc
    doc["skipped"].update(sub["skipped"])
    for r in sub["results"]:
        if r.get("graph_median_ms"):
            r["graph_speedup"] = r["median_ms"] / r["graph_median_ms"]
        if r.get("graph_loop_ms") and r.get("loop_ms"):
            r["loop_speedup"] = r["loop_ms"] / r["graph_loop_ms"]
        doc["results"].append(r)
    return doc


def _measure_memory(run: _Run) -> Dict[str, Any]:
    s = run.sizes
    tiles = {"block_q": s["block"], "block_k": s["block"]} if "block" in s else {}
    cfg = _config(run, causal=True, window=s["window"], **tiles)
    decode = {"contexts": list(s["decode_n"]), "batches": list(s["decode_batch"]), "heads": s["decode_heads"],
              "kv_heads": s["kv_heads"], "d": s["decode_d"], "dtype": run.dtype, "lq": 1}
    doc = _document(run, {"block_sparse": {**asdict(cfg), "d": list(run.ds), "n": list(run.ns)},
                          "decode": decode}, memory_method="profiling.peak_memory: bytes above the inputs")
    _sweeps(run, doc, lambda d: ["block_sparse", "triton", "torch_sdpa"], cfg, memory=True, interleave=False,
            part="block_sparse")
    itemsize = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}[run.dtype]
    for r in doc["results"]:
        if "error" not in r:
            r["model_tiled_peak_bytes"] = profiling.attention_peak_bytes(r["n"], r["d"], itemsize, cfg.batch,
                                                                         cfg.heads, tiled=True)
            r["dense_mask_bytes"] = r["n"] * r["n"]  # a boolean (n, n) mask, which the kernel never reads
    if "stopped" in doc:
        return doc
    try:
        sub = _decode(run, s["decode_n"], s["decode_batch"], s["decode_heads"], s["decode_d"], memory=True)
    except KeyboardInterrupt:
        doc["stopped"] = "interrupted in the decode part"
        return doc
    for what, why in sub["skipped"].items():
        _skip(doc, what, why)
    doc["results"] += [{"part": "decode", **r} for r in sub["results"]]
    return doc


# --------------------------------------------------------------------------- the FlashAttention-3 ladder
def _measure_fa3_ladder(run: _Run) -> Dict[str, Any]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..kernels import flash_triton as ft

    cfg = _config(run)
    doc = _document(run, {**asdict(cfg), "d": list(run.ds), "n": list(run.ns), "causal": [False, True],
                          "variants": list(ft.FORWARD_VARIANTS)}, flop_formula=FLOP_FORMULA,
                    timed="the forward only; every variant and SDPA cuDNN and flash interleaved per point, same inputs",
                    published="FlashAttention-3's own numbers are Shah et al. 2024's (attn_edu.bench.published)")
    points = [(d, n, c) for d in run.ds for n in run.ns for c in (False, True)]
    try:
        for done, (d, n, causal) in enumerate(points):
            sdpa = _sdpa_names(run, doc, _FORWARD_SDPA, d)
            _ladder_point(run, doc, replace(cfg, d=d, causal=causal), n, sdpa, ft, F, SDPBackend, sdpa_kernel)
            _save(doc, run)
    except KeyboardInterrupt:
        doc["stopped"] = f"interrupted after {done} of {len(points)} points"
    plain = {(r["impl"], r["d"], r["n"]): r for r in doc["results"] if not r["causal"] and "median_ms" in r}
    for r in doc["results"]:
        base = plain.get((r["impl"], r["d"], r["n"]))
        if r["causal"] and "median_ms" in r and base is not None:
            r["causal_over_noncausal"] = r["median_ms"] / base["median_ms"]
    return doc


def _ladder_point(run: _Run, doc: Dict[str, Any], cfg: BenchConfig, n: int, sdpa: List[str], ft, F,
                  SDPBackend, sdpa_kernel) -> None:
    flops = profiling.attention_flops(cfg.batch, cfg.heads, n, n, cfg.d, causal=cfg.causal)
    rows: Dict[str, Dict[str, Any]] = {}
    calls: Dict[str, Callable[[], Any]] = {}
    with _timed_point(run, doc, rows, calls, flops):
        q, k, v = make_inputs("torch", n, cfg)
        for variant in ft.FORWARD_VARIANTS:
            name = f"triton_{variant}"
            rows[name] = row = {"impl": name, "variant": variant, "n": n, "d": cfg.d, "causal": cfg.causal,
                                "flops": flops}
            try:
                call = (lambda variant=variant: ft.triton_attention_forward(q, k, v, causal=cfg.causal,
                                                                            variant=variant))
                for _ in range(max(1, run.warmup)):  # at least once: the first call autotunes
                    call()
                row["steps"] = ft.launch.launch_steps(q, k, v, variant)
                row["config"] = ft.chosen_forward_config(q, k, v, cfg.causal, variant=variant)
                calls[name] = call
            except Exception as err:  # this variant failed here; the others still run
                _failed(row, err)
        for name in sdpa:
            kind = getattr(SDPBackend, SDPA_BACKENDS[name[len("torch_sdpa_"):]])
            rows[name] = {"impl": name, "backend": kind.name, "n": n, "d": cfg.d, "causal": cfg.causal,
                          "flops": flops}

            def call(kind=kind):
                with sdpa_kernel(kind):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal)
            try:
                call()
                calls[name] = call
            except Exception as err:
                _failed(rows[name], err)


_MEASURE_FNS: Dict[str, Callable[[_Run], Dict[str, Any]]] = {
    "backward": _measure_backward, "forward_cudnn": _measure_forward_cudnn, "causal_d128": _measure_causal_d128,
    "host_time": _measure_host_time, "decode_graph": _measure_decode_graph, "memory": _measure_memory,
    "fa3_ladder": _measure_fa3_ladder, "profile": measure_profile,
}
