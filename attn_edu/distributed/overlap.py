r"""Does a ring step's transfer hide behind its computation? Measured on one GPU.

A ring step computes attention of this rank's queries against the K/V block it holds
while that block goes on to the next rank. Whether the transfer is hidden is a question
about one device: can its compute units run the attention while a copy engine moves the
block? That needs no second GPU. Here the "link" is a copy of the K/V block (``2 B H_kv n d
s`` bytes) from the GPU to pinned host memory, on its own CUDA stream, by a copy engine
(the same engines and about the bandwidth, 25-55 GB/s over PCIe, that a network card
reached through PCIe gives), and the compute is ``torch.nn.functional.scaled_dot_product_attention``
of one (n x n) block on the compute stream. Four timings, each with CUDA events on the
stream that finishes last (median of ``repeats``):

* ``compute_ms``: the block alone; ``transfer_ms``: the copy alone;
* ``serial_ms``: the copy, then the block (what ``overlap=False`` does);
* ``overlap_ms``: both posted at once on their two streams, the compute stream waiting for
  the copy at the end (what ``overlap=True`` does).

``hidden = (compute_ms + transfer_ms - overlap_ms) / min(compute_ms, transfer_ms)``: 1 when
the shorter one is wholly hidden, 0 when nothing overlaps. It is a difference of timings
divided by the shorter one, so jitter moves it most when one side is short:
``hidden_spread`` (:func:`hidden_fraction`) says how far the spread of the three timings
could move it, and a chapter prints ``hidden`` with it.

On the CPU (``--dry-run``, and gloo) there are no streams or copy engines: a gloo transfer
is loopback TCP run by gloo's threads on the same cores as the computation, so whether it
"overlaps" says how many cores were spare, not what a GPU does. The dry run times the same
two operations one after the other at tiny sizes, checks the pipeline and writes
``overlap_ms`` and ``hidden`` as None, saying why. Chapter 14.

::

    python -m attn_edu.distributed.overlap --out ring_overlap.json          # on a GPU
    python -m attn_edu.distributed.overlap --out ring_overlap.json --dry-run  # anywhere
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import torch

__all__ = ["measure_overlap", "hidden_fraction"]

#: The reason the CPU cannot show a GPU's overlap (written into dry-run documents).
CPU_NOTE = ("CPU: no CUDA streams or copy engines; gloo's transfers are loopback TCP on the same "
            "cores as the computation, so overlap there shows spare cores, not a GPU's overlap")


def hidden_fraction(compute_ms: Sequence[float], transfer_ms: Sequence[float],
                    overlap_ms: Sequence[float]) -> tuple:
    """``(hidden, spread)`` from the repeated timings (milliseconds) of the three runs.

    ``hidden`` is the module's formula on the medians. ``spread`` is the sum of the three
    runs' interquartile ranges over the shorter median, ``min(compute, transfer)``: how far
    the timings' own jitter could move ``hidden``. Where it is as large as ``hidden`` the
    measurement does not tell overlap from noise.
    """
    runs = {"compute_ms": compute_ms, "transfer_ms": transfer_ms, "overlap_ms": overlap_ms}
    for name, times in runs.items():
        if isinstance(times, (str, bytes)) or not hasattr(times, "__len__") or len(times) == 0:
            raise TypeError(f"{name} must be a non-empty sequence of milliseconds; got {times!r}")
        if not all(isinstance(t, (int, float)) and t > 0 and t == t for t in times):
            raise ValueError(f"{name} must hold positive times in milliseconds; got {list(times)!r}")
    c, t, o = (statistics.median(times) for times in runs.values())

    def iqr(times):
        if len(times) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
        return q3 - q1

    shorter = min(c, t)
    return (c + t - o) / shorter, sum(iqr(times) for times in runs.values()) / shorter


def _time_cuda(fn, stream: torch.cuda.Stream, repeats: int) -> List[float]:
    """Milliseconds of each of ``repeats`` calls of ``fn()``, bracketed by events on
    ``stream`` (which must be the stream that finishes last)."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn(start)
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def measure_overlap(ns: Sequence[int] = (2048, 4096, 8192, 16384), heads: int = 32, kv_heads: int = 8,
                    head_dim: int = 128, batch: int = 1, repeats: int = 10, dry_run: bool = False,
                    verbose: bool = True) -> Dict[str, Any]:
    """One row per block length ``n`` (the L/P positions of a ring step): see the module text.

    On a GPU the inputs are in its half type (:func:`attn_edu.bench.gpu_half_dtype`);
    ``dry_run`` runs on the CPU in float32, each n capped at 64 (a pipeline check: ``overlap_ms`` None).
    Returns a benchmark document (schema ``attn_edu.bench/1``, kind ``"ring_overlap"``).
    """
    from ..bench.env import environment, gpu_half_dtype
    from ..bench.sweep import SCHEMA

    import torch.nn.functional as F

    cuda = torch.cuda.is_available() and not dry_run
    if not cuda and not dry_run:
        raise RuntimeError("measure_overlap needs a CUDA GPU; pass dry_run=True (--dry-run) to check "
                           "the pipeline on the CPU")
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = getattr(torch, gpu_half_dtype(dev)) if cuda else torch.float32
    if dry_run:
        ns = sorted({min(int(n), 64) for n in ns})
        repeats = min(repeats, 2)
    rows: List[Dict[str, Any]] = []
    g = torch.Generator(device=dev).manual_seed(0)
    for n in ns:
        q = torch.randn(batch, heads, n, head_dim, device=dev, dtype=dtype, generator=g)
        k, v = (torch.randn(batch, kv_heads, n, head_dim, device=dev, dtype=dtype, generator=g)
                for _ in range(2))
        kv = torch.cat([k.reshape(-1), v.reshape(-1)])  # the block a ring step sends, packed
        host = torch.empty(kv.shape, dtype=dtype, pin_memory=cuda)  # the "link": a copy engine
        nbytes = kv.numel() * kv.element_size()

        group = heads // kv_heads  # expanded for the compute only, as the ring does on each rank
        ke, ve = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)

        def compute():
            return F.scaled_dot_product_attention(q, ke, ve)

        row: Dict[str, Any] = {"n": n, "bytes": nbytes}
        if cuda:
            main, side = torch.cuda.current_stream(), torch.cuda.Stream()

            def copy_on_side(after):
                side.wait_event(after)  # starts when the timed region starts
                with torch.cuda.stream(side):
                    host.copy_(kv, non_blocking=True)
                done = torch.cuda.Event()
                done.record(side)
                return done

            for _ in range(2):  # warm-up: kernels chosen, memory allocated
                compute()
                copy_on_side(torch.cuda.Event()).synchronize()
            torch.cuda.synchronize()
            times = {"compute_ms": _time_cuda(lambda s: compute(), main, repeats),
                     "transfer_ms": _time_cuda(lambda s: main.wait_event(copy_on_side(s)), main, repeats)}

            def serial(s):
                main.wait_event(copy_on_side(s))  # the copy first, then the compute
                compute()

            def overlapped(s):
                done = copy_on_side(s)  # the copy on its stream ...
                compute()  # ... while the compute stream runs the block
                main.wait_event(done)  # the next step needs the block: wait at the end

            times["serial_ms"] = _time_cuda(serial, main, repeats)
            times["overlap_ms"] = _time_cuda(overlapped, main, repeats)
            row.update({name: statistics.median(ts) for name, ts in times.items()})
            row["hidden"], row["hidden_spread"] = hidden_fraction(
                times["compute_ms"], times["transfer_ms"], times["overlap_ms"])
            row["transfer_GBps"] = nbytes / (row["transfer_ms"] * 1e-3) / 1e9
        else:
            def wall(fn):
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    fn()
                    times.append((time.perf_counter() - start) * 1e3)
                return statistics.median(times)

            row["compute_ms"] = wall(compute)
            row["transfer_ms"] = wall(lambda: host.copy_(kv))
            row["serial_ms"] = wall(lambda: (host.copy_(kv), compute()))
            row.update(overlap_ms=None, hidden=None, hidden_spread=None, transfer_GBps=None)
        rows.append(row)
        if verbose:
            fmt = lambda x: "   n/a" if x is None else f"{x:6.3f}"  # noqa: E731
            print(f"n={n:6d} {nbytes / 1e6:8.2f} MB  compute {fmt(row['compute_ms'])} ms  transfer "
                  f"{fmt(row['transfer_ms'])} ms  serial {fmt(row['serial_ms'])} ms  overlapped "
                  f"{fmt(row['overlap_ms'])} ms  hidden {fmt(row['hidden'])} +- {fmt(row['hidden_spread'])}",
                  flush=True)
    config = {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "batch": batch,
              "dtype": str(dtype).replace("torch.", ""), "repeats": repeats,
              "compute": "F.scaled_dot_product_attention, one (n x n) block, compute stream",
              "transfer": "the packed K/V block, GPU -> pinned host memory, its own stream (a copy engine)"}
    doc = {"schema": SCHEMA, "kind": "ring_overlap", "dry_run": bool(dry_run),
           **environment("cuda" if cuda else "cpu"), "config": config, "rows": rows}
    if not cuda:
        doc["note"] = CPU_NOTE
    return doc


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attn_edu.distributed.overlap",
                                description="Time a ring step's transfer against its computation on one GPU.")
    p.add_argument("--out", required=True, help="the JSON document to write")
    p.add_argument("--dry-run", action="store_true", help="on the CPU, tiny sizes: checks the pipeline")
    p.add_argument("--n", type=int, nargs="+", default=[2048, 4096, 8192, 16384], help="block lengths L/P")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=10)
    a = p.parse_args(argv)
    from ..bench.sweep import save_results

    doc = measure_overlap(a.n, a.heads, a.kv_heads, a.head_dim, repeats=a.repeats, dry_run=a.dry_run)
    doc["command"] = "python -m attn_edu.distributed.overlap " + " ".join(argv if argv is not None else sys.argv[1:])
    save_results(doc, a.out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
