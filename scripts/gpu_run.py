#!/usr/bin/env python3
"""The GPU run, step by step, under a deadline: what ``bash scripts/gpu-bench.sh`` runs.

One command for a machine with a CUDA GPU (the one we measure on, or a reader's)::

    bash scripts/gpu-bench.sh [--deadline S] [--from STEP] [--only STEP ...] [--out DIR]
    bash scripts/gpu-bench.sh --dry-run DIR       # every step on the CPU, tiny sizes
    bash scripts/gpu-bench.sh --list              # the steps, in order
    bash scripts/gpu-bench.sh --submission        # a reader's run, as one folder for a pull request

The steps, most-needed first (a deadline cuts from the end; ``--from STEP`` starts a
second command where the first one stopped):

``chapters``
    Run all, as a Colab reader does: every English chapter top to bottom with nbclient, in
    a kernel of Colab's notebook stack (ipykernel 6.17.1, IPython 7.34.0, jupyter_client
    7.4.9, ipywidgets 7.7.1, plotly 5.24.1: from the checkout's ``.colab-wheels/``, see
    scripts/colab_wheels.py) over the machine's own torch and triton, ``google.colab``
    stood in (tests/colab.py). Per chapter: ran to the end or the first failing cell (index
    and traceback), wall time, peak GPU memory (``torch.cuda.max_memory_allocated`` read in
    the kernel by an appended cell), which GPU-only branches ran. The chapters with GPU
    branches go first. The executed notebooks are kept as one zip of at most 16 MiB.
``t4``
    The chapters with GPU branches again, under ``ATTN_EDU_GPU_PROFILE=t4`` (a T4's limits:
    attn_edu reads it), then ``python -m attn_edu.bench --t4-estimates`` (each GPU branch's
    estimated time on a real T4).
``measure-NAME``
    The measurements we do not have yet: ``python -m attn_edu.bench --measure NAME``,
    NAME in :data:`MEASUREMENTS` (backward, forward against cuDNN, causal at d = 128, host
    time, decode eager against graph replay, the goals' calls profiled -- host time by whose
    code spent it, and Nsight Compute's reading of their kernels where the GPU's counters can
    be read (``profile``, about a minute) --, peak memory, and last the forward's ladder from
    FlashAttention-2 to -3, ``fa3_ladder``: five variants autotuned each, so its first run
    compiles some 270 kernels on an H100, each key's in parallel threads before its autotuner
    times them (``attn_edu.kernels._compile_ahead``); give the command a ``--deadline`` that
    leaves it room).
``ring-overlap``
    ``python -m attn_edu.distributed.overlap``: a ring step's K/V transfer (a copy engine, its
    own stream) timed with CUDA events against its compute, on one GPU (chapter 14).
``gpu-tests``
    ``pytest -m "triton or cuda"``: the tests only a GPU runs.
``correctness`` ... ``sweep-other-d``
    The sweeps the chapters plot (correctness, the d = 64 sweep, the goals, causal, decode,
    block-sparse, d = 128). They come last: an H100 recorded them on 2026-11-26 and they are
    committed, so on another GPU they add a second device, not a missing number.

Each step writes its schema'd JSON document (``attn_edu.bench/1``; the kinds ``run``,
``chapters`` and ``gpu_tests`` are validated against attn_edu/data/schema/bench.schema.json with
jsonschema) the moment it finishes, its output in ``DIR/run/logs/STEP.log``, and one line
in ``DIR/run/run_GPU.json`` (read back and merged by a later ``--from`` command). It prints
one summary line per step, and all of them again at the end. The exit code is 1 when a
step failed, stopped or did not run.

``--dry-run`` runs every step on the CPU at tiny sizes (Triton's interpreter; one short
chapter in the Colab stand-in, tests/standin.py; every measurement with ``--dry-run``) and
marks every document ``"dry_run": true``: it checks the pipeline, its numbers are CPU
numbers. So each measurement runs at one length there (the dry-run rule of
attn_edu/bench/measure.py); the sweeps keep their own sizes (``steps``: n <= 64).
tests/test_gpu_pipeline.py runs it once per test run (tests/conftest.py's ``gpu_dry_run``),
and tests/test_bench_measure.py reads its measurements' documents.
"""
from __future__ import annotations

import argparse
import ast
import datetime as _dt
import hashlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
SCHEMA = "attn_edu.bench/1"
SUBMISSIONS = REPO / "attn_edu" / "data" / "submissions"
SCHEMA_FILE = REPO / "attn_edu" / "data" / "schema" / "bench.schema.json"  # every kind, one schema
#: Colab's notebook stack as wheels (scripts/colab_wheels.py), installed when present
WHEELS = REPO / ".colab-wheels"
DEFAULT_DEADLINE_S = 540
#: a step is not started with less time left than this
MIN_STEP_S = 10
#: the executed notebooks of one chapters step, compressed (what a GPU lease returns: 16 MiB a file)
ARTIFACT_CAP_BYTES = 16 * 2**20
MEASUREMENTS = ("backward", "forward_cudnn", "causal_d128", "host_time", "decode_graph", "profile", "memory",
                "fa3_ladder")
#: the dry run's chapter (short) and how many of its code cells run: six as it is (the setup,
#: the imports, a figure), the first one (the setup) under the T4 profile
DRY_CHAPTER, DRY_CELLS = "01_soft_lookup", {None: 6, "t4": 1}
DRY_TESTS = ["tests/test_reference_torch.py", "-k", "test_cuda_matches_reference"]   # they skip on a CPU
PROBE_MARK = "__ATTN_EDU_PROBE__"

# ---------------------------------------------------------------------------------------------
# Which branches of a cell run only on a GPU. One source, run twice: here on the cells' text
# (which branches there are) and inside the kernel (which of them ran): an IPython AST
# transformer puts a call at the top of every GPU-only branch, the visible source unchanged.
GPU_BRANCHES = r'''
def gpu_sign(test):
    """+1: the body runs only on a GPU; -1: the else branch does; 0: neither."""
    import ast
    if isinstance(test, ast.Name):
        return 1 if test.id in ("GPU", "ON_GPU", "HAS_GPU", "CUDA") else 0
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return -gpu_sign(test.operand)
    if isinstance(test, ast.BoolOp):
        signs = [gpu_sign(v) for v in test.values]
        if isinstance(test.op, ast.And):
            return 1 if 1 in signs else 0
        return -1 if -1 in signs else 0
    if isinstance(test, ast.Attribute) and test.attr == "is_cuda":
        return 1
    if isinstance(test, ast.Call):
        f = test.func
        return 1 if isinstance(f, ast.Attribute) and f.attr == "is_available" and \
            isinstance(f.value, ast.Attribute) and f.value.attr == "cuda" else 0
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        sides, op = (test.left, test.comparators[0]), test.ops[0]
        if any(isinstance(s, ast.Constant) and s.value == "cuda" for s in sides):
            return 1 if isinstance(op, ast.Eq) else -1 if isinstance(op, ast.NotEq) else 0
        left, right = sides
        if isinstance(left, ast.Call) and isinstance(left.func, ast.Attribute) and \
                left.func.attr == "device_count" and isinstance(op, (ast.Gt, ast.GtE)) and \
                isinstance(right, ast.Constant) and isinstance(right.value, int) and right.value >= 1:
            return 1
    return 0


def gpu_branches(tree):
    """[(line of the if, the branch's statements, the test's text)] of every GPU-only branch."""
    import ast
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            sign = gpu_sign(node.test)
            branch = node.body if sign > 0 else node.orelse if sign < 0 else None
            if branch:
                found.append((node.lineno, branch, ast.unparse(node.test) if hasattr(ast, "unparse") else ""))
    return found
'''
_ns: Dict[str, Any] = {}
exec(GPU_BRANCHES, _ns)
gpu_sign, _gpu_branches = _ns["gpu_sign"], _ns["gpu_branches"]

