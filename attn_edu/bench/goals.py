"""The book's speed and memory goals, each a ratio measured side by side in one run.

``python -m attn_edu.bench --goals`` (:func:`run_goals`) measures every goal it can run
here and prints PASS, FAIL or *not run* (no GPU) for each; :data:`GOALS` states them.
Ratios, not times: both sides of a ratio run interleaved, so the load of a shared
machine hits them alike. The CPU goals use 256 x 256 tiles, as they were stated.
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import profiling
from ..flash import flash_attention
from ..masks import plan_tiles, sliding_window_mask
from ..reference import scaled_dot_product_attention
from .env import autotune_config, best_sdpa_backend, gpu_half_dtype
from .registry import BenchConfig, ImplUnavailable, build_impl, make_inputs
from .sweep import failure_reason

__all__ = ["GOALS", "goal_numpy_memory_and_time", "goal_sparse_speed", "goal_gpu_triton_vs_sdpa",
           "goal_gpu_causal_speedup", "run_goals", "cuda_available", "GOAL_BLOCK", "DRY_RUN_GPU_GOALS"]

#: The tile of the CPU goals (stated at n = 8192 with 256 x 256 tiles).
GOAL_BLOCK = 256


#: Targets of the performance goals. ``op`` compares the measured ratio with ``target``.
GOALS: Dict[str, Dict[str, Any]] = {
    "numpy_peak_naive_over_tiled": {"op": ">=", "target": 50.0,
                                    "what": "peak memory, naive / tiled (NumPy, d=64, fp32, tiles 256; "
                                            "goal stated at n=8192)"},
    "numpy_time_tiled_over_naive": {"op": "<=", "target": 1.2,
                                    "what": "time, tiled / naive (same run, interleaved)"},
    "sparse_time_over_density": {"op": "<=", "target": 1 / 0.75,
                                 "what": "(time masked / time dense) / tile density, causal sliding window, "
                                         "tiles 256 (goal stated at n=8192, window 1024)"},
    "triton_over_sdpa_flash_tflops": {"op": ">=", "target": 1.0,
                                      "what": "Triton forward TFLOP/s / SDPA's best backend TFLOP/s (flash "
                                              "where it exists), in the GPU's half type"},
    "causal_over_noncausal_time": {"op": "<=", "target": 1 / 1.8,
                                   "what": "Triton forward time, causal / non-causal (goal: causal "
                                           ">= 1.8x faster; ideal 0.5)"},
}


def _goal(key: str, measured: Optional[float], details: Dict[str, Any], note: str = "") -> Dict[str, Any]:
    g = GOALS[key]
    if measured is None:
        passed = None
    elif g["op"] == ">=":
        passed = measured >= g["target"]
    else:
        passed = measured <= g["target"]
    return {"goal": key, "what": g["what"], "op": g["op"], "target": g["target"],
            "measured": measured, "passed": passed, "details": details, "note": note}


def _median(xs: List[float]) -> float:
    return float(statistics.median(xs))


def _interleaved(fns: Dict[str, Callable], args: tuple, repeat: int, device: str) -> Dict[str, List[float]]:
    """Run a, b, a, b, ... after one warm-up each (:func:`attn_edu.profiling.time_interleaved_ms`)."""
    timings = profiling.time_interleaved_ms(fns, *args, repeat=repeat, warmup=1, device=device)
    return {key: list(t.times_ms) for key, t in timings.items()}


def goal_numpy_memory_and_time(n: int = 8192, d: int = 64, block_q: int = GOAL_BLOCK,
                               block_k: int = GOAL_BLOCK, repeat: int = 3) -> List[Dict[str, Any]]:
    """Peak memory naive/tiled (>= 50) and time tiled/naive (<= 1.2), NumPy float32, one run."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))  # (L, D)
    naive = scaled_dot_product_attention

    def tiled(q, k, v):
        return flash_attention(q, k, v, block_q=block_q, block_k=block_k)

    _, peak_naive = profiling.peak_memory(naive, q, k, v, device="numpy")
    _, peak_tiled = profiling.peak_memory(tiled, q, k, v, device="numpy")
    times = _interleaved({"naive": naive, "tiled": tiled}, (q, k, v), repeat, "cpu")
    tn, tt = _median(times["naive"]), _median(times["tiled"])
    shape = {"n": n, "d": d, "dtype": "float32", "block_q": block_q, "block_k": block_k, "repeat": repeat}
    return [
        _goal("numpy_peak_naive_over_tiled", peak_naive / max(peak_tiled, 1),
              {**shape, "peak_naive_bytes": peak_naive, "peak_tiled_bytes": peak_tiled}),
        _goal("numpy_time_tiled_over_naive", tt / tn,
              {**shape, "naive_ms": times["naive"], "tiled_ms": times["tiled"]}),
    ]


