"""Packaging: `import attn_edu` needs NumPy only, flags are right, and the package installs."""
import importlib.util
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from venvs import build_wheel

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ["torch", "triton", "plotly", "matplotlib", "ipywidgets", "IPython"]


def test_import_needs_numpy_only():
    code = (
        "import sys, attn_edu, numpy as np\n"
        "attn_edu.scaled_dot_product_attention(np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 2)))\n"
        "attn_edu.masks.causal_mask(3)\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"heavy modules imported by `import attn_edu`: {out.stdout}"


def test_capability_flags():
    import attn_edu

    assert attn_edu.HAS_TORCH is (importlib.util.find_spec("torch") is not None)
    assert attn_edu.HAS_TRITON is (importlib.util.find_spec("triton") is not None)
    if attn_edu.HAS_TORCH:
        import torch

        assert attn_edu.HAS_CUDA is torch.cuda.is_available()
    else:
        assert attn_edu.HAS_CUDA is False
    with pytest.raises(AttributeError, match="HAS_TPU"):
        attn_edu.HAS_TPU  # noqa: B018


def test_no_upper_pins_that_fight_colab():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(meta["dependencies"])
    for extra in meta.get("optional-dependencies", {}).values():
        deps += extra
    assert deps[0].startswith("numpy") and len(meta["dependencies"]) == 1
    for dep in deps:
        assert "<" not in dep and "==" not in dep and "~=" not in dep, f"upper pin in {dep!r}"


def test_builds_an_installable_wheel(tmp_path):
    pytest.importorskip("wheel")  # what setuptools builds wheels with, without build isolation
    proc = build_wheel(tmp_path, ROOT)  # the tree's build lock held: one build at a time
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = tmp_path.glob("attn_edu-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for module in ["__init__.py", "reference.py", "masks/__init__.py", "masks/tiles.py", "_checks.py",
                   "testing.py", "bench/__main__.py", "kernels/flash_triton/kernels.py"]:
        assert f"attn_edu/{module}" in names
    assert not any(n.startswith(("tests/", "notebooks/", "book/")) for n in names)


def test_pip_installs_from_git_url_like_colab(tmp_path):
    """The Colab install cell does `pip install "attn_edu @ git+<repository url>"`; the same
    command with this checkout's URL installs a working package (of the committed HEAD)."""
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout with commits")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), f"attn_edu @ git+file://{ROOT}"], check=True, capture_output=True)
    code = "import attn_edu, numpy as np; print(attn_edu.__file__); print(attn_edu.softmax(np.zeros(4)).sum())"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    path, total = out.stdout.split()
    assert path.startswith(str(target)) and float(total) == 1.0


NUMPY_ONLY_SCRIPT = r"""
import importlib.util, sys
import numpy as np
import attn_edu
from attn_edu import masks
from attn_edu.flash import flash_attention

assert importlib.util.find_spec("torch") is None and not attn_edu.HAS_TORCH
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((2, 37, 16)) for _ in range(3))
m = masks.sliding_window_mask(37, 9) | masks.global_mask(37, [0])
gold = attn_edu.scaled_dot_product_attention(q, k, v, mask=m, causal=True)
for mask in (m, masks.plan_tiles(m, 8, 16, causal=True)):
    out = flash_attention(q, k, v, mask=mask, causal=True, block_q=8, block_k=16)
    assert np.abs(out - gold).max() <= 1e-10
assert masks.allowed_pairs("sliding_window", 37, window=9) == masks.sliding_window_mask(37, 9).sum()
print("numpy-only ok", attn_edu.__file__)
"""


@pytest.mark.slow
def test_a_numpy_only_install_runs_the_reference_masks_and_flash(numpy_only_venv, tmp_path):
    """A virtual environment with NumPy (and the test tools pytest and hypothesis) only and
    a plain `pip install` of this checkout (conftest's ``numpy_only_venv``): the reference,
    the masks and NumPy flash run from it, and the fast test loop collects (modules that
    need torch, triton, matplotlib or plotly skip themselves) and passes."""
    import shutil

    py = str(numpy_only_venv)
    venv = Path(py).parents[1]
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([py, "-c", NUMPY_ONLY_SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"numpy-only ok {venv}" in out.stdout  # the installed package, not the checkout
    # the fast loop, from a copy of the tests: collection works and the NumPy tests pass;
    # what needs torch, triton, matplotlib or plotly skips itself
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        ".git", ".venv", "_build", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
    run = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
                          "not slow and not notebooks and not browser"], cwd=copy, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0 and " passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    assert "could not import 'torch'" in run.stdout  # it really ran without torch
