"""scripts/gpu_run.py's bookkeeping, on the CPU: which branches are GPU-only, a notebook that
fails (or runs past the deadline) on purpose, the executed notebooks' zip and its cap, the
documents' JSON schema, and Colab's wheels (scripts/colab_wheels.py) and their install.

The whole pipeline runs in tests/test_gpu_pipeline.py (``gpu-bench.sh --dry-run``); these
tests show on tiny synthetic notebooks that what it records of a chapter is right.
"""
from __future__ import annotations

import ast
import base64
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from venvs import REPO

sys.path.insert(0, str(REPO / "scripts"))
import colab_wheels  # noqa: E402
import gpu_run  # noqa: E402

nbformat = pytest.importorskip("nbformat")
jsonschema = pytest.importorskip("jsonschema")


def _branches(source: str):
    return [(line, test) for line, _, test in gpu_run._gpu_branches(ast.parse(source))]


def test_gpu_only_branches_are_told_apart_from_the_others():
    assert _branches("if GPU:\n    a = 1\nelse:\n    a = 2") == [(1, "GPU")]
    assert _branches("if not GPU:\n    a = 1\nelse:\n    a = 2") == [(1, "not GPU")]   # the else branch
    assert _branches("if not GPU:\n    a = 1") == []                # nothing runs only on a GPU
    assert _branches('if device != "cuda":\n    x = 1') == []
    assert _branches('if device == "cuda" and HAVE_TRITON:\n    x = 1') == [(1, "device == 'cuda' and HAVE_TRITON")]
    assert _branches("if GPU or SMALL:\n    x = 1") == []             # runs on a CPU too
    assert _branches("if torch.cuda.device_count() >= 2:\n    x = 1") == [(1, "torch.cuda.device_count() >= 2")]
    assert _branches("if torch.cuda.device_count() >= 0:\n    x = 1") == []
    assert _branches("if torch.cuda.is_available():\n    x = 1") == [(1, "torch.cuda.is_available()")]
    assert _branches("x = 1 if GPU else 2") == []                      # an expression, not a branch
    assert _branches("for n in ns:\n    if GPU:\n        f(n)\n    elif not SMALL:\n        g(n)") == [(2, "GPU")]


def test_the_chapters_gpu_branches_are_found():
    # the issue names 08, 09, 10 and 13; 03, 06, 11, 12 and 14 have GPU-only cells too
    found = {}
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = gpu_run.gpu_branch_cells(nbformat.read(str(path), as_version=4))
        if cells:
            found[path.stem[:2]] = cells
    assert set(found) == {"03", "06", "08", "09", "10", "11", "12", "13", "14"}, sorted(found)
    assert len(found["10"]) >= 5 and all(b["test"] for bs in found.values() for b in bs)
    nb = nbformat.read(str(REPO / "notebooks" / "10_flash_gpu.ipynb"), as_version=4)
    for b in found["10"]:
        assert nb.cells[b["cell"]].cell_type == "code" and b["key"] == gpu_run.cell_key(nb.cells[b["cell"]].source)


