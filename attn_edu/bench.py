"""Benchmarks of attention implementations: ``python -m attn_edu.bench``.

A sweep times every implementation named with ``--impl`` at every length ``--n`` and
writes one JSON document that says where and how the numbers were taken:

* ``device`` (CPU model from /proc/cpuinfo, or ``torch.cuda.get_device_name``),
  ``versions`` (python, numpy, torch, triton, attn_edu), ``git_commit``, ``date``
  (UTC, ISO 8601) and the ``command`` line;
* per (impl, n): median and minimum time in ms, TFLOP/s and, with ``--memory``, the
  peak bytes above the inputs (:func:`attn_edu.profiling.peak_memory`).

TFLOP/s use :func:`attn_edu.profiling.attention_flops` (``FLOP_FORMULA``): matmul FLOPs
only, ``4*B*H*n^2*d`` forward, half of that when causal. The sparse ``numpy_window`` and
``torch_window`` (tiled attention with a ``--window`` sliding-window mask) count only the
allowed pairs (``window_pairs``). Chapters 08 and 10 plot the recorded sweeps in
``attn_edu/data/bench/*.json`` (:func:`recorded_results`).

``--goals`` measures the project's performance goals side by side in one run and exits
non-zero when a measured goal fails; goals that cannot run here (no GPU, a module not
written yet) are printed as *not run*. Examples::

    python -m attn_edu.bench --impl numpy_naive torch_sdpa --n 256 512 1024 --memory \\
        --out sweep.json
    python -m attn_edu.bench --list
    python -m attn_edu.bench --goals
"""
from __future__ import annotations

import argparse
import datetime as _dt
import glob as _glob
import importlib
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import profiling
from .kernels._interpret import requested as _interpret_requested

__all__ = [
    "BenchConfig",
    "Impl",
    "ImplUnavailable",
    "REGISTRY",
    "register_impl",
    "impl_names",
    "build_impl",
    "make_inputs",
    "run_one",
    "window_pairs",
    "cpu_threads",
    "set_cpu_threads",
    "run_sweep",
    "environment",
    "save_results",
    "load_results",
    "recorded_results",
    "results_rows",
    "fit_exponent",
    "DATA_DIR",
    "GOALS",
    "goal_numpy_memory_and_time",
    "goal_sparse_speed",
    "goal_gpu_triton_vs_sdpa",
    "goal_gpu_causal_speedup",
    "run_goals",
    "main",
]

SCHEMA = "attn_edu.bench/1"
DATA_DIR = Path(__file__).resolve().parent / "data" / "bench"
FLOP_FORMULA = (
    "attention_flops(B, H, n, n, d, causal): 2*B*H*n*n*(d + d) matmul FLOPs "
    "(Q K^T and P V; = 4*B*H*n^2*d), half of that when causal; softmax not counted. "
    "Sliding-window impls (numpy_window, torch_window): 2*B*H*pairs*(d + d) over the "
    "allowed pairs of the window mask only. "
    "tflops = flops / (median_ms * 1e-3) / 1e12"
)


class ImplUnavailable(RuntimeError):
    """The implementation exists in the registry but cannot run here (module, device, dtype)."""


# --------------------------------------------------------------------------- registry
@dataclass
class BenchConfig:
    """Everything but the length that defines one benchmark point."""

    batch: int = 1
    heads: int = 1
    d: int = 64
    dtype: str = "float32"
    causal: bool = False
    device: str = "cpu"
    block_q: int = 128
    block_k: int = 128
    window: Optional[int] = None  # sliding window for masked implementations


@dataclass
class Impl:
    """One entry of the registry: ``build(config)`` returns ``fn(q, k, v) -> out``."""

    name: str
    framework: str  # "numpy" or "torch": which arrays make_inputs hands it
    description: str
    build: Callable[[BenchConfig], Callable]
    backend: Optional[str] = None  # e.g. the pinned SDPA backend
    devices: Tuple[str, ...] = ("cpu", "cuda")
    #: ``flops(n, config)``: the FLOPs the row reports; None = dense attention_flops
    flops: Optional[Callable[[int, "BenchConfig"], int]] = None


