#!/usr/bin/env python3
"""Install Python packages into a virtual environment, fast, saying what is downloaded.

    python3 scripts/pyinstall.py --python .venv/bin/python -r requirements.txt
    python3 scripts/pyinstall.py --python VENV/bin/python ipywidgets==7.7.1 torch==2.13.0

One home for how the project installs (scripts/setup-env.sh for .venv, tests/venvs.py for the
test venvs):

* **uv** when the environment running this has it (``uv`` is in requirements.txt; setup-env.sh
  puts it into .venv first): a venv of the Colab stand-in's pins took 4.8 s with an empty cache
  against 42 s for pip with a warm one. Else pip.
* **torch, CPU or CUDA.** PyPI's Linux wheel of torch is the CUDA build: 527 MB for torch
  2.13.0, and 1.25 GB more of NVIDIA libraries (cuBLAS, cuDNN, NCCL, cuSPARSELt, NVSHMEM). Where there is no NVIDIA GPU (``nvidia-smi`` does not
  run), torch comes from PyTorch's CPU index, https://download.pytorch.org/whl/cpu (a wheel of
  about 190 MB, nothing else), unless a local wheel of it is configured (pip's ``find-links``,
  as on this project's build machines) or ``ATTN_EDU_TORCH_INDEX`` names an index
  (``pypi`` for PyPI's CUDA build). With a GPU, PyPI's build, and then the triton that build
  pins (torch 2.13.0's: triton 3.7.1) instead of requirements.txt's, which is the CPU build's
  (the two pins cannot both hold). The script prints which.
* pip's ``find-links`` (its configuration and ``PIP_FIND_LINKS``) are passed on to uv, which
  does not read pip's configuration.
* ``--exclude NAME``: a package a dependency pulls in that this environment goes without:
  uninstalled after the install (its own dependencies stay). scripts/setup-env.sh leaves out
  :data:`LEFT_OUT`.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

CPU_INDEX = "https://download.pytorch.org/whl/cpu"

#: What the project's .venv goes without (scripts/setup-env.sh passes them as ``--exclude``).
#: ``rfc3987-syntax``: jupyter-events asks for ``jsonschema[format-nongpl]``, whose checker of
#: the ``iri`` formats it is; nothing here checks those formats (our schema has none), and
#: importing it builds an Earley parser of RFC 3987's grammar, 1.7 CPU-s in every process that
#: imports jsonschema -- every kernel (plotly.io imports nbformat), every Jupyter server and
#: script that reads a notebook. Without it jsonschema checks every other format as before.
#: (The Colab stand-in keeps it: Colab has it.)
LEFT_OUT = ["rfc3987-syntax"]


def find_links() -> List[str]:
    """pip's configured find-links folders/URLs (configuration files and PIP_FIND_LINKS)."""
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        m = re.match(r"[\w:.-]*find-links='(.*)'$", line.strip())
        if m:
            links += m.group(1).split()
    seen = []
    for link in links:
        if link not in seen:
            seen.append(link)
    return seen


def local_wheel(name: str, links: Sequence[str]) -> Optional[Path]:
    """A wheel of ``name`` in one of the local find-links folders."""
    for link in links:
        folder = Path(link[7:] if link.startswith("file://") else link)
        if folder.is_dir():
            found = sorted(folder.glob(f"{name}-*.whl"))
            if found:
                return found[-1]
    return None