def _notebook(tmp_path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# a notebook that fails on purpose")]
    nb.cells += [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "99_synthetic.ipynb"
    nbformat.write(nb, str(path))
    return path


FAKE_TORCH = """import sys, types
torch = types.ModuleType("torch")   # stands for torch on a GPU: the probe reads its peak memory
torch.cuda = types.SimpleNamespace(is_available=lambda: True, max_memory_allocated=lambda: 123,
                                   max_memory_reserved=lambda: 456)
sys.modules["torch"] = torch"""


def _header(kind: str, **rest):
    return {"schema": gpu_run.SCHEMA, "kind": kind, "dry_run": True, "date": "2026-12-01T22:00:00+00:00",
            "device": {"kind": "cpu", "name": "test"}, "versions": {"python": "3", "attn_edu": "0"},
            "git_commit": None, "git_dirty": None, "command": "test", **rest}


def _chapters_doc(records, artifact=None):
    return _header("chapters", profile=None, kernel_python=sys.executable, where="test", deadline_s=1.0,
                   max_cells=None, chapters=records, artifact=artifact, t4_estimates=None, stack=None)


@pytest.mark.slow  # starts a kernel
def test_a_failing_notebook_records_its_cell_traceback_time_memory_and_gpu_branches(tmp_path):
    path = _notebook(
        tmp_path,
        'import time\nGPU = True   # as on a GPU runtime\ndevice = "cpu"',
        "def pick():\n    if GPU:\n        return 1\n    return 0",           # called by the next cell
        'if GPU:\n    x = pick()\nif device == "cuda":\n    y = 1\ntime.sleep(0.6)',
        FAKE_TORCH,
        "print('before')\n1 / 0",
        "never = True")
    rec, nb = gpu_run.execute_notebook(path, Path(sys.executable), time.monotonic() + 120,
                                       env={"PYTHONPATH": str(REPO)})
    assert rec["status"] == "failed", rec
    bad = rec["failed_cell"]
    assert (bad["cell"], bad["code_cell"], bad["ename"]) == (5, 4, "ZeroDivisionError")
    assert "1 / 0" in bad["traceback"] and "\x1b[" not in bad["traceback"]
    assert bad["id"] == nb.cells[5].id
    assert rec["cells_run"] == 5 and rec["code_cells"] == 6
    assert nb.cells[6].outputs == [] and nb.cells[6].execution_count is None   # Run all stops there
    assert "before" in nb.cells[5].outputs[0]["text"]
    assert rec["seconds"] >= 0.6
    assert rec["slowest_cells"][0]["cell"] == 3 and rec["slowest_cells"][0]["seconds"] >= 0.6
    # the branches that ran: in the function defined by cell 2 (called from cell 3) and cell 3's first
    assert [(b["cell"], b["line"], b["ran"]) for b in rec["gpu_branches"]] == [(2, 2, True), (3, 1, True),
                                                                              (3, 3, False)]
    assert (rec["gpu_peak_bytes"], rec["gpu_reserved_peak_bytes"]) == (123, 456)
    assert rec["kernel"]["google_colab"] is True                  # the stand-in google.colab
    assert len(nb.cells) == 7 and all(gpu_run.PROBE_MARK not in c.source for c in nb.cells)
    gpu_run.validate(_chapters_doc([rec]))
    assert "FAILED at cell 5 (ZeroDivisionError" in gpu_run.chapter_line(rec)
    # the schema holds what a failed chapter must say
    with pytest.raises(jsonschema.ValidationError):
        gpu_run.validate(_chapters_doc([{**rec, "failed_cell": None}]))
    with pytest.raises(jsonschema.ValidationError):
        gpu_run.validate(_chapters_doc([{**rec, "status": "ok"}]))


@pytest.mark.slow  # starts a kernel
def test_a_cell_past_the_deadline_stops_the_chapter_and_the_probe_still_runs(tmp_path):
    path = _notebook(tmp_path, "x = 1", "import time\ntime.sleep(60)", "y = 2")
    start = time.monotonic()
    rec, nb = gpu_run.execute_notebook(path, Path(sys.executable), time.monotonic() + 6,
                                       env={"PYTHONPATH": str(REPO)}, colab_standin=False)
    assert time.monotonic() - start < 45
    assert rec["status"] == "stopped" and rec["stopped"] == {"cell": 2, "reason": "deadline"}, rec
    assert rec["failed_cell"] is None and rec["cells_run"] == 1
    assert rec["gpu_memory_note"] == "torch was not imported"      # the kernel answered after the interrupt
    assert nb.cells[3].outputs == []
    gpu_run.validate(_chapters_doc([rec]))


def _big_notebook(seed: int, outputs: int, size: int):
    nb = nbformat.v4.new_notebook()
    for i in range(outputs):   # random bytes: what compression cannot shrink
        png = base64.b64encode(os.urandom(size)).decode()
        cell = nbformat.v4.new_code_cell(f"plot({seed}, {i})")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})]
        nb.cells.append(cell)
    nb.cells.append(nbformat.v4.new_code_cell("print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")]))
    return nb


def test_the_executed_notebooks_zip_stays_under_its_cap(tmp_path):
    assert gpu_run.ARTIFACT_CAP_BYTES == 16 * 2**20
    schema = json.loads(gpu_run.SCHEMA_FILE.read_text())
    art = schema["$defs"]["chapters"]["properties"]["artifact"]["oneOf"][1]["properties"]
    assert art["bytes"]["maximum"] == gpu_run.ARTIFACT_CAP_BYTES
    nbs = {f"0{i}_x": _big_notebook(i, 3, 40_000) for i in range(1, 4)}   # 9 x 40 kB of noise
    path = tmp_path / "executed.zip"
    small = gpu_run.write_artifact(path, nbs, cap=200_000)
    assert small["bytes"] == path.stat().st_size <= 200_000 < 9 * 40_000
    assert sum(small["outputs_left_out"].values()) >= 4 and small["chapters"] == sorted(nbs)
    with zipfile.ZipFile(path) as z:
        back = {n: nbformat.reads(z.read(n).decode(), as_version=4) for n in z.namelist()}
    assert sorted(back) == [f"{s}.ipynb" for s in sorted(nbs)]
    kept = left = 0
    for nb in back.values():
        nbformat.validate(nb)
        for cell in nb.cells:
            for out in cell.outputs:
                if out.get("metadata", {}).get("attn_edu_left_out"):
                    left += 1
                    assert "left out" in out["data"]["text/plain"]
                elif "image/png" in out.get("data", {}):
                    kept += 1
    assert left == sum(small["outputs_left_out"].values()) and kept + left == 9
    assert all(nb.cells[-1].outputs[0]["text"] == "1\n" for nb in back.values())   # small outputs stay
    assert all(len(nb.cells[0].outputs[0]["data"]["image/png"]) > 50_000 for nb in nbs.values())  # copies changed
    # under the cap: nothing left out; a later command adds its chapters to the earlier ones
    full = gpu_run.write_artifact(path, {"01_x": nbs["01_x"]}, cap=10**7)
    assert full["outputs_left_out"] == {} and full["chapters"] == ["01_x"]
    more = gpu_run.write_artifact(path, {"02_x": nbs["02_x"]}, cap=10**7, keep=["01_x"])
    assert more["chapters"] == ["01_x", "02_x"]
    with pytest.raises(ValueError, match="above the cap"):
        gpu_run.write_artifact(tmp_path / "tiny.zip", {"01_x": nbs["01_x"]}, cap=100)


