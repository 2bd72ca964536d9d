"""Where and with what the numbers are taken: device, library versions, git commit, threads.

:func:`environment` is the header of every JSON document a sweep writes; on a shared CPU,
:func:`set_cpu_threads` pins NumPy's OpenBLAS and torch to fewer threads for steadier times.
What a GPU can run decides two choices of every GPU measurement, made here once:
:func:`gpu_half_dtype` (float16 before compute capability 8.0, bfloat16 from it) and
:func:`sdpa_backends` / :func:`best_sdpa_backend` (flash, else efficient, else math).
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .._checks import check_positive_int
from ..gpu_profile import missing_sdpa_backends

__all__ = ["environment", "cpu_threads", "set_cpu_threads", "gpu_half_dtype", "sdpa_backends",
           "best_sdpa_backend", "sdpa_refusal", "SDPA_PREFERENCE", "SDPA_BACKENDS", "autotune_config"]


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
    root = Path(__file__).resolve().parents[2]  # the checkout: attn_edu/bench/ is two below
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


def _capability(device: Any = None) -> Tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(device))


def gpu_half_dtype(device: Any = "cuda") -> str:
    """The 16-bit type the kernels run in on ``device``: ``"bfloat16"`` on GPUs of compute
    capability 8.0 or newer (A100, RTX 30xx, H100), ``"float16"`` before (Colab's T4, 7.5)
    and on the CPU (Triton's interpreter takes no bfloat16).

    Under the ``t4`` GPU profile (:mod:`attn_edu.gpu_profile`) the capability reads 7.5, so
    float16. Not ``torch.cuda.is_bf16_supported()``: by default it also says True where bfloat16 is
    merely *emulated* (a T4), but Triton's kernels and SDPA's flash backend need it natively.
    Not float32 either: on a GPU its exact products take no tensor cores and the autotuner
    compiles slow, spilling configurations for minutes. ``device``: ``"cuda"`` (the current
    GPU), ``"cuda:1"``, a ``torch.device``, an index, or ``"cpu"``. The name is a string;
    ``getattr(torch, gpu_half_dtype(device))`` is the torch dtype.
    """
    kind = getattr(device, "type", device)
    if isinstance(kind, str) and kind.split(":")[0] == "cpu":
        return "float16"
    if not isinstance(kind, (str, int)) or (isinstance(kind, str) and kind.split(":")[0] != "cuda"):
        raise ValueError(f"device must be 'cuda', 'cuda:N', 'cpu', a torch.device or an index; got {device!r}")
    return "bfloat16" if _capability(device) >= (8, 0) else "float16"


#: SDPA's backends from the best to the fallback, FlashAttention-2 (compute capability
#: 8.0+, 16-bit types), memory-efficient (xFormers' kernel, any CUDA GPU), math (composite).
SDPA_PREFERENCE = ("flash", "efficient", "math")
#: The ``torch.nn.attention.SDPBackend`` member of each backend name (the registry's too).
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "math": "MATH",
                 "cudnn": "CUDNN_ATTENTION"}


def sdpa_refusal(backend: str, device: str = "cuda", dtype: Optional[str] = None, d: int = 64,
                 backward: bool = False) -> Optional[str]:
    """Why SDPA pinned to ``backend`` (a key of :data:`SDPA_BACKENDS`) does not run here, or
    None when it does: one tiny call (128 keys) under ``torch.nn.attention.sdpa_kernel``,
    and with ``backward=True`` its backward too. The reason is PyTorch's error followed by
    the warnings in which each backend says why it declined (compute capability, dtype,
    head dim). ``dtype`` defaults to :func:`gpu_half_dtype`.
    """
    import warnings

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if backend not in SDPA_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(SDPA_BACKENDS)}; got {backend!r}")
    dtype = dtype or gpu_half_dtype(device)
    x = torch.zeros(1, 1, 128, d, device=device, dtype=getattr(torch, dtype), requires_grad=backward)
    with warnings.catch_warnings(record=True) as seen:  # the reasons a backend refuses come as warnings
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[backend])):
                out = F.scaled_dot_product_attention(x, x, x)
                if backward:
                    out.sum().backward()
            return None
        except RuntimeError as err:
            why = [f"{type(err).__name__}: {str(err).strip()}"]
    why += [str(w.message).strip() for w in seen if str(w.message).strip() not in why]
    return " | ".join(why)[:600]


def _sdpa_runs(backend: str, device: str, dtype: str, d: int) -> bool:
    """Whether SDPA pinned to ``backend`` runs a tiny call here (one call, 128 keys)."""
    return sdpa_refusal(backend, device, dtype, d) is None


def sdpa_backends(device: str = "cuda", dtype: Optional[str] = None, d: int = 64) -> List[str]:
    """The SDPA backends that run on ``device`` for ``dtype`` and head dim ``d``, best first
    (of :data:`SDPA_PREFERENCE`), each found by one tiny call pinned to it with
    ``torch.nn.attention.sdpa_kernel``: the backend's own checks (compute capability, dtype,
    head dim) decide, not a table that a new PyTorch could outdate. On a T4 flash is
    missing (it needs compute capability 8.0); on the CPU, efficient. ``dtype`` defaults
    to :func:`gpu_half_dtype`. Under a GPU profile (:mod:`attn_edu.gpu_profile`), the backends
    its GPU lacks are left out (a T4 has no flash, whatever GPU runs the profile).
    """
    dtype = dtype or gpu_half_dtype(device)
    missing = missing_sdpa_backends() if str(device).startswith("cuda") else ()
    return [b for b in SDPA_PREFERENCE if b not in missing and _sdpa_runs(b, device, dtype, d)]


def best_sdpa_backend(device: str = "cuda", dtype: Optional[str] = None, d: int = 64) -> Optional[str]:
    """The first of :func:`sdpa_backends` (``"flash"``, ``"efficient"`` or ``"math"``), the one a
    GPU measurement compares against; None when none runs (torch without CUDA support)."""
    runs = sdpa_backends(device, dtype, d)
    return runs[0] if runs else None


def _config_dict(config: Any) -> Any:
    """A Triton ``Config`` (or a dict, or a tuple) as plain JSON values."""
    if isinstance(config, dict):
        return dict(config)
    if hasattr(config, "kwargs"):
        return {**config.kwargs, "num_warps": getattr(config, "num_warps", None),
                "num_stages": getattr(config, "num_stages", None)}
    return list(config) if isinstance(config, (tuple, list)) else config


def autotune_config(module: Any = None) -> Optional[Dict[str, Any]]:
    """The configurations the autotuner chose in its latest call, by kernel: ``{kernel:
    {"BLOCK_M": ..., "BLOCK_N": ..., "num_warps": ..., "num_stages": ...}}``, written next to a
    Triton row so that a recorded number says which tile produced it.

    ``module`` (default the FlashAttention kernels' launch module,
    ``attn_edu.kernels.flash_triton.launch``, which holds the forward's autotuner) is asked first for a
    ``chosen_config()`` function; without one, its Triton autotuners are read (their
    ``best_config``, the choice for the key of the latest call). None when nothing was
    tuned (Triton's interpreter, or no call yet) or triton is missing.
    """
    if module is None:
        try:
            from ..kernels.flash_triton import launch as module
        except ImportError:  # pragma: no cover - the kernels import without triton
            return None
    chosen = getattr(module, "chosen_config", None)
    if callable(chosen):
        try:
            got = chosen()
        except TypeError:  # a signature this reader does not know: read the autotuners
            got = None
        if got is not None:
            # {kernel: config} by kernel, or one config ({"BLOCK_M": 64, ...}, a Config, a tuple)
            by_kernel = isinstance(got, dict) and got and all(
                isinstance(v, (dict, tuple, list)) or hasattr(v, "kwargs") for v in got.values())
            return {k: _config_dict(v) for k, v in got.items()} if by_kernel else {"forward": _config_dict(got)}
    found = {name: _config_dict(obj.best_config) for name, obj in sorted(vars(module).items())
             if hasattr(obj, "configs") and getattr(obj, "best_config", None) is not None}
    return found or None


def environment(device: str = "cpu") -> Dict[str, Any]:
    """Where and with what the numbers are taken: device, versions, git commit, date (UTC)."""
    from .. import __version__

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
    n = check_positive_int("n", n)
    blas = _numpy_openblas()
    if blas:
        blas[0](n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    return cpu_threads()