def has_nvidia_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        return subprocess.run([smi, "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def torch_plan(links: Sequence[str]) -> tuple:
    """``(index or None, message, cuda)``: where torch comes from here; ``cuda``: it is PyPI's
    CUDA build, which pins its own triton (torch 2.13.0: triton 3.7.1)."""
    choice = os.environ.get("ATTN_EDU_TORCH_INDEX", "").strip()
    if choice == "pypi":
        return None, ("torch: PyPI's build (ATTN_EDU_TORCH_INDEX=pypi; on Linux the CUDA build: "
                      "about 2.2 GB to download with its NVIDIA libraries)"), True
    if choice:
        return choice, f"torch: from {choice} (ATTN_EDU_TORCH_INDEX)", False
    wheel = local_wheel("torch", links)
    if wheel is not None:
        return None, f"torch: the local wheel {wheel.name} (pip's find-links)", "+cpu" not in wheel.name
    if has_nvidia_gpu():
        return None, ("torch: PyPI's CUDA build (an NVIDIA GPU is here; about 2.2 GB to download "
                      "with its NVIDIA libraries)"), True
    return CPU_INDEX, f"torch: the CPU build from {CPU_INDEX} (no NVIDIA GPU here; a wheel of about 190 MB)", False


def uv_binary() -> Optional[str]:
    here = Path(sys.executable).with_name("uv")
    if here.is_file():
        return str(here)
    return shutil.which("uv")


def _is_package(req: str, name: str) -> bool:
    return re.match(rf"^\s*{name}\s*(\[|[=<>!~;]|$)", req) is not None


def _is_torch(req: str) -> bool:
    return _is_package(req, "torch")


def _requirement_lines(path: Path) -> List[str]:
    lines = []
    for raw in Path(path).read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def install(python: Path, requirements: Sequence[str] = (), requirement_files: Sequence[Path] = (),
            extra: Sequence[str] = (), quiet: bool = True, echo=print, exclude: Sequence[str] = ()) -> None:
    """Install ``requirements`` (and the lines of ``requirement_files``) into the venv of
    ``python``; ``extra``: more installer arguments (``--no-deps``, ``-e PATH``...);
    ``exclude``: package names to go without (uninstalled after the install).
    Raises RuntimeError with the installer's output when it fails."""
    reqs = list(requirements)
    for f in requirement_files:
        reqs += _requirement_lines(f)
    links = find_links()
    uv = uv_binary()
    if uv:
        # --compile-bytecode: as pip does. uv leaves it out by default, and with
        # PYTHONDONTWRITEBYTECODE set (CI, containers) every process then compiles torch from
        # source as it imports it: chapter 14's ranks ran 2x slower (98 s against 46 s)
        base = [uv, "pip", "install", "--compile-bytecode", "--python", str(python)] + (
            ["--quiet"] if quiet else [])
    else:
        base = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"] + (
            ["--quiet"] if quiet else [])
    link_args = [a for link in links for a in ("--find-links", link)] if uv else []
    torch_reqs = [r for r in reqs if _is_torch(r)]
    if torch_reqs:
        index, message, cuda = torch_plan(links)
        echo(f"[install] {message}")
        if cuda:  # the CUDA build pins its own triton; requirements.txt's pin is the CPU build's
            dropped = [r for r in reqs if _is_package(r, "triton")]
            reqs = [r for r in reqs if r not in dropped]
            if dropped:
                echo(f"[install] triton: the version torch's CUDA build pins (not {', '.join(dropped)})")
        if index is not None:  # torch alone from its index first; the rest then finds it installed
            _run(base + link_args + ["--index-url", index] + torch_reqs)
    _run(base + link_args + list(extra) + reqs)
    if not exclude:
        return
    # uninstalled after the install, by any uv or pip (uv's --excludes is recent: uv>=0.5 here)
    if uv:
        _run([uv, "pip", "uninstall", "--quiet", "--python", str(python), *exclude])
    else:
        _run([str(python), "-m", "pip", "uninstall", "--disable-pip-version-check", "-y", "-q", *exclude])


def _run(cmd: List[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", type=Path, help="the venv's python")
    p.add_argument("-r", dest="files", action="append", default=[], type=Path, help="a requirements file")
    p.add_argument("--no-deps", action="store_true")
    p.add_argument("--upgrade", action="store_true")
    p.add_argument("-e", dest="editable", action="append", default=[], help="an editable project path")
    p.add_argument("--exclude", action="append", default=[], metavar="NAME",
                   help="a package to go without (uninstalled after the install)")
    p.add_argument("--left-out", action="store_true",
                   help="print LEFT_OUT as --exclude arguments (for scripts/setup-env.sh) and exit")
    p.add_argument("requirements", nargs="*")
    args = p.parse_args(argv)
    if args.left_out:
        print(" ".join(f"--exclude {name}" for name in LEFT_OUT))
        return 0
    if args.python is None:
        p.error("--python is required")
    extra = (["--no-deps"] if args.no_deps else []) + (["--upgrade"] if args.upgrade else []) + \
        [a for e in args.editable for a in ("-e", e)]
    try:
        install(args.python, args.requirements, args.files, extra, exclude=args.exclude)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
