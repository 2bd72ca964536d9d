"""Decoding benchmarks (chapter 13): one step with ``L_q = 1`` over a KV cache.

The Triton split-KV kernel (:func:`attn_edu.kernels.split_kv_decode`), PyTorch's SDPA and
the chapter's PyTorch twin timed over the cache length; ``scripts/gpu-bench.sh`` records
the sweep under :data:`DECODE_DIR`, apart from the prefill sweeps chapters 08 and 10 plot.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .. import profiling
from ..kernels._interpret import requested as interpret_requested
from .env import environment, gpu_half_dtype
from .registry import ImplUnavailable
from .sweep import DATA_DIR, SCHEMA, failure_reason, recorded_results

__all__ = ["DECODE_DIR", "DECODE_IMPLS", "decode_sweep", "recorded_decode_results"]

#: Recorded decode sweeps (chapter 13), apart from the prefill sweeps the other chapters plot.
DECODE_DIR = DATA_DIR / "decode"
#: The implementations a decode sweep times.
DECODE_IMPLS = ("triton_split_kv", "triton_one_split", "torch_sdpa", "torch_split_kv")


def _decode_fn(impl: str, device: str, dry_run: bool = False):
    """``fn(q, k, v) -> out`` for one decode implementation, or ImplUnavailable. The Triton
    kernel runs on the CPU only in a dry run (``dry_run=True`` and ``TRITON_INTERPRET=1``)."""
    import torch

    if impl == "torch_sdpa":  # PyTorch's dispatcher, default backend, grouped heads
        return lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    if impl == "torch_split_kv":  # the chapter's PyTorch twin: a loop of library calls
        from ..decoding import split_kv_attention

        return lambda q, k, v: split_kv_attention(q, k, v, 8, enable_gqa=True)
    if device != "cuda" and not (dry_run and interpret_requested()):
        raise ImplUnavailable("the Triton kernel would run in the CPU interpreter, whose time measures "
                              "NumPy, not the kernel; run on a CUDA GPU")
    from ..kernels.decode_triton import split_kv_decode

    splits = 1 if impl == "triton_one_split" else None
    return lambda q, k, v: split_kv_decode(q, k, v, num_splits=splits, enable_gqa=True)


def decode_sweep(contexts: Sequence[int] = (1024, 4096, 16384, 65536), batches: Sequence[int] = (1, 8),
                 heads: int = 32, kv_heads: int = 8, d: int = 128, dtype: Optional[str] = None,
                 device: str = "cuda", impls: Sequence[str] = DECODE_IMPLS, repeat: int = 20,
                 warmup: int = 3, memory: bool = False, graph: bool = True,
                 dry_run: bool = False) -> Dict[str, Any]:
    """One decoding step (``L_q = 1``) over a KV cache of every length in ``contexts``.

    Times each of ``impls`` -- ``triton_split_kv`` (:func:`attn_edu.kernels.decode_triton.split_kv_decode`,
    splits chosen for the GPU), ``triton_one_split`` (the same kernel, ``num_splits=1``: one
    program per (batch, K/V head)), ``torch_sdpa`` (``F.scaled_dot_product_attention`` with
    ``enable_gqa=True``) and ``torch_split_kv`` (:func:`attn_edu.decoding.split_kv_attention`
    on tensors) -- for query heads ``heads`` sharing ``kv_heads`` K/V heads, in ``dtype``
    (default: the GPU's half type, :func:`~attn_edu.bench.gpu_half_dtype`). Each row has the
    median and minimum time (CUDA events, L2 flushed before each call: a cache under 50 MB
    would otherwise stay in an H100's L2), the host's time in the call (``host_median_ms``:
    when it exceeds the GPU time, the step is launch-bound), on a GPU the time of the same
    call replayed from a CUDA graph (``graph_median_ms``, :func:`attn_edu.profiling.time_cuda_graph_ms`;
    None when the call cannot be captured, ``graph_note`` saying why; ``graph=False`` leaves
    it out), the time per step of ``LOOP_STEPS`` calls back to back as a decoding loop makes
    them, eager (``loop_ms``: no flush, no synchronisation between the steps, so a host
    slower than the GPU shows; on the CPU, and two steps in a dry run) and replayed from the
    graph (``graph_loop_ms``, on a GPU), the KV-cache bytes one step reads
    (``2 * batch * kv_heads * context * d * itemsize``), the bandwidth that implies
    (GB/s) and the largest difference from the float64 reference; with ``memory=True`` the
    peak memory of one more call above its inputs (``peak_bytes``,
    :func:`attn_edu.profiling.peak_memory`). ``dry_run=True`` marks the document as a dry
    run on the CPU and lets the Triton kernel run there in Triton's interpreter
    (``TRITON_INTERPRET=1``; the pipeline, not the numbers). Returns a JSON document
    like :func:`run_sweep`'s (schema, device, versions, commit, date); the GPU script saves
    it under :data:`DECODE_DIR`. Implementations that cannot run here are listed under
    ``"skipped"``. Explained in chapter 13.
    """
    import torch

    from .. import reference_torch

    dtype = dtype or gpu_half_dtype(device)
    dt = getattr(torch, dtype)
    config = {"heads": heads, "kv_heads": kv_heads, "d": d, "dtype": dtype, "device": device, "lq": 1}
    doc = {"schema": SCHEMA, "kind": "decode", "sweep": "decode", "dry_run": bool(dry_run),
           **environment(device), "config": config,
           "repeat": repeat, "warmup": warmup, "results": [], "skipped": {}}
    fns = {}
    for impl in impls:
        try:
            fns[impl] = _decode_fn(impl, device, dry_run)
        except ImplUnavailable as err:
            doc["skipped"][impl] = str(err)
    gen = torch.Generator().manual_seed(0)
    for batch in batches:
        for context in contexts:
            q = k = v = gold = None
            try:
                q = torch.randn(batch, heads, 1, d, generator=gen).to(device, dt)  # (B, H_q, 1, d)
                k = torch.randn(batch, kv_heads, context, d, generator=gen).to(device, dt)  # (B, H_kv, L, d)
                v = torch.randn(batch, kv_heads, context, d, generator=gen).to(device, dt)
                gold = reference_torch.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                                    enable_gqa=True)
            except Exception as exc:  # the cache or its float64 reference does not fit: each row says so
                del q, k, v, gold
                doc["results"] += [_failed({"impl": impl, "batch": batch, "context": context}, exc, device)
                                   for impl in fns]
                continue
            kv_bytes = 2 * k.numel() * k.element_size()
            for impl, fn in fns.items():
                row = {"impl": impl, "batch": batch, "context": context, "kv_bytes": kv_bytes}
                try:
                    with torch.no_grad():
                        err = float((fn(q, k, v).double() - gold).abs().max())
                        t = profiling.time_ms(fn, q, k, v, repeat=repeat, warmup=warmup, device=device)
                    steps = 2 if dry_run else LOOP_STEPS  # a decode loop's steps, back to back
                    graph_ms, graph_loop_ms, graph_note = (_graph_ms(fn, (q, k, v), device, steps) if graph
                                                           else (None, None, None))
                    row.update(median_ms=t.median_ms, min_ms=t.min_ms, max_abs_err=err,
                               gb_per_s=kv_bytes / (t.median_ms * 1e-3) / 1e9, timer=t.method,
                               host_median_ms=t.host_ms, graph_median_ms=graph_ms)
                    if graph:  # and as a decode loop makes the step: eager, and replayed (above)
                        with torch.no_grad():
                            row["loop_ms"] = _loop_ms(fn, (q, k, v), device, steps)
                        row["graph_loop_ms"] = graph_loop_ms
                    if graph_note:
                        row["graph_note"] = graph_note
                    if memory:
                        with torch.no_grad():
                            method = profiling.memory_method(q, k, v)
                            peak = profiling.peak_memory(fn, q, k, v, device=method)[1]
                        row.update(peak_bytes=int(peak), memory_method=method)
                except Exception as exc:  # e.g. out of memory: keep the sweep going
                    _failed(row, exc, device)
                doc["results"].append(row)
            del q, k, v, gold
    return doc


def _failed(row: Dict[str, Any], exc: BaseException, device: str) -> Dict[str, Any]:
    """The row with the failure's ``error`` and ``reason``; a GPU's memory given back."""
    row.update(error=f"{type(exc).__name__}: {str(exc)[:300]}", reason=failure_reason(exc))
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
    return row


#: How many calls back to back a timed decode loop makes (``loop_ms`` and ``graph_loop_ms``),
#: as a decoding loop makes them.
LOOP_STEPS = 20


def _loop_ms(fn, args, device: str, steps: int) -> float:
    """Median time per step of ``steps`` calls of ``fn(*args)`` back to back (5 loops, CUDA
    events around each, read after one synchronisation; no L2 flush, no synchronisation
    between the steps): the host's time shows where it is the longer (the GPU waits for each
    launch), and is hidden where the GPU's is (the launches run ahead), as in a decoding loop."""
    def loop() -> None:
        for _ in range(steps):
            fn(*args)
    return profiling.time_interleaved_ms({"loop": loop}, repeat=5, warmup=1, device=device,
                                         l2_flush=False)["loop"].median_ms / steps


def _graph_ms(fn, args, device: str, loop_steps: int) -> Tuple[Optional[float], Optional[float], Optional[str]]:
    """``fn(*args)`` captured once into a CUDA graph and its replays timed two ways:
    ``(median GPU time of one replay after an L2 flush, per replay of loop_steps back to back
    without flushes (a decode loop), None)``; ``(None, None, why)`` on the CPU or when the call
    cannot be captured (a host synchronisation inside it)."""
    if device != "cuda":
        return None, None, "CUDA graphs need a CUDA GPU"
    import torch

    try:
        with torch.no_grad():
            graph = profiling.capture_cuda_graph(fn, *args)
            one = profiling.time_cuda_graph_ms(fn, *args, graph=graph).median_ms
            loop = profiling.time_cuda_graph_ms(fn, *args, graph=graph, steps=loop_steps, l2_flush=False)
        return one, loop.median_ms, None
    except Exception as err:  # not capturable: the eager time stands alone
        try:
            torch.cuda.synchronize()
        except Exception:  # a failed capture can leave the stream in an error state
            pass
        return None, None, f"not captured: {type(err).__name__}: {str(err)[:200]}"


def recorded_decode_results(kind: Optional[str] = None,
                            data_dir: Union[str, Path, None] = None) -> List[Dict[str, Any]]:
    """The decode sweeps recorded under :data:`DECODE_DIR` (``kind="cuda"`` or ``"cpu"``
    filters), any number from any GPU; an empty list when none is recorded.

    ``data_dir`` (or the environment variable ``ATTN_EDU_BENCH_DATA``, as for
    :func:`~attn_edu.bench.recorded_results`) reads the ``decode/`` folder of another one, as
    a GPU run's ``--out`` folder or a submission holds it (``<folder>/decode/decode_<GPU>.json``).
    A file there that is not a decode document is skipped with a warning naming it."""
    root = Path(data_dir or os.environ.get("ATTN_EDU_BENCH_DATA") or DATA_DIR)
    return recorded_results(kind, what="decode", data_dir=root / DECODE_DIR.name)
