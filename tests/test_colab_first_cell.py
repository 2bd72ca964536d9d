"""The Colab first cell, simulated: a fresh environment without attn_edu installs it from the
repository URL, and the chapter then runs from the installed package alone.

* a local clone: this working tree (tracked and untracked, not ignored files) committed
  into a new git repository in a temporary folder;
* the one repository-URL setting (``repository.url`` in ``_config.yml``) of a *copy* is
  pointed at it (``file://``) and ``scripts/set_repo_url.py`` rewrites the chapters'
  install cells from it, as a fork's owner would;
* a fresh venv that sees the packages Colab preinstalls -- NumPy, torch,
  matplotlib, plotly, ipywidgets, ipykernel, pip ... -- through links to the test
  environment's site-packages (tests/venvs.py, ``overlay_site_packages``: nothing is
  reinstalled), but not attn_edu: ``find_spec("attn_edu")`` is None and pip sees no
  attn_edu installed;
* a real kernel of that venv (a kernelspec in a temporary ``JUPYTER_PATH``) runs the
  chapter's first cell from the copy, in a temporary working directory, without
  ``PYTHONPATH``; the test checks that pip installed attn_edu from the file URL into the
  venv, with the recorded benchmark data (``attn_edu/data/bench/*.json``) inside it,
  then **deletes the clone and the copy** and runs the rest of the chapter.

:data:`CHAPTER` is chapter 08, which plots the recorded benchmark data. The GPU branch of
the first cell is not simulated here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from venvs import REPO, jupyter_dirs, make_venv, overlay_site_packages, site_packages, write_kernelspec

pytestmark = pytest.mark.slow

CHAPTER = "08_cost_of_attention.ipynb"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@localhost", *args],
                          cwd=cwd, capture_output=True, text=True, check=True).stdout


def snapshot_clone(dest: Path) -> Path:
    """A git repository holding this working tree as it is now (one commit)."""
    files = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "snapshot of the working tree")
    return dest


def point_copy_at(copy: Path, url: str) -> None:
    """Set repository.url in the copy's _config.yml and propagate it with set_repo_url.py."""
    config = copy / "_config.yml"
    text = config.read_text(encoding="utf-8")
    start = text.index("repository:")
    line_start = text.index("url:", start)
    line_end = text.index("\n", line_start)
    config.write_text(text[:line_start] + f"url: {url}" + text[line_end:], encoding="utf-8")
    proc = subprocess.run([sys.executable, "scripts/set_repo_url.py"], cwd=copy, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = subprocess.run([sys.executable, "scripts/set_repo_url.py", "--check"], cwd=copy,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def _probe_cell(code: str):
    import nbformat

    return nbformat.v4.new_code_cell(code)


def test_first_cell_installs_from_the_url_and_the_chapter_runs_from_the_install(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    clone = snapshot_clone(tmp_path / "clone")
    copy = tmp_path / "copy"
    shutil.copytree(clone, copy, ignore=shutil.ignore_patterns(".git"))
    url = clone.resolve().as_uri()  # file:///.../clone
    point_copy_at(copy, url)
    nb = nbformat.read(copy / "notebooks" / CHAPTER, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    assert f"attn_edu @ git+{url}" in nb.cells[first].source, "set_repo_url.py did not rewrite the install cell"

    # a fresh venv that sees Colab-like preinstalled packages, but no attn_edu
    # (its pip comes from the overlay: Colab's pip is recent, and a venv's bundled one
    # may be too old to parse a git+file:/// requirement)
    python = make_venv(tmp_path / "colab", with_pip=False)
    overlay_site_packages(python, Path(site_packages(Path(sys.executable))))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTN_EDU_SKIP_INSTALL")}
    before = subprocess.run([str(python), "-c", "import importlib.util, numpy, torch, plotly, matplotlib, "
                             "ipywidgets, ipykernel; print(importlib.util.find_spec('attn_edu'))"],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert before.stdout.strip() == "None", before.stdout + before.stderr
    shown = subprocess.run([str(python), "-m", "pip", "show", "attn_edu"], capture_output=True, text=True,
                           env=env, cwd=tmp_path)
    assert shown.returncode != 0, "pip thinks attn_edu is already installed"

    # the kernel: that venv's python, with every Jupyter file in tmp_path
    for key, value in jupyter_dirs(tmp_path / "jupyter").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("ATTN_EDU_SKIP_INSTALL", raising=False)
    write_kernelspec(Path(os.environ["JUPYTER_PATH"]), python)
    workdir = tmp_path / "work"
    workdir.mkdir()
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(workdir)}})
    with client.setup_kernel():
        client.execute_cell(nb.cells[first], first)
        probe = _probe_cell(
            "import attn_edu, importlib.metadata, json, pathlib, sys\n"
            "from attn_edu import bench\n"
            "dist = importlib.metadata.distribution('attn_edu')\n"
            "from attn_edu import i18n\n"
            "print(json.dumps({'file': attn_edu.__file__, 'prefix': sys.prefix,\n"
            "  'zh': i18n.translate('computing…', 'zh'), 'lang': i18n.current_language(),\n"
            "  'direct_url': json.loads(dist.read_text('direct_url.json') or '{}'),\n"
            "  'data': sorted(p.name for p in (pathlib.Path(attn_edu.__file__).parent / 'data' / 'bench').rglob('*.json')),\n"
            "  'recorded': sorted(pathlib.Path(d['source']).name for w in bench.KINDS if w != 'decode'\n"
            "                     for d in bench.recorded_results(what=w))\n"
            "              + sorted(pathlib.Path(d['source']).name for d in bench.recorded_decode_results())}))")
        nb.cells.append(probe)
        client.execute_cell(probe, len(nb.cells) - 1)
        nb.cells.pop()
        info = json.loads(probe.outputs[-1]["text"].strip().splitlines()[-1])
        assert Path(info["file"]).is_relative_to(tmp_path / "colab"), f"attn_edu not from the venv: {info}"
        assert Path(info["prefix"]).resolve() == (tmp_path / "colab").resolve()
        assert info["direct_url"].get("url", "").rstrip("/") == url.rstrip("/"), info["direct_url"]
        assert "vcs_info" in info["direct_url"], "not installed from the git URL"
        # the compiled Chinese catalog is package data: a Chinese twin's setup_notebook(lang="zh")
        # finds it in a pip install from git; the English chapter stays English
        assert info["zh"] == "计算中……" and info["lang"] == "en", info
        shipped = sorted(p.name for p in (REPO / "attn_edu" / "data" / "bench").rglob("*.json"))
        assert info["data"] == shipped and shipped, f"data files missing from the install: {info['data']}"
        # every shipped file is read back as a benchmark document of its kind
        assert sorted(info["recorded"]) == shipped, info["recorded"]
        # nothing may depend on the repository's working tree (or its copies) from here on
        shutil.rmtree(clone)
        shutil.rmtree(copy)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and index != first:
                client.execute_cell(cell, index)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
