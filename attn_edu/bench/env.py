"""Where and with what the numbers are taken: device, library versions, git commit, threads.

:func:`environment` is the header of every JSON document a sweep writes; on a shared CPU,
:func:`set_cpu_threads` pins NumPy's OpenBLAS and torch to fewer threads for steadier times.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from .._checks import check_positive_int

__all__ = ["environment", "cpu_threads", "set_cpu_threads"]


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
