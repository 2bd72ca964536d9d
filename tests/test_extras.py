"""No extra of attn_edu changes a package that Colab preinstalls.

``pip install "attn_edu[viz]"`` on Colab must keep Colab's ipywidgets 7.7.1 (ipywidgets 8
over it makes every widget disappear, googlecolab/colabtools#3020), its plotly, NumPy and
torch. For each extra (and all of them together), pip's own resolver is asked, offline:

* an environment that holds exactly Colab's packages at Colab's versions: a venv whose
  site-packages has one metadata-only ``.dist-info`` per line of Colab's ``pip freeze``
  (tests/data/colab/, the GPU and the CPU runtime);
* ``pip install --dry-run --no-index`` of this working tree's wheel with the extra, with
  ``--report``: the only thing pip would install is attn_edu itself. A requirement that
  Colab's version does not meet makes pip look for another version -- and with no index
  it fails, naming the package.

A control (``ipywidgets>=8`` asked for beside the extra) shows that an upgrade is caught.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import colab
from venvs import REPO, build_wheel

pytestmark = pytest.mark.slow  # nine pip resolutions, about 30 s

pytest.importorskip("setuptools")

#: what each extra may never change on Colab
KEPT = ("ipywidgets", "plotly", "numpy", "torch", "matplotlib")


def _extras() -> list:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return sorted(project.get("optional-dependencies", {}))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = build_wheel(out, REPO, env=_env())  # the tree's build lock held: one build at a time
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (found,) = out.glob("attn_edu-*.whl")
    return found


def _env() -> dict:
    """pip without this machine's configuration (its indexes, find-links, constraints)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


@pytest.fixture(scope="module", params=["gpu", "cpu"])
def colab_env(request, tmp_path_factory) -> Path:
    """The python of a venv that "has" every package of Colab's ``runtime`` (metadata only)."""
    root = tmp_path_factory.mktemp(f"colab-{request.param}")
    venv.EnvBuilder(with_pip=False).create(str(root))
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name, version in colab.colab_pins(request.param).items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("colab\n")
    return python


def _dry_run(python: Path, wheel: Path, *requirements: str, tmp: Path) -> tuple:
    report = tmp / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run", "--no-index",
         "--find-links", str(wheel.parent), "--report", str(report), "--quiet", *requirements],
        capture_output=True, text=True, env=_env())
    installs = {}
    if proc.returncode == 0:
        installs = {i["metadata"]["name"].lower(): i["metadata"]["version"]
                    for i in json.loads(report.read_text())["install"]}
    return proc, installs


@pytest.mark.parametrize("extra", [*_extras(), ",".join(_extras())])
def test_an_extra_keeps_every_package_colab_preinstalls(extra, colab_env, wheel, tmp_path):
    proc, installs = _dry_run(colab_env, wheel, f"attn_edu[{extra}]", tmp=tmp_path)
    assert proc.returncode == 0, (f"pip install attn_edu[{extra}] would change a package Colab "
                                  f"preinstalls:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    assert set(installs) == {"attn_edu"}, f"it would also install {installs}"


def test_the_extras_cover_what_the_chapters_use():
    assert {"viz", "torch"} <= set(_extras())
    assert set(KEPT) <= set(colab.colab_pins("gpu")), "Colab's freeze lost a package the book relies on"


def test_an_upgrade_of_a_preinstalled_package_is_caught(colab_env, wheel, tmp_path):
    """The control: asking for ipywidgets 8 on Colab fails here (nothing to upgrade to)."""
    proc, _ = _dry_run(colab_env, wheel, "attn_edu[viz]", "ipywidgets>=8", tmp=tmp_path)
    assert proc.returncode != 0 and "ipywidgets" in proc.stdout + proc.stderr
