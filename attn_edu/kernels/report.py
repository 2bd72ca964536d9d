"""Ahead-of-time compile report: every Triton kernel of the package, compiled for real GPUs
on a machine without one.

``python -m attn_edu.kernels.report [--targets sm_75,sm_80,sm_90a] [--d 64,128]
[--kernels forward,backward_dq] [--json FILE]`` compiles each kernel that a kernel module
lists in its ``aot_kernels()`` (``AotKernel`` (``attn_edu/kernels/_shared.py``)) with
Triton's own compiler and its bundled ``ptxas``, for each target, for every configuration
(BLOCK_M, BLOCK_N, num_warps, num_stages) the kernel can launch with there, at each head
dimension, in the half dtype the target supports (float16 on sm_75, bfloat16 from sm_80;
``--dtypes`` for more). One row per compile:

* ``shared`` bytes of shared memory against the target's per-block limit;
* ``registers`` per thread and ``spill`` bytes (stores + loads, from ``ptxas -v``);
* ``matrix``: the matrix instructions in the PTX -- ``wgmma`` (Hopper's warpgroup MMA),
  ``mma.sync`` (Ampere's tensor cores) or ``fma`` (none: plain fused multiply-adds, what
  Triton 3.9 emits for ``tl.dot`` on sm_75) -- and ``tma`` (bulk tensor copies).

It exits with 1 when a configuration does not fit the target's shared memory, when on
sm_90a a kernel that should use wgmma (or TMA: the forward) does not, or when an sm_90a
configuration spills registers. Chapter 10 explains what these numbers mean; the tests run a subset.

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
from ._shared import AotKernel
from ._targets import TARGETS

__all__ = ["KERNEL_MODULES", "SPEC_MODULES", "SPEC_KERNELS", "RECORDED", "kernels", "compile_kernel", "run_report",
           "format_rows", "problems",
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
_TRITON_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


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


def _half_dtypes(target: str) -> List[str]:
    """The half dtype a target computes in: float16 before sm_80, bfloat16 from sm_80."""
    return ["bfloat16"] if TARGETS[target].bfloat16 else ["float16"]


def _source(kernel: AotKernel, d: int, dtype: str, config, capability):
    from triton.compiler import ASTSource

    fn = kernel.fn
    consts = kernel.constants(d, dtype, config, capability)
    signature, constexprs, attrs = {}, dict(consts), {}
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            signature[name] = "constexpr"
        elif name in kernel.unit_strides:  # Triton specialises an int equal to 1
            signature[name] = "constexpr"
            constexprs[name] = 1
        elif name in kernel.pointers:
            elem = kernel.pointers[name].replace("{dtype}", _TRITON_DTYPES[dtype])
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


def _compile(src, target: str, options: Dict[str, int], row: Dict[str, Any]) -> Dict[str, Any]:
    import triton
    from triton.backends.compiler import GPUTarget

    spec = TARGETS[target]
    t0 = time.perf_counter()
    compiled = triton.compile(src, target=GPUTarget("cuda", spec.capability, 32), options=options)
    ptx = compiled.asm["ptx"]
    return {**row, "target": target, "num_warps": options["num_warps"],
            "num_stages": options["num_stages"], "shared": int(compiled.metadata.shared),
            "shared_limit": spec.shared_memory, **_ptxas_usage(ptx, target, spec.capability),
            "matrix": matrix_instructions(ptx), "tma": bool(re.search(r"cp\.async\.bulk\.tensor", ptx)),
            "seconds": round(time.perf_counter() - t0, 2),
            "asm": {"ttir": compiled.asm["ttir"], "ptx": ptx}}


def compile_kernel(kernel: AotKernel, target: str, config, d: int, dtype: str) -> Dict[str, Any]:
    """Compile one kernel for one target, configuration, head dim and dtype; return its row
    (``shared``, ``shared_limit``, ``registers``, ``spill_bytes``, ``matrix``, ``tma``,
    ``seconds``, and ``ttir``/``ptx`` texts under ``"asm"``)."""
    bm, bn, warps, stages = config
    capability = divmod(TARGETS[target].capability, 10)
    return _compile(_source(kernel, d, dtype, config, capability), target, dict(num_warps=warps, num_stages=stages),
                    {"kernel": kernel.name, "d": d, "dtype": dtype, "block_m": bm, "block_n": bn})


def _spec_rows(target: str, dtype: str, d: int, names: Optional[List[str]]) -> List[Dict[str, Any]]:
    """Rows of the kernels a module lists with ``compile_specs(arch, dtype, head_dim)`` (the
    decode kernel of chapter 13: the configuration its launcher picks for the target)."""
    from triton.compiler import ASTSource

    rows = []
    for mod in SPEC_MODULES:
        module = importlib.import_module(mod)
        prefix = mod.rsplit(".", 1)[1].replace("_triton", "")
        for spec in module.compile_specs(target, dtype, d):
            name = f"{prefix}{spec['name'].split('[')[0]}"  # e.g. decode_split_kernel
            if names is not None and name not in names:
                continue
            src = ASTSource(fn=spec["fn"], signature=spec["signature"], constexprs=spec["constexprs"],
                            attrs=spec["attrs"])
            consts = spec["constexprs"]
            row = _compile(src, target, spec["options"], {
                "kernel": name, "d": d, "dtype": dtype, "block_m": consts.get("BLOCK_M", consts.get("BLOCK_S", 0)),
                "block_n": consts.get("BLOCK_N", 0)})
            row.pop("asm")
            row["problems"] = problems(row, needs_wgmma=False)  # L_q = 1: too few rows for wgmma
            rows.append(row)
    return rows


def problems(row: Dict[str, Any], needs_wgmma: bool = True, needs_tma: bool = False) -> List[str]:
    """What is wrong with one row: shared memory over the limit; on sm_90a no wgmma or no
    TMA (for a kernel that needs them) or spilled registers."""
    out = []
    if row["shared"] > row["shared_limit"]:
        out.append(f"shared memory {row['shared']} B > limit {row['shared_limit']} B")
    if row["target"] == "sm_90a":
        if needs_wgmma and row["matrix"] != "wgmma":
            out.append(f"no wgmma on sm_90a ({row['matrix']})")
        if needs_tma and not row.get("tma"):
            out.append("no TMA on sm_90a")
        if row["spill_bytes"] > 0:
            out.append(f"spills {row['spill_bytes']} B of registers")
    return out


def _fallbacks(group: List[Dict[str, Any]]) -> None:
    """Configurations are tried in order (the backward launcher) or all benchmarked (the
    forward's autotuner), and one that does not fit is skipped at launch: too little shared
    memory is a problem only when no configuration of the group fits."""
    fits = [r["shared"] <= r["shared_limit"] for r in group]
    if any(fits):
        for row, ok in zip(group, fits):
            if not ok:
                row["problems"] = [p for p in row["problems"] if not p.startswith("shared memory")]
                row["note"] = "does not fit: skipped at launch (another configuration fits)"


_HEAD = (f"{'kernel':22s} {'target':6s} {'d':>3s} {'dtype':8s} {'BM':>4s} {'BN':>4s} {'w':>2s} "
         f"{'s':>2s} {'shared/limit KiB':>16s} {'regs':>4s} {'spill':>5s} {'matrix':8s} {'tma':3s}  problems")


def _line(row: Dict[str, Any]) -> str:
    return (f"{row['kernel']:22s} {row['target']:6s} {row['d']:3d} {row['dtype']:8s} {row['block_m']:4d} "
            f"{row['block_n']:4d} {row['num_warps']:2d} {row['num_stages']:2d} "
            f"{row['shared'] / 1024:7.1f}/{row['shared_limit'] / 1024:<8.0f} "
            f"{row['registers']:4d} {row['spill_bytes']:5d} {row['matrix']:8s} "
            f"{'yes' if row['tma'] else 'no':3s}  {'; '.join(row['problems']) or row.get('note', 'ok')}")


def format_rows(rows: Iterable[Dict[str, Any]]) -> str:
    """The report's table (a header and one line per row), as ``run_report`` prints it:
    kernel, target, d, dtype, BLOCK_M, BLOCK_N, warps, stages, shared memory / the target's
    limit (KiB), registers per thread, spilled bytes, matrix instructions, TMA, problems.
    When every row is of one kernel, its name heads the table instead of filling a column."""
    rows = list(rows)
    names = {r["kernel"] for r in rows}
    if len(names) != 1:
        return "\n".join([_HEAD] + [_line(r) for r in rows])
    width = _HEAD.index("target")  # the kernel column and its space
    return "\n".join([f"kernel: {names.pop()}", _HEAD[width:]] + [_line(r)[width:] for r in rows])


def _print_row(row: Dict[str, Any], stream) -> None:
    print(_line(row), file=stream, flush=True)


def run_report(targets: Sequence[str] = ("sm_75", "sm_80", "sm_90a"), ds: Sequence[int] = (64, 128),
               kernel_names: Optional[Iterable[str]] = None, dtypes: Optional[Sequence[str]] = None,
               configs: Optional[int] = None, stream=sys.stdout) -> List[Dict[str, Any]]:
    """Compile every (kernel, target, config, d, dtype); print a table; return the rows
    (without their assembly), each with its ``problems``. ``configs=N`` compiles only the
    first N configurations of each kernel (for quick checks)."""
    for t in targets:
        if t not in TARGETS:
            raise ValueError(f"unknown target {t!r}; known: {', '.join(TARGETS)}")
    rows = []
    print(_HEAD, file=stream)
    names = list(kernel_names) if kernel_names is not None else None
    own = kernels([n for n in names if n not in SPEC_KERNELS] if names is not None else None)
    spec_groups = []
    if names is None or set(names) & set(SPEC_KERNELS):
        for target in targets:
            for dtype in (dtypes or _half_dtypes(target)):
                for d in ds:
                    spec_groups.append(_spec_rows(target, dtype, d, names))
    for kernel in own:
        for target in targets:
            for dtype in (dtypes or _half_dtypes(target)):
                for d in ds:
                    cfgs = kernel.configs(divmod(TARGETS[target].capability, 10), d)
                    group = []
                    for config in cfgs[:configs] if configs else cfgs:
                        row = compile_kernel(kernel, target, config, d, dtype)
                        row.pop("asm")
                        row["problems"] = problems(row, kernel.needs_wgmma, kernel.needs_tma)
                        group.append(row)
                    _fallbacks(group)
                    rows += group
                    for row in group:
                        _print_row(row, stream)
    for group in spec_groups:
        rows += group
        for row in group:
            _print_row(row, stream)
    return rows


def recorded_report(kernel: Optional[str] = None) -> List[Dict[str, Any]]:
    """The rows of the committed report (``RECORDED``), all or one kernel's; each row as
    printed by :func:`run_report`, plus the Triton version it was compiled with."""
    doc = json.loads(RECORDED.read_text())
    if doc.get("schema") != "attn_edu.kernels.report/1":
        raise ValueError(f"{RECORDED} is not a compile report (schema {doc.get('schema')!r})")
    return [dict(r, triton=doc.get("triton")) for r in doc["rows"] if kernel in (None, r["kernel"])]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; exit code 1 when any row has a problem."""
    p = argparse.ArgumentParser(prog="python -m attn_edu.kernels.report", description=__doc__.split("\n")[0])
    p.add_argument("--targets", default="sm_75,sm_80,sm_90a")
    p.add_argument("--d", default="64,128", help="head dimensions")
    p.add_argument("--kernels", default=None, help="kernel names (default: all)")
    p.add_argument("--dtypes", default=None, help="default: the target's half dtype")
    p.add_argument("--configs", type=int, default=None, help="only the first N configurations")
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args(argv)
    split = lambda s: [x for x in s.replace(" ", ",").split(",") if x]  # noqa: E731
    rows = run_report(split(args.targets), [int(x) for x in split(args.d)],
                      split(args.kernels) if args.kernels else None,
                      split(args.dtypes) if args.dtypes else None, args.configs)
    bad = [r for r in rows if r["problems"]]
    print(f"{len(rows)} compiles, {len(bad)} with problems")
    if args.json:
        with open(args.json, "w") as f:
            import triton

            json.dump({"schema": "attn_edu.kernels.report/1", "triton": triton.__version__,
                       "command": "python -m attn_edu.kernels.report " + " ".join(argv or sys.argv[1:]),
                       "rows": [{k: v for k, v in r.items() if k != "seconds"} for r in rows]},
                      f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
