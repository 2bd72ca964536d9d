"""Ahead-of-time compile report: every Triton kernel of the package, compiled for real GPUs
on a machine without one.

``python -m attn_edu.kernels.report [--targets sm_75,sm_80,sm_90a] [--d 64,128]
[--kernels forward,backward_dq] [--json FILE] [--jobs N]`` compiles each kernel that a kernel module
lists in its ``aot_kernels()`` (``AotKernel`` (``attn_edu/kernels/_shared.py``)) with
Triton's own compiler and its bundled ``ptxas``, for each target, for every configuration
(BLOCK_M, BLOCK_N, num_warps, num_stages) the kernel can launch with there, at each head
dimension, in the half dtype the target supports (float16 on sm_75, bfloat16 from sm_80)
and in float32 with each ``tl.dot`` precision a launch can use there (``"ieee"``, exact,
everywhere; ``"tf32"`` from sm_80, the default there; ``--dtypes`` to choose). One row
per compile:

* ``shared`` bytes of shared memory against the target's per-block limit;
* ``registers`` per thread and ``spill`` bytes (stores + loads, from ``ptxas -v``);
* ``threads`` per program, from the PTX's ``.reqntid``/``.maxntid`` (``num_warps`` x 32,
  unless warp specialization added warps for its producer and consumers);
* ``matrix``: the matrix instructions in the PTX -- ``wgmma`` (Hopper's warpgroup MMA),
  ``mma.sync`` (Ampere's tensor cores) or ``fma`` (none: plain fused multiply-adds, what
  Triton 3.9 emits for ``tl.dot`` on sm_75) -- ``tma`` (bulk tensor copies) and
  ``setmaxnreg`` (warp-group register reallocation: a warp-specialized kernel's producer
  gives registers to its consumers);
* ``seconds``: CPU seconds of the compile (Triton's passes and ptxas, the cache bypassed),
  what a reader's first call waits per configuration on an idle core.

It exits with 1 when any row has a *problem*: a configuration that does not fit the
target's shared memory (unless another of its group does, see ``_fallbacks``), on sm_90a a
kernel that should use wgmma (or TMA: the forward) and does not, a configuration that
spills registers on sm_80 or sm_90a, or one that takes more than ``MAX_COMPILE_SECONDS``
to compile on any target. Spills on sm_75 are a problem only when another configuration
of the same group (kernel, d, dtype, precision) spills none; when every one spills -- a T4
has no tensor cores in Triton, its FMA tiles live in registers -- they are a *warning*,
``T4_SPILL``: reported (``warnings`` of the row, the last column of :func:`format_rows`,
counted by :func:`summary`), exit code 0. Chapter 10 explains what these numbers mean;
the tests run a subset.

Needs triton (not a GPU). The kernels must be *compiled* ones: the report refuses to run
with ``TRITON_INTERPRET=1`` set (run it in a fresh shell).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from . import _interpret
from ._shared import TRITON_DTYPES, AotKernel
from ._targets import TARGETS, float32_precisions, input_precision

__all__ = ["KERNEL_MODULES", "SPEC_MODULES", "SPEC_KERNELS", "RECORDED", "MAX_COMPILE_SECONDS", "T4_SPILL",
           "kernels", "variants", "compile_kernel", "run_report", "format_rows", "problems", "summary",
           "recorded_report", "main"]

#: Modules whose ``aot_kernels()`` the report compiles (add new kernel files here).
KERNEL_MODULES = ["attn_edu.kernels.flash_triton", "attn_edu.kernels.block_sparse_triton"]
#: Modules that list their kernels with ``compile_specs(arch, dtype, head_dim)`` instead
#: (one configuration per target, the one their launcher picks).
SPEC_MODULES = ["attn_edu.kernels.decode_triton"]
#: The names their kernels get in the report (``--kernels`` accepts them).
SPEC_KERNELS = ("decode_split_kernel", "decode_reduce_kernel")
#: The full report as committed (``python -m attn_edu.kernels.report --json`` this file):
#: chapter 10 reads it, so the page builds without compiling anything.
RECORDED = Path(__file__).resolve().parent.parent / "data" / "kernels" / "compile_report.json"
#: A configuration that takes longer than this (CPU seconds) to compile is a problem (the
#: autotuner compiles each configuration on a reader's first call).
MAX_COMPILE_SECONDS = 10.0
#: The warning class of spills on sm_75 that no configuration of the group avoids.
T4_SPILL = "T4 spill"


def kernels(names: Optional[Iterable[str]] = None) -> List[AotKernel]:
    """The kernels of ``KERNEL_MODULES`` (all, or those named), in module order."""
    if _interpret.requested():
        raise RuntimeError("the compile report needs compiled kernels: unset TRITON_INTERPRET "
                           "(it is set to 1 here, so the kernels were built for the interpreter)")
    found = [k for mod in KERNEL_MODULES for k in importlib.import_module(mod).aot_kernels()]
    if names is None:
        return found
    names = list(names)
    if not names:
        return []
    unknown = sorted(set(names) - {k.name for k in found} - set(SPEC_KERNELS))
    if unknown:
        raise ValueError(f"unknown kernel(s) {', '.join(unknown)}; known: "
                         f"{', '.join(k.name for k in found)}")
    return [k for k in found if k.name in names]


def variants(target: str, dtypes: Optional[Sequence[str]] = None) -> List[tuple]:
    """The (dtype, precision) pairs compiled for a target: float32 with every precision a
    launch can use there (``attn_edu.kernels._targets.input_precision``: ``"ieee"``
    everywhere, ``"tf32"`` from sm_80), then its half dtype (float16 before sm_80, bfloat16
    from sm_80; precision None, ``tl.dot`` ignores it). ``dtypes`` restricts the dtypes."""
    half = "bfloat16" if TARGETS[target].bfloat16 else "float16"
    precisions = float32_precisions(divmod(TARGETS[target].capability, 10))
    return [(dt, p) for dt in (dtypes or ("float32", half))  # the half dtype last: a target's
            for p in (precisions if dt == "float32" else (None,))]  # last row is its main one


def _source(kernel: AotKernel, d: int, dtype: str, config, capability, precision=None):
    from triton.compiler import ASTSource

    fn = kernel.fn
    consts = kernel.constants(d, dtype, config, capability, input_precision(dtype, capability, precision))
    signature, constexprs, attrs = {}, dict(consts), {}
    descriptors = kernel.descriptors(consts) if kernel.descriptors else {}
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            signature[name] = "constexpr"
        elif name in descriptors:  # a host-built TMA descriptor (TensorDescriptor at launch)
            elem = kernel.pointers[name].replace("{dtype}", TRITON_DTYPES[dtype])
            signature[name] = f"tensordesc<{elem}[{', '.join(map(str, descriptors[name]))}]>"
        elif name in kernel.unit_strides:  # Triton specialises an int equal to 1
            signature[name] = "constexpr"
            constexprs[name] = 1
        elif name in kernel.pointers:
            elem = kernel.pointers[name].replace("{dtype}", TRITON_DTYPES[dtype])
            signature[name] = "*" + elem
            attrs[(i,)] = [["tt.divisibility", 16]]  # torch allocations are 16-byte aligned
        elif name in kernel.floats:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if name.startswith(("stride", "s_")):  # strides of (B, H, L, D) tensors, d % 16 == 0
                attrs[(i,)] = [["tt.divisibility", 16]]
    return ASTSource(fn, signature, constexprs, attrs)


def _ptxas_usage(ptx: str, arch: str, cc: int) -> Dict[str, int]:
    """Registers and spill bytes from ``ptxas -v`` (the bundled ptxas Triton itself uses)."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        out = subprocess.run([get_ptxas(cc).path, "-v", f"--gpu-name={arch}", path,
                              "-o", os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
    text = out.stdout + out.stderr
    regs = re.findall(r"Used (\d+) registers", text)
    stores = re.findall(r"(\d+) bytes spill stores", text)
    loads = re.findall(r"(\d+) bytes spill loads", text)
    return {"registers": int(regs[-1]) if regs else -1,
            "spill_bytes": sum(map(int, stores)) + sum(map(int, loads))}