REGISTRY: Dict[str, Impl] = {}


def register_impl(name: str, framework: str, build: Callable[[BenchConfig], Callable], description: str,
                  backend: Optional[str] = None, devices: Sequence[str] = ("cpu", "cuda"),
                  flops: Optional[Callable[[int, BenchConfig], int]] = None) -> Impl:
    """Add an implementation to ``REGISTRY`` (the hook for later ones, e.g. block-sparse).

    ``build(config)`` is called once per sweep point and returns ``fn(q, k, v)``; it should
    import what it needs lazily and raise :class:`ImplUnavailable` with a reason when it
    cannot run (module missing, device or dtype unsupported). ``flops(n, config)``, when
    given, is the FLOP count its rows report (e.g. only the allowed pairs of a sparse
    mask); by default the dense :func:`attn_edu.profiling.attention_flops`.
    """
    if framework not in ("numpy", "torch"):
        raise ValueError(f"framework must be 'numpy' or 'torch'; got {framework!r}")
    impl = Impl(name, framework, description, build, backend, tuple(devices), flops)
    REGISTRY[name] = impl
    return impl


def impl_names() -> List[str]:
    return sorted(REGISTRY)


def _import(module: str, attr: str, who: str):
    """``module.attr``, or ImplUnavailable naming what is missing."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise ImplUnavailable(f"{who}: needs {module.split('.')[0]}, which is not installed")
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise ImplUnavailable(f"{who}: cannot import {module} ({err})") from None
    if not hasattr(mod, attr):
        raise ImplUnavailable(f"{who}: {module} has no {attr} (not written yet?)")
    return getattr(mod, attr)


def _numpy_dtype_ok(cfg: BenchConfig, who: str) -> None:
    if cfg.device != "cpu":
        raise ImplUnavailable(f"{who}: NumPy runs on the CPU only; got --device {cfg.device}")
    if cfg.dtype not in ("float16", "float32", "float64"):
        raise ImplUnavailable(f"{who}: NumPy has no {cfg.dtype}; use float16, float32 or float64")


def _build_numpy_naive(cfg: BenchConfig) -> Callable:
    _numpy_dtype_ok(cfg, "numpy_naive")
    from .reference import scaled_dot_product_attention as sdpa

    return lambda q, k, v: sdpa(q, k, v, causal=cfg.causal)


def _build_flash(who: str, numpy: bool) -> Callable[[BenchConfig], Callable]:
    def build(cfg: BenchConfig) -> Callable:
        if numpy:
            _numpy_dtype_ok(cfg, who)
        flash = _import("attn_edu.flash", "flash_attention", who)
        return lambda q, k, v: flash(q, k, v, causal=cfg.causal, block_q=cfg.block_q, block_k=cfg.block_k)

    return build


def window_pairs(n: int, window: int, causal: bool = False) -> int:
    """Allowed (query, key) pairs of :func:`attn_edu.masks.sliding_window_mask` ``(n, window, causal)``.

    Causal: ``n*w - w*(w - 1)/2`` (``w = min(window, n)``). Symmetric (Longformer, ``h =
    window // 2`` keys on each side): ``n*(2h + 1) - h*(h + 1)`` with ``h = min(h, n - 1)``.
    Both are ``O(n*w)``: linear in ``n`` for a fixed window. Chapters 08 and 11.
    """
    n, window = profiling._pos("n", n), profiling._pos("window", window)
    if causal:
        from .masks import allowed_pairs

        return allowed_pairs("sliding_window", n, window=window)
    h = min(window // 2, n - 1)
    return n * (2 * h + 1) - h * (h + 1)


def _window_flops(n: int, cfg: BenchConfig) -> int:
    """Matmul FLOPs of the window's allowed pairs only: ``2*B*H*pairs*(d + d)``."""
    if cfg.window is None:
        return profiling.attention_flops(cfg.batch, cfg.heads, n, n, cfg.d, causal=cfg.causal)
    return 2 * cfg.batch * cfg.heads * window_pairs(n, cfg.window, bool(cfg.causal)) * 2 * cfg.d


def _build_window(who: str, numpy: bool) -> Callable[[BenchConfig], Callable]:
    """Sparse attention on the CPU: the tiled flash_attention with a sliding-window mask.

    The boolean (n, n) mask is built once per length on the first call (the warm-up) and
    kept, so neither the timed calls nor the peak memory include building it; holding it
    costs n^2 bytes all the same. Tiles the window leaves empty are skipped, so the work
    is about ``(window + block) * n * 4d`` FLOPs; planning which tiles to skip still reads
    the whole mask once per call (O(n^2) cheap boolean operations).
    """
    def build(cfg: BenchConfig) -> Callable:
        if cfg.window is None:
            raise ImplUnavailable(f"{who}: needs --window (the sliding-window width)")
        if numpy:
            _numpy_dtype_ok(cfg, who)
        flash = _import("attn_edu.flash", "flash_attention", who)
        window = _import("attn_edu.masks", "sliding_window_mask", who)
        cache: Dict[Tuple[int, str], Any] = {}

        def run(q, k, v):
            key = (q.shape[-2], str(getattr(q, "device", "cpu")))
            if key not in cache:
                m = window(q.shape[-2], cfg.window, causal=bool(cfg.causal))  # (L, L) bool
                if not numpy:
                    import torch

                    m = torch.as_tensor(m, device=q.device)
                cache[key] = m
            return flash(q, k, v, mask=cache[key], block_q=cfg.block_q, block_k=cfg.block_k)

        return run

    return build


def _build_torch_naive(cfg: BenchConfig) -> Callable:
    _import("torch", "Tensor", "torch_naive")
    from .torch_ops import scaled_dot_product_attention as sdpa

    return lambda q, k, v: sdpa(q, k, v, causal=cfg.causal)


_SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "math": "MATH",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
}


