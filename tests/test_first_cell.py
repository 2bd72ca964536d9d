"""Every chapter's first cell: one and the same cell, and when pip cannot install attn_edu it
says so in one line that names what it tried and how to point it elsewhere.

(tests/test_colab_first_cell.py runs it for real: a fresh venv installs from a file:// clone
that scripts/set_repo_url.py wrote into the cell.)"""
from __future__ import annotations

import json
import os
import re
import subprocess
import venv
from pathlib import Path

import pytest

from venvs import REPO

yaml = pytest.importorskip("yaml")
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
REPO_URL = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]["url"]


def first_cell(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


def test_every_chapter_has_the_same_first_cell():
    cells = {first_cell(p) for p in NOTEBOOKS}
    assert len(cells) == 1, "the chapters' first cells differ: change them all together"
    (cell,) = cells
    assert f'SOURCE = "attn_edu @ git+{REPO_URL}"' in cell  # the one line scripts/set_repo_url.py rewrites


def test_the_chinese_twins_first_cell_is_the_english_one_in_chinese():
    """notebooks/zh/NN: the same first cell, but for setup_notebook(lang="zh") (the twins' one
    code difference, scripts/zh.py's zh_code), so Jupyter and Colab show the package's words
    in Chinese; the English chapters choose nothing (English, the default)."""
    (english,) = {first_cell(p) for p in NOTEBOOKS}
    assert english.count("attn_edu.setup_notebook()") == 1 and "lang=" not in english
    twins = sorted((REPO / "notebooks" / "zh").glob("*.ipynb"))
    assert [p.name for p in twins] == [p.name for p in NOTEBOOKS]
    want = english.replace("attn_edu.setup_notebook()", 'attn_edu.setup_notebook(lang="zh")')
    for path in twins:
        assert first_cell(path) == want, f"{path.name}: python scripts/zh.py sync {path.name[:2]}"


def test_a_failed_install_says_what_it_tried_and_how_to_point_it_elsewhere(tmp_path):
    """A runtime where pip fails (here: a venv without pip, and no attn_edu): the cell stops
    with one line naming the URL and what to change -- not pip's traceback alone."""
    venv.EnvBuilder(with_pip=False).create(str(tmp_path / "env"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([str(tmp_path / "env" / "bin" / "python"), "-I", "-c", first_cell(NOTEBOOKS[0])],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("Could not install") and f"git+{REPO_URL}" in last, proc.stderr
    assert re.search(r"set SOURCE above to .*fork.*clone", last) and "run this cell again" in last