#: the kernel's first (hidden) cell: the branch marks, then what the kernel is (versions, profile)
KERNEL_SETUP = r'''
def _attn_edu_setup(branches_source):
    import ast, builtins, hashlib, importlib.metadata as md, json, os, platform, sys
    ns = {}
    exec(branches_source, ns)
    gpu_branches = ns["gpu_branches"]
    builtins.__attn_edu_gpu_ran__ = set()
    builtins.__attn_edu_gpu_mark__ = lambda key, line: builtins.__attn_edu_gpu_ran__.add((key, line))
    state = {"key": None}

    def pre(info=None):
        raw = getattr(info, "raw_cell", None) or ""
        state["key"] = hashlib.sha1(raw.encode()).hexdigest()[:12]

    class Mark(ast.NodeTransformer):
        def visit_Module(self, node):
            for line, branch, _ in gpu_branches(node):
                call = ast.Expr(ast.Call(ast.Name("__attn_edu_gpu_mark__", ast.Load()),
                                         [ast.Constant(state["key"]), ast.Constant(line)], []))
                ast.copy_location(call, branch[0])
                branch.insert(0, ast.fix_missing_locations(call))
            return node

    ip = get_ipython()
    ip.events.register("pre_run_cell", pre)
    ip.ast_transformers.append(Mark())
    versions = {"python": platform.python_version()}
    for dist in ("ipykernel", "ipython", "jupyter_client", "ipywidgets", "plotly", "traitlets",
                 "tornado", "pyzmq", "numpy", "torch", "triton"):
        try:
            versions[dist] = md.version(dist)
        except Exception:
            versions[dist] = None
    print(json.dumps({"versions": versions, "google_colab": "google.colab" in sys.modules,
                      "gpu_profile": os.environ.get("ATTN_EDU_GPU_PROFILE"),
                      "executable": sys.executable}))
_attn_edu_setup(%r)
del _attn_edu_setup
''' % GPU_BRANCHES

#: the kernel's last (hidden) cell, run also after a failure: peak GPU memory, the branches that ran
KERNEL_PROBE = r'''
def _attn_edu_probe():
    import builtins, json, sys
    torch, peak, reserved, why = sys.modules.get("torch"), None, None, None
    try:
        if torch is None:
            why = "torch was not imported"
        elif not torch.cuda.is_available():
            why = "no CUDA GPU"
        else:
            peak, reserved = int(torch.cuda.max_memory_allocated()), int(torch.cuda.max_memory_reserved())
    except Exception as err:
        why = f"{type(err).__name__}: {err}"
    print("%s" + json.dumps({"gpu_peak_bytes": peak, "gpu_reserved_peak_bytes": reserved, "why": why,
                             "gpu_ran": sorted(getattr(builtins, "__attn_edu_gpu_ran__", ()))}))
_attn_edu_probe()
del _attn_edu_probe
''' % PROBE_MARK