def test_the_schema_rejects_what_a_run_must_not_record():
    run = _header("run", deadline_s=540, steps=[{"step": "chapters", "status": "ok", "seconds": 1.0,
                                                 "summary": "", "outputs": [], "date": "d"}])
    gpu_run.validate(run)
    tests = _header("gpu_tests", argv=[], exit_code=0, passed=3, failed=0, errors=0, skipped=1, failures=[],
                    stopped=False)
    gpu_run.validate(tests)
    gpu_run.validate(_chapters_doc([{"chapter": "01_x", "status": "not_run", "reason": "out of time"}]))
    for broken in ({**run, "schema": "attn_edu.bench/2"},
                   {**run, "dry_run": False},                     # a GPU run on a CPU device
                   {**run, "steps": [{**run["steps"][0], "status": "fine"}]},
                   {**tests, "passed": -1},
                   {**tests, "kind": "sweep"},
                   _chapters_doc([{"chapter": "01_x", "status": "not_run"}]),   # without its reason
                   _chapters_doc([], artifact={"path": "x.zip", "bytes": 17 * 2**20, "cap_bytes": 16 * 2**20,
                                               "chapters": [], "outputs_left_out": {}})):
        with pytest.raises(jsonschema.ValidationError):
            gpu_run.validate(broken)


def test_colab_wheels_pin_colabs_stack_and_find_a_missing_dependency():
    pins = dict(r.split("==") for r in colab_wheels.pinned())
    assert {k: pins[k] for k in ("ipykernel", "ipython", "ipywidgets", "plotly", "jupyter_client")} == {
        "ipykernel": "6.17.1", "ipython": "7.34.0", "ipywidgets": "7.7.1", "plotly": "5.24.1",
        "jupyter_client": "7.4.9"}
    requires = {"ipykernel": ["debugpy>=1.0", "packaging", "pytest; extra == 'test'"],
                "debugpy": [], "ipython": ['pexpect>4.3; sys_platform != "win32"', 'appnope; sys_platform == "darwin"',
                                           'importlib-metadata; python_version < "3.8"', "zzz-missing"]}
    assert colab_wheels.closure_problems(requires) == ["pexpect (needed by ipython)", "zzz-missing (needed by ipython)"]
    assert colab_wheels.closure_problems(requires, have=["pexpect", "zzz_missing"]) == []
    ignored = subprocess.run(["git", "check-ignore", "-q", ".colab-wheels/x.whl"], cwd=REPO)
    assert ignored.returncode == 0   # the wheels never go into a commit


def _tiny_wheel(folder: Path, name: str = "attn_edu_wheel_probe") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    dist = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": "ANSWER = 42\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(wheel, "w") as z:
        for n, text in files.items():
            z.writestr(n, text)
        z.writestr(f"{dist}/RECORD", "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n")
    return wheel


@pytest.mark.slow  # pip installs a wheel
def test_the_wheels_install_without_an_index_into_a_folder_first_on_the_path(tmp_path):
    wheels = tmp_path / "wheels"
    _tiny_wheel(wheels)
    assert gpu_run.install_wheels(tmp_path / "none") is None         # no folder: nothing to do
    site = gpu_run.install_wheels(wheels, tmp_path / "site")
    got = subprocess.run([sys.executable, "-c", "import attn_edu_wheel_probe as m; print(m.ANSWER, m.__file__)"],
                         env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert got.stdout.split()[0] == "42" and got.stdout.split()[1].startswith(str(site)), got.stderr
    (wheels / "MANIFEST.json").write_text(json.dumps({"python": "2.7"}))
    with pytest.raises(SystemExit, match="wheels for Python 2.7"):
        gpu_run.install_wheels(wheels, tmp_path / "site2")
