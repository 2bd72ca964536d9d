"""Sweeps: every implementation at every length, timed, written as one JSON document.

:func:`run_sweep` (and :func:`run_one` for a single point) time the implementations of
the registry and record, next to each time, the FLOPs (``FLOP_FORMULA``) and optionally
the peak memory; the document starts with :func:`~attn_edu.bench.environment`.
:func:`save_results`, :func:`load_results` and :func:`recorded_results` (the sweeps in
``attn_edu/data/bench/``) read and write them; :func:`results_rows` and
:func:`fit_exponent` are what chapters 08 and 10 plot and fit.
"""
from __future__ import annotations

import glob as _glob
import json
import os
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .. import profiling
from .._checks import check_positive_int
from ..kernels._interpret import requested as interpret_requested
from .env import autotune_config, best_sdpa_backend, cpu_threads, environment
from .registry import REGISTRY, BenchConfig, Impl, ImplUnavailable, build_impl, impl_names, make_inputs

__all__ = ["SCHEMA", "KINDS", "DATA_DIR", "FLOP_FORMULA", "run_one", "run_sweep", "save_results", "load_results",
           "recorded_results", "results_rows", "fit_exponent", "failure_reason"]

#: The ``schema`` field of every benchmark document.
SCHEMA = "attn_edu.bench/1"
#: What a document holds, its ``"kind"`` field (a document without one is a sweep); the six
#: after ``decode`` are the measurements of ``--measure NAME`` (``attn_edu.bench.measure.MEASURES``),
#: ``correctness`` the kernels' check against float64 (``--correctness --out``) and
#: ``ring_overlap`` a ring step's transfer timed against its compute on one GPU
#: (``python -m attn_edu.distributed.overlap``, chapter 14), ``fa3_ladder`` the seventh
#: measurement (the forward's FlashAttention-3 steps side by side) and ``profile`` the eighth
#: (the goals' calls: host time by owner, and ncu's reading of their kernels).
KINDS = ("sweep", "goals", "block_sparse", "decode", "backward", "forward_cudnn", "causal_d128", "host_time",
         "decode_graph", "memory", "correctness", "ring_overlap", "fa3_ladder", "profile")
#: Where the recorded sweeps live (package data, plotted by chapters 08, 10 and 11); the
#: environment variable ``ATTN_EDU_BENCH_DATA`` points the chapters at another folder
#: (e.g. the output of ``bash scripts/gpu-bench.sh --dry-run DIR``).
DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "bench"
#: How the FLOPs of a row are counted (written into every document).
FLOP_FORMULA = (
    "attention_flops(B, H, n, n, d, causal): 2*B*H*n*n*(d + d) matmul FLOPs "
    "(Q K^T and P V; = 4*B*H*n^2*d), half of that when causal; softmax not counted. "
    "Sliding-window impls (numpy_window, torch_window): 2*B*H*pairs*(d + d) over the "
    "allowed pairs of the window mask only (attn_edu.masks.allowed_pairs). "
    "tflops = flops / (median_ms * 1e-3) / 1e12"
)


#: The registry's Triton implementations, which run on the CPU in Triton's interpreter
#: (``TRITON_INTERPRET=1``: the dry run of the GPU pipeline; their times are not kernel times).
_INTERPRETABLE = ("triton", "block_sparse")


def _prepare(name: str, n: int, config: BenchConfig, seed: int = 0):
    """(impl, fn, inputs) for one point; ImplUnavailable when it cannot run here."""
    impl, fn = build_impl(name, config)
    interpreted = name in _INTERPRETABLE and interpret_requested()
    if config.device not in impl.devices and not interpreted:
        raise ImplUnavailable(f"{name}: runs on {', '.join(impl.devices)}; got --device {config.device}")
    return impl, fn, make_inputs(impl.framework, n, config, seed)


def _row(impl: Impl, n: int, config: BenchConfig, t: "profiling.Timing") -> Dict[str, Any]:
    if impl.flops is not None:
        flops = int(impl.flops(n, config))
    else:
        flops = profiling.attention_flops(config.batch, config.heads, n, n, config.d, causal=config.causal)
    block_q, block_k = impl.tiles(config) if impl.tiles is not None else (None, None)
    return {
        "impl": impl.name,
        "backend": impl.backend,
        "n": n,
        "block_q": block_q,  # the tiles it ran with (None: not tiled)
        "block_k": block_k,
        "median_ms": t.median_ms,
        "min_ms": t.min_ms,
        "times_ms": list(t.times_ms),
        "flops": flops,
        "tflops": profiling.tflops(flops, t.median_ms),
        "timer": t.method,
        "host_median_ms": t.host_ms,
        "peak_bytes": None,
        "memory_method": None,
    }


