"""How the project installs (scripts/pyinstall.py, used by scripts/setup-env.sh and the test
venvs): uv when there, and torch's CPU build where there is no NVIDIA GPU -- PyPI's Linux
torch is the CUDA build, several GB -- unless a local wheel or an index is configured."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pyinstall
from venvs import REPO


@pytest.fixture
def no_local_torch(monkeypatch):
    monkeypatch.delenv("ATTN_EDU_TORCH_INDEX", raising=False)
    monkeypatch.setattr(pyinstall, "local_wheel", lambda name, links: None)


def test_without_a_gpu_torch_comes_from_pytorchs_cpu_index(no_local_torch, monkeypatch):
    monkeypatch.setattr(pyinstall, "has_nvidia_gpu", lambda: False)
    index, message, cuda = pyinstall.torch_plan([])
    assert index == "https://download.pytorch.org/whl/cpu" and "CPU build" in message and "190 MB" in message
    assert not cuda


def test_with_a_gpu_torch_comes_from_pypi_and_says_how_large(no_local_torch, monkeypatch):
    monkeypatch.setattr(pyinstall, "has_nvidia_gpu", lambda: True)
    index, message, cuda = pyinstall.torch_plan([])
    assert index is None and "CUDA build" in message and "GB" in message and cuda


def test_a_local_wheel_or_a_named_index_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("ATTN_EDU_TORCH_INDEX", raising=False)
    monkeypatch.setattr(pyinstall, "has_nvidia_gpu", lambda: False)
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    index, message, cuda = pyinstall.torch_plan([str(tmp_path)])
    assert index is None and "local wheel torch-2.13.0+cpu" in message and not cuda
    monkeypatch.setenv("ATTN_EDU_TORCH_INDEX", "https://example.org/simple")
    assert pyinstall.torch_plan([str(tmp_path)])[0] == "https://example.org/simple"
    monkeypatch.setenv("ATTN_EDU_TORCH_INDEX", "pypi")
    assert pyinstall.torch_plan([])[0] is None


def test_torch_is_installed_alone_from_its_index_first(no_local_torch, monkeypatch, tmp_path):
    monkeypatch.setattr(pyinstall, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(pyinstall, "find_links", lambda: [])
    monkeypatch.setattr(pyinstall, "uv_binary", lambda: "/bin/uv")
    calls = []
    monkeypatch.setattr(pyinstall, "_run", calls.append)
    req = tmp_path / "requirements.txt"
    req.write_text("# a comment\ntorch==2.13.0  # pinned\nnumpy>=1.24\ntorchvision==0.28\n")
    pyinstall.install(REPO / ".venv" / "bin" / "python", requirement_files=[req], echo=lambda m: None)
    first, second = calls
    assert first[-3:] == ["--index-url", pyinstall.CPU_INDEX, "torch==2.13.0"]  # torchvision is not torch
    assert second[-3:] == ["torch==2.13.0", "numpy>=1.24", "torchvision==0.28"] and "--index-url" not in second


def test_setup_env_installs_with_this_script():
    text = (REPO / "scripts" / "setup-env.sh").read_text()
    assert "scripts/pyinstall.py" in text and "-r \"$ROOT/requirements.txt\"" in text
    assert "uv" in (REPO / "requirements.txt").read_text()


def test_the_cli_reports_a_failing_install(tmp_path):
    """A requirement that cannot resolve: exit 1 with the installer's words, not a traceback."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "pyinstall.py"), "--python", sys.executable,
                           "attn-edu-no-such-package-here==0.0.1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "attn-edu-no-such-package-here" in proc.stderr


def test_with_pypis_cuda_torch_the_triton_pin_is_left_to_torch(no_local_torch, monkeypatch, tmp_path):
    """PyPI's torch 2.13.0 (CUDA) requires triton==3.7.1; requirements.txt pins the CPU build's
    triton 3.9.0: both cannot hold, so on a GPU machine the triton pin goes to torch."""
    monkeypatch.setattr(pyinstall, "has_nvidia_gpu", lambda: True)
    monkeypatch.setattr(pyinstall, "find_links", lambda: [])
    monkeypatch.setattr(pyinstall, "uv_binary", lambda: "/bin/uv")
    calls, said = [], []
    monkeypatch.setattr(pyinstall, "_run", calls.append)
    pyinstall.install(REPO / ".venv" / "bin" / "python", requirement_files=[REPO / "requirements.txt"],
                      echo=said.append)
    (only,) = calls
    assert not any(r.startswith("triton") for r in only) and "torch==2.13.0" in only
    assert any("triton: the version torch's CUDA build pins" in m for m in said)


def test_a_left_out_package_is_uninstalled_after_the_install(monkeypatch):
    monkeypatch.setattr(pyinstall, "find_links", lambda: [])
    calls = []
    monkeypatch.setattr(pyinstall, "_run", calls.append)
    monkeypatch.setattr(pyinstall, "uv_binary", lambda: "/bin/uv")
    python = REPO / ".venv" / "bin" / "python"
    pyinstall.install(python, ["jupyter-events"], exclude=["rfc3987-syntax"], echo=lambda m: None)
    install, uninstall = calls
    assert install[-1] == "jupyter-events" and "rfc3987-syntax" not in install
    assert uninstall[:3] == ["/bin/uv", "pip", "uninstall"] and uninstall[-1] == "rfc3987-syntax"
    calls.clear()
    monkeypatch.setattr(pyinstall, "uv_binary", lambda: None)  # pip
    pyinstall.install(python, ["jupyter-events"], exclude=["rfc3987-syntax"], echo=lambda m: None)
    install, uninstall = calls
    assert uninstall[1:4] == ["-m", "pip", "uninstall"] and uninstall[-1] == "rfc3987-syntax" and "-y" in uninstall
    calls.clear()
    pyinstall.install(python, ["jupyter-events"], echo=lambda m: None)
    assert len(calls) == 1                                     # nothing left out: no uninstall
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "pyinstall.py"), "--left-out"],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == [a for name in pyinstall.LEFT_OUT for a in ("--exclude", name)]
    assert "pyinstall.py\" --left-out" in (REPO / "scripts" / "setup-env.sh").read_text()


def test_the_projects_venv_imports_jsonschema_without_rfc3987_syntax():
    """In the .venv scripts/setup-env.sh made, reading a notebook (nbformat -> jsonschema, in
    every kernel through plotly.io) does not build rfc3987-syntax's parser (1.7 CPU-s each)."""
    if not (Path(sys.prefix) / ".attn-edu-installed").is_file():
        pytest.skip("not the .venv scripts/setup-env.sh made")
    proc = subprocess.run([sys.executable, "-c", "import sys, nbformat, jsonschema; "
                           "print(sorted(m for m in sys.modules if m.startswith(('rfc3987_syntax', 'lark'))))"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
