"""Run the publishing workflow's build job as GitHub's runner would, here.

:func:`run_job` reads ``.github/workflows/book.yml``, makes a fresh checkout of this working
tree (``git clone`` of HEAD, then the working tree's changed and untracked files on top: what
``actions/checkout`` would give for a commit of it), and runs the job's steps in order:

* a ``run:`` step in bash as the runner does (``bash -e {0}``, or ``bash --noprofile --norc
  -eo pipefail {0}`` when the step or the job's defaults say ``shell: bash``), in the
  checkout, with the variables a runner sets (``CI``, ``GITHUB_ACTIONS``,
  ``GITHUB_REPOSITORY`` -- the repository ``_config.yml`` names --, ``GITHUB_WORKSPACE``,
  ``GITHUB_SHA``, ``GITHUB_REF``, ``GITHUB_EVENT_NAME``, ``RUNNER_OS``, ``RUNNER_TEMP``, and the
  files ``GITHUB_ENV``, ``GITHUB_PATH``, ``GITHUB_OUTPUT``, whose lines later steps see);
* a ``uses:`` step by a stand-in for what it provides: ``actions/checkout`` -- the checkout;
  ``actions/setup-python`` -- this machine's ``python3``, which must have the version asked
  for; ``actions/cache`` -- nothing (a cold cache); ``actions/upload-artifact`` -- nothing;
  ``actions/upload-pages-artifact`` -- the folder it would upload must hold ``index.html`` and
  every page of ``_toc.yml``. Any other action fails the run: it has no stand-in yet.

Steps run until one fails; later steps then run only with ``if: always()``, as on GitHub.
The result lists each step with its exit code, time and output.

    python tests/publish.py [--workflow FILE] [--keep DIR] [--skip-build-from DIR] [--venv-from VENV]

prints each step's result; ``--skip-build-from DIR`` stands in for the build step with
``DIR/_build`` (a book built from the same sources), to check the other steps quickly;
``--venv-from VENV`` gives the checkout a current ``.venv`` (a link) for the venv step to find.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "book.yml"
sys.path.insert(0, str(REPO / "scripts"))


@dataclass
class StepResult:
    name: str
    returncode: int
    seconds: float
    output: str = ""
    skipped: Optional[str] = None

    def __str__(self) -> str:
        state = f"skipped ({self.skipped})" if self.skipped else f"exit {self.returncode}"
        return f"{self.name}: {state}, {self.seconds:.0f} s"


@dataclass
class JobResult:
    checkout: Path
    steps: List[StepResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.returncode == 0 for s in self.steps)

    def failed(self) -> Optional[StepResult]:
        return next((s for s in self.steps if s.returncode != 0), None)

    def report(self, tail: int = 3000) -> str:
        lines = [str(s) for s in self.steps]
        bad = self.failed()
        if bad:
            lines.append(f"--- output of the failed step {bad.name!r} (last {tail} characters):")
            lines.append(bad.output[-tail:])
        return "\n".join(lines)


def load_workflow(path: Path = WORKFLOW) -> dict:
    import yaml

    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def repository_slug(root: Path = REPO) -> str:
    """``OWNER/REPO`` of ``repository.url`` in ``_config.yml``: where the runner would run."""
    import yaml

    url = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))["repository"]["url"]
    return url.rstrip("/").split("github.com/", 1)[1]


def fresh_checkout(dest: Path, source: Path = REPO) -> Path:
    """A clone of ``source``'s HEAD with its working tree's changes on top (tracked files that
    differ, untracked files that git does not ignore; deleted files deleted): the commit
    ``actions/checkout`` would check out if the working tree were committed."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(source), str(dest)], check=True)
    changed = subprocess.run(["git", "ls-files", "-z", "--modified", "--others", "--exclude-standard"],
                             cwd=source, check=True, capture_output=True, text=True).stdout.split("\0")
    deleted = set(subprocess.run(["git", "ls-files", "-z", "--deleted"], cwd=source, check=True,
                                 capture_output=True, text=True).stdout.split("\0"))
    for rel in filter(None, changed):
        src, dst = source / rel, dest / rel
        if rel in deleted or not src.exists():
            dst.unlink(missing_ok=True)
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    return dest