def cell_key(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()[:12]


def _parse_cell(source: str):
    """The cell's AST; IPython's line magics and shell escapes read as ``pass`` (lines kept)."""
    try:
        return ast.parse(source)
    except SyntaxError:
        lines = [re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in source.splitlines()]
        try:
            return ast.parse("\n".join(lines))
        except SyntaxError:
            return None


def gpu_branch_cells(nb) -> List[Dict[str, Any]]:
    """Every GPU-only branch of a notebook: ``{"cell": index, "line", "test", "key"}``."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tree = _parse_cell(cell.source)
        for line, _, test in (_gpu_branches(tree) if tree is not None else []):
            found.append({"cell": index, "line": line, "test": test, "key": cell_key(cell.source)})
    return sorted(found, key=lambda b: (b["cell"], b["line"]))


# ---------------------------------------------------------------------------------------------
# one notebook, cell by cell

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _error_of(cell) -> Optional[Dict[str, Any]]:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            tb = _ANSI.sub("", "\n".join(out.get("traceback", [])))
            return {"ename": out.get("ename"), "evalue": str(out.get("evalue"))[:2000], "traceback": tb[-8000:]}
    return None


def _probe_json(cell) -> Optional[Dict[str, Any]]:
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    for line in text.splitlines():
        if line.startswith(PROBE_MARK):
            return json.loads(line[len(PROBE_MARK):])
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def _interrupt(client) -> None:
    """Interrupt the kernel's running cell (after a timeout), so that the probe can run."""
    import inspect

    try:
        from nbclient.util import run_sync
    except ImportError:  # pragma: no cover - other nbclient versions
        from jupyter_core.utils import run_sync
    async def interrupt():
        got = client.km.interrupt_kernel()
        if inspect.isawaitable(got):
            await got

    run_sync(interrupt)()
    time.sleep(2)


def execute_notebook(path: Path, kernel_python: Path, deadline_at: float, *, max_cells: Optional[int] = None,
                     env: Optional[Dict[str, str]] = None, block: Sequence[str] = (),
                     colab_standin: bool = True, startup_timeout: int = 120) -> Tuple[Dict[str, Any], Any]:
    """Run the notebook at ``path`` top to bottom in a kernel of ``kernel_python`` (stopping at
    the first failing cell, as Colab's Run all does, or at ``deadline_at``, a time.monotonic()
    value); returns (its record, the executed notebook). ``max_cells``: only the first code cells.
    ``env``: the kernel's environment on top of this one's; ``block``: modules the kernel cannot
    import; ``colab_standin``: a stand-in ``google.colab`` is imported first (tests/colab.py)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    sys.path.insert(0, str(REPO / "tests"))
    import colab
    import venvs

    nb = nbformat.read(str(path), as_version=4)
    branches = gpu_branch_cells(nb)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    run = code if max_cells is None else code[:max_cells]
    rec: Dict[str, Any] = {"chapter": path.stem, "status": "ok", "seconds": 0.0, "code_cells": len(code),
                           "cells_to_run": len(run), "cells_run": 0, "failed_cell": None, "stopped": None,
                           "gpu_peak_bytes": None, "gpu_reserved_peak_bytes": None, "gpu_memory_note": None,
                           "slowest_cells": [], "gpu_branches": [], "kernel": None}
    seconds: Dict[int, float] = {}
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="attn-edu-gpu-run-") as tmp, \
            venvs.environ(venvs.jupyter_dirs(Path(tmp) / "jupyter")) as dirs:   # the kernel's Jupyter files
        try:
            if colab_standin:
                colab.write_colab_kernelspec(Path(dirs["JUPYTER_PATH"]), kernel_python, Path(tmp),
                                             block=tuple(block), env=env)
            else:
                venvs.write_kernelspec(Path(dirs["JUPYTER_PATH"]), kernel_python, env=env)
            client = NotebookClient(nb, timeout=max(1, int(deadline_at - time.monotonic())), kernel_name="python3",
                                    startup_timeout=startup_timeout, interrupt_on_timeout=False,
                                    resources={"metadata": {"path": str(path.parent)}})
            with client.setup_kernel():
                setup = nbformat.v4.new_code_cell(KERNEL_SETUP)
                nb.cells.insert(0, setup)
                client.execute_cell(setup, 0, store_history=False)
                nb.cells.pop(0)
                rec["kernel"] = _probe_json(setup)
                for index in run:
                    left = deadline_at - time.monotonic()
                    if left < 1:
                        rec["status"], rec["stopped"] = "stopped", {"cell": index, "reason": "deadline"}
                        break
                    client.timeout = max(1, int(left))
                    t0 = time.monotonic()
                    try:
                        client.execute_cell(nb.cells[index], index)
                    except CellTimeoutError:
                        seconds[index] = time.monotonic() - t0
                        rec["status"], rec["stopped"] = "stopped", {"cell": index, "reason": "deadline"}
                        _interrupt(client)
                        break
                    except DeadKernelError as err:
                        seconds[index] = time.monotonic() - t0
                        rec["status"] = "failed"
                        rec["failed_cell"] = {"cell": index, "code_cell": code.index(index),
                                              "id": nb.cells[index].get("id"), "ename": "DeadKernelError",
                                              "evalue": str(err)[:2000], "traceback": ""}
                        break
                    except Exception as err:  # CellExecutionError: the cell raised
                        seconds[index] = time.monotonic() - t0
                        rec["status"] = "failed"
                        error = _error_of(nb.cells[index]) or {"ename": type(err).__name__,
                                                              "evalue": str(err)[:2000], "traceback": str(err)[-8000:]}
                        rec["failed_cell"] = {"cell": index, "code_cell": code.index(index),
                                              "id": nb.cells[index].get("id"), **error}
                        rec["cells_run"] += 1
                        break
                    seconds[index] = time.monotonic() - t0
                    rec["cells_run"] += 1
                rec["seconds"] = round(time.monotonic() - start, 3)
                if rec["failed_cell"] is None or rec["failed_cell"]["ename"] != "DeadKernelError":
                    probe = nbformat.v4.new_code_cell(KERNEL_PROBE)
                    nb.cells.append(probe)
                    client.timeout = 20 if rec["stopped"] else 60
                    try:
                        client.execute_cell(probe, len(nb.cells) - 1, store_history=False)
                        got = _probe_json(probe) or {}
                    except Exception as err:  # noqa: BLE001 - the kernel is stuck or gone
                        got = {"why": f"the probe cell did not run: {type(err).__name__}"}
                    nb.cells.pop()
                else:
                    got = {"why": "the kernel died"}
        except Exception as err:  # noqa: BLE001 - the kernel did not start
            if rec["kernel"] is None:
                rec["status"] = "failed"
                rec["failed_cell"] = {"cell": None, "code_cell": None, "id": None, "ename": type(err).__name__,
                                      "evalue": f"the kernel did not start: {str(err)[:1500]}", "traceback": ""}
                got = {"why": "no kernel"}
            else:
                raise
    rec["seconds"] = rec["seconds"] or round(time.monotonic() - start, 3)
    rec["gpu_peak_bytes"], rec["gpu_reserved_peak_bytes"] = got.get("gpu_peak_bytes"), got.get("gpu_reserved_peak_bytes")
    rec["gpu_memory_note"] = got.get("why")
    ran = {(k, line) for k, line in got.get("gpu_ran", [])}
    rec["gpu_branches"] = [{"cell": b["cell"], "line": b["line"], "test": b["test"],
                            "ran": (b["key"], b["line"]) in ran, "cell_seconds": round(seconds.get(b["cell"], 0.0), 3)}
                           for b in branches]
    rec["slowest_cells"] = [{"cell": i, "seconds": round(s, 3)}
                            for i, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:5]]
    return rec, nb


# ---------------------------------------------------------------------------------------------
# the executed notebooks, one zip under a cap

def write_artifact(path: Path, notebooks: Dict[str, Any], cap: int = ARTIFACT_CAP_BYTES,
                   keep: Sequence[str] = ()) -> Dict[str, Any]:
    """Write ``{stem: executed notebook}`` (and the members ``keep`` of the zip already at
    ``path``) as one zip of at most ``cap`` bytes. Where it would be larger, the largest
    outputs are left out (each replaced by a line saying so) until it fits. Returns
    ``{"path", "bytes", "cap_bytes", "chapters", "outputs_left_out": {stem: n}}``."""
    import copy

    import nbformat

    old: Dict[str, bytes] = {}
    if path.is_file() and keep:
        with zipfile.ZipFile(path) as z:
            old = {n: z.read(n) for n in z.namelist() if Path(n).stem in keep and Path(n).stem not in notebooks}
    texts = {f"{stem}.ipynb": nbformat.writes(nb) for stem, nb in notebooks.items()}
    left_out: Dict[str, int] = {}

    def pack() -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            for name, data in sorted({**old, **texts}.items()):
                z.writestr(name, data)
        return buf.getvalue()

    data = pack()
    work = {stem: copy.deepcopy(nb) for stem, nb in notebooks.items()} if len(data) > cap else {}
    while len(data) > cap:
        outputs = [(len(json.dumps(o)), stem, c, j) for stem, nb in work.items() for c in nb.cells
                   for j, o in enumerate(c.get("outputs", [])) if not o.get("metadata", {}).get("attn_edu_left_out")]
        if not outputs:
            for name in list(old):  # the earlier chapters' notebooks go last
                old.pop(name)
                left_out[Path(name).stem] = -1
                break
            else:
                raise ValueError(f"{path.name}: the notebooks without outputs are above the cap of {cap} bytes")
            data = pack()
            continue
        outputs.sort(key=lambda o: -o[0])
        for size, stem, c, j in outputs[:max(1, len(outputs) // 8)]:
            c.outputs[j] = nbformat.v4.new_output(
                "display_data", data={"text/plain": f"[output of {size} bytes left out: the artifact is capped "
                                                    f"at {cap} bytes]"}, metadata={"attn_edu_left_out": True})
            left_out[stem] = left_out.get(stem, 0) + 1
        texts = {f"{stem}.ipynb": nbformat.writes(nb) for stem, nb in work.items()}
        data = pack()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return {"path": path.name, "bytes": len(data), "cap_bytes": cap,
            "chapters": sorted(Path(n).stem for n in {**old, **texts}), "outputs_left_out": left_out}


# ---------------------------------------------------------------------------------------------
# documents

def validate(doc: Dict[str, Any]) -> None:
    """Raise jsonschema's ValidationError when ``doc`` breaks the documents' one schema,
    attn_edu/data/schema/bench.schema.json (``python -m attn_edu.bench validate`` checks it too)."""
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


def save(doc: Dict[str, Any], path: Path) -> Path:
    """Validate, then write atomically (a run cut off mid-write leaves the previous version)."""
    validate(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    return path


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------------
# the run

class Run:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.dry = args.dry_run
        self.out = Path(args.out)
        self.rundir = self.out / "run"
        self.logs = self.rundir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.deadline_at = self.started + args.deadline if args.deadline > 0 else float("inf")
        self.python = Path(args.python or sys.executable)
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                                if p and Path(p).resolve() != REPO])
        self.env.pop("TRITON_INTERPRET", None)
        if self.dry:
            self.env["TRITON_INTERPRET"] = "1"   # before anything imports triton
        self.machine = self._machine()
        self.gpu = self.machine["label"]
        self.run_path = self.rundir / f"run_{self.gpu}.json"
        self.lines: List[str] = []

    def left(self) -> float:
        return self.deadline_at - time.monotonic()

    def _machine(self) -> Dict[str, Any]:
        """What the steps need to know, from one interpreter that imports torch (this one never does)."""
        code = r'''
import json, sys
from attn_edu.bench import environment
dry = sys.argv[1] == "1"
out = {}
try:
    import torch
    cuda = torch.cuda.is_available() and not dry
except ImportError:
    cuda = False
out["header"] = environment("cuda" if cuda else "cpu")
if cuda:
    from attn_edu.bench import gpu_half_dtype, sdpa_backends
    half = gpu_half_dtype()
    out.update(label=torch.cuda.get_device_name().replace(" ", "_"), half=half,
               sdpa=["torch_sdpa_" + b for b in sdpa_backends("cuda", half)])
else:
    out.update(label="dry-run-cpu" if dry else None, half="float32", sdpa=[])
print(json.dumps(out))
'''
        res = subprocess.run([str(self.python), "-c", code, "1" if self.dry else "0"], env=self.env, cwd=REPO,
                             capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise SystemExit(f"could not read this machine with {self.python}:\n{res.stderr[-3000:]}")
        got = json.loads(res.stdout.strip().splitlines()[-1])
        if got["label"] is None:
            raise SystemExit("no CUDA GPU: torch.cuda.is_available() is False, so there is nothing to run here "
                             "(bash scripts/gpu-bench.sh --dry-run DIR checks the pipeline on the CPU)")
        got["sdpa"] = got["sdpa"] or ["torch_sdpa_math"]
        return got

    def header(self, kind: str) -> Dict[str, Any]:
        h = self.machine["header"]
        return {"schema": SCHEMA, "kind": kind, "dry_run": self.dry, **h, "date": _now(),
                "command": "bash scripts/gpu-bench.sh " + " ".join(shlex.quote(a) for a in self.args.argv)}

    # -- a step that is another command ---------------------------------------------------
    def command(self, name: str, argv: List[str], outputs: Sequence[Path] = (),
                env: Optional[Dict[str, str]] = None) -> Tuple[str, str, List[str], Dict[str, Any]]:
        left = self.left()
        log = self.logs / f"{name}.log"
        t0 = time.monotonic()
        with open(log, "w") as f:
            f.write("$ " + " ".join(shlex.quote(a) for a in argv) + "\n")
            f.flush()
            proc = subprocess.Popen(argv, cwd=REPO, env={**self.env, **(env or {})}, stdout=f,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=None if left == float("inf") else max(1.0, left))
                stopped = False
            except subprocess.TimeoutExpired:  # SIGTERM: a sweep writes the points it has
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    rc = proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    rc = proc.wait()
                stopped = True
        took = time.monotonic() - t0
        tail = [line for line in log.read_text(errors="replace").splitlines()[1:] if line.strip()]
        written = [p for p in outputs if p.is_file() and p.stat().st_mtime >= time.time() - took - 1]
        problems = [f"{p.relative_to(self.out)}: {why}" for p in written for why in [self._envelope(p)] if why]
        status = "stopped" if stopped else "ok" if rc == 0 and not problems else "failed"
        last = tail[-1][:160] if tail else "wrote " + ", ".join(str(p.relative_to(self.out)) for p in written) \
            if written else "(no output)"
        summary = (f"stopped by the deadline after {took:.0f} s" if stopped else
                   f"exit {rc}" + (f": {'; '.join(problems)}" if problems else "") + f"; {last}")
        return status, summary, [str(p.relative_to(self.out)) for p in written], {"exit_code": rc, "log": str(log.relative_to(self.out))}

    def _envelope(self, path: Path) -> Optional[str]:
        """What is wrong with a written document's envelope (schema, dry_run), or None."""
        try:
            doc = json.loads(path.read_text())
        except ValueError as err:
            return f"not JSON ({err})"
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            return f"schema {doc.get('schema') if isinstance(doc, dict) else None!r}, not {SCHEMA!r}"
        if "dry_run" in doc and bool(doc["dry_run"]) != self.dry:
            return f"dry_run is {doc.get('dry_run')!r} in a {'dry' if self.dry else 'GPU'} run"
        return None

    # -- the run document ------------------------------------------------------------------
    def record(self, entry: Dict[str, Any]) -> None:
        doc = None
        if self.run_path.is_file():
            try:
                doc = json.loads(self.run_path.read_text())
                validate(doc)
            except Exception:  # noqa: BLE001 - a broken earlier record: start a new one
                doc = None
        if doc is None or doc.get("git_commit") != self.machine["header"].get("git_commit"):
            doc = {**self.header("run"), "steps": []}
        doc.update({k: v for k, v in self.header("run").items() if k not in ("steps",)})
        doc["deadline_s"] = self.args.deadline
        order = [n for n, _ in STEP_NAMES]
        steps_ = {s["step"]: s for s in doc["steps"]}
        steps_[entry["step"]] = entry
        doc["steps"] = sorted(steps_.values(), key=lambda s: order.index(s["step"]) if s["step"] in order else 99)
        save(doc, self.run_path)


class Step:
    def __init__(self, name: str, what: str, fn: Callable[[], Tuple[str, str, List[str], Dict[str, Any]]]):
        self.name, self.what, self.fn = name, what, fn


def _chapters_step(run: Run, t4: bool) -> Tuple[str, str, List[str], Dict[str, Any]]:
    import nbformat

    paths = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    branchy = [p for p in paths if gpu_branch_cells(nbformat.read(str(p), as_version=4))]
    if run.args.chapters:
        paths = [p for p in paths if any(p.stem.startswith(c) for c in run.args.chapters)]
    elif run.dry:
        paths = [p for p in paths if p.stem == DRY_CHAPTER]
    if t4 and not run.dry:
        paths = [p for p in paths if p in branchy]
    else:   # the chapters with GPU branches first: they have never run on a GPU
        paths = [p for p in paths if p in branchy] + [p for p in paths if p not in branchy]
    kind_name = "chapters_t4" if t4 else "chapters"
    doc_path = run.rundir / f"{kind_name}_{run.gpu}.json"
    art_path = run.rundir / f"executed{'_t4' if t4 else ''}_{run.gpu}.zip"
    python, where = kernel_python(run)
    cells = DRY_CELLS["t4" if t4 else None] if run.dry else None
    env = {"PYTHONPATH": run.env["PYTHONPATH"]}
    if run.dry:
        env["TRITON_INTERPRET"] = "1"
    if t4:
        env["ATTN_EDU_GPU_PROFILE"] = "t4"
    doc = {**run.header("chapters"), "profile": "t4" if t4 else None, "kernel_python": str(python),
           "where": where, "deadline_s": run.args.deadline, "max_cells": cells,
           "chapters": [], "artifact": None, "t4_estimates": None, "stack": None}
    # a second command (--chapters ...) adds to the first one's record of the same commit
    earlier: List[Dict[str, Any]] = []
    if doc_path.is_file():
        try:
            old = json.loads(doc_path.read_text())
            if old.get("git_commit") == doc["git_commit"] and old.get("dry_run") == run.dry:
                earlier = [c for c in old["chapters"] if c["chapter"] not in {p.stem for p in paths}]
        except (ValueError, KeyError):
            pass
    executed: Dict[str, Any] = {}
    kernel = None
    for path in paths:
        if run.left() < MIN_STEP_S:
            doc["chapters"].append({"chapter": path.stem, "status": "not_run", "reason": "out of time"})
            continue
        rec, nb = execute_notebook(path, python, run.deadline_at, max_cells=cells,
                                   env=env, block=("triton",) if run.dry and where == "colab stand-in" else ())
        kernel = kernel or rec.get("kernel")
        doc["chapters"].append(rec)
        executed[path.stem] = nb
        print(f"    {chapter_line(rec)}", flush=True)
        doc["chapters"] = sorted(doc["chapters"], key=lambda c: c["chapter"])
        save({**doc, "chapters": sorted(earlier + doc["chapters"], key=lambda c: c["chapter"])}, doc_path)
    if executed:
        doc["artifact"] = write_artifact(art_path, executed, keep=[c["chapter"] for c in earlier])
    if t4:
        doc["t4_estimates"] = t4_estimates(run)
    doc["chapters"] = sorted(earlier + doc["chapters"], key=lambda c: c["chapter"])
    doc["stack"] = stack_report(kernel)
    save(doc, doc_path)
    outputs = [str(doc_path.relative_to(run.out))] + ([str(art_path.relative_to(run.out))] if executed else [])
    done = [c for c in doc["chapters"] if c["status"] == "ok"]
    bad = [c for c in doc["chapters"] if c["status"] != "ok"]
    peak = max((c for c in doc["chapters"] if c.get("gpu_peak_bytes")), key=lambda c: c["gpu_peak_bytes"], default=None)
    n_br = sum(len(c.get("gpu_branches", [])) for c in doc["chapters"])
    n_ran = sum(b["ran"] for c in doc["chapters"] for b in c.get("gpu_branches", []))
    summary = (f"{len(done)}/{len(doc['chapters'])} chapters ran to the end"
               + ((" (its first code cell)" if cells == 1 else f" (its first {cells} code cells)") if cells else "")
               + (f"; not: {', '.join(c['chapter'][:2] + ' ' + c['status'] for c in bad)}" if bad else "")
               + f"; GPU branches ran {n_ran}/{n_br}"
               + (f"; peak GPU {peak['gpu_peak_bytes'] / 2**30:.2f} GiB ({peak['chapter'][:2]})" if peak else "; no GPU memory used")
               + (f"; zip {doc['artifact']['bytes'] / 2**20:.2f} MiB" if doc["artifact"] else "")
               + f"; {doc['stack']['summary']}")
    if bad and any(c["status"] == "not_run" for c in bad):
        summary += "; continue with --from " + ("t4" if t4 else "chapters") + " --chapters " + \
            " ".join(c["chapter"][:2] for c in bad if c["status"] == "not_run")
    status = "ok" if not bad else "stopped" if all(c["status"] in ("stopped", "not_run") for c in bad) else "failed"
    if t4 and doc["t4_estimates"]["exit_code"] != 0:
        status, summary = "failed", summary + f"; --t4-estimates exited {doc['t4_estimates']['exit_code']}"
    return status, summary, outputs, {}


def chapter_line(rec: Dict[str, Any]) -> str:
    """One line for a chapter: how it ended, its time, its GPU memory and branches."""
    if rec["status"] == "not_run":
        return f"{rec['chapter']}: not run ({rec['reason']})"
    if rec["status"] == "ok":
        how = "ran to the end"
    elif rec["status"] == "stopped":
        how = f"stopped at cell {rec['stopped']['cell']} (deadline)"
    else:
        bad = rec["failed_cell"]
        how = f"FAILED at cell {bad['cell']} ({bad['ename']}: {str(bad['evalue'])[:100]})"
    mem = ("no GPU memory" if rec["gpu_peak_bytes"] is None else f"peak GPU {rec['gpu_peak_bytes'] / 2**30:.2f} GiB")
    br = rec["gpu_branches"]
    return (f"{rec['chapter']}: {how}, {rec['seconds']:.1f} s, {mem}, GPU branches ran "
            f"{sum(b['ran'] for b in br)}/{len(br)}")


#: Colab's notebook stack, as a Colab GPU runtime has it (tests/data/colab/pip-freeze.gpu.txt)
STACK = ("ipykernel", "ipython", "jupyter_client", "ipywidgets", "plotly", "traitlets", "tornado", "pyzmq")


def stack_report(kernel: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The kernel's notebook stack against Colab's pins: ``{"colab": bool, "differs": {...}, "summary"}``."""
    sys.path.insert(0, str(REPO / "tests"))
    from colab import colab_pins

    pins = colab_pins("gpu")
    seen = (kernel or {}).get("versions", {})
    differs = {name: {"kernel": seen.get(name), "colab": pins.get(name.replace("_", "-"))}
               for name in STACK if seen.get(name) != pins.get(name.replace("_", "-"))}
    colab_ok = kernel is not None and not differs
    summary = ("Colab's notebook stack (ipykernel {ipykernel}, IPython {ipython}, jupyter_client {jupyter_client}, "
               "ipywidgets {ipywidgets}, plotly {plotly})".format(**seen) if colab_ok else
               "kernel NOT in Colab's stack: " + ", ".join(f"{n} {d['kernel']} (Colab {d['colab']})"
                                                          for n, d in differs.items()) if kernel else "no kernel started")
    return {"colab": colab_ok, "differs": differs, "summary": summary, "kernel": kernel}


def kernel_python(run: Run) -> Tuple[Path, str]:
    """(python, where) of the chapters' kernel: ``--kernel-python``; in a dry run the Colab
    stand-in's (tests/colab.py), else this machine's (with Colab's stack installed over it)."""
    if run.args.kernel_python:
        return Path(run.args.kernel_python), "given (--kernel-python)"
    if run.dry:
        sys.path.insert(0, str(REPO / "tests"))
        import colab

        # the cached venv as it is: the kernel imports this checkout's attn_edu (PYTHONPATH),
        # so the copy colab.standin_venv() would install first is not needed
        python, why = None, "ATTN_EDU_NO_COLAB_STANDIN=1"
        if os.environ.get("ATTN_EDU_NO_COLAB_STANDIN") != "1":
            try:
                python = colab._standin_cached()
            except RuntimeError as err:  # pip failed: no PyPI here
                why = str(err)
        if python is not None:
            return Path(python), "colab stand-in"
        print(f"    the Colab stand-in could not be built ({why[-200:]}): this environment's kernel", flush=True)
    return run.python, "this machine"


def t4_estimates(run: Run) -> Dict[str, Any]:
    """``python -m attn_edu.bench --t4-estimates``: each chapter GPU branch's time on a real T4."""
    argv = [str(run.python), "-m", "attn_edu.bench", "--t4-estimates"]
    res = subprocess.run(argv, cwd=REPO, env=run.env, capture_output=True, text=True,
                         timeout=max(30, min(300, int(run.left()))) if run.left() != float("inf") else 300)
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    for line in lines:
        print(f"    {line}", flush=True)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or [""])[-1]
        print(f"    --t4-estimates exited {res.returncode}: {last[-300:]}", flush=True)
    return {"exit_code": res.returncode, "lines": lines, "error": res.stderr[-2000:] if res.returncode else None}


def _gpu_tests_step(run: Run) -> Tuple[str, str, List[str], Dict[str, Any]]:
    import xml.etree.ElementTree as ET

    junit = run.logs / "gpu-tests.junit.xml"
    if junit.exists():
        junit.unlink()
    argv = [str(run.python), "-m", "pytest", "-m", "triton or cuda", "-q", "-p", "no:cacheprovider",
            f"--junitxml={junit}"]
    if run.dry:
        argv += DRY_TESTS
    else:
        try:
            import xdist  # noqa: F401
            argv += ["-n", str(min(16, os.cpu_count() or 1))]
        except ImportError:
            pass
        argv += ["tests"]
    status, summary, _, extra = run.command("gpu-tests", argv)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failures = []
    if junit.is_file():
        root = ET.parse(junit).getroot()
        for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
            for k in counts:
                counts[k] += int(suite.get(k, 0))
            for case in suite.iter("testcase"):
                for bad in list(case.findall("failure")) + list(case.findall("error")):
                    failures.append({"test": f"{case.get('classname')}::{case.get('name')}",
                                     "message": (bad.get("message") or "")[:500]})
    doc = {**run.header("gpu_tests"), "argv": argv[1:], "exit_code": extra["exit_code"],
           "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
           "failed": counts["failures"], "errors": counts["errors"], "skipped": counts["skipped"],
           "failures": failures, "stopped": status == "stopped"}
    path = save(doc, run.rundir / f"gpu_tests_{run.gpu}.json")
    if status != "stopped":
        status = "ok" if extra["exit_code"] == 0 else "failed"
    summary = (f"{doc['passed']} passed, {doc['failed']} failed, {doc['errors']} errors, {doc['skipped']} skipped"
               + (f"; first failure {failures[0]['test']}" if failures else "") + ("; stopped by the deadline" if doc["stopped"] else ""))
    return status, summary, [str(path.relative_to(run.out))], extra


def steps(run: Run) -> List[Step]:
    """Every step, in the order they run."""
    py, out, gpu, dry = str(run.python), run.out, run.gpu, run.dry
    dry_flag = ["--dry-run"] if dry else []
    bench = [py, "-m", "attn_edu.bench"]
    if dry:
        dev = ["--device", "cpu", "--dtype", "float32", "--batch", "1", "--heads", "1"]
        ns, ns_causal, ds, rep = ["32", "64"], ["64"], ["16", "32"], ["--repeat", "2", "--warmup", "1"]
        blocks = ["--block-q", "16", "--block-k", "16"]
        goals = ["--goals", "--dry-run", "--goal-n", "256"]
        sparse = ["--block-sparse", "--dry-run", "--n", "64", "--d", "16", "--heads", "1", "--block-q", "16",
                  "--block-k", "16", "--flex-block-q", "16", "--flex-block-k", "16", "--densities", "1.0", "0.5",
                  "--patterns", "window"]
        sdpa, sdpa_best = ["torch_sdpa_flash", "torch_sdpa_efficient", "torch_sdpa_math"], "torch_sdpa_flash"
        decode = "contexts=(64,), batches=(1,), heads=2, kv_heads=1, d=16, dtype='float32', device='cpu', repeat=2, warmup=1, dry_run=True"
    else:
        half = run.machine["half"]
        dev = ["--device", "cuda", "--dtype", half, "--batch", "4", "--heads", "16"]
        ns, ns_causal, ds, rep = ["1024", "2048", "4096", "8192", "16384"], ["4096", "8192", "16384"], ["64", "128"], \
            ["--repeat", "20", "--warmup", "3"]
        blocks = ["--block-q", "128", "--block-k", "128"]
        goals, sparse = ["--goals"], ["--block-sparse", "--n", "8192", "16384"]
        sdpa = run.machine["sdpa"]
        sdpa_best = sdpa[0]
        decode = f"dtype='{half}'"

    def sweep(name: str, d: str, ns_: Sequence[str], impls: Sequence[str]) -> Callable:
        path = out / f"gpu_{gpu}_d{d}.json"
        return lambda: run.command(name, bench + dev + ["--d", d, "--n", *ns_, "--impl", *impls,
                                   *blocks, "--memory", *rep, "--no-progress",
                                   *dry_flag, "--out", str(path)], [path])

    def measure(name: str) -> Callable:
        path = out / f"{name}_{gpu}.json"   # the top level, where recorded_results(what=KIND) reads
        return lambda: run.command(f"measure-{name}", bench + ["--measure", name, *dry_flag, "--out", str(path)], [path])

    every = ["triton", *sdpa, "torch_naive", "torch_flash"]
    causal_path = out / f"gpu_{gpu}_d{ds[0]}_causal.json"
    decode_path = out / "decode" / f"decode_{gpu}.json"   # save_results makes the folder
    goals_path, sparse_path = out / f"goals_{gpu}.json", out / f"block_sparse_{gpu}.json"
    overlap_path = out / f"ring_overlap_{gpu}.json"
    correct_path = out / f"correctness_{gpu}.json"   # saved: a submission's proof the kernels were right
    return [
        Step("chapters", "Run all: every chapter in Colab's notebook stack", lambda: _chapters_step(run, t4=False)),
        Step("t4", "the GPU-branch chapters under a T4's limits, and their T4 estimates",
             lambda: _chapters_step(run, t4=True)),
        *[Step(f"measure-{m}", f"python -m attn_edu.bench --measure {m}", measure(m)) for m in MEASUREMENTS],
        Step("ring-overlap", "a ring step's K/V transfer timed against its compute on one GPU (chapter 14)",
             lambda: run.command("ring-overlap", [py, "-m", "attn_edu.distributed.overlap", *dry_flag,
                                 "--out", str(overlap_path)], [overlap_path])),
        Step("gpu-tests", 'pytest -m "triton or cuda"', lambda: _gpu_tests_step(run)),
        Step("correctness", "every kernel against float64, in the GPU's half type",
             lambda: run.command("correctness", bench + ["--correctness", *dry_flag, "--out", str(correct_path)],
                                 [correct_path])),
        Step("sweep", f"every implementation at d = {ds[0]}, with peak memory", sweep("sweep", ds[0], ns, every)),
        Step("goals", "the goals, ratios measured side by side",
             lambda: run.command("goals", bench + goals + ["--out", str(goals_path)], [goals_path])),
        Step("causal", "the causal sweep",
             lambda: run.command("causal", bench + dev + ["--d", ds[0], "--causal", "--n", *ns_causal, "--impl",
                                 "triton", sdpa_best, *rep, "--no-progress", *dry_flag, "--out", str(causal_path)],
                                 [causal_path])),
        Step("decode", "decoding (L_q = 1): the split-KV kernel against SDPA over the cache length",
             lambda: run.command("decode", [py, "-c", "from attn_edu import bench; bench.save_results("
                                 f"bench.decode_sweep({decode}), {str(decode_path)!r})"], [decode_path])),
        Step("block-sparse", "the block-sparse kernel against dense and FlexAttention",
             lambda: run.command("block-sparse", bench + sparse + ["--out", str(sparse_path)], [sparse_path])),
        Step("sweep-other-d", f"every implementation at d = {', '.join(ds[1:])}",
             sweep("sweep-other-d", ds[1], ns[:1] if dry else ns, ["triton", sdpa_best] if dry else every)),
    ]


def install_wheels(wheels: Path, site: Optional[Path] = None) -> Optional[Path]:
    """Install the wheels in ``wheels`` (Colab's notebook stack, scripts/colab_wheels.py) into
    ``site`` (default: a folder in the temporary directory) with ``pip --no-index --no-deps``;
    returns ``site``, or None when there is no such folder. SystemExit when the wheels are for
    another Python (their MANIFEST.json says which) or pip fails."""
    wheels = Path(wheels)
    if not wheels.is_dir() or not any(wheels.glob("*.whl")):
        return None
    manifest = wheels / "MANIFEST.json"
    want = json.loads(manifest.read_text()).get("python") if manifest.is_file() else None
    have = "%d.%d" % sys.version_info[:2]
    if want and want != have:
        raise SystemExit(f"{wheels} holds wheels for Python {want}, this is {have} ({sys.executable}): "
                         f"python scripts/colab_wheels.py --python-version {have}")
    site = Path(site or Path(tempfile.gettempdir()) / f"attn-edu-colab-site-{have}")
    files = sorted(str(p) for p in wheels.glob("*.whl"))
    print(f"==> Colab's notebook stack: {len(files)} wheels from {wheels} into {site}", flush=True)
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                          "--no-cache-dir", "--upgrade", "--disable-pip-version-check", "--target", str(site), *files],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"pip could not install {wheels}:\n{res.stdout[-2000:]}{res.stderr[-3000:]}")
    return site


