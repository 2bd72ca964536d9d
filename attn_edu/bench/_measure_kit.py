"""What every measurement of :mod:`attn_edu.bench.measure` shares: its settings (:class:`Run`),
its document, how a failed point is recorded, one side-by-side timing round, the SDPA backends
that run here, and the backward's timed call. Kept apart so that each measurement's module
(``measure``, the host and kernel profile of ``_profile_measure``) uses the same rules."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .. import profiling
from .diagnose import format_host_breakdown
from .env import SDPA_BACKENDS, cpu_threads, environment, sdpa_refusal
from .registry import BenchConfig
from .sweep import SCHEMA, failure_reason, save_results

#: SDPA's backends the backward and the forward measurements compare with.
BACKWARD_SDPA = ("flash", "cudnn")
FORWARD_SDPA = ("cudnn", "flash")
CAUSAL_SDPA = ("flash", "cudnn", "efficient")


@dataclass
class Run:
    """One measurement's settings, after the defaults of :data:`MEASURE_SIZES`."""

    name: str
    description: str
    dry_run: bool
    device: str
    dtype: str
    ns: Tuple[int, ...]
    ds: Tuple[int, ...]
    batch: int
    heads: int
    repeat: int
    warmup: int
    causal: bool
    sizes: Dict[str, Any]
    out: Optional[str]
    command: Optional[str]
    progress: Any
    stream: Any