def goal_sparse_speed(n: int = 8192, window: int = 1024, block_q: int = GOAL_BLOCK,
                      block_k: int = GOAL_BLOCK, d: int = 64, repeat: int = 5) -> List[Dict[str, Any]]:
    """Masked (sliding window, causal) vs dense tiled NumPy attention: time ratio vs tile density.

    The goal: ``time(masked) / time(dense) <= density / 0.75`` -- skipping empty tiles
    delivers at least 75% of the ideal saving. Reported as ``(time ratio) / density``.

    The masked calls reuse a :class:`attn_edu.masks.TilePlan` built once, as a model
    reuses one pattern across heads, layers and steps (FlexAttention's block mask works
    the same way), and from the warm-up call on the plan holds its partial tiles'
    element masks too (:func:`attn_edu.flash.flash_attention`); building the plan reads
    the whole n x n mask, and its time is measured and reported next to the goal,
    together with the ratio a call would give if it planned every time.
    """
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))  # (L, D)
    mask = np.asarray(sliding_window_mask(n, window, causal=True))  # (L, L) bool
    plan_ms = profiling.time_ms(plan_tiles, mask, block_q, block_k, repeat=3, warmup=0).median_ms
    plan = plan_tiles(mask, block_q, block_k)
    density = plan.density

    def masked(q, k, v):
        return flash_attention(q, k, v, mask=plan)

    def planned_each_call(q, k, v):
        return flash_attention(q, k, v, mask=mask, block_q=block_q, block_k=block_k)

    def dense(q, k, v):
        return flash_attention(q, k, v, block_q=block_q, block_k=block_k)

    times = _interleaved({"masked": masked, "dense": dense, "planned": planned_each_call},
                         (q, k, v), repeat, "cpu")
    ratio = _median(times["masked"]) / _median(times["dense"])
    ratio_planned = _median(times["planned"]) / _median(times["dense"])
    return [_goal("sparse_time_over_density", ratio / density,
                  {"n": n, "d": d, "window": window, "block_q": block_q, "block_k": block_k,
                   "density": density, "time_ratio": ratio, "masked_ms": times["masked"],
                   "dense_ms": times["dense"], "planned_each_call_ms": times["planned"],
                   "planned_each_call_over_density": ratio_planned / density, "plan_ms": plan_ms},
                  f"plan built once ({plan_ms:.1f} ms); planning on every call gives "
                  f"{ratio_planned / density:.2f}")]


def cuda_available() -> bool:
    """Whether PyTorch sees a CUDA GPU (``attn_edu.HAS_CUDA``)."""
    import attn_edu

    return bool(attn_edu.HAS_CUDA)


#: The GPU goals' shapes in a dry run on the CPU (Triton interpreter, float32), for the code
#: path of the goals, not their numbers.
DRY_RUN_GPU_GOALS = {"ns": (64,), "ds": (16,), "batch": 1, "heads": 1, "repeat": 2}