def _with_wheels(args: argparse.Namespace) -> None:
    """Once per command: Colab's stack from ``--wheels``, first on PYTHONPATH, then this script
    again over it (so that nbclient here and the kernels it starts are Colab's)."""
    if os.environ.get("ATTN_EDU_COLAB_SITE"):
        return
    site = install_wheels(Path(args.wheels))
    if site is None:
        return
    env = dict(os.environ, ATTN_EDU_COLAB_SITE=str(site))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(site), env.get("PYTHONPATH", "")] if p)
    os.execve(sys.executable, [sys.executable, __file__, *args.argv], env)


def bundle(out: Path, dest: Path) -> List[Path]:
    """``dest/gpu-run.tgz``: every document and log under ``out`` (the executed notebooks'
    zips copied beside it, already compressed); returns the files."""
    import shutil
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / "gpu-run.tgz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for f in sorted(out.rglob("*")):
            if f.is_file() and f.suffix in (".json", ".log", ".xml") and dest not in f.parents:
                tar.add(f, arcname=str(f.relative_to(out)))
    tmp.replace(dest / "gpu-run.tgz")
    zips = []
    for z in sorted((out / "run").glob("*.zip")):
        shutil.copy2(z, dest / z.name)
        zips.append(dest / z.name)
    return [dest / "gpu-run.tgz", *zips]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bash scripts/gpu-bench.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="every step on the CPU, tiny sizes (documents marked dry_run)")
    p.add_argument("--out", default=None, help="where the documents go (default attn_edu/data/bench; "
                   "--dry-run needs one)")
    p.add_argument("--deadline", type=float, default=float(os.environ.get("GPU_BENCH_DEADLINE", DEFAULT_DEADLINE_S)),
                   help=f"seconds from the start after which no step runs (default {DEFAULT_DEADLINE_S}, or "
                        "$GPU_BENCH_DEADLINE; 0: none); a step running then is stopped")
    p.add_argument("--from", dest="start", default=None, help="start at this step (see --list)")
    p.add_argument("--only", nargs="+", default=None, help="run only these steps")
    p.add_argument("--chapters", nargs="+", default=None, help="only these chapters (NN or NN_name) in chapters and t4")
    p.add_argument("--python", default=None, help="the interpreter of every step (default: this one)")
    p.add_argument("--kernel-python", default=None, help="the chapters' kernel (default: this one; "
                   "the Colab stand-in in a dry run)")
    p.add_argument("--wheels", default=str(WHEELS), help="Colab's notebook stack as wheels, installed when "
                   "the folder is there (scripts/colab_wheels.py)")
    p.add_argument("--bundle", default=None, help="after every step, also pack the documents and logs into "
                   "BUNDLE/gpu-run.tgz and copy the executed notebooks' zips beside it (a few files, e.g. "
                   "for a lease's $OUT, which returns at most 8)")
    p.add_argument("--submission", nargs="?", const=str(SUBMISSIONS), default=None, metavar="ROOT",
                   help="a reader's run: write the documents to --out (default gpu-run-out/), then copy them "
                        "into one new folder ROOT/<gpu>_<date>_<sha7>/ (default attn_edu/data/submissions), "
                        "validated: the folder to open a pull request with")
    p.add_argument("--measured-by", choices=["submitted", "maintainers"], default="submitted",
                   help="who ran it, written into every document of --submission (default: submitted)")
    p.add_argument("--list", action="store_true", help="print the steps and exit")
    args = p.parse_args(list(argv))
    args.argv = list(argv)
    if args.out is None and args.submission is not None:
        args.out = str(REPO / "gpu-run-out")   # never over the maintainers' recorded documents
    if args.out is None:
        if args.dry_run and not args.list:
            p.error("--dry-run needs --out DIR (it must not write over the recorded documents)")
        args.out = str(REPO / "attn_edu" / "data" / "bench")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.list:
        for name, what in STEP_NAMES:
            print(f"{name:22s} {what}")
        return 0
    names = [n for n, _ in STEP_NAMES]
    for name in ([args.start] if args.start else []) + (args.only or []):
        if name not in names:
            raise SystemExit(f"unknown step {name!r}; the steps: {', '.join(names)}")
    if not args.dry_run:
        _with_wheels(args)
    run = Run(args)
    todo = steps(run)
    if args.start:
        todo = todo[names.index(args.start):]
    if args.only:
        todo = [s for s in todo if s.name in args.only]
    print(f"==> {len(todo)} steps on {run.gpu}, deadline {args.deadline:.0f} s"
          + (" (dry run: CPU numbers)" if run.dry else ""), flush=True)
    bad = False
    skipped: List[str] = []
    for i, step in enumerate(todo, 1):
        head = f"[{i:2d}/{len(todo)}] {step.name:22s}"
        if run.left() < MIN_STEP_S:
            status, summary, outputs, extra, took = "skipped", "out of time", [], {}, 0.0
            skipped.append(step.name)
        else:
            print(f"==> {step.name}: {step.what}", flush=True)
            t0 = time.monotonic()
            try:
                status, summary, outputs, extra = step.fn()
            except Exception as err:  # noqa: BLE001 - recorded, and the next step runs
                import traceback

                status, summary, outputs, extra = "failed", f"{type(err).__name__}: {err}"[:300], [], {}
                (run.logs / f"{step.name}.error.log").write_text(traceback.format_exc())
            took = time.monotonic() - t0
        line = f"{head} {status:8s} {took:7.1f} s  {summary}"
        run.lines.append(line)
        print(line, flush=True)
        run.record({"step": step.name, "status": status, "seconds": round(took, 3), "summary": summary,
                    "outputs": outputs, "date": _now(), **extra})
        bad |= status != "ok"
        if args.bundle:
            bundle(run.out, Path(args.bundle))
    print(f"==> summary ({run.run_path.relative_to(run.out)}):")
    for line in run.lines:
        print(line)
    if skipped:
        print(f"==> out of time: continue with  bash scripts/gpu-bench.sh --from {skipped[0]}"
              + (f" --out {args.out}" if args.dry_run else ""))
    with open(run.out / "gpu-bench.log", "a") as f:
        f.write("\n".join(run.lines) + "\n")
    if args.submission is not None:
        bad |= not submit(run.out, Path(args.submission), args.measured_by)
    return 1 if bad else 0


