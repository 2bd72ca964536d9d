"""Decoding benchmarks (chapter 13): one step with ``L_q = 1`` over a KV cache.

The Triton split-KV kernel (:func:`attn_edu.kernels.split_kv_decode`), PyTorch's SDPA and
the chapter's PyTorch twin timed over the cache length; ``scripts/gpu-bench.sh`` records
the sweep under :data:`DECODE_DIR`, apart from the prefill sweeps chapters 08 and 10 plot.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .. import profiling
from .env import environment, gpu_half_dtype
from .registry import ImplUnavailable
from .sweep import DATA_DIR, SCHEMA, load_results

__all__ = ["DECODE_DIR", "DECODE_IMPLS", "decode_sweep", "recorded_decode_results"]

#: Recorded decode sweeps (chapter 13), apart from the prefill sweeps the other chapters plot.
DECODE_DIR = DATA_DIR / "decode"
#: The implementations a decode sweep times.
DECODE_IMPLS = ("triton_split_kv", "triton_one_split", "torch_sdpa", "torch_split_kv")


def _decode_fn(impl: str, device: str):
    """``fn(q, k, v) -> out`` for one decode implementation, or ImplUnavailable."""
    import torch

    if impl == "torch_sdpa":  # PyTorch's dispatcher, default backend, grouped heads
        return lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    if impl == "torch_split_kv":  # the chapter's PyTorch twin: a loop of library calls
        from ..decoding import split_kv_attention

        return lambda q, k, v: split_kv_attention(q, k, v, 8, enable_gqa=True)
    if device != "cuda":
        raise ImplUnavailable("the Triton kernel would run in the CPU interpreter, whose time measures "
                              "NumPy, not the kernel; run on a CUDA GPU")
    from ..kernels.decode_triton import split_kv_decode

    splits = 1 if impl == "triton_one_split" else None
    return lambda q, k, v: split_kv_decode(q, k, v, num_splits=splits, enable_gqa=True)


def decode_sweep(contexts: Sequence[int] = (1024, 4096, 16384, 65536), batches: Sequence[int] = (1, 8),
                 heads: int = 32, kv_heads: int = 8, d: int = 128, dtype: Optional[str] = None,
                 device: str = "cuda", impls: Sequence[str] = DECODE_IMPLS, repeat: int = 20,
                 warmup: int = 3) -> Dict[str, Any]:
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
    None when the call cannot be captured), the KV-cache bytes one step reads
    (``2 * batch * kv_heads * context * d * itemsize``), the bandwidth that implies
    (GB/s) and the largest difference from the float64 reference. Returns a JSON document
    like :func:`run_sweep`'s (schema, device, versions, commit, date); the GPU script saves
    it under :data:`DECODE_DIR`. Implementations that cannot run here are listed under
    ``"skipped"``. Explained in chapter 13.
    """
    import torch

    from .. import reference_torch

    dtype = dtype or gpu_half_dtype(device)
    dt = getattr(torch, dtype)
    config = {"heads": heads, "kv_heads": kv_heads, "d": d, "dtype": dtype, "device": device, "lq": 1}
    doc = {"schema": SCHEMA, "kind": "decode", "sweep": "decode", **environment(device), "config": config,
           "repeat": repeat, "warmup": warmup, "results": [], "skipped": {}}
    fns = {}
    for impl in impls:
        try:
            fns[impl] = _decode_fn(impl, device)
        except ImplUnavailable as err:
            doc["skipped"][impl] = str(err)
    gen = torch.Generator().manual_seed(0)
    for batch in batches:
        for context in contexts:
            q = torch.randn(batch, heads, 1, d, generator=gen).to(device, dt)  # (B, H_q, 1, d)
            k = torch.randn(batch, kv_heads, context, d, generator=gen).to(device, dt)  # (B, H_kv, L, d)
            v = torch.randn(batch, kv_heads, context, d, generator=gen).to(device, dt)
            gold = reference_torch.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
            kv_bytes = 2 * k.numel() * k.element_size()
            for impl, fn in fns.items():
                row = {"impl": impl, "batch": batch, "context": context, "kv_bytes": kv_bytes}
                try:
                    with torch.no_grad():
                        err = float((fn(q, k, v).double() - gold).abs().max())
                        t = profiling.time_ms(fn, q, k, v, repeat=repeat, warmup=warmup, device=device)
                    row.update(median_ms=t.median_ms, min_ms=t.min_ms, max_abs_err=err,
                               gb_per_s=kv_bytes / (t.median_ms * 1e-3) / 1e9, timer=t.method,
                               host_median_ms=t.host_ms, graph_median_ms=_graph_ms(fn, (q, k, v), device))
                except Exception as exc:  # e.g. out of memory: keep the sweep going
                    row["error"] = f"{type(exc).__name__}: {exc}"
                doc["results"].append(row)
            del q, k, v, gold
    return doc


def _graph_ms(fn, args, device: str) -> Optional[float]:
    """Median GPU time of ``fn(*args)`` replayed from a CUDA graph; None on the CPU or when
    the call cannot be captured (a host synchronisation inside it)."""
    if device != "cuda":
        return None
    import torch

    try:
        with torch.no_grad():
            return profiling.time_cuda_graph_ms(fn, *args).median_ms
    except Exception:  # not capturable: the eager time stands alone
        torch.cuda.synchronize()
        return None


def recorded_decode_results(kind: Optional[str] = None) -> List[Dict[str, Any]]:
    """The decode sweeps committed under :data:`DECODE_DIR` (``kind="cuda"`` or ``"cpu"``
    filters); an empty list when none is recorded."""
    if not DECODE_DIR.is_dir() or not any(DECODE_DIR.glob("*.json")):
        return []
    return [d for d in load_results(DECODE_DIR) if kind is None or d["device"]["kind"] == kind]
