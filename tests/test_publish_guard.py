"""The publishing workflow refuses to publish a book whose first cells install someone
else's code: its guard step fails unless ``repository.url`` is the repository it runs in.

The step is found in .github/workflows/book.yml and its shell is run as GitHub Actions
would (bash, ``GITHUB_REPOSITORY`` set to a fake repository), in copies of the repository's
configuration."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from venvs import REPO

yaml = pytest.importorskip("yaml")
WORKFLOW = REPO / ".github" / "workflows" / "book.yml"
URL = yaml.safe_load((REPO / "_config.yml").read_text())["repository"]["url"]


def _build_steps() -> list:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]["build"]["steps"]


def guard_step() -> dict:
    (step,) = [s for s in _build_steps() if "repository.url" in s.get("name", "")]
    return step


def run_guard(root: Path, github_repository: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["GITHUB_REPOSITORY"] = github_repository
    return subprocess.run(["bash", "-e", "-c", guard_step()["run"]], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def copy(tmp_path) -> Path:
    """The files the guard reads: _config.yml and scripts/."""
    shutil.copy(REPO / "_config.yml", tmp_path / "_config.yml")
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    return tmp_path


def test_the_guard_runs_before_anything_is_built_or_published():
    names = [s.get("name") or s.get("uses") for s in _build_steps()]
    guard = names.index(guard_step()["name"])
    build = next(i for i, s in enumerate(_build_steps()) if "site.sh build" in s.get("run", ""))
    upload = next(i for i, s in enumerate(_build_steps()) if "upload-pages-artifact" in s.get("uses", ""))
    assert guard < build < upload, names
    deploy = yaml.safe_load(WORKFLOW.read_text())["jobs"]["deploy"]
    assert deploy.get("needs") == "build", "publishing must wait for the build job (and its guard)"


def test_the_guard_passes_in_the_repository_that_repository_url_names(copy):
    owner_repo = URL.split("github.com/", 1)[1]
    proc = run_guard(copy, owner_repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert run_guard(copy, owner_repo.upper()).returncode == 0  # GitHub names ignore case


def test_the_guard_fails_in_another_repository(copy):
    proc = run_guard(copy, "someone-else/their-fork")
    assert proc.returncode != 0
    assert "https://github.com/someone-else/their-fork" in proc.stderr and URL in proc.stderr
    assert "scripts/set_repo_url.py" in proc.stderr  # says how to fix it


def test_a_fork_passes_once_repository_url_is_its_own(copy):
    config = copy / "_config.yml"
    config.write_text(config.read_text().replace(f"url: {URL}", "url: https://github.com/someone-else/their-fork"))
    assert run_guard(copy, "someone-else/their-fork").returncode == 0
    assert run_guard(copy, URL.split("github.com/", 1)[1]).returncode != 0


def test_the_guard_fails_outside_github_actions(copy):
    assert run_guard(copy, "").returncode != 0


def test_the_readmes_fork_walkthrough_runs(tmp_path):
    """README's "Publish the book", step 1, as a fork's new owner runs it: set repository.url,
    run the commands of its code block; then every copy names the fork and the workflow's
    guard passes in the fork."""
    import re

    readme = (REPO / "README.md").read_text()
    section = readme.split("## Publish the book", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [line.strip() for line in block.splitlines() if line.strip()]
    assert commands == ["python3 scripts/set_repo_url.py", "python3 scripts/set_repo_url.py --check"]
    for rel in ("_config.yml", "README.md", "pyproject.toml", "scripts", "notebooks"):
        src = REPO / rel
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / rel)
    config = tmp_path / "_config.yml"
    config.write_text(config.read_text().replace(f"url: {URL}", "url: https://github.com/new-owner/their-book"))
    for cmd in commands:
        proc = subprocess.run(["bash", "-e", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (cmd, proc.stdout + proc.stderr)
    assert "new-owner/their-book" in (tmp_path / "notebooks" / "01_soft_lookup.ipynb").read_text()
    assert URL not in (tmp_path / "pyproject.toml").read_text()
    assert run_guard(tmp_path, "new-owner/their-book").returncode == 0
    assert "python3 tests/publish.py" in section and (REPO / "tests" / "publish.py").is_file()
