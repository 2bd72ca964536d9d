"""Virtual environments that tests make, cached by what they hold, and Jupyter sandboxes.

* :func:`cached_venv` makes a venv with exactly the given pip requirements, once: it lives
  in ``$ATTN_EDU_VENV_CACHE`` (default: ``<tmp>/attn-edu-venvs``), in a folder named by a
  hash of the requirements and the Python version, so a later run (or a CI run on the
  same machine) reuses it and a changed requirement makes a new one. A ``.complete``
  file is written last, so a half-made venv is never reused, and a lock file beside it
  makes a second process that wants the same venv wait for the first instead of
  building it again (scripts/test.sh builds the big ones in the background while the
  first tests run: ``python tests/colab.py --prebuild``).
* :func:`install_attn_edu` installs the working tree's attn_edu into such a venv (not
  editable, no dependencies), so what is tested is what ``pip install .`` gives.
* :func:`overlay_site_packages` lets a fresh venv see another venv's packages without
  installing them again (and without attn_edu), the way Colab's preinstalled packages
  sit beside a notebook's own ``pip install``.
* :func:`jupyter_dirs` gives a Jupyter configuration that lives in a temporary folder
  (kernels, settings, runtime files) so that nothing global changes, and
  :func:`write_kernelspec` registers a Python as a kernel there; :func:`environ` sets such
  variables in this process for a block (nbclient's kernels inherit them) and restores them.

Shared by tests/test_plain_install.py, tests/test_colab_first_cell.py and
tests/test_live_explorers.py (through the fixtures in tests/conftest.py).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from typing import Dict, Iterable, Iterator, Mapping, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import pyinstall  # noqa: E402  (scripts/pyinstall.py: how the project installs)

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ATTN_EDU_VENV_CACHE", Path(tempfile.gettempdir()) / "attn-edu-venvs"))
PIP_QUIET = ["--quiet", "--disable-pip-version-check", "--no-input"]


def venv_python(path: Path) -> Path:
    return Path(path) / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def make_venv(path: Path, requirements: Sequence[str] = (), with_pip: bool = True,
              base: Optional[Path] = None) -> Path:
    """A new venv at ``path`` holding ``requirements``; returns its python. ``base``: the
    Python to make it from (default: this one), e.g. another version's interpreter."""
    if base is None:
        venv.EnvBuilder(with_pip=with_pip, clear=True).create(str(path))
    else:
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run([str(base), "-m", "venv", *([] if with_pip else ["--without-pip"]), str(path)],
                       check=True, capture_output=True)
    python = venv_python(path)
    if requirements:  # uv where it is (seconds), else pip; torch's CPU build without a GPU
        pyinstall.install(python, requirements, echo=lambda msg: None)
    return python