def _build_sdpa(backend: Optional[str]) -> Callable[[BenchConfig], Callable]:
    who = "torch_sdpa" + (f"_{backend}" if backend else "")

    def build(cfg: BenchConfig) -> Callable:
        sdpa = _import("torch.nn.functional", "scaled_dot_product_attention", who)
        if backend is None:  # the dispatcher picks
            return lambda q, k, v: sdpa(q, k, v, is_causal=cfg.causal)
        attention = _import("torch.nn.attention", "sdpa_kernel", who)
        kind = getattr(importlib.import_module("torch.nn.attention").SDPBackend, _SDPA_BACKENDS[backend])

        def run(q, k, v):
            with attention(kind):
                return sdpa(q, k, v, is_causal=cfg.causal)

        return run

    return build


def _build_triton(cfg: BenchConfig) -> Callable:
    if cfg.device != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ImplUnavailable("triton: needs --device cuda (or TRITON_INTERPRET=1 for a slow CPU check)")
    fwd = _import("attn_edu.kernels", "triton_attention_forward", "triton")
    return lambda q, k, v: fwd(q, k, v, causal=cfg.causal)[0]


def _build_block_sparse(cfg: BenchConfig) -> Callable:
    """Hook: block-sparse Triton attention with a sliding-window mask of ``cfg.window``."""
    if cfg.window is None:
        raise ImplUnavailable("block_sparse: needs --window (the sliding-window width)")
    fn = _import("attn_edu.kernels.block_sparse_triton", "block_sparse_attention", "block_sparse")
    window = _import("attn_edu.masks", "sliding_window_mask", "block_sparse")
    cache: Dict[Tuple[int, str], Any] = {}

    def run(q, k, v):
        key = (q.shape[-2], str(q.device))
        if key not in cache:
            import torch

            m = window(q.shape[-2], cfg.window, causal=bool(cfg.causal))
            cache[key] = torch.as_tensor(m, device=q.device)
        return fn(q, k, v, cache[key], block=cfg.block_q)

    return run


register_impl("numpy_naive", "numpy", _build_numpy_naive,
              "attn_edu.scaled_dot_product_attention on NumPy arrays (materialises n x n)", devices=("cpu",))
