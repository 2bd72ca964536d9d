"""The book's speed and memory goals, each a ratio measured side by side in one run.

``python -m attn_edu.bench --goals`` (:func:`run_goals`) measures every goal it can run
here and prints PASS, FAIL or *not run* (no GPU) for each; :data:`GOALS` states them.
Ratios, not times: both sides of a ratio run interleaved, so the load of a shared
machine hits them alike. The CPU goals use 256 x 256 tiles, as they were stated.
"""
from __future__ import annotations

import statistics
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import profiling
from ..flash import flash_attention
from ..masks import plan_tiles, sliding_window_mask
from ..reference import scaled_dot_product_attention
from .registry import BenchConfig, ImplUnavailable
from .sweep import run_one

__all__ = ["GOALS", "goal_numpy_memory_and_time", "goal_sparse_speed", "goal_gpu_triton_vs_sdpa",
           "goal_gpu_causal_speedup", "run_goals", "cuda_available", "GOAL_BLOCK"]

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
                                      "what": "Triton forward TFLOP/s / SDPA flash backend TFLOP/s, bf16"},
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
    """Run a, b, a, b, ... after one warm-up each, so machine load hits both alike."""
    for fn in fns.values():
        fn(*args)
    times: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for key, fn in fns.items():
            times[key].append(profiling.time_ms(fn, *args, repeat=1, warmup=0, device=device).median_ms)
    return times


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
    the same way); building the plan reads the whole n x n mask, and its time is
    measured and reported next to the goal, together with the ratio a call would give
    if it planned every time.
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


def goal_gpu_triton_vs_sdpa(ns: Sequence[int] = (4096, 8192, 16384), ds: Sequence[int] = (64, 128),
                            batch: int = 4, heads: int = 16, repeat: int = 10) -> List[Dict[str, Any]]:
    """Triton forward TFLOP/s over SDPA's flash backend, bf16, non-causal; the worst ratio counts."""
    if not cuda_available():
        return [_goal("triton_over_sdpa_flash_tflops", None, {}, "not run: no CUDA GPU")]
    details, ratios = [], []
    try:
        for d in ds:
            for n in ns:
                cfg = BenchConfig(batch=batch, heads=heads, d=d, dtype="bfloat16", device="cuda")
                tri = run_one("triton", n, cfg, repeat=repeat, warmup=2)
                ref = run_one("torch_sdpa_flash", n, cfg, repeat=repeat, warmup=2)
                ratios.append(tri["tflops"] / ref["tflops"])
                details.append({"n": n, "d": d, "triton_tflops": tri["tflops"],
                                "sdpa_flash_tflops": ref["tflops"], "ratio": ratios[-1]})
    except ImplUnavailable as err:
        return [_goal("triton_over_sdpa_flash_tflops", None, {"points": details}, f"not run: {err}")]
    return [_goal("triton_over_sdpa_flash_tflops", min(ratios),
                  {"batch": batch, "heads": heads, "points": details}, "worst point")]


def goal_gpu_causal_speedup(n: int = 8192, d: int = 64, batch: int = 4, heads: int = 16,
                            repeat: int = 10) -> List[Dict[str, Any]]:
    """Triton forward, causal / non-causal time at bf16 (skipping tiles should nearly halve it)."""
    if not cuda_available():
        return [_goal("causal_over_noncausal_time", None, {}, "not run: no CUDA GPU")]
    try:
        full = run_one("triton", n, BenchConfig(batch=batch, heads=heads, d=d, dtype="bfloat16",
                                                device="cuda"), repeat=repeat, warmup=2)
        causal = run_one("triton", n, BenchConfig(batch=batch, heads=heads, d=d, dtype="bfloat16",
                                                  device="cuda", causal=True), repeat=repeat, warmup=2)
    except ImplUnavailable as err:
        return [_goal("causal_over_noncausal_time", None, {}, f"not run: {err}")]
    return [_goal("causal_over_noncausal_time", causal["median_ms"] / full["median_ms"],
                  {"n": n, "d": d, "full_ms": full["median_ms"], "causal_ms": causal["median_ms"]})]


def run_goals(n: int = 8192, repeat: int = 3, sparse: bool = True, gpu: bool = True,
              stream=None) -> Tuple[List[Dict[str, Any]], int]:
    """Measure every goal, print a table; return (goal records, exit code: 1 if one failed)."""
    stream = stream or sys.stdout
    goals = goal_numpy_memory_and_time(n=n, repeat=repeat)
    if sparse:
        goals += goal_sparse_speed(n=n, window=min(1024, n // 2), repeat=repeat)
    if gpu:
        goals += goal_gpu_triton_vs_sdpa() + goal_gpu_causal_speedup()
    for g in goals:
        status = {True: "PASS", False: "FAIL", None: "not run"}[g["passed"]]
        measured = "-" if g["measured"] is None else f"{g['measured']:.3g}"
        where = ", ".join(f"{k}={g['details'][k]}" for k in ("n", "window") if k in g["details"])
        note = "; ".join(x for x in (where, g["note"]) if x)
        print(f"{status:8s} {g['goal']:32s} measured {measured:>8s}  goal {g['op']} {g['target']:.3g}"
              f"  {g['what']}{'  [' + note + ']' if note else ''}", file=stream)
    return goals, int(any(g["passed"] is False for g in goals))