def document(run: Run, config: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    env = environment(run.device)
    if env["device"]["kind"] == "cpu":
        env["device"]["threads"] = cpu_threads()
    return {"schema": SCHEMA, "kind": run.name, "measure": run.description, "dry_run": run.dry_run, **env,
            "command": run.command, "config": config, "repeat": run.repeat, "warmup": run.warmup, **extra,
            "results": [], "skipped": {}}


def save(doc: Dict[str, Any], run: Run) -> None:
    if run.out:
        save_results(doc, run.out)


def failed(row: Dict[str, Any], err: BaseException) -> Dict[str, Any]:
    """Record why a point failed in its row (and give a GPU's memory back after an OOM)."""
    row.update(error=f"{type(err).__name__}: {str(err)[:300]}", reason=failure_reason(err))
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


def time_round(run: Run, calls: Dict[str, Callable], rows: Dict[str, Dict[str, Any]], flops: float) -> None:
    """Time ``calls`` side by side (interleaved) into their ``rows``; a round that fails (out
    of memory while timing) marks every row of the round failed."""
    if not calls:
        return
    try:
        timings = profiling.time_interleaved_ms(calls, repeat=run.repeat, warmup=0, device=run.device)
    except Exception as err:
        for name in calls:
            failed(rows[name], err)
        return
    for name, t in timings.items():
        rows[name].update(median_ms=t.median_ms, min_ms=t.min_ms, times_ms=list(t.times_ms),
                          tflops=profiling.tflops(flops, t.median_ms), timer=t.method, host_median_ms=t.host_ms)


def fail_unfinished(rows: Dict[str, Dict[str, Any]], err: BaseException) -> None:
    """Every row neither failed nor timed yet gets ``err`` (the inputs themselves failed)."""
    for row in rows.values():
        if "error" not in row and "median_ms" not in row:
            failed(row, err)


@contextmanager
def timed_point(run: Run, doc: Dict[str, Any], rows: Dict[str, Dict[str, Any]],
                 calls: Dict[str, Callable], flops: float):
    """``with timed_point(...):`` one point of a side-by-side measurement: the block makes the
    inputs and fills ``calls`` and ``rows``, then the calls are timed in one round
    (:func:`time_round`). An exception of the block or the round (the inputs themselves: out of
    memory) fails every unfinished row and the run goes on; whatever happened, the calls (and
    the tensors they hold) are let go and the rows join ``doc["results"]``."""
    try:
        yield
        time_round(run, calls, rows, flops)
    except Exception as err:  # the inputs themselves (out of memory)
        fail_unfinished(rows, err)
    finally:
        calls.clear()
        doc["results"].extend(rows.values())


def skip(doc: Dict[str, Any], what: str, why: str, d: Optional[int] = None) -> None:
    """``skipped[what]``; a reason that holds at one head dim only says which."""
    why = why if d is None else f"d={d}: {why}"
    old = doc["skipped"].get(what)
    doc["skipped"][what] = why if old is None or why in old else f"{old}; {why}"


def print_row(r: Dict[str, Any], stream) -> None:
    where = "  ".join(f"{k}={r[k]}" for k in ("part", "d", "n", "batch", "context") if r.get(k) is not None)
    where += "  causal" if r.get("causal") is True and "variant" in r else ""
    if "error" in r:
        print(f"  {r['impl']:24s} {where}  {r.get('reason', 'error').upper()} {r['error'][:120]}", file=stream)
        return
    got = [f"{r['median_ms']:10.3f} ms"] if r.get("median_ms") is not None else []
    if r.get("tflops") is not None:
        got.append(f"{r['tflops']:9.3g} TFLOP/s")
    if r.get("host_median_ms") is not None and r.get("part") is None:
        got.append(f"host {r['host_median_ms']:.3f} ms")
    if r.get("graph_median_ms") is not None:
        got.append(f"graph {r['graph_median_ms']:.4f} ms")
    elif r.get("graph_note"):
        got.append(f"graph: {r['graph_note'][:60]}")
    if r.get("peak_bytes") is not None:
        got.append(f"peak {r['peak_bytes'] / 2**20:.3f} MiB")
    print(f"  {r['impl']:24s} {where}  " + "  ".join(got), file=stream)
    if r.get("host"):   # the profile: whose code spent the host's time, then each kernel ncu read
        print(f"      {format_host_breakdown(r['host'])}", file=stream)
        for f in r["host"]["top"][:3]:
            print(f"        {f['self_us']:8.1f} us  {f['owner']:8s} {f['function'][:90]}", file=stream)
    for k in r.get("kernels", []):
        stalls = ", ".join(f"{name} {v:.1f}" for name, v in list(k.get("stalls", {}).items())[:3])
        print(f"      kernel {k['name'][:48]:48s} {k.get('duration_ms') or 0:9.4f} ms  "
              f"SM {k.get('sm_throughput_pct') or 0:5.1f}%  memory {k.get('memory_throughput_pct') or 0:5.1f}%  "
              f"occupancy {k.get('achieved_occupancy_pct') or 0:5.1f}%  regs {k.get('registers_per_thread') or 0:.0f}"
              f"  stalls: {stalls or '-'}", file=stream)


def sdpa_names(run: Run, doc: Dict[str, Any], backends: Sequence[str], d: int,
                backward: bool = False) -> List[str]:
    """The registry names of the SDPA backends that run here at head dim ``d``; the others
    go to ``skipped`` with PyTorch's reason."""
    names = []
    for b in backends:
        why = sdpa_refusal(b, run.device, run.dtype, d, backward=backward)
        if why is None:
            names.append(f"torch_sdpa_{b}")
        else:
            skip(doc, f"torch_sdpa_{b}", why, d if len(run.ds) > 1 else None)
    return names


def config(run: Run, **kw: Any) -> BenchConfig:
    return BenchConfig(batch=run.batch, heads=run.heads, d=run.ds[0], dtype=run.dtype, device=run.device, **kw)


def backward_forwards(run: Run, doc: Dict[str, Any], d: int) -> Dict[str, Tuple[Callable, Dict[str, Any]]]:
    """``{name: (forward(q, k, v), row fields)}`` of the implementations whose backward is
    timed at head dim ``d``; the others go to ``skipped``."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fns: Dict[str, Tuple[Callable, Dict[str, Any]]] = {}
    causal = run.causal
    try:
        from ..kernels import flash_triton
    except ImportError as err:
        skip(doc, "triton", f"needs triton ({err})")
    else:
        for mode in flash_triton.BACKWARDS:
            def forward(q, k, v, mode=mode):
                return flash_triton.triton_attention(q, k, v, causal=causal, backward=mode)
            fns[f"triton_{mode}"] = (forward, {"schedule": mode, "backend": None})
    for name in sdpa_names(run, doc, BACKWARD_SDPA, d, backward=True):
        kind = getattr(SDPBackend, SDPA_BACKENDS[name[len("torch_sdpa_"):]])

        def forward(q, k, v, kind=kind):
            with sdpa_kernel(kind):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        fns[name] = (forward, {"schedule": None, "backend": kind.name})
    return fns


def backward_call(out, dout, leaves) -> Callable[[], None]:
    """One timed backward: the inputs' gradients reset (no accumulation kernel), the graph kept."""
    def call() -> None:
        for x in leaves:
            x.grad = None
        out.backward(dout, retain_graph=True)
    return call
