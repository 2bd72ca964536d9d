"""The publishing workflow works on a runner: its build job, run as written.

``.github/workflows/book.yml`` is the only way the book reaches readers, so the suite runs
its build job's steps in order in a fresh checkout of this working tree (tests/publish.py:
``run:`` steps in bash with a runner's variables, a stand-in for each ``uses:`` step). That
run is the suite's one build of the book: its check step, ``bash scripts/site.sh check``,
runs every page check of tests/test_book_browser.py on it, and its last stand-in checks the
folder Pages would publish holds every page. The job must pass, and it must fail where a
runner would: without the axe-core install, at the check step.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import publish

yaml = pytest.importorskip("yaml")


def _steps(workflow: dict) -> list:
    return workflow["jobs"]["build"]["steps"]


@pytest.mark.publish
@pytest.mark.slow  # builds the book (the suite's one build) and checks every page: minutes
def test_the_build_job_passes_as_written_and_fails_without_axe(tmp_path):
    """One test, so that on several workers (pytest -n) the one build runs on one of them."""
    # the checkout's .venv is the suite's own, when current: scripts/test.sh made it with the
    # workflow's venv step (site.sh venv) from the same requirements, so the step, run as
    # written, finds it made (byte-compiling torch and Jupyter again: ~80 CPU-s in CI)
    published = publish.run_job(checkout=publish.fresh_checkout(tmp_path / "repo"), echo=True,
                                venv_from=publish.current_venv())
    # 1. the job as written passes, every step ran, and the check step checked every page
    assert published.ok, published.report()
    ran = [s for s in published.steps if not s.skipped]
    assert len(ran) == len(_steps(publish.load_workflow())), published.report()
    check = next(s for s in published.steps if "Check every page" in s.name)
    summary = check.output.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert "failed" not in summary and "skipped" not in summary and "error" not in summary, summary
    from site_pages import toc_files

    assert passed >= len(toc_files(published.checkout)), summary  # at least one check per page
    assert (published.checkout / "_build" / "html" / "index.html").is_file()
    assert (published.checkout / "_build" / "html" / "zh" / "index.html").is_file()  # both editions

    # 2. the workflow with its axe-core step removed fails at the check step, as on a runner
    # (where nothing else installs it); the other steps run again on the same checkout, the
    # build step stood in by the build already there
    workflow = publish.load_workflow()
    workflow["jobs"]["build"]["steps"] = [s for s in _steps(workflow) if "site.sh axe" not in s.get("run", "")]
    axe = published.checkout / ".web-tools" / "axe"
    axe.rename(axe.with_name("axe.hidden"))
    res = publish.run_job(workflow, checkout=published.checkout, skip_build_from=published.checkout)
    bad = res.failed()
    assert bad is not None and "Check every page" in bad.name, res.report()
    assert "axe-core is missing" in bad.output, bad.output[-2000:]


# --- the runner stand-in itself (fast: tiny workflows in a folder with a _config.yml) ----------
@pytest.fixture
def folder(tmp_path):
    shutil.copy(publish.REPO / "_config.yml", tmp_path / "_config.yml")
    return tmp_path


def _job(*steps) -> dict:
    return {"jobs": {"build": {"steps": list(steps)}}}


def test_a_failing_step_stops_the_job_but_always_steps_run(folder):
    res = publish.run_job(_job({"run": "exit 3"}, {"run": "echo later"},
                               {"name": "screenshots", "if": "always()", "run": "echo kept"}), checkout=folder)
    assert [s.returncode for s in res.steps] == [3, 0, 0]
    assert res.steps[1].skipped and not res.steps[2].skipped and "kept" in res.steps[2].output
    assert not res.ok


def test_runner_variables_and_env_files_reach_later_steps(folder):
    res = publish.run_job(_job(
        {"run": 'echo "FOO=bar" >> "$GITHUB_ENV"; echo /opt/stand-in/bin >> "$GITHUB_PATH"'},
        {"run": 'test "$FOO" = bar; case ":$PATH:" in *:/opt/stand-in/bin:*) ;; *) exit 9 ;; esac'},
        {"run": 'test "$GITHUB_ACTIONS" = true && test "$CI" = true && test -n "$GITHUB_REPOSITORY"'
                ' && test "$GITHUB_WORKSPACE" = "$PWD"'},
        {"run": "false | true"},                      # bash -e without pipefail: passes
        {"shell": "bash", "run": "false | true"}),    # shell: bash adds pipefail: fails
        checkout=folder)
    assert [s.returncode for s in res.steps] == [0, 0, 0, 0, 1], res.report()


def test_an_action_with_no_stand_in_or_the_wrong_python_fails(folder):
    res = publish.run_job(_job({"uses": "someone/new-action@v1"}), checkout=folder)
    assert not res.ok and "no stand-in" in res.steps[0].output
    res = publish.run_job(_job({"uses": "actions/setup-python@v5", "with": {"python-version": "2.7"}}),
                          checkout=folder)
    assert not res.ok and "Python 2.7" in res.steps[0].output


def test_the_pages_stand_in_wants_every_page_of_the_toc(folder):
    shutil.copy(publish.REPO / "_toc.yml", folder / "_toc.yml")
    html = folder / "site"
    html.mkdir()
    (html / "index.html").write_text("<html></html>")
    res = publish.run_job(_job({"uses": "actions/upload-pages-artifact@v3", "with": {"path": "site"}}),
                          checkout=folder)
    assert not res.ok and "notebooks/01_soft_lookup.html" in res.steps[0].output


def test_a_current_venv_is_lent_to_the_checkout_and_a_stale_one_is_not(tmp_path):
    source = tmp_path / "source"
    (source / ".venv" / "bin").mkdir(parents=True)
    (source / ".venv" / "bin" / "python").write_text("")
    for name, text in (("requirements.txt", "numpy\n"), ("pyproject.toml", "[project]\n")):
        (source / name).write_text(text)
    assert publish.current_venv(source) is None                      # no stamp: not made by setup-env.sh
    # the stamp scripts/setup-env.sh writes: sha256 of requirements.txt then pyproject.toml
    stamp = subprocess.run("cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1", shell=True,
                           cwd=source, capture_output=True, text=True, check=True).stdout
    (source / ".venv" / ".attn-edu-installed").write_text(stamp)
    assert publish.current_venv(source) == source / ".venv"
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(publish.REPO / "_config.yml", checkout / "_config.yml")
    res = publish.run_job(_job({"run": f'test "$(readlink -f .venv)" = "{(source / ".venv").resolve()}"'}),
                          checkout=checkout, venv_from=publish.current_venv(source))
    assert res.ok, res.report()
    (source / "requirements.txt").write_text("numpy\ntorch\n")         # the pins changed: stale
    assert publish.current_venv(source) is None