register_impl("numpy_flash", "numpy", _build_flash("numpy_flash", True),
              "attn_edu.flash.flash_attention on NumPy arrays (tiled, block_q x block_k)", devices=("cpu",))
register_impl("numpy_window", "numpy", _build_window("numpy_window", True),
              "attn_edu.flash.flash_attention on NumPy arrays with masks.sliding_window_mask(n, --window) "
              "(sparse: empty tiles skipped; FLOPs = allowed pairs only)",
              devices=("cpu",), flops=_window_flops)
register_impl("torch_window", "torch", _build_window("torch_window", False),
              "attn_edu.flash.flash_attention on torch tensors with masks.sliding_window_mask(n, --window) "
              "(sparse: empty tiles skipped; FLOPs = allowed pairs only)",
              flops=_window_flops)
register_impl("torch_naive", "torch", _build_torch_naive,
              "attn_edu.torch_ops.scaled_dot_product_attention (matmul, softmax, matmul)")
register_impl("torch_flash", "torch", _build_flash("torch_flash", False),
              "attn_edu.flash.flash_attention on torch tensors (tiled PyTorch)")
register_impl("torch_sdpa", "torch", _build_sdpa(None),
              "torch.nn.functional.scaled_dot_product_attention, backend chosen by PyTorch", backend="auto")
for _b in _SDPA_BACKENDS:
    register_impl(f"torch_sdpa_{_b}", "torch", _build_sdpa(_b),
                  f"torch.nn.functional.scaled_dot_product_attention pinned with "
                  f"sdpa_kernel(SDPBackend.{_SDPA_BACKENDS[_b]})", backend=_SDPA_BACKENDS[_b])
register_impl("triton", "torch", _build_triton,
              "attn_edu.kernels.triton_attention_forward (Triton FlashAttention forward)", devices=("cuda",))
register_impl("block_sparse", "torch", _build_block_sparse,
              "attn_edu.kernels.block_sparse_triton.block_sparse_attention, sliding window --window "
              "(TFLOP/s counted as dense: an effective rate)",
              devices=("cuda",))


def build_impl(name: str, config: BenchConfig) -> Tuple[Impl, Callable]:
    """Look ``name`` up and build it; ValueError for an unknown name, ImplUnavailable if it cannot run."""
    if name not in REGISTRY:
        raise ValueError(f"unknown implementation {name!r}; known: {', '.join(impl_names())}")
    impl = REGISTRY[name]
    return impl, impl.build(config)


# --------------------------------------------------------------------------- inputs
def make_inputs(framework: str, n: int, config: BenchConfig, seed: int = 0):
    """Random q, k, v of shape (batch, heads, n, d), standard normal, in config.dtype."""
    import numpy as np

    n = profiling._pos("n", n)
    shape = (config.batch, config.heads, n, config.d)  # (B, H, L, D)
    if framework == "numpy":
        rng = np.random.default_rng(seed)
        return tuple(rng.standard_normal(shape).astype(config.dtype) for _ in range(3))
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    dtype = getattr(torch, config.dtype)
    return tuple(torch.randn(shape, generator=g).to(device=config.device, dtype=dtype) for _ in range(3))


# --------------------------------------------------------------------------- environment
def _version(dist: str) -> Optional[str]:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _git(*args: str) -> Optional[str]:
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _git_commit() -> Optional[str]:
    """The checkout's HEAD commit, or None outside a git checkout (e.g. an installed package)."""
    out = _git("rev-parse", "HEAD")
    return out.strip() or None if out is not None else None


def _git_dirty() -> Optional[bool]:
    """True when tracked files differ from the commit (the numbers may not match it exactly)."""
    out = _git("status", "--porcelain", "--untracked-files=no")
    return None if out is None else bool(out.strip())