def _tuned(name: str) -> Optional[Dict[str, Any]]:
    """The Triton forward's autotuned configuration after a call of ``name`` (triton rows)."""
    return autotune_config() if name == "triton" else None


def _add_memory(row: Dict[str, Any], impl: Impl, fn: Callable, inputs: tuple) -> None:
    method = profiling.memory_method(*inputs, device="numpy" if impl.framework == "numpy" else None)
    out, peak = profiling.peak_memory(fn, *inputs, device=method)
    del out
    row["peak_bytes"], row["memory_method"] = int(peak), method


def run_one(name: str, n: int, config: BenchConfig, repeat: int = 5, warmup: int = 1,
            memory: bool = False, seed: int = 0) -> Dict[str, Any]:
    """Time (and optionally measure the peak memory of) one implementation at length n.

    ``warmup`` untimed calls, ``repeat`` timed ones (:func:`attn_edu.profiling.time_ms`);
    the peak memory, when asked for, comes from one more, separate call.
    """
    impl, fn, inputs = _prepare(name, n, config, seed)
    t = profiling.time_ms(fn, *inputs, repeat=repeat, warmup=warmup, device=config.device)
    row = _row(impl, n, config, t)
    if name == "triton":
        row["autotune_config"] = _tuned(name)
    if memory:
        _add_memory(row, impl, fn, inputs)
    return row


def _progress(items: list, desc: str, progress: Any):
    """``progress``: False (none), True (tqdm on stderr, hidden when not a terminal), or a
    tqdm-like callable such as ``tqdm.auto.tqdm`` (a widget bar in a notebook)."""
    if callable(progress):
        return progress(items, desc=desc)
    if progress:
        try:
            from tqdm import tqdm

            return tqdm(items, desc=desc, disable=None, file=sys.stderr)
        except ImportError:
            pass
    return items


def failure_reason(err: BaseException) -> str:
    """``"out_of_memory"`` for a CUDA (or CPU) allocation failure, else ``"error"``."""
    text = f"{type(err).__name__}: {err}".lower()
    return "out_of_memory" if ("out of memory" in text or "outofmemory" in text
                               or isinstance(err, MemoryError)) else "error"


def _error(name: str, n: int, err: BaseException) -> Dict[str, Any]:
    reason = failure_reason(err)
    torch = sys.modules.get("torch")
    if reason == "out_of_memory" and torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()  # give the failed point's memory back before the next one
    return {"impl": name, "n": n, "error": f"{type(err).__name__}: {str(err)[:300]}", "reason": reason}