def matrix_instructions(ptx: str) -> str:
    """``"wgmma"``, ``"mma.sync"`` or ``"fma"`` (no matrix instruction) for a kernel's PTX."""
    if re.search(r"\bwgmma\.mma_async", ptx):
        return "wgmma"
    if re.search(r"\bmma\.sync", ptx):
        return "mma.sync"
    return "fma"


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (ptxas): a compile's cost,
    unlike wall time, does not grow when other work shares the machine."""
    import resource

    return time.process_time() + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime \
        + resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime


def _compile(src, target: str, options: Dict[str, int], row: Dict[str, Any]) -> Dict[str, Any]:
    import triton
    from triton.backends.compiler import GPUTarget

    spec = TARGETS[target]
    always = triton.knobs.compilation.always_compile
    triton.knobs.compilation.always_compile = True  # a cached kernel would take no time
    try:
        t0 = _cpu_seconds()
        compiled = triton.compile(src, target=GPUTarget("cuda", spec.capability, 32), options=options)
        seconds = _cpu_seconds() - t0
    finally:
        triton.knobs.compilation.always_compile = always
    ptx = compiled.asm["ptx"]
    return {**row, "target": target, "num_warps": options["num_warps"],
            "num_stages": options["num_stages"], "shared": int(compiled.metadata.shared),
            "shared_limit": spec.shared_memory, **_ptxas_usage(ptx, target, spec.capability),
            "matrix": matrix_instructions(ptx), "tma": bool(re.search(r"cp\.async\.bulk\.tensor", ptx)),
            "setmaxnreg": bool(re.search(r"\bsetmaxnreg\.", ptx)), "threads": _threads(ptx, options["num_warps"]),
            "seconds": round(seconds, 2), "asm": {"ttir": compiled.asm["ttir"], "ptx": ptx}}


def _threads(ptx: str, num_warps: int) -> int:
    """Threads per program: the PTX's ``.reqntid`` or ``.maxntid`` (what the kernel is built
    for), else ``num_warps`` warps of 32."""
    found = re.search(r"^\s*\.(?:reqntid|maxntid)\s+(\d+)", ptx, re.M)
    return int(found.group(1)) if found else 32 * num_warps


def compile_kernel(kernel: AotKernel, target: str, config, d: int, dtype: str,
                   precision: Optional[str] = None) -> Dict[str, Any]:
    """Compile one kernel for one target, configuration, head dim, dtype and (float32)
    ``tl.dot`` precision (``"tf32"``/``"ieee"``; None for half dtypes); return its row
    (``shared``, ``shared_limit``, ``registers``, ``spill_bytes``, ``matrix``, ``tma``,
    ``seconds``, and ``ttir``/``ptx`` texts under ``"asm"``)."""
    bm, bn, warps, stages = config
    capability = divmod(TARGETS[target].capability, 10)
    if dtype == "float32" and precision is None:
        raise ValueError("float32 needs precision 'tf32' or 'ieee'")
    consts = kernel.constants(d, dtype, config, capability, input_precision(dtype, capability, precision))
    row = _compile(_source(kernel, d, dtype, config, capability, precision), target,
                   dict(num_warps=warps, num_stages=stages),
                   {"kernel": kernel.name, "d": d, "dtype": dtype,
                    "precision": precision if dtype == "float32" else None, "block_m": bm, "block_n": bn})
    if consts.get("WARP_SPECIALIZE"):  # asked for a producer/consumer split of the warps
        row["warp_specialize"] = True
    return row


def _spec_rows(target: str, dtype: str, d: int, names: Optional[List[str]],
               precision: Optional[str] = None, asm: bool = False) -> List[Dict[str, Any]]:
    """Rows of the kernels a module lists with ``compile_specs(arch, dtype, head_dim)`` (the
    decode kernel of chapter 13: the configuration its launcher picks for the target)."""
    from triton.compiler import ASTSource

    rows = []
    for mod in SPEC_MODULES:
        module = importlib.import_module(mod)
        prefix = mod.rsplit(".", 1)[1].replace("_triton", "")
        for spec in module.compile_specs(target, dtype, d, precision=precision):
            name = f"{prefix}{spec['name'].split('[')[0]}"  # e.g. decode_split_kernel
            if names is not None and name not in names:
                continue
            src = ASTSource(fn=spec["fn"], signature=spec["signature"], constexprs=spec["constexprs"],
                            attrs=spec["attrs"])
            consts = spec["constexprs"]
            row = _compile(src, target, spec["options"], {
                "kernel": name, "d": d, "dtype": dtype, "precision": precision,
                "block_m": consts.get("BLOCK_M", consts.get("BLOCK_S", 0)), "block_n": consts.get("BLOCK_N", 0)})
            if not asm:
                row.pop("asm")
            row["problems"] = problems(row, needs_wgmma=False)  # L_q = 1: too few rows for wgmma
            _judge_spills([row])
            rows.append(row)
    return rows


def problems(row: Dict[str, Any], needs_wgmma: bool = True, needs_tma: bool = False) -> List[str]:
    """What is wrong with one row: shared memory over the limit; on sm_90a no wgmma (for a
    kernel that needs it, not in exact float32) or no TMA (for one that needs it); spilled
    registers on sm_80 or sm_90a (sm_75: see ``_judge_spills``); on sm_90a a row that asked
    for warp specialization (``warp_specialize``) without ``setmaxnreg`` (the producer's and
    consumers' register reallocation) in its PTX; a compile of more than
    ``MAX_COMPILE_SECONDS``."""
    out = []
    if row["shared"] > row["shared_limit"]:
        out.append(f"shared memory {row['shared']} B > limit {row['shared_limit']} B")
    if row["target"] == "sm_90a":
        if needs_wgmma and row.get("precision") != "ieee" and row["matrix"] != "wgmma":
            out.append(f"no wgmma on sm_90a ({row['matrix']})")
        if needs_tma and row.get("precision") != "ieee" and not row.get("tma"):
            out.append("no TMA on sm_90a")
        if row.get("warp_specialize") and not row.get("setmaxnreg"):
            out.append("no warp specialization (setmaxnreg) on sm_90a")
    if row["target"] != "sm_75" and row["spill_bytes"] > 0:
        out.append(f"spills {row['spill_bytes']} B of registers")
    if row.get("seconds", 0) > MAX_COMPILE_SECONDS:
        out.append(f"compiles in {row['seconds']:.0f} s > {MAX_COMPILE_SECONDS:.0f} s")
    return out


def _judge_spills(group: List[Dict[str, Any]]) -> None:
    """sm_75 spills of one group (kernel, target, d, dtype, precision): a ``T4_SPILL``
    warning when every configuration of the group spills (a T4 cannot avoid it), else a
    problem (the spilling configurations should leave the launcher's list)."""
    spilled = [r for r in group if r["target"] == "sm_75" and r["spill_bytes"] > 0]
    for row in group:
        row.setdefault("warnings", [])
    if not spilled:
        return
    if len(spilled) == len(group):
        for row in spilled:
            row["warnings"].append(f"{T4_SPILL}: {row['spill_bytes']} B; every configuration of "
                                   "the group spills on sm_75 (FMA tiles live in registers)")
    else:
        for row in spilled:
            row["problems"].append(f"spills {row['spill_bytes']} B on sm_75 where another "
                                   "configuration of the group spills none")


def _fallbacks(group: List[Dict[str, Any]]) -> None:
    """Configurations are tried in order (the backward launcher) or all benchmarked (the
    forward's autotuner), and one that does not fit is skipped at launch: too little shared
    memory is a problem only when no configuration of the group fits."""
    fits = [r["shared"] <= r["shared_limit"] for r in group]
    if any(fits):
        for row, ok in zip(group, fits):
            if not ok:
                row["problems"] = [p for p in row["problems"] if not p.startswith("shared memory")]
                row["note"] = "no fit: skipped"  # at launch: another configuration fits


_HEAD = (f"{'kernel':24s} {'target':6s} {'d':>3s} {'dtype':9s} {'BM':>3s} {'BN':>3s} {'w':>2s} "
         f"{'s':>2s} {'shared KiB':>11s} {'regs':>4s} {'spill':>6s} {'matrix':8s} {'tma':3s} {'secs':>5s}  status")


def _dtype_label(row: Dict[str, Any]) -> str:
    """``fp16``, ``bf16``, or float32 with its precision: ``fp32/tf32``, ``fp32/ieee``."""
    label = TRITON_DTYPES.get(row["dtype"], row["dtype"])
    return f"{label}/{row.get('precision') or 'ieee'}" if row["dtype"] == "float32" else label


def _status(row: Dict[str, Any]) -> str:
    if row["problems"]:
        return "; ".join(row["problems"])
    if row.get("warnings"):
        return T4_SPILL if all(w.startswith(T4_SPILL) for w in row["warnings"]) else "; ".join(row["warnings"])
    return row.get("note", "ok")


def _line(row: Dict[str, Any]) -> str:
    secs = row.get("seconds")
    return (f"{row['kernel']:24s} {row['target']:6s} {row['d']:3d} {_dtype_label(row):9s} {row['block_m']:3d} "
            f"{row['block_n']:3d} {row['num_warps']:2d} {row['num_stages']:2d} "
            f"{row['shared'] / 1024:6.1f}/{row['shared_limit'] / 1024:<4.0f} "
            f"{row['registers']:4d} {row['spill_bytes']:6d} {row['matrix']:8s} "
            f"{'yes' if row['tma'] else 'no':3s} {'' if secs is None else format(secs, '5.1f'):>5s}  {_status(row)}")


def summary(rows: Iterable[Dict[str, Any]]) -> str:
    """One line: compiles, rows with problems, rows with warnings (``T4_SPILL``), CPU seconds."""
    rows = list(rows)
    bad = sum(bool(r["problems"]) for r in rows)
    warned = sum(bool(r.get("warnings")) for r in rows)
    secs = sum(r.get("seconds") or 0 for r in rows)
    return (f"{len(rows)} compiles, {bad} with problems, {warned} with warnings ({T4_SPILL}), "
            f"{secs:.0f} CPU seconds of compiling")


def format_rows(rows: Iterable[Dict[str, Any]]) -> str:
    """The report's table (a header and one line per row), as ``run_report`` prints it:
    kernel, target, d, dtype (float32 with its ``tl.dot`` precision, ``fp32/tf32`` or
    ``fp32/ieee``), BLOCK_M, BLOCK_N, warps, stages, shared memory / the target's limit
    (KiB), registers per thread, spilled bytes, matrix instructions, TMA, compile CPU
    seconds, and the status: ``ok``, the problems, or the warning class (``T4 spill``).
    When every row is of one kernel, its name heads the table instead of filling a column."""
    rows = list(rows)
    names = {r["kernel"] for r in rows}
    if len(names) != 1:
        return "\n".join([_HEAD] + [_line(r) for r in rows])
    width = _HEAD.index("target")  # the kernel column and its space
    return "\n".join([f"kernel: {names.pop()}", _HEAD[width:]] + [_line(r)[width:] for r in rows])


def _print_row(row: Dict[str, Any], stream) -> None:
    print(_line(row), file=stream, flush=True)


def _task(task: tuple) -> List[Dict[str, Any]]:
    """One unit of the report's work (a compile of one of our kernels, or a spec module's
    kernels for one target, dtype and d), as rows (with their assembly when the task's last
    item says so); runs in a worker too."""
    if task[0] == "spec":
        return _spec_rows(*task[1:])
    _, name, target, config, d, dtype, precision, asm = task
    kernel = kernels([name])[0]
    row = compile_kernel(kernel, target, config, d, dtype, precision)
    if not asm:
        row.pop("asm")
    row["problems"] = problems(row, kernel.needs_wgmma, kernel.needs_tma)
    return [row]


def run_report(targets: Sequence[str] = ("sm_75", "sm_80", "sm_90a"), ds: Sequence[int] = (64, 128),
               kernel_names: Optional[Iterable[str]] = None, dtypes: Optional[Sequence[str]] = None,
               configs: Optional[int] = None, stream=sys.stdout, jobs: int = 1,
               asm: bool = False) -> List[Dict[str, Any]]:
    """Compile every (kernel, target, config, d, dtype, precision); print a table; return
    the rows, each with its ``problems`` and ``warnings``. ``configs=N`` compiles only the
    first N configurations of each kernel (for quick checks); ``jobs=N`` compiles in N
    worker processes (each compile is timed in its own); ``asm=True`` keeps each compile's
    Triton IR and PTX in its row (``"asm"``: ``"ttir"``, ``"ptx"``), to read what the
    compiler made of a kernel."""
    for t in targets:
        if t not in TARGETS:
            raise ValueError(f"unknown target {t!r}; known: {', '.join(TARGETS)}")
    print(_HEAD, file=stream)
    names = list(kernel_names) if kernel_names is not None else None
    own = kernels([n for n in names if n not in SPEC_KERNELS] if names is not None else None)
    groups = []  # lists of tasks whose rows are judged together (_fallbacks, _judge_spills)
    for kernel in own:
        for target in targets:
            for dtype, precision in variants(target, dtypes):
                for d in ds:
                    cap = divmod(TARGETS[target].capability, 10)
                    cfgs = kernel.configs(cap, d, dtype, input_precision(dtype, cap, precision))
                    groups.append([("own", kernel.name, target, config, d, dtype, precision, asm)
                                   for config in (cfgs[:configs] if configs else cfgs)])
    if names is None or set(names) & set(SPEC_KERNELS):
        groups += [[("spec", target, dtype, d, names, precision, asm)] for target in targets
                   for dtype, precision in variants(target, dtypes) for d in ds]
    tasks = [t for g in groups for t in g]
    if jobs > 1:
        import concurrent.futures

        pool = concurrent.futures.ProcessPoolExecutor(jobs)
        results = pool.map(_task, tasks)
    else:
        pool, results = None, map(_task, tasks)
    rows = []
    try:
        for g in groups:
            group = [row for _ in g for row in next(results)]
            if g and g[0][0] == "own":
                _fallbacks(group)
                _judge_spills(group)
            rows += group
            for row in group:
                _print_row(row, stream)
    finally:
        if pool is not None:
            pool.shutdown()
    return rows


def recorded_report(kernel: Optional[str] = None) -> List[Dict[str, Any]]:
    """The rows of the committed report (``RECORDED``), all or one kernel's; each row as
    printed by :func:`run_report`, plus the Triton version it was compiled with."""
    doc = json.loads(RECORDED.read_text())
    if doc.get("schema") != "attn_edu.kernels.report/1":
        raise ValueError(f"{RECORDED} is not a compile report (schema {doc.get('schema')!r})")
    return [dict(r, triton=doc.get("triton")) for r in doc["rows"] if kernel in (None, r["kernel"])]


def sources_fingerprint() -> str:
    """A hash of what a full report depends on: the kernel package's sources (kernels, their
    launch tables and limits) and Triton's version. The committed report records it
    (``"sources"``), so a check can tell whether it still describes this code."""
    import hashlib

    import triton

    h = hashlib.sha256(triton.__version__.encode())
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def recorded_is_current() -> bool:
    """Whether the committed report (``RECORDED``) was compiled from this code and Triton."""
    doc = json.loads(RECORDED.read_text())
    return doc.get("sources") == sources_fingerprint()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; exit code 1 when any row has a problem."""
    p = argparse.ArgumentParser(prog="python -m attn_edu.kernels.report", description=__doc__.split("\n")[0])
    p.add_argument("--targets", default="sm_75,sm_80,sm_90a")
    p.add_argument("--d", default="64,128", help="head dimensions")
    p.add_argument("--kernels", default=None, help="kernel names (default: all)")
    p.add_argument("--dtypes", default=None, help="default: the target's half dtype and float32")
    p.add_argument("--configs", type=int, default=None, help="only the first N configurations")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--jobs", type=int, default=1, help="compile in this many processes")
    p.add_argument("--asm", action="store_true", help="keep each compile's Triton IR and PTX in the JSON rows")
    args = p.parse_args(argv)
    split = lambda s: [x for x in s.replace(" ", ",").split(",") if x]  # noqa: E731
    rows = run_report(split(args.targets), [int(x) for x in split(args.d)],
                      split(args.kernels) if args.kernels else None,
                      split(args.dtypes) if args.dtypes else None, args.configs, jobs=args.jobs,
                      asm=args.asm)
    bad = [r for r in rows if r["problems"]]
    print(summary(rows))
    if args.json:
        with open(args.json, "w") as f:
            import triton

            json.dump({"schema": "attn_edu.kernels.report/1", "triton": triton.__version__,
                       "sources": sources_fingerprint(),
                       "command": "python -m attn_edu.kernels.report " + " ".join(argv or sys.argv[1:]),
                       "summary": summary(rows),
                       "rows": rows}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