def environment(device: str = "cpu") -> Dict[str, Any]:
    """Where and with what the numbers are taken: device, versions, git commit, date (UTC)."""
    from . import __version__

    if device == "cuda":
        import torch

        name = torch.cuda.get_device_name()
        dev = {"kind": "cuda", "name": name, "cuda": torch.version.cuda,
               "memory_bytes": torch.cuda.get_device_properties(0).total_memory}
    else:
        dev = {"kind": "cpu", "name": _cpu_name(), "logical_cpus": os.cpu_count()}
    versions = {"python": platform.python_version(), "attn_edu": __version__}
    for dist in ("numpy", "torch", "triton"):
        versions[dist] = _version(dist)
    return {
        "device": dev,
        "versions": versions,
        "platform": platform.platform(),
        "git_commit": _git_commit(),
        "git_dirty": _git_dirty(),
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }


# --------------------------------------------------------------------------- threads
_BLAS_FUNCS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)


def _numpy_openblas():
    """(set, get) of the OpenBLAS that NumPy loaded, found in /proc/self/maps; None if unknown."""
    import ctypes

    import numpy  # noqa: F401  (make sure its BLAS is loaded)

    try:
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and "/" in ln})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _BLAS_FUNCS:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                return getattr(lib, set_name), getattr(lib, get_name)
    return None


def cpu_threads() -> Dict[str, Optional[int]]:
    """Threads NumPy's OpenBLAS and torch use now (None where it cannot be read)."""
    blas = _numpy_openblas()
    torch = sys.modules.get("torch")
    return {"numpy_blas": int(blas[1]()) if blas else None,
            "torch": torch.get_num_threads() if torch is not None else None}


def set_cpu_threads(n: int) -> Dict[str, Optional[int]]:
    """Use ``n`` threads in NumPy's OpenBLAS and in torch (if imported); returns :func:`cpu_threads`.

    On a CPU shared with other work, fewer threads than cores give much steadier times:
    a parallel matmul or softmax waits for its slowest thread, and a thread the OS has
    parked makes the whole call wait a scheduler slice. Best effort for BLAS: only
    OpenBLAS (what NumPy's wheels ship) is adjusted.
    """
    n = profiling._pos("n", n)
    blas = _numpy_openblas()
    if blas:
        blas[0](n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    return cpu_threads()


# --------------------------------------------------------------------------- measuring
def _prepare(name: str, n: int, config: BenchConfig, seed: int = 0):
    """(impl, fn, inputs) for one point; ImplUnavailable when it cannot run here."""
    impl, fn = build_impl(name, config)
    interpreted = name == "triton" and _interpret_requested()
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
    ns = [profiling._pos("n", n) for n in ns]
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


# --------------------------------------------------------------------------- files
def save_results(doc: Dict[str, Any], path: Union[str, Path]) -> Path:
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


# --------------------------------------------------------------------------- goals
#: Targets of the performance goals. ``op`` compares the measured ratio with ``target``.
GOALS: Dict[str, Dict[str, Any]] = {
    "numpy_peak_naive_over_tiled": {"op": ">=", "target": 50.0,
                                    "what": "peak memory, naive / tiled (NumPy, d=64, fp32, tiles 256; "
                                            "goal stated at n=8192)"},
    "numpy_time_tiled_over_naive": {"op": "<=", "target": 1.2,
                                    "what": "time, tiled / naive (same run, interleaved)"},
    "sparse_time_over_density": {"op": "<=", "target": 1 / 0.75,
                                 "what": "(time masked / time dense) / tile density, causal sliding window, "
                                         "tiles 256 (goal stated at n=8192, window 1024)"},
    "triton_over_sdpa_flash_tflops": {"op": ">=", "target": 1.0,
                                      "what": "Triton forward TFLOP/s / SDPA flash backend TFLOP/s, bf16"},
    "causal_over_noncausal_time": {"op": "<=", "target": 1 / 1.8,
                                   "what": "Triton forward time, causal / non-causal (goal: causal "
                                           ">= 1.8x faster; ideal 0.5)"},
}


def _goal(key: str, measured: Optional[float], details: Dict[str, Any], note: str = "") -> Dict[str, Any]:
    g = GOALS[key]
    if measured is None:
        passed = None
    elif g["op"] == ">=":
        passed = measured >= g["target"]
    else:
        passed = measured <= g["target"]
    return {"goal": key, "what": g["what"], "op": g["op"], "target": g["target"],
            "measured": measured, "passed": passed, "details": details, "note": note}


def _median(xs: List[float]) -> float:
    import statistics

    return float(statistics.median(xs))


def _interleaved(fns: Dict[str, Callable], args: tuple, repeat: int, device: str) -> Dict[str, List[float]]:
    """Run a, b, a, b, ... after one warm-up each, so machine load hits both alike."""
    for fn in fns.values():
        fn(*args)
    times: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for key, fn in fns.items():
            times[key].append(profiling.time_ms(fn, *args, repeat=1, warmup=0, device=device).median_ms)
    return times


def goal_numpy_memory_and_time(n: int = 8192, d: int = 64, block: int = 256,
                               repeat: int = 3) -> List[Dict[str, Any]]:
    """Peak memory naive/tiled (>= 50) and time tiled/naive (<= 1.2), NumPy float32, one run."""
    try:
        flash = _import("attn_edu.flash", "flash_attention", "numpy tiled goal")
    except ImplUnavailable as err:
        return [_goal("numpy_peak_naive_over_tiled", None, {}, f"not run: {err}"),
                _goal("numpy_time_tiled_over_naive", None, {}, f"not run: {err}")]
    import numpy as np

    from .reference import scaled_dot_product_attention as naive

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))  # (L, D)

    def tiled(q, k, v):
        return flash(q, k, v, block_q=block, block_k=block)

    _, peak_naive = profiling.peak_memory(naive, q, k, v, device="numpy")
    _, peak_tiled = profiling.peak_memory(tiled, q, k, v, device="numpy")
    times = _interleaved({"naive": naive, "tiled": tiled}, (q, k, v), repeat, "cpu")
    tn, tt = _median(times["naive"]), _median(times["tiled"])
    shape = {"n": n, "d": d, "dtype": "float32", "block": block, "repeat": repeat}
    return [
        _goal("numpy_peak_naive_over_tiled", peak_naive / max(peak_tiled, 1),
              {**shape, "peak_naive_bytes": peak_naive, "peak_tiled_bytes": peak_tiled}),
        _goal("numpy_time_tiled_over_naive", tt / tn,
              {**shape, "naive_ms": times["naive"], "tiled_ms": times["tiled"]}),
    ]