def run_sweep(impls: Sequence[str], ns: Sequence[int], config: Optional[BenchConfig] = None,
              repeat: int = 5, warmup: int = 1, memory: bool = False, progress: Any = True,
              command: Optional[str] = None, interleave: bool = False,
              dry_run: bool = False) -> Dict[str, Any]:
    """Every implementation at every length; returns the JSON document (see the module docstring).

    Implementations that cannot run here are listed under ``"skipped"`` with the reason;
    a point that fails is kept with its ``"error"`` and ``"reason"`` (``"out_of_memory"``
    or ``"error"``), and the sweep goes on. ``dry_run=True`` marks the document as a dry
    run of the GPU pipeline on the CPU (tiny sizes; its numbers are not GPU numbers). ``progress``:
    True (a tqdm bar on a terminal), False, or a tqdm-like callable (``tqdm.auto.tqdm``).

    ``interleave=True`` prepares every point, warms each up, then times them round-robin
    (one call of every point per round, ``repeat`` rounds): a burst of load from other
    processes then hits all lengths alike instead of bending one part of the curve. All
    inputs are alive at once, so use it for moderate sizes.
    """
    config = config or BenchConfig()
    for name in impls:
        if name not in REGISTRY:
            raise ValueError(f"unknown implementation {name!r}; known: {', '.join(impl_names())}")
    ns = [check_positive_int("n", n) for n in ns]
    doc = {"schema": SCHEMA, "kind": "sweep", "dry_run": bool(dry_run),
           **environment(config.device), "command": command,
           "config": asdict(config), "repeat": repeat, "warmup": warmup, "interleave": interleave,
           "flop_formula": FLOP_FORMULA, "sdpa_backend": _sdpa_backend(impls, config),
           "results": [], "skipped": {}}
    points = [(name, n) for name in impls for n in ns]
    if not interleave:
        done = 0
        try:
            for name, n in _progress(points, "bench", progress):
                if name not in doc["skipped"]:
                    try:
                        doc["results"].append(run_one(name, n, config, repeat, warmup, memory))
                    except ImplUnavailable as err:
                        doc["skipped"][name] = str(err)
                    except Exception as err:  # keep the sweep going; the point records what happened
                        doc["results"].append(_error(name, n, err))
                done += 1
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through the command line: keep what ran
            doc["stopped"] = f"interrupted after {done} of {len(points)} points"
    else:
        ready: Dict[Tuple[str, int], Any] = {}
        rows: Dict[Tuple[str, int], Dict[str, Any]] = {}
        tuned: Dict[Tuple[str, int], Any] = {}
        for name, n in points:
            if name in doc["skipped"]:
                continue
            try:
                ready[(name, n)] = _prepare(name, n, config)
                _, fn, inputs = ready[(name, n)]
                for _ in range(warmup):
                    fn(*inputs)
                tuned[(name, n)] = _tuned(name)  # the warm-up tuned this point's key
            except ImplUnavailable as err:
                doc["skipped"][name] = str(err)
                ready.pop((name, n), None)
            except Exception as err:
                rows[(name, n)] = _error(name, n, err)
                ready.pop((name, n), None)
        times: Dict[Tuple[str, int], List[float]] = {key: [] for key in ready}
        host: Dict[Tuple[str, int], List[float]] = {key: [] for key in ready}
        method = "perf_counter"
        rounds = [key for _ in range(repeat) for key in ready]
        for key in _progress(rounds, "bench", progress):
            if key in rows:
                continue
            _, fn, inputs = ready[key]
            try:
                t = profiling.time_ms(fn, *inputs, repeat=1, warmup=0, device=config.device)
                times[key].append(t.median_ms)
                method = t.method
                if t.host_ms is not None:
                    host[key].append(t.host_ms)
            except Exception as err:
                rows[key] = _error(key[0], key[1], err)
        for key, (impl, fn, inputs) in ready.items():
            if key in rows:
                continue
            rows[key] = _row(impl, key[1], config,
                             profiling.Timing(times[key], warmup, method, host[key] or None))
            if key[0] == "triton":
                rows[key]["autotune_config"] = tuned.get(key)
            if memory:
                try:
                    _add_memory(rows[key], impl, fn, inputs)
                except Exception as err:
                    rows[key] = _error(key[0], key[1], err)
        doc["results"] = [rows[p] for p in points if p in rows]
    if doc["device"]["kind"] == "cpu":
        doc["device"]["threads"] = cpu_threads()
    return doc


def _sdpa_backend(impls: Sequence[str], config: BenchConfig) -> Optional[str]:
    """SDPA's best backend for the sweep's device, dtype and head dim (when it times SDPA)."""
    if not any(name.startswith("torch_sdpa") for name in impls):
        return None
    try:
        return best_sdpa_backend(config.device, config.dtype, config.d)
    except Exception:  # no torch, or a device torch cannot use: the rows say why
        return None


def save_results(doc: Dict[str, Any], path: Union[str, Path]) -> Path:
    """Write a benchmark document as JSON (creating the folder); returns the path."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def _check_document(doc: Any, path: Path) -> Dict[str, Any]:
    """The document, or ValueError naming the file and what is wrong with it."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        seen = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"{path} is not an attn_edu benchmark file: schema {seen!r}, "
                         f"expected {SCHEMA!r}")
    kind = doc.setdefault("kind", "decode" if doc.get("sweep") == "decode" else "sweep")
    if kind not in KINDS:
        raise ValueError(f"{path}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    need = {"goals": ("goals",), "block_sparse": ("device", "config", "rows"),
            "ring_overlap": ("device", "config", "rows"),
            "correctness": ("device", "results", "passed")}.get(
        kind, ("device", "config", "results"))  # a sweep, a decode sweep, a measurement
    missing = [k for k in need if k not in doc]
    if missing:
        raise ValueError(f"{path}: a {kind} document without {', '.join(missing)}")
    return doc