def _runner_env(checkout: Path, temp: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "RUNNER_", "ATTN_EDU_", "PYTEST_", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)
    # a fresh runner has no virtual environment on PATH (scripts/test.sh puts .venv/bin first)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and not (Path(p).parent / "pyvenv.cfg").is_file())
    for name in ("env", "path", "output", "step_summary"):
        (temp / f"github_{name}").write_text("")
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    env.update(CI="true", GITHUB_ACTIONS="true", GITHUB_REPOSITORY=repository_slug(checkout),
               GITHUB_WORKSPACE=str(checkout), GITHUB_SHA=sha, GITHUB_REF="refs/heads/main",
               GITHUB_REF_NAME="main", GITHUB_EVENT_NAME="push", GITHUB_JOB="build", RUNNER_OS="Linux",
               RUNNER_TEMP=str(temp), GITHUB_ENV=str(temp / "github_env"), GITHUB_PATH=str(temp / "github_path"),
               GITHUB_OUTPUT=str(temp / "github_output"), GITHUB_STEP_SUMMARY=str(temp / "github_step_summary"))
    return env


def _apply_runner_files(env: dict) -> None:
    """What a step appended to GITHUB_ENV / GITHUB_PATH, as the runner applies it to later steps."""
    text = Path(env["GITHUB_ENV"]).read_text()
    lines = iter(text.splitlines())
    for line in lines:
        if "<<" in line and "=" not in line.split("<<", 1)[0]:
            name, delim = line.split("<<", 1)
            value = []
            for more in lines:
                if more == delim:
                    break
                value.append(more)
            env[name] = "\n".join(value)
        elif "=" in line:
            name, value = line.split("=", 1)
            env[name] = value
    for p in reversed([p for p in Path(env["GITHUB_PATH"]).read_text().splitlines() if p.strip()]):
        env["PATH"] = p + os.pathsep + env["PATH"]


def _expand(text: str, env: dict) -> str:
    """The ``${{ ... }}`` expressions a stand-in needs; any other fails loudly."""
    def sub(m):
        expr = m.group(1).strip()
        if expr == "github.repository":
            return env["GITHUB_REPOSITORY"]
        if expr == "runner.os":
            return env["RUNNER_OS"]
        if expr.startswith("hashFiles("):
            return "stand-in-hash"
        raise ValueError(f"the runner stand-in cannot evaluate ${{{{ {expr} }}}}")
    return re.sub(r"\$\{\{(.*?)\}\}", sub, text)


def _stand_in(step: dict, checkout: Path, env: dict) -> tuple:
    """``(returncode, output)`` of a ``uses:`` step's stand-in."""
    action = step["uses"].split("@")[0]
    args = step.get("with") or {}
    if action == "actions/checkout":
        return 0, f"the fresh checkout {checkout}"
    if action == "actions/setup-python":
        want = str(args.get("python-version", ""))
        have = subprocess.run(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              env=env, capture_output=True, text=True).stdout.strip()
        if want and not (have == want or have.startswith(want + ".")):
            return 1, f"setup-python would provide Python {want}; this machine's python3 is {have}"
        return 0, f"this machine's python3 ({have})"
    if action in ("actions/cache", "actions/upload-artifact"):
        return 0, f"{action}: nothing to do here"
    if action == "actions/upload-pages-artifact":
        from site_pages import missing_pages

        folder = checkout / _expand(str(args.get("path", "_site")), env)
        missing = missing_pages(folder, checkout)
        if missing:
            return 1, f"{folder} is not a complete site: missing {', '.join(missing)}"
        return 0, f"{folder} holds index.html and every page of _toc.yml"
    return 1, f"no stand-in for {step['uses']}: teach tests/publish.py what it provides"


def _shell(step: dict, job: dict, workflow: dict) -> list:
    shell = (step.get("shell") or (job.get("defaults") or {}).get("run", {}).get("shell")
             or (workflow.get("defaults") or {}).get("run", {}).get("shell"))
    if shell in (None, ""):
        return ["bash", "-e"]
    if shell == "bash":
        return ["bash", "--noprofile", "--norc", "-eo", "pipefail"]
    raise ValueError(f"the runner stand-in runs bash steps only; got shell: {shell}")


