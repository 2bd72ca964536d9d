"""``python -m attn_edu.bench``: sweeps, the goals, and the block-sparse benchmark.

The modes of one command line (``--help`` lists every option):

* a sweep (the default): ``--impl`` at every ``--n``, JSON to ``--out``
  (:func:`~attn_edu.bench.run_sweep`); ``--list`` prints the implementations;
* ``--goals``: the book's speed and memory goals (:func:`~attn_edu.bench.run_goals`);
* ``--block-sparse``: the block-sparse Triton kernel against a full layout and
  FlexAttention (:func:`~attn_edu.bench.bench_block_sparse`, CUDA only);
* ``--correctness``: every Triton kernel against float64 in the GPU's half type
  (:func:`~attn_edu.bench.gpu_correctness`), the first step of ``scripts/gpu-bench.sh``;
* ``--host-overhead``: the package's own Python time per Triton call on the CPU, the
  launches stubbed, before and after the launch decisions' caches, then the autotuned
  launches with Triton's dispatch, through the autotuner against its choice launched
  directly, and every call, the split-KV decode step too, with Triton's dispatch on every
  launch against the package's direct launch, and against the package alone
  (:mod:`attn_edu.bench.host`);
* ``--compile-ahead``: a first autotuned call's compiles for an H100, in series against
  ahead in parallel threads, timed on the CPU (:mod:`attn_edu.bench.compile_time`);
* ``--t4-estimates``: every chapter GPU branch's estimated time on a T4
  (:func:`attn_edu.gpu_profile.t4_estimates`), printed; no GPU needed;
* ``--measure NAME``: one of the measurements of :data:`~attn_edu.bench.MEASURES`
  (:func:`~attn_edu.bench.run_measure`), one document of kind NAME to ``--out``; ``--n``,
  ``--d``, ``--batch``, ``--heads``, ``--dtype``, ``--repeat``, ``--warmup`` replace its
  sizes, ``--dry-run`` runs it on the CPU at tiny sizes (``TRITON_INTERPRET=1``).

Every mode but ``--t4-estimates`` and ``--compile-ahead`` first applies the GPU profile ``ATTN_EDU_GPU_PROFILE``
names (:func:`attn_edu.gpu_profile.apply_profile`; nothing without it).

Tiled implementations use ``--block-q`` x ``--block-k`` tiles, by default their backend's
(:func:`attn_edu.masks.default_tiles`; the block-sparse kernel's ``DEFAULT_BLOCK_Q`` x
``DEFAULT_BLOCK_K``); every row prints and records the tiles it ran with.
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
from typing import List, Optional, Sequence

from ..gpu_profile import apply_profile, format_estimates
from ..masks import DEFAULT_TILES
from .block_sparse import bench_block_sparse
from .check import correctness_document, gpu_correctness
from .env import cpu_threads, environment, gpu_half_dtype, set_cpu_threads
from .goals import cuda_available, run_goals
from .measure import MEASURES, run_measure
from .registry import REGISTRY, BenchConfig, ImplUnavailable, impl_names
from .sweep import SCHEMA, run_sweep, save_results

__all__ = ["main"]

def _ints(text: str) -> List[int]:
    return [int(x) for x in text.replace(",", " ").split()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m attn_edu.bench",
        description="Time attention implementations over sequence lengths; write JSON with device metadata.",
    )
    p.add_argument("--impl", nargs="+", default=["numpy_naive"],
                   help="implementations (space or comma separated); --list shows them")
    p.add_argument("--n", nargs="+", default=None,
                   help="sequence lengths (default: 256 512 1024; 8192 16384 with --block-sparse)")
    p.add_argument("--d", type=int, default=None, help="head dimension (default: 64; --measure: its own)")
    p.add_argument("--batch", type=int, default=None, help="batch (default: 1; --measure: its own)")
    p.add_argument("--heads", type=int, default=None, help="heads (default: 1; 16 with --block-sparse; --measure: its own)")
    p.add_argument("--dtype", default=None, choices=["float16", "bfloat16", "float32", "float64"],
                   help="default: float32 on the CPU; on a GPU (--device cuda, --block-sparse) the "
                        "GPU's half type: bfloat16 on compute capability 8.0+, else float16")
    p.add_argument("--causal", action="store_true", help="causal attention (--measure backward: a causal backward)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--block-q", type=int, default=None,
                   help=f"tile rows (queries) of tiled impls (default: the backend's, "
                        f"masks.DEFAULT_TILES = {_tiles_text()}; 128 with --block-sparse)")
    p.add_argument("--block-k", type=int, default=None,
                   help="tile columns (keys) of tiled impls (default: the backend's; 64 with --block-sparse)")
    p.add_argument("--window", type=int, default=None,
                   help="sliding-window width for numpy_window, torch_window and block_sparse")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for NumPy's OpenBLAS and torch; 1 gives steadier times on a busy CPU")
    p.add_argument("--repeat", type=int, default=None, help="timed calls (default: 5; --measure: its own)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first (default: 1; --measure: its own)")
    p.add_argument("--memory", action="store_true", help="also measure peak memory (a separate call)")
    p.add_argument("--interleave", action="store_true",
                   help="time all points round-robin (steadier curves on a busy machine)")
    p.add_argument("--out", default=None, help="write the JSON document here")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--list", action="store_true", help="list the implementations and exit")
    p.add_argument("--goals", action="store_true",
                   help="measure the performance goals side by side; exit 1 if one fails")
    p.add_argument("--goal-n", type=int, default=8192,
                   help="length for the CPU goals (the goals are stated at 8192)")
    p.add_argument("--block-sparse", action="store_true",
                   help="benchmark the block-sparse Triton kernel against a full layout and "
                        "FlexAttention (CUDA only); JSON to --out")
    p.add_argument("--densities", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.125, 0.0625],
                   help="mask densities for --block-sparse")
    p.add_argument("--patterns", nargs="+", default=["blocks", "window"], choices=["blocks", "window"],
                   help="mask patterns for --block-sparse")
    p.add_argument("--flex-block-q", type=int, default=128, help="FlexAttention's tile rows (--block-sparse)")
    p.add_argument("--flex-block-k", type=int, default=128, help="FlexAttention's tile columns (--block-sparse)")
    p.add_argument("--correctness", action="store_true",
                   help="check every Triton kernel against float64 in the GPU's half type "
                        "(--dtype overrides; --out FILE saves the correctness document); exit 1 if one fails")
    p.add_argument("--host-overhead", action="store_true",
                   help="the package's Python time per Triton call on the CPU, the launches stubbed, "
                        "before and after the launch decisions' caches, then the autotuned launches with "
                        "Triton's dispatch (compiled for sm_90a, the C launcher stubbed), through the "
                        "autotuner against its choice direct, and each call with Triton's dispatch on every "
                        "launch against the package's direct launch and against the package alone "
                        "(attn_edu.bench.host); "
                        "--repeat calls per round; JSON to --out")
    p.add_argument("--compile-ahead", action="store_true",
                   help="the first autotuned call's compiles for an H100 (sm_90a), in series against ahead "
                        "in parallel threads, on this CPU without a GPU (attn_edu.bench.compile_time); "
                        "--d (default 64), --repeat alternating rounds (default 1)")
    p.add_argument("--t4-estimates", action="store_true",
                   help="print each chapter GPU branch's FLOPs, bytes and estimated seconds on a T4 "
                        "under ATTN_EDU_GPU_PROFILE=t4 (attn_edu.gpu_profile.t4_estimates) and exit")
    p.add_argument("--measure", default=None, choices=list(MEASURES),
                   help="one measurement the recorded sweeps lack, as one JSON document to --out: "
                        + "; ".join(f"{k}: {v}" for k, v in MEASURES.items())
                        + " (needs a CUDA GPU, or --dry-run; exit 1 if a point failed)")
    p.add_argument("--dry-run", action="store_true",
                   help="the GPU pipeline on the CPU (TRITON_INTERPRET=1, tiny sizes): documents are "
                        "marked dry_run, their numbers are not GPU numbers")
    return p


def _tiles_text() -> str:
    return ", ".join(f"{name} {bq}x{bk}" for name, (bq, bk) in DEFAULT_TILES.items())


def _given(value, default):
    """An option's value, or the mode's default when it was not given."""
    return default if value is None else value


def _block_sparse(args, ns: List[int], argv: Sequence[str]) -> int:
    rows = bench_block_sparse(ns or [8192, 16384], _given(args.d, 64), args.densities, args.dtype,
                              _given(args.batch, 1),
                              _given(args.heads, 16), _given(args.block_q, 128), _given(args.block_k, 64),
                              args.flex_block_q, args.flex_block_k, args.patterns, json_path=args.out,
                              dry_run=args.dry_run, command=_command(argv))
    return 0 if rows or not (cuda_available() or args.dry_run) else 1


def _measure(args, ns: List[int], argv: Sequence[str]) -> int:
    """``--measure NAME``: exit 0, or 1 when a point failed or it cannot run here."""
    signal.signal(signal.SIGTERM, _interrupt)  # gpu-bench.sh's deadline: keep what was measured
    try:
        return run_measure(args.measure, dry_run=args.dry_run, out=args.out, n=ns or None,
                           d=None if args.d is None else [args.d], batch=args.batch, heads=args.heads,
                           dtype=args.dtype, repeat=args.repeat, warmup=args.warmup, causal=args.causal or None,
                           command=_command(argv), progress=not args.no_progress)[1]
    except (ImplUnavailable, ImportError) as err:  # no GPU, no interpreter, no torch: nothing ran
        print(f"python -m attn_edu.bench --measure {args.measure}: {err}", file=sys.stderr)
        return 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; returns the exit code (1 when a point failed or a goal was missed)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["validate"]:  # python -m attn_edu.bench validate FILE_OR_FOLDER ...
        from .validate import validate_main

        return validate_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.t4_estimates:  # a model from datasheet figures, no GPU needed
        print(format_estimates())
        return 0
    if args.compile_ahead:  # the CPU only: compiles for sm_90a in child processes
        from .compile_time import compile_ahead_time, format_compile_ahead

        print(format_compile_ahead(compile_ahead_time(d=args.d or 64, rounds=args.repeat or 1)))
        return 0
    if args.host_overhead:  # the CPU only: a child with TRITON_INTERPRET=1, then one compiling for sm_90a
        from .host import dispatch_overhead, format_dispatch_overhead, format_host_overhead, host_overhead

        result = host_overhead(repeat=args.repeat or 200)
        print(format_host_overhead(result))
        result["dispatch"] = dispatch_overhead(repeat=args.repeat or 200)
        print(format_dispatch_overhead(result["dispatch"]))
        if args.out:
            save_results({"schema": SCHEMA, "kind": "host_overhead", **environment("cpu"), **result,
                          "command": _command(argv)}, args.out)
        return 0
    apply_profile()  # ATTN_EDU_GPU_PROFILE (e.g. t4): a no-op without it or without a GPU
    if args.list:
        for name in impl_names():
            print(f"{name:20s} {REGISTRY[name].description}")
        return 0
    impls = [x for item in args.impl for x in item.replace(",", " ").split()]
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be at least 1; got {args.threads}")
        if not args.goals and any(REGISTRY[x].framework == "torch" for x in impls if x in REGISTRY):
            import torch  # noqa: F401  (so set_cpu_threads reaches it)
        set_cpu_threads(args.threads)
    try:
        ns = [n for item in (args.n or []) for n in _ints(item)]
    except ValueError:
        parser.error(f"--n must be integers; got {' '.join(args.n)}")
    if args.measure:
        return _measure(args, ns, argv)
    if args.block_sparse:
        return _block_sparse(args, ns, argv)
    if args.correctness:
        if not (args.dry_run or cuda_available()):
            parser.error("--correctness checks the kernels on a CUDA GPU (or --dry-run on the CPU)")
        records, code = gpu_correctness(dtype=args.dtype, dry_run=args.dry_run)
        if args.out:  # the proof a submission carries: saved, not only printed
            print(f"wrote {save_results(correctness_document(records, args.dry_run, _command(argv)), args.out)}")
        return code
    if args.goals:
        goals, code = run_goals(n=args.goal_n, repeat=max(1, min(_given(args.repeat, 5), 5)),
                                dry_run=args.dry_run)
        if args.out:
            env = environment("cuda" if cuda_available() and not args.dry_run else "cpu")
            if env["device"]["kind"] == "cpu":
                env["device"]["threads"] = cpu_threads()
            save_results({"schema": SCHEMA, "kind": "goals", "dry_run": args.dry_run, **env,
                          "command": _command(argv), "goal_n": args.goal_n, "goals": goals}, args.out)
            print(f"wrote {args.out}")
        return code
    unknown = [x for x in impls if x not in REGISTRY]
    if unknown:
        parser.error(f"unknown --impl {', '.join(unknown)}; known: {', '.join(impl_names())}")
    ns = ns or [256, 512, 1024]
    if args.device == "cuda" and not cuda_available():
        parser.error("--device cuda but PyTorch sees no CUDA GPU")
    config = BenchConfig(batch=_given(args.batch, 1), heads=_given(args.heads, 1), d=_given(args.d, 64),
                         dtype=_given(args.dtype, gpu_half_dtype() if args.device == "cuda" else "float32"),
                         causal=args.causal, device=args.device,
                         block_q=args.block_q, block_k=args.block_k, window=args.window)
    # `timeout` (gpu-bench.sh's deadline) stops a sweep with SIGTERM: end it like Ctrl-C, so
    # the points measured so far are written, with "stopped" saying how far it got.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        doc = run_sweep(impls, ns, config, repeat=_given(args.repeat, 5), warmup=_given(args.warmup, 1),
                        memory=args.memory,
                        progress=not args.no_progress, command=_command(argv),
                        interleave=args.interleave, dry_run=args.dry_run)
    except ValueError as err:
        parser.error(str(err))
    for r in doc["results"]:
        if "error" in r:
            print(f"{r['impl']:18s} n={r['n']:6d}  {r.get('reason', 'error').upper()} {r['error'][:120]}")
            continue
        mem = "" if r["peak_bytes"] is None else f"  peak {r['peak_bytes'] / 2**20:9.2f} MiB"
        tiles = "" if r.get("block_q") is None else f"  tiles {r['block_q']}x{r['block_k']}"
        print(f"{r['impl']:18s} n={r['n']:6d}  {r['median_ms']:10.3f} ms (min {r['min_ms']:.3f})"
              f"  {r['tflops'] * 1e3:8.2f} GFLOP/s{mem}{tiles}")
    for name, why in doc["skipped"].items():
        print(f"{name:18s} skipped: {why}")
    print(f"device: {doc['device']['name']} ({doc['device']['kind']}); {doc['date']}")
    if "stopped" in doc:
        print(f"STOPPED: {doc['stopped']}")
    if args.out:
        print(f"wrote {save_results(doc, args.out)}")
    failed = any("error" in r for r in doc["results"]) or "stopped" in doc
    return 1 if failed or not doc["results"] else 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _command(argv: Sequence[str]) -> str:
    return "python -m attn_edu.bench " + " ".join(shlex.quote(a) for a in argv)