def _gpu_goal_setup(key: str, device: str) -> Optional[Dict[str, Any]]:
    """The goal record saying why a GPU goal cannot run here, or None when it can
    (on CUDA, or on the CPU through Triton's interpreter: a dry run)."""
    from ..kernels._interpret import requested

    if device == "cuda" and not cuda_available():
        return _goal(key, None, {}, "not run: no CUDA GPU")
    if device == "cpu" and not requested():
        return _goal(key, None, {}, "not run: a dry run on the CPU needs TRITON_INTERPRET=1")
    return None


def _dry_note(device: str) -> str:
    return ("DRY RUN on the CPU (Triton interpreter, tiny shapes): exercises the code, "
            "not a GPU number" if device == "cpu" else "")


def _ratio_point(fns: Dict[str, Callable], cfg: BenchConfig, n: int, repeat: int) -> Dict[str, Any]:
    """Median times of ``fns`` on one input, interleaved: ``{name}_ms`` (CUDA events with the
    L2 flushed on a GPU) and ``{name}_host_ms`` (the host's time in the call, on a GPU)."""
    inputs = make_inputs("torch", n, cfg)
    t = profiling.time_interleaved_ms(fns, *inputs, repeat=repeat, warmup=2, device=cfg.device)
    out = {f"{k}_ms": t[k].median_ms for k in fns}
    out.update({f"{k}_host_ms": t[k].host_ms for k in fns if t[k].host_ms is not None})
    return out


def _gpu_dtype(device: str) -> str:
    """The goals' dtype: the GPU's half type (:func:`gpu_half_dtype`), float32 in a dry run."""
    return gpu_half_dtype(device) if device == "cuda" else "float32"


def goal_gpu_triton_vs_sdpa(ns: Sequence[int] = (4096, 8192, 16384), ds: Sequence[int] = (64, 128),
                            batch: int = 4, heads: int = 16, repeat: int = 20,
                            device: str = "cuda") -> List[Dict[str, Any]]:
    """Triton forward TFLOP/s over SDPA's best backend, non-causal; the worst ratio counts.

    In the GPU's half type (:func:`gpu_half_dtype`: float16 on a T4, bfloat16 from compute
    capability 8.0) against the best SDPA backend that runs there for that dtype and head
    dim (:func:`best_sdpa_backend`: flash, else efficient on a T4); the details record
    ``dtype`` and ``sdpa_backend``. Both run interleaved on the same inputs (a, b, a, b,
    ...), each call timed with CUDA events after an L2 flush, and the ratio is of the
    medians. A point that fails (out of memory) is recorded with its reason and the others
    still count. ``device="cpu"`` is the dry run (``TRITON_INTERPRET=1``, float32, tiny
    shapes): the record says it is one.
    """
    key = "triton_over_sdpa_flash_tflops"
    why = _gpu_goal_setup(key, device)
    if why:
        return [why]
    details, ratios, backends = [], [], {}
    dtype = _gpu_dtype(device)
    for d in ds:
        backends[d] = best_sdpa_backend(device, dtype, d)
        if backends[d] is None:
            return [_goal(key, None, {"dtype": dtype}, f"not run: no SDPA backend runs {dtype} at d={d}")]
        for n in ns:
            cfg = BenchConfig(batch=batch, heads=heads, d=d, dtype=dtype, device=device)
            try:
                fns = {"triton": build_impl("triton", cfg)[1],
                       "sdpa": build_impl(f"torch_sdpa_{backends[d]}", cfg)[1]}
                t = _ratio_point(fns, cfg, n, repeat)
            except ImplUnavailable as err:
                return [_goal(key, None, {"points": details}, f"not run: {err}")]
            except Exception as err:  # out of memory, ...: recorded, the goal goes on
                details.append({"n": n, "d": d, "error": f"{type(err).__name__}: {str(err)[:200]}",
                                "reason": failure_reason(err)})
                continue
            ratios.append(t["sdpa_ms"] / t["triton_ms"])  # = TFLOP/s ratio (same FLOPs)
            details.append({"n": n, "d": d, "sdpa_backend": backends[d], **t, "ratio": ratios[-1],
                            "autotune_config": autotune_config()})
    measured = min(ratios) if ratios else None
    note = "; ".join(x for x in ("worst point, medians of interleaved runs", _dry_note(device),
                                 "" if ratios else "every point failed") if x)
    sdpa = sorted(set(backends.values()))
    return [_goal(key, measured, {"batch": batch, "heads": heads, "dtype": dtype,
                                  "sdpa_backend": sdpa[0] if len(sdpa) == 1 else sdpa, "points": details},
                  note)]