def current_venv(source: Path = REPO) -> Optional[Path]:
    """``source``'s ``.venv`` when scripts/setup-env.sh made it for the requirements.txt and
    pyproject.toml there now (its stamp), else None."""
    venv = source / ".venv"
    stamp = venv / ".attn-edu-installed"
    if not (venv / "bin" / "python").is_file() or not stamp.is_file():
        return None
    import hashlib

    want = hashlib.sha256((source / "requirements.txt").read_bytes() + (source / "pyproject.toml").read_bytes())
    return venv if stamp.read_text().strip() == want.hexdigest() else None


def run_job(workflow: Optional[dict] = None, job: str = "build", checkout: Optional[Path] = None,
            skip_build_from: Optional[Path] = None, echo: bool = False,
            venv_from: Optional[Path] = None) -> JobResult:
    """Run ``job``'s steps of ``workflow`` (default: book.yml as it is) in ``checkout`` (default:
    a fresh checkout in a new temporary folder). ``skip_build_from``: stand in for the step that
    builds the book with that folder's ``_build`` instead of building (the same sources).
    ``venv_from``: a current ``.venv`` (:func:`current_venv`) that the checkout's ``.venv`` links
    to, so that the venv step, run as written, finds its environment made: made by the same
    step (scripts/setup-env.sh) from the same requirements, it would be the same."""
    workflow = load_workflow() if workflow is None else workflow
    spec = workflow["jobs"][job]
    if checkout is None:
        checkout = fresh_checkout(Path(tempfile.mkdtemp(prefix="attn-edu-publish-")) / "repo")
    if venv_from is not None and not (checkout / ".venv").exists():
        (checkout / ".venv").symlink_to(Path(venv_from).resolve(), target_is_directory=True)
    temp = checkout.parent / "runner_temp"
    temp.mkdir(exist_ok=True)
    env = _runner_env(checkout, temp)
    result = JobResult(checkout)
    timeout = 60 * float(spec.get("timeout-minutes", 360))
    start = time.time()
    for i, step in enumerate(spec["steps"]):
        name = step.get("name") or step.get("uses") or step.get("run", "").splitlines()[0]
        cond = str(step.get("if", "success()")).strip()
        if cond not in ("success()", "always()"):
            raise ValueError(f"the runner stand-in evaluates if: success() and always() only; got {cond!r}")
        if result.failed() and cond != "always()":
            result.steps.append(StepResult(name, 0, 0.0, skipped="an earlier step failed"))
            continue
        t0 = time.time()
        if "uses" in step:
            code, out = _stand_in(step, checkout, env)
        elif skip_build_from is not None and re.search(r"site\.sh build|build-book\.sh", step["run"]):
            # what the build step leaves behind: .venv (made as build-book.sh makes it) and _build
            proc = subprocess.run(["bash", "-e", "-c", "source scripts/setup-env.sh"], cwd=checkout, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if Path(skip_build_from).resolve() != checkout.resolve():
                shutil.copytree(Path(skip_build_from) / "_build", checkout / "_build", dirs_exist_ok=True)
            code, out = proc.returncode, proc.stdout + f"\n_build stood in by {skip_build_from}/_build"
        else:
            left = timeout - (time.time() - start)
            try:
                proc = subprocess.run(_shell(step, spec, workflow) + ["-c", _expand(step["run"], env)],
                                      cwd=checkout, env={**env, **(step.get("env") or {})},
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      timeout=max(left, 1))
                code, out = proc.returncode, proc.stdout
            except subprocess.TimeoutExpired as err:
                code, out = 124, f"the job's timeout-minutes ran out\n{err.stdout or ''}"
            _apply_runner_files(env)
        result.steps.append(StepResult(name, code, time.time() - t0, out))
        if echo:
            print(result.steps[-1], flush=True)
    return result


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workflow", type=Path, default=WORKFLOW)
    p.add_argument("--keep", type=Path, help="make the fresh checkout here (a new folder)")
    p.add_argument("--skip-build-from", type=Path, help="stand in for the build step with DIR/_build")
    p.add_argument("--venv-from", type=Path, help="a current .venv for the checkout (default: the venv step makes one)")
    args = p.parse_args(argv)
    checkout = fresh_checkout(args.keep / "repo") if args.keep else None
    res = run_job(load_workflow(args.workflow), checkout=checkout, skip_build_from=args.skip_build_from,
                  echo=True, venv_from=args.venv_from)
    print(res.report())
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