def load_results(path_or_glob: Union[str, Path], kind: Optional[str] = None) -> List[Dict[str, Any]]:
    """Load benchmark documents: a file, a directory (its ``*.json``) or a glob pattern.

    Always returns a list (sorted by file name), each document with ``"source"`` set to
    its path; ``kind`` (one of ``KINDS``) keeps only documents of that kind. A file that
    is not a benchmark document (no ``"schema": "attn_edu.bench/1"``, an unknown kind,
    missing fields) is a ValueError naming the file.
    """
    p = Path(path_or_glob)
    if p.is_dir():
        files = sorted(p.glob("*.json"))
    elif p.exists():
        files = [p]
    else:
        files = sorted(Path(f) for f in _glob.glob(str(path_or_glob)))
        if not files:
            raise FileNotFoundError(f"no benchmark JSON matches {str(path_or_glob)!r}")
    docs = []
    for f in files:
        try:
            doc = json.loads(f.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{f} is not valid JSON: {err}") from None
        doc = _check_document(doc, f)
        doc["source"] = str(f)
        if kind is None or doc["kind"] == kind:
            docs.append(doc)
    return docs


def recorded_results(kind: Optional[str] = None, what: str = "sweep",
                     data_dir: Union[str, Path, None] = None) -> List[Dict[str, Any]]:
    """The recorded documents of kind ``what`` (one of ``KINDS``)
    in ``attn_edu/data/bench/*.json``; ``kind="cpu"``/``"cuda"`` filters by device.

    ``data_dir`` (or the environment variable ``ATTN_EDU_BENCH_DATA``) reads another
    folder. An empty list when none are recorded. A file there that is not a benchmark
    document is skipped with a warning naming it, so one stray file cannot break a chapter.
    """
    if what not in KINDS:
        raise ValueError(f"what must be one of {', '.join(KINDS)}; got {what!r}")
    folder = Path(data_dir or os.environ.get("ATTN_EDU_BENCH_DATA") or DATA_DIR)
    docs = []
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            docs += load_results(f, kind=what)
        except ValueError as err:
            warnings.warn(f"skipped {f.name}: {err}", stacklevel=2)
    return [d for d in docs if kind is None or d.get("device", {}).get("kind") == kind]


def results_rows(docs: Union[Dict[str, Any], Iterable[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """Flatten documents into one row per (impl, n), each labelled with device and date."""
    if isinstance(docs, dict):
        docs = [docs]
    rows = []
    for doc in docs:
        label = f"{doc['device']['name']} ({doc['device']['kind']}), {doc['date'][:10]}"
        for r in doc["results"]:
            rows.append({**doc["config"], **r, "device": doc["device"]["name"],
                         "device_kind": doc["device"]["kind"], "date": doc["date"], "label": label})
    return rows


def fit_exponent(rows: Union[Dict[str, Any], Iterable[Dict[str, Any]]], impl: str, key: str = "min_ms",
                 n_min: Optional[int] = None, n_max: Optional[int] = None) -> float:
    r"""The exponent :math:`p` of a power law :math:`y \approx c\,n^p` fitted to one implementation.

    Least squares on :math:`\log y = \log c + p \log n` over the rows of ``impl`` with
    ``n_min <= n <= n_max`` (``rows``: a document or a list of rows/results). Use the upper
    part of the n range, where the quadratic term dominates the fixed costs. Chapter 08
    compares the fitted exponents with the theory (2 for time; 2 or about 1 for memory).
    """
    import numpy as np

    if isinstance(rows, dict):
        rows = rows["results"]
    pts = [(r["n"], r[key]) for r in rows
           if r.get("impl") == impl and r.get(key) is not None and "error" not in r
           and (n_min is None or r["n"] >= n_min) and (n_max is None or r["n"] <= n_max)]
    if len({n for n, _ in pts}) < 2:
        raise ValueError(f"fit_exponent needs {key} at two or more lengths for {impl!r}; "
                         f"got {len(pts)} point(s)")
    n, y = np.array(pts, dtype=float).T
    if (y <= 0).any():
        raise ValueError(f"{key} must be positive to fit a power law; got {y.min()}")
    return float(np.polyfit(np.log(n), np.log(y), 1)[0])