def submit(out: Path, root: Path, measured_by: str) -> bool:
    """--submission: the run's documents as one folder under ``root``, validated; prints what
    to do with it. False when it cannot be made or is not valid (it is kept, to be looked at)."""
    sys.path.insert(0, str(REPO))
    from attn_edu.bench.submission import make_submission
    from attn_edu.bench.validate import validate_path

    try:
        folder = make_submission(out, root, measured_by=measured_by)
    except ValueError as err:
        print(f"==> no submission: {err}")
        return False
    problems = validate_path(folder)
    for p in problems:
        print(f"    {p}")
    fatal = [p for p in problems if p.fatal]
    shown = folder.relative_to(REPO) if REPO in folder.parents else folder
    print(f"==> submission: {shown} ({'valid' if not fatal else f'{len(fatal)} problem(s), above'})")
    if not fatal:
        print("    send it: open a pull request adding that folder, or attach it zipped to an issue "
              "(CONTRIBUTING.md, 'Submit your GPU's numbers')")
    return not fatal


#: (name, what) of every step, in order, without a machine (for --list and --from)
STEP_NAMES = [("chapters", "Run all: every chapter in Colab's notebook stack"),
              ("t4", "the GPU-branch chapters under ATTN_EDU_GPU_PROFILE=t4, then --t4-estimates"),
              *[(f"measure-{m}", f"python -m attn_edu.bench --measure {m}") for m in MEASUREMENTS],
              ("ring-overlap", "a ring step's K/V transfer timed against its compute on one GPU (chapter 14)"),
              ("gpu-tests", 'pytest -m "triton or cuda"'),
              ("correctness", "every kernel against float64, in the GPU's half type"),
              ("sweep", "every implementation at the first head dimension (d = 64), with peak memory"),
              ("goals", "the goals, ratios measured side by side"),
              ("causal", "the causal sweep"),
              ("decode", "decoding: the split-KV kernel against SDPA over the cache length"),
              ("block-sparse", "the block-sparse kernel against dense and FlexAttention"),
              ("sweep-other-d", "every implementation at the other head dimensions (d = 128)")]

if __name__ == "__main__":
    sys.exit(main())