def run_pip(python: Path, *args: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", *args, *PIP_QUIET], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def cached_venv(name: str, requirements: Sequence[str], base: Optional[Path] = None) -> Path:
    """The python of a cached venv named ``name`` holding ``requirements`` (made if needed),
    from the Python ``base`` (default: this one)."""
    version = sys.version if base is None else subprocess.run(
        [str(base), "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(json.dumps([version, sorted(requirements)]).encode()).hexdigest()[:12]
    path = CACHE / f"{name}-{key}"
    python = venv_python(path)
    if (path / ".complete").is_file() and python.exists():
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building it: wait, then reuse it
        if (path / ".complete").is_file() and python.exists():
            return python
        try:
            make_venv(path, requirements, base=base)  # cleared first: a half-made one is started again
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        (path / ".complete").write_text("\n".join(requirements) + "\n")
    for stale in CACHE.glob(f"{name}-*"):  # older requirement sets of the same venv
        if stale.is_dir() and stale != path and (stale / ".complete").is_file():
            shutil.rmtree(stale, ignore_errors=True)
    return python


@contextlib.contextmanager
def building(source: Path = REPO) -> Iterator[None]:
    """Hold the source tree's build lock for a block: setuptools builds a wheel of
    ``source`` in ``source/build``, and two pytest-xdist workers building it at once fail
    ("File exists: ...dist-info"), so every build of a tree here takes its turn."""
    CACHE.mkdir(parents=True, exist_ok=True)
    tree = hashlib.sha256(str(Path(source).resolve()).encode()).hexdigest()[:12]
    with open(CACHE / f"install-{tree}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def install_attn_edu(python: Path, source: Path = REPO) -> None:
    """``pip install --no-deps`` the attn_edu at ``source`` (a copy, not editable), one
    build of the tree at a time (:func:`building`)."""
    with building(source):
        # no build isolation: the venv's own setuptools builds it (no download)
        run_pip(python, "install", "--no-deps", "--force-reinstall", "--no-build-isolation", str(source))


def build_wheel(out: Path, source: Path = REPO, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """``pip wheel --no-deps --no-build-isolation`` of ``source`` into ``out`` with this
    Python, one build of the tree at a time (:func:`building`); the finished process."""
    with building(source):
        return subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                               "--quiet", "-w", str(out), str(source)], capture_output=True, text=True, env=env)


def overlay_site_packages(python: Path, donor: Path, exclude: Iterable[str] = ("attn_edu",)) -> Path:
    """Make the venv of ``python`` see the packages of the ``donor`` site-packages folder.

    A folder of symlinks to every package (and its ``.dist-info``) of ``donor`` except
    ``exclude`` (and the setuptools hooks and ``.pth`` files), put on ``sys.path`` after
    the venv's own site-packages by a ``.pth`` file: imports and pip both see them as
    installed, nothing is copied or reinstalled, and an editable attn_edu in ``donor``
    stays out. A venv made without pip gets the donor's (current) pip this way.
    """
    target = site_packages(python)
    overlay = target.parent / "attn-edu-overlay"
    overlay.mkdir(exist_ok=True)
    skip = tuple(e.lower() for e in (*exclude, "_distutils_hack", "__editable__", "distutils-precedence"))
    for entry in Path(donor).iterdir():
        low = entry.name.lower().replace("-", "_")
        if entry.suffix == ".pth" or low.startswith(skip) or entry.name == "__pycache__":
            continue
        link = overlay / entry.name
        if not link.exists():
            link.symlink_to(entry)
    (target / "attn_edu_overlay.pth").write_text(str(overlay) + "\n")
    return overlay


def jupyter_dirs(root: Path) -> Dict[str, str]:
    """Environment variables that keep every Jupyter file under ``root``."""
    dirs = {
        "JUPYTER_PATH": root / "path",           # highest priority: our kernelspecs
        "JUPYTER_DATA_DIR": root / "data",
        "JUPYTER_CONFIG_DIR": root / "config",
        "JUPYTER_RUNTIME_DIR": root / "runtime",
        "IPYTHONDIR": root / "ipython",
        "JUPYTERLAB_SETTINGS_DIR": root / "config" / "lab" / "user-settings",
        "JUPYTERLAB_WORKSPACES_DIR": root / "config" / "lab" / "workspaces",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in dirs.items()}


@contextlib.contextmanager
def environ(changes: Mapping[str, Optional[str]]) -> Iterator[Mapping[str, Optional[str]]]:
    """``os.environ`` with ``changes`` inside the block (a value of None removes the
    variable), and as it was before once the block ends, however it ends; yields ``changes``."""
    def put(values: Mapping[str, Optional[str]]) -> None:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    saved = {k: os.environ.get(k) for k in changes}
    try:
        put(changes)
        yield changes
    finally:
        put(saved)


def compiled_env(**extra: str) -> Dict[str, str]:
    """The environment of a child process that compiles Triton kernels for a GPU (this
    test process has ``TRITON_INTERPRET=1``, so its kernels are interpreted ones and cannot
    be compiled): ``os.environ`` without ``TRITON_INTERPRET``, this checkout first on
    ``PYTHONPATH``, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def write_kernelspec(jupyter_path: Path, python: Path, name: str = "python3",
                     env: Optional[Dict[str, str]] = None, display_name: str = "Python 3 (attn_edu)") -> Path:
    """Register ``python`` as kernel ``name`` in ``jupyter_path`` (an entry of JUPYTER_PATH)."""
    spec_dir = Path(jupyter_path) / "kernels" / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": display_name, "language": "python", "env": env or {}}
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    return spec_dir