def goal_sparse_speed(n: int = 8192, window: int = 1024, block: int = 256, d: int = 64,
                      repeat: int = 5) -> List[Dict[str, Any]]:
    """Masked (sliding window, causal) vs dense tiled NumPy attention: time ratio vs tile density.

    The goal: ``time(masked) / time(dense) <= density / 0.75`` -- skipping empty tiles
    delivers at least 75% of the ideal saving. Reported as ``(time ratio) / density``.

    The masked calls reuse a :class:`attn_edu.flash.TilePlan` built once, as a model
    reuses one pattern across heads, layers and steps (FlexAttention's block mask works
    the same way); building the plan reads the whole n x n mask, and its time is
    measured and reported next to the goal, together with the ratio a call would give
    if it planned every time.
    """
    try:
        flash = _import("attn_edu.flash", "flash_attention", "sparse goal")
        plan_tiles = _import("attn_edu.flash", "plan_tiles", "sparse goal")
        window_mask = _import("attn_edu.masks", "sliding_window_mask", "sparse goal")
    except ImplUnavailable as err:
        return [_goal("sparse_time_over_density", None, {}, f"not run: {err}")]
    import numpy as np

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))  # (L, D)
    mask = np.asarray(window_mask(n, window, causal=True))  # (L, L) bool
    plan_ms = profiling.time_ms(plan_tiles, mask, block, block, repeat=3, warmup=0).median_ms
    plan = plan_tiles(mask, block, block)
    density = plan.density

    def masked(q, k, v):
        return flash(q, k, v, mask=plan)

    def planned_each_call(q, k, v):
        return flash(q, k, v, mask=mask, block_q=block, block_k=block)

    def dense(q, k, v):
        return flash(q, k, v, block_q=block, block_k=block)

    times = _interleaved({"masked": masked, "dense": dense, "planned": planned_each_call},
                         (q, k, v), repeat, "cpu")
    ratio = _median(times["masked"]) / _median(times["dense"])
    ratio_planned = _median(times["planned"]) / _median(times["dense"])
    return [_goal("sparse_time_over_density", ratio / density,
                  {"n": n, "d": d, "window": window, "block": block, "density": density,
                   "time_ratio": ratio, "masked_ms": times["masked"], "dense_ms": times["dense"],
                   "planned_each_call_ms": times["planned"],
                   "planned_each_call_over_density": ratio_planned / density, "plan_ms": plan_ms},
                  f"plan built once ({plan_ms:.1f} ms); planning on every call gives "
                  f"{ratio_planned / density:.2f}")]


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def goal_gpu_triton_vs_sdpa(ns: Sequence[int] = (4096, 8192, 16384), ds: Sequence[int] = (64, 128),
                            batch: int = 4, heads: int = 16, repeat: int = 10) -> List[Dict[str, Any]]:
    """Triton forward TFLOP/s over SDPA's flash backend, bf16, non-causal; the worst ratio counts."""
    if not _cuda_available():
        return [_goal("triton_over_sdpa_flash_tflops", None, {}, "not run: no CUDA GPU")]
    details, ratios = [], []
    try:
        for d in ds:
            for n in ns:
                cfg = BenchConfig(batch=batch, heads=heads, d=d, dtype="bfloat16", device="cuda")
                tri = run_one("triton", n, cfg, repeat=repeat, warmup=2)
                ref = run_one("torch_sdpa_flash", n, cfg, repeat=repeat, warmup=2)
                ratios.append(tri["tflops"] / ref["tflops"])
                details.append({"n": n, "d": d, "triton_tflops": tri["tflops"],
                                "sdpa_flash_tflops": ref["tflops"], "ratio": ratios[-1]})
    except ImplUnavailable as err:
        return [_goal("triton_over_sdpa_flash_tflops", None, {"points": details}, f"not run: {err}")]
    return [_goal("triton_over_sdpa_flash_tflops", min(ratios),
                  {"batch": batch, "heads": heads, "points": details}, "worst point")]