def goal_gpu_causal_speedup(n: int = 8192, d: int = 64, batch: int = 4, heads: int = 16,
                            repeat: int = 20, device: str = "cuda") -> List[Dict[str, Any]]:
    """Triton forward, causal / non-causal time in the GPU's half type (:func:`gpu_half_dtype`;
    skipping tiles should nearly halve it); both interleaved, medians of CUDA-event times
    with the L2 flushed. ``device="cpu"``: the dry run."""
    key = "causal_over_noncausal_time"
    why = _gpu_goal_setup(key, device)
    if why:
        return [why]
    dtype = _gpu_dtype(device)
    cfg = BenchConfig(batch=batch, heads=heads, d=d, dtype=dtype, device=device)
    try:
        fns = {"full": build_impl("triton", cfg)[1],
               "causal": build_impl("triton", dataclasses.replace(cfg, causal=True))[1]}
        t = _ratio_point(fns, cfg, n, repeat)
    except ImplUnavailable as err:
        return [_goal(key, None, {}, f"not run: {err}")]
    except Exception as err:
        return [_goal(key, None, {"n": n, "d": d, "error": f"{type(err).__name__}: {str(err)[:200]}",
                                  "reason": failure_reason(err)}, "failed")]
    return [_goal(key, t["causal_ms"] / t["full_ms"], {"n": n, "d": d, "dtype": dtype, **t},
                  _dry_note(device))]


def run_goals(n: int = 8192, repeat: int = 3, sparse: bool = True, gpu: bool = True,
              stream=None, dry_run: bool = False) -> Tuple[List[Dict[str, Any]], int]:
    """Measure every goal, print a table; return (goal records, exit code: 1 if one failed).

    ``dry_run=True`` runs the GPU goals on the CPU through Triton's interpreter at the
    tiny shapes of ``DRY_RUN_GPU_GOALS`` (their records say so)."""
    stream = stream or sys.stdout
    goals = goal_numpy_memory_and_time(n=n, repeat=repeat)
    if sparse:
        goals += goal_sparse_speed(n=n, window=min(1024, n // 2), repeat=repeat)
    if gpu and dry_run:
        dr = DRY_RUN_GPU_GOALS
        goals += goal_gpu_triton_vs_sdpa(dr["ns"], dr["ds"], dr["batch"], dr["heads"], dr["repeat"],
                                         device="cpu")
        goals += goal_gpu_causal_speedup(dr["ns"][0], dr["ds"][0], dr["batch"], dr["heads"],
                                         dr["repeat"], device="cpu")
    elif gpu:
        goals += goal_gpu_triton_vs_sdpa() + goal_gpu_causal_speedup()
    for g in goals:
        status = {True: "PASS", False: "FAIL", None: "not run"}[g["passed"]]
        measured = "-" if g["measured"] is None else f"{g['measured']:.3g}"
        where = ", ".join(f"{k}={g['details'][k]}" for k in ("n", "window") if k in g["details"])
        note = "; ".join(x for x in (where, g["note"]) if x)
        print(f"{status:8s} {g['goal']:32s} measured {measured:>8s}  goal {g['op']} {g['target']:.3g}"
              f"  {g['what']}{'  [' + note + ']' if note else ''}", file=stream)
    return goals, int(any(g["passed"] is False for g in goals))
