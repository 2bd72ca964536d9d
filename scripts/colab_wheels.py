#!/usr/bin/env python3
"""Colab's notebook stack as wheels, for a GPU machine that cannot reach PyPI.

    python scripts/colab_wheels.py                      # into .colab-wheels/ (git-ignored)
    python scripts/colab_wheels.py --python-version 3.13 --dest DIR

Downloads, with ``pip download --only-binary=:all: --python-version 3.12`` for manylinux
x86-64, the notebook stack a Colab GPU runtime has (:data:`STACK`) and the dependencies of it
that the GPU machine we measure on lacks (:data:`DEPS`), each at the version of Colab's own
``pip freeze`` (tests/data/colab/pip-freeze.gpu.txt, read by tests/colab.py). Then it checks
that nothing is missing (every wheel's ``Requires-Dist`` is one of them, or on the machine
already: :data:`MACHINE_HAS`, or left out on purpose: :data:`LEFT_OUT`) and that the folder
is at most :data:`MAX_BYTES` (the checkout that travels to that machine must stay under
64 MiB), prints its size and writes ``MANIFEST.json``. ``bash scripts/gpu-bench.sh``
installs the folder with ``pip install --no-index --no-deps`` when it is there
(scripts/gpu_run.py). A reader's machine with the internet needs none of this.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

DEST = REPO / ".colab-wheels"
MAX_BYTES = 40 * 2**20
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64",
             "manylinux1_x86_64")
#: what the chapters' kernel and the GPU run need of Colab's stack (nbclient runs the chapters,
#: jsonschema checks the run's documents)
STACK = ("ipykernel", "ipython", "jupyter_client", "ipywidgets", "plotly", "nbclient", "nbformat", "jsonschema")
#: their dependencies that the GPU machine lacks (/work/.library/device/KINDS.md: its packages, 2026-11-17)
DEPS = ("traitlets", "tornado", "pyzmq", "jupyter_core", "debugpy", "matplotlib-inline", "nest-asyncio",
        "entrypoints", "platformdirs", "parso", "decorator", "pickleshare", "backcall", "prompt_toolkit",
        "wcwidth", "pexpect", "ptyprocess", "ipython-genutils", "widgetsnbextension", "jupyterlab-widgets",
        "tenacity", "fastjsonschema", "jsonschema-specifications", "referencing", "rpds-py")
#: needed by the stack and on the GPU machine already (KINDS.md, 2026-11-17): not carried
MACHINE_HAS = ("packaging", "psutil", "pygments", "python-dateutil", "six", "setuptools", "typing-extensions",
               "attrs")
#: required by a wheel of the stack, and not needed to run a kernel: left out
LEFT_OUT = {"notebook": "widgetsnbextension 3.6 is the classic Notebook's extension; no kernel imports it",
            "jedi": "not in Colab's runtime either (its pip freeze); IPython 7.34 completes without it"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> List[str]:
    """``name==version`` of :data:`STACK` and :data:`DEPS`, at Colab's versions."""
    from colab import colab_pins

    pins = colab_pins("gpu")
    missing = [n for n in STACK + DEPS if norm(n) not in pins]
    if missing:
        raise SystemExit(f"not in Colab's pip freeze: {', '.join(missing)}")
    return [f"{n}=={pins[norm(n)]}" for n in STACK + DEPS]


def requirements_of(wheel: Path) -> List[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def closure_problems(requires: Dict[str, Iterable[str]], python_version: str = "3.12",
                     have: Iterable[str] = ()) -> List[str]:
    """What the wheels need that none of them, the machine (:data:`MACHINE_HAS`, ``have``) nor
    :data:`LEFT_OUT` provides: ``["NAME (needed by WHEEL)"]``. ``requires``: {distribution:
    its Requires-Dist lines}; a requirement under an extra, or whose marker is false on Linux
    with ``python_version``, is not needed."""
    from packaging.requirements import Requirement

    env = {"python_version": python_version, "python_full_version": python_version + ".0",
           "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
           "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "extra": ""}
    provided = {norm(n) for n in requires} | {norm(n) for n in (*MACHINE_HAS, *have)} | set(LEFT_OUT)
    problems = []
    for dist, reqs in sorted(requires.items()):
        for line in reqs:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            if norm(req.name) not in provided:
                problems.append(f"{req.name} (needed by {dist})")
    return problems


def folder_report(dest: Path, python_version: str) -> Dict:
    wheels = sorted(dest.glob("*.whl"))
    items = [{"file": w.name, "bytes": w.stat().st_size, "sha256": hashlib.sha256(w.read_bytes()).hexdigest()}
             for w in wheels]
    return {"python": python_version, "platforms": list(PLATFORMS), "wheels": items,
            "total_bytes": sum(i["bytes"] for i in items), "max_bytes": MAX_BYTES,
            "pins_from": "tests/data/colab/pip-freeze.gpu.txt", "machine_has": list(MACHINE_HAS),
            "left_out": LEFT_OUT}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dest", default=str(DEST))
    p.add_argument("--python-version", default="3.12", help="the GPU machine's Python (KINDS.md: 3.12.3)")
    args = p.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):  # one version of each: two stop the install
        old.unlink()
    reqs = pinned()
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", args.python_version, "--implementation", "cp",
           *[a for plat in PLATFORMS for a in ("--platform", plat)], "--platform", "any", "-d", str(dest), *reqs]
    print("==> pip download", len(reqs), "wheels for Python", args.python_version, "into", dest, flush=True)
    res = subprocess.run(cmd)
    if res.returncode != 0:
        print("pip download failed (is PyPI reachable?)", file=sys.stderr)
        return 1
    wheels = sorted(dest.glob("*.whl"))
    requires = {w.name.split("-")[0]: requirements_of(w) for w in wheels}
    problems = closure_problems(requires, args.python_version)
    report = folder_report(dest, args.python_version)
    (dest / "MANIFEST.json").write_text(json.dumps(report, indent=1) + "\n")
    size = report["total_bytes"]
    print(f"==> {len(wheels)} wheels, {size / 2**20:.1f} MiB (at most {MAX_BYTES / 2**20:.0f} MiB) in {dest}")
    for w in sorted(report["wheels"], key=lambda i: -i["bytes"])[:5]:
        print(f"    {w['bytes'] / 2**20:6.2f} MiB  {w['file']}")
    bad = 0
    if problems:
        print("==> MISSING (add to DEPS, or to MACHINE_HAS if the GPU machine has it):", ", ".join(problems))
        bad = 1
    if size > MAX_BYTES:
        print(f"==> TOO LARGE: {size / 2**20:.1f} MiB > {MAX_BYTES / 2**20:.0f} MiB")
        bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