def goal_gpu_causal_speedup(n: int = 8192, d: int = 64, batch: int = 4, heads: int = 16,
                            repeat: int = 10) -> List[Dict[str, Any]]:
    """Triton forward, causal / non-causal time at bf16 (skipping tiles should nearly halve it)."""
    if not _cuda_available():
        return [_goal("causal_over_noncausal_time", None, {}, "not run: no CUDA GPU")]
    try:
        full = run_one("triton", n, BenchConfig(batch=batch, heads=heads, d=d, dtype="bfloat16",
                                                device="cuda"), repeat=repeat, warmup=2)
        causal = run_one("triton", n, BenchConfig(batch=batch, heads=heads, d=d, dtype="bfloat16",
                                                  device="cuda", causal=True), repeat=repeat, warmup=2)
    except ImplUnavailable as err:
        return [_goal("causal_over_noncausal_time", None, {}, f"not run: {err}")]
    return [_goal("causal_over_noncausal_time", causal["median_ms"] / full["median_ms"],
                  {"n": n, "d": d, "full_ms": full["median_ms"], "causal_ms": causal["median_ms"]})]


def run_goals(n: int = 8192, repeat: int = 3, sparse: bool = True, gpu: bool = True,
              stream=None) -> Tuple[List[Dict[str, Any]], int]:
    """Measure every goal, print a table; return (goal records, exit code: 1 if one failed)."""
    stream = stream or sys.stdout
    goals = goal_numpy_memory_and_time(n=n, repeat=repeat)
    if sparse:
        goals += goal_sparse_speed(n=n, window=min(1024, n // 2), repeat=repeat)
    if gpu:
        goals += goal_gpu_triton_vs_sdpa() + goal_gpu_causal_speedup()
    for g in goals:
        status = {True: "PASS", False: "FAIL", None: "not run"}[g["passed"]]
        measured = "-" if g["measured"] is None else f"{g['measured']:.3g}"
        where = ", ".join(f"{k}={g['details'][k]}" for k in ("n", "window") if k in g["details"])
        note = "; ".join(x for x in (where, g["note"]) if x)
        print(f"{status:8s} {g['goal']:32s} measured {measured:>8s}  goal {g['op']} {g['target']:.3g}"
              f"  {g['what']}{'  [' + note + ']' if note else ''}", file=stream)
    return goals, int(any(g["passed"] is False for g in goals))


# --------------------------------------------------------------------------- CLI
def _ints(text: str) -> List[int]:
    return [int(x) for x in text.replace(",", " ").split()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m attn_edu.bench",
        description="Time attention implementations over sequence lengths; write JSON with device metadata.",
    )
    p.add_argument("--impl", nargs="+", default=["numpy_naive"],
                   help="implementations (space or comma separated); --list shows them")
    p.add_argument("--n", nargs="+", default=["256", "512", "1024"], help="sequence lengths")
    p.add_argument("--d", type=int, default=64, help="head dimension")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--dtype", default="float32", choices=["float16", "bfloat16", "float32", "float64"])
    p.add_argument("--causal", action="store_true")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--block", type=int, default=128, help="tile size (block_q = block_k) for tiled impls")
    p.add_argument("--window", type=int, default=None,
                   help="sliding-window width for numpy_window, torch_window and block_sparse")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for NumPy's OpenBLAS and torch; 1 gives steadier times on a busy CPU")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
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
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
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
    if args.goals:
        goals, code = run_goals(n=args.goal_n, repeat=max(1, min(args.repeat, 5)))
        if args.out:
            env = environment("cpu")
            env["device"]["threads"] = cpu_threads()
            save_results({"schema": SCHEMA, **env, "command": _command(argv),
                          "config": {}, "results": [], "skipped": {}, "goals": goals}, args.out)
        return code
    unknown = [x for x in impls if x not in REGISTRY]
    if unknown:
        parser.error(f"unknown --impl {', '.join(unknown)}; known: {', '.join(impl_names())}")
    try:
        ns = [n for item in args.n for n in _ints(item)]
    except ValueError:
        parser.error(f"--n must be integers; got {' '.join(args.n)}")
    if args.device == "cuda" and not _cuda_available():
        parser.error("--device cuda but PyTorch sees no CUDA GPU")
    config = BenchConfig(batch=args.batch, heads=args.heads, d=args.d, dtype=args.dtype, causal=args.causal,
                         device=args.device, block_q=args.block, block_k=args.block, window=args.window)
    try:
        doc = run_sweep(impls, ns, config, repeat=args.repeat, warmup=args.warmup, memory=args.memory,
                        progress=not args.no_progress, command=_command(argv),
                        interleave=args.interleave)
    except ValueError as err:
        parser.error(str(err))
    for r in doc["results"]:
        if "error" in r:
            print(f"{r['impl']:18s} n={r['n']:6d}  ERROR {r['error']}")
            continue
        mem = "" if r["peak_bytes"] is None else f"  peak {r['peak_bytes'] / 2**20:9.2f} MiB"
        print(f"{r['impl']:18s} n={r['n']:6d}  {r['median_ms']:10.3f} ms (min {r['min_ms']:.3f})"
              f"  {r['tflops'] * 1e3:8.2f} GFLOP/s{mem}")
    for name, why in doc["skipped"].items():
        print(f"{name:18s} skipped: {why}")
    print(f"device: {doc['device']['name']} ({doc['device']['kind']}); {doc['date']}")
    if args.out:
        print(f"wrote {save_results(doc, args.out)}")
    failed = any("error" in r for r in doc["results"])
    return 1 if failed or not doc["results"] else 0


def _command(argv: Sequence[str]) -> str:
    return "python -m attn_edu.bench " + " ".join(shlex.quote(a) for a in argv)


if __name__ == "__main__":
    sys.exit(main())
