"""``--measure profile``: the calls behind the GPU goals, each timed, its host time taken apart
(:func:`attn_edu.bench.diagnose.host_breakdown`) and, where Nsight Compute runs, its kernels read
(:func:`attn_edu.bench.diagnose.ncu_kernels`).

The calls (``part``): the Triton forward beside SDPA's cuDNN and flash backends at each head
dim (``forward``) and causal at the first (``causal``); both Triton backward schedules beside
SDPA's at the last head dim (``backward``); one decoding step, the split-KV kernel beside SDPA
(``decode``); the block-sparse kernel over a causal sliding window beside the dense causal
forward (``block_sparse``). Each row has the GPU's time (CUDA events, L2 flushed), the host's
time per call without synchronising and whose code spent it (``host``), ``launch_bound`` when
the host's time is the longer, and ``kernels``: what ncu read in each kernel the call launched.

ncu runs this same measurement again in a child process (``ATTN_EDU_PROFILE_CHILD`` names the
file where it lists its calls), which runs each call once after a marker kernel, between
``cudaProfilerStart`` and ``cudaProfilerStop``; the parent gives the report's kernels back to
its rows. On the CPU (a dry run) ncu is not run unless ``ATTN_EDU_NCU`` names one (a stand-in).
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

from .. import profiling
from ..masks import plan_tiles, sliding_window_mask
from . import diagnose
from ._measure_kit import (FORWARD_SDPA, Run, backward_call, backward_forwards, config, document, failed, save,
                           sdpa_names, skip)
from .registry import build_impl, make_inputs

__all__ = ["CHILD_ENV", "measure_profile"]

#: Set in ncu's child, naming the file where it writes the calls it ran, in order, as JSON.
CHILD_ENV = "ATTN_EDU_PROFILE_CHILD"

Group = Tuple[str, Dict[str, Any], Dict[str, Callable[[], Any]]]


def _groups(run: Run, doc: Dict[str, Any]) -> Iterator[Group]:
    """``(part, the rows' fields, {impl: call})`` per group of calls; a group's inputs are made
    when it is reached and let go with its calls."""
    ds = sorted(set(run.ds))
    for n in run.ns:
        for d in ds:
            yield _forward(run, doc, n, d, False)
        yield _forward(run, doc, n, ds[0], True)
        yield _backward(run, doc, n, ds[-1])
        yield _decode(run, n * run.sizes["decode_scale"])
        yield _block_sparse(run, n)


def _forward(run: Run, doc: Dict[str, Any], n: int, d: int, causal: bool) -> Group:
    from ..kernels import flash_triton as ft

    cfg = replace(config(run, causal=causal), d=d)
    q, k, v = make_inputs("torch", n, cfg)
    calls = {"triton": lambda: ft.triton_attention_forward(q, k, v, causal=causal)}
    for name in sdpa_names(run, doc, FORWARD_SDPA, d):
        calls[name] = lambda fn=build_impl(name, cfg)[1]: fn(q, k, v)
    part = f"{'causal' if causal else 'forward'}_d{d}"
    return part, {"n": n, "d": d, "causal": causal, "batch": cfg.batch}, calls


def _backward(run: Run, doc: Dict[str, Any], n: int, d: int) -> Group:
    """Each backward's call is made by calling what the group holds (its forward runs then)."""
    cfg = replace(config(run), d=d)
    q, k, v = (x.requires_grad_() for x in make_inputs("torch", n, cfg))
    dout = make_inputs("torch", n, cfg, seed=1)[0]
    makers = {name: (lambda fwd=fwd: backward_call(fwd(q, k, v), dout, (q, k, v)))
              for name, (fwd, _) in backward_forwards(run, doc, d).items()}
    return f"backward_d{d}", {"n": n, "d": d, "causal": False, "batch": cfg.batch}, makers


def _decode(run: Run, ctx: int) -> Group:
    import torch
    import torch.nn.functional as F

    from ..kernels.decode_triton import split_kv_decode

    s, dt = run.sizes, getattr(torch, run.dtype)
    h, hkv, d = s["decode_heads"], s["kv_heads"], s["decode_d"]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, h, 1, d, generator=g).to(run.device, dt)
    k, v = (torch.randn(1, hkv, ctx, d, generator=g).to(run.device, dt) for _ in range(2))
    return "decode", {"context": ctx, "d": d, "batch": 1, "heads": h, "kv_heads": hkv}, {
        "triton_split_kv": lambda: split_kv_decode(q, k, v, enable_gqa=True),
        "torch_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)}


def _block_sparse(run: Run, n: int) -> Group:
    import torch

    from ..kernels import flash_triton as ft
    from ..kernels.block_sparse_triton import block_sparse_attention

    s = run.sizes
    cfg = replace(config(run, causal=True), batch=s["sparse_batch"])
    q, k, v = make_inputs("torch", n, cfg)
    mask = torch.as_tensor(sliding_window_mask(n, s["window"], causal=True), device=run.device)
    plan = plan_tiles(mask, s["block_q"], s["block_k"])   # built once, as a model would
    fields = {"n": n, "d": cfg.d, "causal": True, "batch": cfg.batch, "window": s["window"],
              "tile_density": plan.density}
    return "block_sparse", fields, {"block_sparse": lambda: block_sparse_attention(q, k, v, plan),
                                    "triton": lambda: ft.triton_attention_forward(q, k, v, causal=True)}


def _length(row: Dict[str, Any]) -> int:
    """A row's length: its queries', or a decoding step's keys."""
    return row.get("n", row.get("context"))


def _prepared(make: Callable[[], Any], row: Dict[str, Any], backward: bool) -> Any:
    """The call of a row, warmed up once (the first call compiles and autotunes); None if it failed."""
    try:
        call = make() if backward else make
        call()
        return call
    except Exception as err:  # this implementation failed here; the others still run
        failed(row, err)
        return None


def _child(run: Run, doc: Dict[str, Any], listing: str) -> Dict[str, Any]:
    """ncu's child: each call once more after a marker kernel, between the profiler's start and
    stop; the calls that ran are listed in ``listing`` as they run (a crash keeps the earlier)."""
    import torch

    cuda = run.device == "cuda"
    ran: List[List[Any]] = []
    Path(listing).write_text("[]")
    for part, name, row, call in _ready_calls(run, doc):
        started = False
        try:
            call()
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
                started = True
                torch.cuda._sleep(1000)   # the marker: diagnose.MARKER
            t0 = time.perf_counter()
            call()
            if cuda:
                torch.cuda.synchronize()
            row["median_ms"] = row["min_ms"] = (time.perf_counter() - t0) * 1e3
            ran.append([part, name, _length(row)])
        except Exception as err:
            failed(row, err)
            if started:   # its marker is in the report: listed, so the markers still count the calls
                ran.append([part, name, _length(row)])
        finally:
            if started:
                torch.cuda.profiler.stop()
        Path(listing).write_text(json.dumps(ran))
    return doc


def _ready_calls(run: Run, doc: Dict[str, Any]) -> Iterator[Tuple[str, str, Dict[str, Any], Callable[[], Any]]]:
    """``(part, impl, its row, its call)`` of every call, warmed up; each row joins ``doc`` (a
    call that failed to warm up is a row with its error, and is not yielded)."""
    for part, fields, calls in _groups(run, doc):
        for name, make in calls.items():
            row = {"impl": name, "part": part, **fields}
            doc["results"].append(row)
            call = _prepared(make, row, part.startswith("backward"))
            if call is not None:
                yield part, name, row, call


def measure_profile(run: Run) -> Dict[str, Any]:
    """The ``profile`` measurement (the module docstring says what it holds)."""
    import torch

    s = run.sizes
    doc = document(run, {**asdict(config(run)), "n": list(run.ns), "d": list(run.ds),
                         **{k: s[k] for k in ("decode_scale", "decode_heads", "kv_heads", "decode_d", "sparse_batch",
                                              "window", "block_q", "block_k", "calls")}},
                   host_profiler="cProfile, attn_edu.bench.diagnose.host_breakdown: the host's time per call "
                                 "(no synchronisation) and whose code spent it",
                   ncu_sections=list(diagnose.NCU_SECTIONS))
    listing = os.environ.get(CHILD_ENV)
    if listing:
        return _child(run, doc, listing)
    cuda = run.device == "cuda"
    sync = torch.cuda.synchronize if cuda else None
    try:
        for _, _, row, call in _ready_calls(run, doc):
            try:
                t = profiling.time_ms(call, repeat=run.repeat, warmup=run.warmup, device=run.device)
                row.update(median_ms=t.median_ms, min_ms=t.min_ms, timer=t.method, host_median_ms=t.host_ms)
                with torch.autograd.set_multithreading_enabled(False):   # the backward's launches
                    row["host"] = diagnose.host_breakdown(call, calls=s["calls"], sync=sync)  # on this thread
                row["launch_bound"] = (row["host"]["host_us"] * 1e-3 >= t.median_ms) if cuda else None
            except Exception as err:
                failed(row, err)
    except KeyboardInterrupt:
        doc["stopped"] = f"interrupted after {len(doc['results'])} rows"
        return doc
    save(doc, run)   # the timed rows, whatever ncu does next
    try:
        _ncu(run, doc)
    except KeyboardInterrupt:   # the GPU run's deadline: the rows stay, without kernels
        doc["stopped"] = "interrupted while ncu ran"
    return doc


def _ncu(run: Run, doc: Dict[str, Any]) -> None:
    """Run ncu around this measurement's child and give each row the kernels of its call."""
    if run.device != "cuda" and not os.environ.get("ATTN_EDU_NCU"):   # (a stand-in named: the tests)
        skip(doc, "ncu", "a dry run on the CPU: Nsight Compute reads a GPU's kernels")
        return
    exe = diagnose.ncu_executable()
    if exe is None:
        skip(doc, "ncu", "Nsight Compute (ncu) is not installed here: not on PATH, nor under /usr/local/cuda "
                         "or /opt/nvidia/nsight-compute")
        return
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "profile.ncu-rep")
        listing = os.path.join(tmp, "calls.json")
        cmd = diagnose.ncu_command(_child_command(run, os.path.join(tmp, "child.json")), report, exe)
        info: Dict[str, Any] = {"executable": exe, "command": shlex.join(cmd[1:])}
        doc["ncu"] = info
        timeout = run.sizes["ncu_timeout"]
        code, said = _run_whole(cmd, {**os.environ, CHILD_ENV: listing}, timeout)
        info["exit_code"], info["output_tail"] = code, said[-3000:]
        report = next((r for r in (report, report + ".ncu-rep") if os.path.exists(r)), report)
        if code is None or not os.path.exists(listing) or not os.path.exists(report):
            errors = [x for x in said.splitlines() if "==ERROR==" in x] or said.splitlines()[-3:]
            why = f"ncu did not finish in {timeout} s" if code is None else f"ncu exited {code}, no report"
            skip(doc, "ncu", f"{why}: " + " | ".join(errors)[:400])
            return
        pages = {}
        for page in ("details", "raw"):
            code, pages[page] = _run_whole(diagnose.ncu_import_command(report, page, exe),
                                           {**os.environ, "LC_ALL": "C"}, 180, stderr=False)
        calls = json.loads(Path(listing).read_text())
    found = diagnose.ncu_kernels(pages["details"], pages["raw"], calls)
    info.update(kernels=len(found["kernels"]), problem=found["problem"])
    if not found["kernels"]:   # what ncu printed instead, to read
        info["details_head"] = pages["details"][:4000]
        skip(doc, "ncu", "ncu's report printed no kernels")
    rows = {(r["part"], r["impl"], _length(r)): r for r in doc["results"]}
    for i, key in enumerate(calls):
        if tuple(key) in rows and i in found["by_call"]:
            rows[tuple(key)]["kernels"] = found["by_call"][i]
    if found["problem"]:
        info["unassigned"] = found["kernels"]


def _child_command(run: Run, out: str) -> List[str]:
    """This measurement again, with the run's own settings, as ncu's child."""
    sizes = run.sizes
    cmd = [sys.executable, "-m", "attn_edu.bench", "--measure", "profile", *(["--dry-run"] if run.dry_run else []),
           "--n", *map(str, run.ns), "--batch", str(run.batch), "--heads", str(run.heads), "--dtype", run.dtype,
           "--out", out]
    if len(set(run.ds)) == 1 and tuple(run.ds) != tuple(sizes["d"]):
        cmd[-2:-2] = ["--d", str(run.ds[0])]
    return cmd


def _run_whole(cmd: List[str], env: Dict[str, str], timeout: float, stderr: bool = True) -> Tuple[Any, str]:
    """``cmd`` in a session of its own, so that a timeout or an interrupt ends it with every
    process it started (ncu's child too); (its exit code or None after the timeout, what it printed)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out or ""
    except subprocess.TimeoutExpired:
        _kill(p)
        out, _ = p.communicate()
        return None, out or ""
    except BaseException:   # the deadline's interrupt: no process of it may stay on the GPU
        _kill(p)
        raise


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
