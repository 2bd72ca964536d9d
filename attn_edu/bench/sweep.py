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
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .. import profiling
from .._checks import check_positive_int
from ..kernels._interpret import requested as interpret_requested
from .env import cpu_threads, environment
from .registry import REGISTRY, BenchConfig, Impl, ImplUnavailable, build_impl, impl_names, make_inputs

__all__ = ["SCHEMA", "DATA_DIR", "FLOP_FORMULA", "run_one", "run_sweep", "save_results", "load_results",
           "recorded_results", "results_rows", "fit_exponent"]

#: The ``schema`` field of every benchmark document.
SCHEMA = "attn_edu.bench/1"
#: Where the recorded sweeps live (package data, plotted by chapters 08, 10 and 11).
DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "bench"
#: How the FLOPs of a row are counted (written into every document).
FLOP_FORMULA = (
    "attention_flops(B, H, n, n, d, causal): 2*B*H*n*n*(d + d) matmul FLOPs "
    "(Q K^T and P V; = 4*B*H*n^2*d), half of that when causal; softmax not counted. "
    "Sliding-window impls (numpy_window, torch_window): 2*B*H*pairs*(d + d) over the "
    "allowed pairs of the window mask only (attn_edu.masks.allowed_pairs). "
    "tflops = flops / (median_ms * 1e-3) / 1e12"
)


def _prepare(name: str, n: int, config: BenchConfig, seed: int = 0):
    """(impl, fn, inputs) for one point; ImplUnavailable when it cannot run here."""
    impl, fn = build_impl(name, config)
    interpreted = name == "triton" and interpret_requested()
    if config.device not in impl.devices and not interpreted:
        raise ImplUnavailable(f"{name}: runs on {', '.join(impl.devices)}; got --device {config.device}")
    return impl, fn, make_inputs(impl.framework, n, config, seed)


def _row(impl: Impl, n: int, config: BenchConfig, t: "profiling.Timing") -> Dict[str, Any]:
    if impl.flops is not None:
        flops = int(impl.flops(n, config))
    else:
        flops = profiling.attention_flops(config.batch, config.heads, n, n, config.d, causal=config.causal)
    return {
        "impl": impl.name,
        "backend": impl.backend,
        "n": n,
        "median_ms": t.median_ms,
        "min_ms": t.min_ms,
        "times_ms": list(t.times_ms),
        "flops": flops,
        "tflops": profiling.tflops(flops, t.median_ms),
        "peak_bytes": None,
        "memory_method": None,
    }


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


def _error(name: str, n: int, err: BaseException) -> Dict[str, Any]:
    return {"impl": name, "n": n, "error": f"{type(err).__name__}: {err}"}


def run_sweep(impls: Sequence[str], ns: Sequence[int], config: Optional[BenchConfig] = None,
              repeat: int = 5, warmup: int = 1, memory: bool = False, progress: Any = True,
              command: Optional[str] = None, interleave: bool = False) -> Dict[str, Any]:
    """Every implementation at every length; returns the JSON document (see the module docstring).

    Implementations that cannot run here are listed under ``"skipped"`` with the reason;
    a point that fails (e.g. out of memory) is kept with its ``"error"``. ``progress``:
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
    doc = {"schema": SCHEMA, **environment(config.device), "command": command,
           "config": asdict(config), "repeat": repeat, "warmup": warmup, "interleave": interleave,
           "flop_formula": FLOP_FORMULA, "results": [], "skipped": {}}
    points = [(name, n) for name in impls for n in ns]
    if not interleave:
        for name, n in _progress(points, "bench", progress):
            if name in doc["skipped"]:
                continue
            try:
                doc["results"].append(run_one(name, n, config, repeat, warmup, memory))
            except ImplUnavailable as err:
                doc["skipped"][name] = str(err)
            except Exception as err:  # keep the sweep going; the point records what happened
                doc["results"].append(_error(name, n, err))
    else:
        ready: Dict[Tuple[str, int], Any] = {}
        rows: Dict[Tuple[str, int], Dict[str, Any]] = {}
        for name, n in points:
            if name in doc["skipped"]:
                continue
            try:
                ready[(name, n)] = _prepare(name, n, config)
                _, fn, inputs = ready[(name, n)]
                for _ in range(warmup):
                    fn(*inputs)
            except ImplUnavailable as err:
                doc["skipped"][name] = str(err)
                ready.pop((name, n), None)
            except Exception as err:
                rows[(name, n)] = _error(name, n, err)
                ready.pop((name, n), None)
        times: Dict[Tuple[str, int], List[float]] = {key: [] for key in ready}
        rounds = [key for _ in range(repeat) for key in ready]
        for key in _progress(rounds, "bench", progress):
            if key in rows:
                continue
            _, fn, inputs = ready[key]
            try:
                t = profiling.time_ms(fn, *inputs, repeat=1, warmup=0, device=config.device)
                times[key].append(t.median_ms)
            except Exception as err:
                rows[key] = _error(key[0], key[1], err)
        for key, (impl, fn, inputs) in ready.items():
            if key in rows:
                continue
            rows[key] = _row(impl, key[1], config, profiling.Timing(times[key], warmup))
            if memory:
                try:
                    _add_memory(rows[key], impl, fn, inputs)
                except Exception as err:
                    rows[key] = _error(key[0], key[1], err)
        doc["results"] = [rows[p] for p in points if p in rows]
    if doc["device"]["kind"] == "cpu":
        doc["device"]["threads"] = cpu_threads()
    return doc


def save_results(doc: Dict[str, Any], path: Union[str, Path]) -> Path:
    """Write a benchmark document as JSON (creating the folder); returns the path."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def load_results(path_or_glob: Union[str, Path]) -> List[Dict[str, Any]]:
    """Load benchmark documents: a file, a directory (its ``*.json``) or a glob pattern.

    Always returns a list (sorted by file name), each document with ``"source"`` set to
    its path. A document without ``"schema": "attn_edu.bench/1"`` is an error.
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
        doc = json.loads(f.read_text())
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError(f"{f} is not an attn_edu benchmark file (schema {SCHEMA!r})")
        doc["source"] = str(f)
        docs.append(doc)
    return docs


def recorded_results(kind: Optional[str] = None) -> List[Dict[str, Any]]:
    """The sweeps committed in ``attn_edu/data/bench/*.json``; ``kind="cpu"``/``"cuda"`` filters.

    An empty list when none are recorded (e.g. no GPU sweep has been run yet).
    """
    if not DATA_DIR.is_dir() or not any(DATA_DIR.glob("*.json")):
        return []
    docs = load_results(DATA_DIR)
    return [d for d in docs if kind is None or d["device"]["kind"] == kind]


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
