"""Google Colab, stood in: its published package versions, a venv built from them, and a
kernel that believes it runs in Colab.

* :func:`colab_pins` reads ``tests/data/colab/pip-freeze.{gpu,cpu}.txt`` (Colab's own
  ``pip freeze``, see the README there) into ``{name: version}``.
* :func:`standin_venv` is a cached venv (tests/venvs.py) holding the packages the book's
  chapters and explorers use, at Colab's versions (:data:`STANDIN_PACKAGES`; every other
  package pip pulls in is held to Colab's version too, by a constraints file made from the
  freeze), except torch: Colab's is a CUDA build, so the stand-in takes the CPU wheel of
  the same series that this machine has (:data:`STANDIN_TORCH`). Python is the test
  suite's (3.11); Colab's 3.13 is covered by :func:`python313`, which has no torch wheel.
* :func:`write_colab_kernelspec` registers the stand-in's python as a kernel that first
  imports a stand-in ``google.colab`` (an empty module on ``sys.path``: the package takes
  its Colab path, ``attn_edu.notebook.in_colab()``) and, with ``block=("triton",)``,
  makes ``import triton`` fail as on Colab's CPU runtime.

A venv that cannot be built (no network for PyPI, say) makes the tests that need it skip
with pip's reason (:func:`standin_or_skip`); ``ATTN_EDU_NO_COLAB_STANDIN=1`` skips them
without trying.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

import pytest

import venvs

DATA = Path(__file__).resolve().parent / "data" / "colab"
#: what Colab preinstalls that the book uses, pinned in the stand-in to Colab's versions
STANDIN_PACKAGES = ("ipywidgets", "widgetsnbextension", "jupyterlab_widgets", "ipykernel", "ipython",
                    "jupyter_client", "traitlets", "tornado", "pyzmq", "plotly", "numpy",
                    "matplotlib", "tqdm", "threadpoolctl")
#: Colab's torch is 2.11.0+cu128; the stand-in uses the CPU wheel this machine has
STANDIN_TORCH = "torch==2.13.0"
#: never held to Colab's version: CUDA builds and their companions (not for this CPU venv)
#: (and setuptools: torch 2.13 needs >= 77, Colab has 75.2; it builds attn_edu here)
_UNPINNED = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia[-_].*|jax.*|cupy.*|setuptools)$", re.I)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=None)
def colab_pins(runtime: str = "gpu") -> Dict[str, str]:
    """``{normalised name: version}`` of Colab's ``runtime`` ("gpu" or "cpu").

    ``name==version`` lines, and ``name @ URL`` lines whose URL ends in a wheel or sdist
    file name (the CPU runtime's ``torch @ .../torch-2.11.0%2Bcpu-cp313-...whl``); a
    ``name @ git+...`` line has no version and is left out.
    """
    from urllib.parse import unquote

    pins = {}
    for line in (DATA / f"pip-freeze.{runtime}.txt").read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line.strip())
        if m:
            pins[_norm(m.group(1))] = m.group(2)
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*) @ \S*/([^/#\s]+?)(?:\.whl|\.tar\.gz)(?:#\S*)?", line.strip())
        if m:
            file = unquote(m.group(2))  # name-version[-tags] (a wheel) or name-version (an sdist)
            parts = file.split("-")
            if len(parts) >= 2 and _norm(parts[0]) == _norm(m.group(1)):
                pins[_norm(m.group(1))] = parts[1]
    return pins


def standin_requirements() -> list:
    pins = colab_pins("gpu")
    return [f"{name}=={pins[_norm(name)]}" for name in STANDIN_PACKAGES] + [STANDIN_TORCH, "setuptools"]


def _constraints_file() -> Path:
    """Colab's versions of everything (but torch & co), for pip's ``-c``: cached beside the venvs."""
    lines = [f"{n}=={v}" for n, v in sorted(colab_pins("gpu").items()) if not _UNPINNED.match(n)]
    text = "\n".join(lines) + "\n"
    venvs.CACHE.mkdir(parents=True, exist_ok=True)  # named by its content: new pins, new venv
    path = venvs.CACHE / f"colab-constraints-{hashlib.sha256(text.encode()).hexdigest()[:12]}.txt"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def _standin_cached() -> Path:
    """The python of the cached stand-in venv (made if needed), before attn_edu goes in."""
    return venvs.cached_venv("colab-standin", [*standin_requirements(), "-c", str(_constraints_file())])


def standin_venv() -> Path:
    """The python of the (cached) Colab stand-in venv, with this working tree's attn_edu."""
    python = _standin_cached()
    venvs.install_attn_edu(python)
    return python


@functools.lru_cache(maxsize=None)
def standin_or_reason() -> tuple:
    """``(python, "")`` of :func:`standin_venv`, or ``(None, why)`` where it cannot be built
    (no network, a version missing for this Python ...); tried once per test session.
    ``ATTN_EDU_NO_COLAB_STANDIN=1`` says not to try (a machine without PyPI)."""
    if os.environ.get("ATTN_EDU_NO_COLAB_STANDIN") == "1":
        return None, "ATTN_EDU_NO_COLAB_STANDIN=1"
    try:
        return standin_venv(), ""
    except RuntimeError as exc:  # pip failed
        return None, str(exc)[-600:]


def standin_or_skip() -> Path:
    """:func:`standin_venv`, or skip the test (with pip's reason) where it cannot be built."""
    python, why = standin_or_reason()
    if python is None:
        pytest.skip(f"the Colab stand-in venv could not be built: {why}")
    return python


def python313() -> Optional[Path]:
    """Colab's Python (3.13) from pyenv, or None."""
    root = os.environ.get("PYENV_ROOT") or (subprocess.run(["pyenv", "root"], capture_output=True, text=True)
                                            .stdout.strip() if shutil.which("pyenv") else "")
    for candidate in ([Path(root) / "versions" / "3.13.0" / "bin" / "python3.13"] if root else []):
        if candidate.exists():
            return candidate
    found = shutil.which("python3.13")
    return Path(found) if found else None


#: the kernel's launcher: stand in google.colab, block packages, then start ipykernel
_LAUNCHER = (
    "import sys; sys.path.insert(0, {fake!r}); import google.colab\n"
    "for _name in {block!r}: sys.modules[_name] = None\n"
    "from ipykernel import kernelapp; kernelapp.launch_new_instance()"
)


def fake_colab_dir(root: Path) -> Path:
    """A folder holding an empty ``google/colab`` package (``google`` stays a namespace)."""
    pkg = Path(root) / "fake-colab" / "google" / "colab"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('"""Stands in for Colab\'s google.colab in the tests."""\n')
    return pkg.parents[1]


def write_colab_kernelspec(jupyter_path: Path, python: Path, root: Path, block: Sequence[str] = (),
                           name: str = "python3", env: Optional[Dict[str, str]] = None) -> Path:
    """Register ``python`` as a kernel that runs as if in Colab (see the module docstring)."""
    spec_dir = venvs.write_kernelspec(jupyter_path, python, name=name, env=env,
                                      display_name="Python 3 (Colab stand-in)")
    launcher = _LAUNCHER.format(fake=str(fake_colab_dir(root)), block=tuple(block))
    spec = spec_dir / "kernel.json"
    data = json.loads(spec.read_text())
    data["argv"] = [str(python), "-Xfrozen_modules=off", "-c", launcher, "-f", "{connection_file}"]
    spec.write_text(json.dumps(data, indent=1))
    return spec_dir


def _python313_cached(base: Path) -> Path:
    """The python of the cached Python 3.13 venv (made if needed), before attn_edu goes in."""
    import hypothesis

    reqs = [f"numpy=={colab_pins('gpu')['numpy']}", "setuptools>=70.1", f"pytest=={pytest.__version__}",
            f"hypothesis=={hypothesis.__version__}"]
    return venvs.cached_venv("colab-py313", reqs, base=base)


def python313_venv() -> Path:
    """A cached venv of Colab's Python (3.13) with Colab's NumPy, pytest and hypothesis (no
    torch: PyTorch's local wheel is for 3.11), and this working tree's attn_edu; skips the
    test where 3.13 or the packages are missing."""
    base = python313()
    if base is None:
        pytest.skip("no Python 3.13 here (pyenv install 3.13.0, or put python3.13 on PATH)")
    try:
        python = _python313_cached(base)
        venvs.install_attn_edu(python)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"the Python 3.13 venv could not be built: {str(exc)[-600:]}")
    return python


def prebuild() -> None:
    """Make the two cached venvs of the Colab tests (the stand-in: minutes on a cold
    machine; Python 3.13's) ahead of the tests that use them. scripts/test.sh runs it in
    the background (``python tests/colab.py --prebuild``) while the first tests run; a test
    that gets there first waits for it (tests/venvs.py locks each venv). Each failure is
    printed and left to the tests, which build again and report it."""
    import time

    jobs = [] if os.environ.get("ATTN_EDU_NO_COLAB_STANDIN") == "1" else [("colab-standin", _standin_cached)]
    base = python313()
    if base is not None:
        jobs.append(("colab-py313", lambda: _python313_cached(base)))
    for name, job in jobs:
        start = time.perf_counter()
        try:
            job()
            print(f"[prebuild] {name}: ready in {time.perf_counter() - start:.0f} s", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported, and the tests try again
            print(f"[prebuild] {name}: failed ({str(exc)[-300:]})", flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["--prebuild"]:
    prebuild()
