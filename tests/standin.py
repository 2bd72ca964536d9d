"""Every chapter executed once in the Colab stand-in, for every test that needs its outputs.

:func:`executed` runs a chapter top to bottom in a kernel of the Colab stand-in venv
(tests/colab.py: Colab's package versions, ``google.colab`` stood in, ``import triton``
failing), then moves every control of every live explorer in the same kernel and audits
them (:data:`MOVE_CONTROLS`), and keeps the result on disk (``_build/standin/``) keyed by what
decides it: the notebook, the attn_edu sources and the stand-in's pins. A second test that
reads the same chapter in the same run -- on any pytest-xdist worker: a lock makes it wait
for the first -- gets the outputs without executing the chapter again. So the suite executes
each chapter once here (without triton) and once in the book build (with triton).

Readers: tests/test_colab_standin.py (every chapter runs, explorers respond, time),
tests/test_decoding.py (chapter 13's no-triton path), tests/test_gpu_pipeline.py (chapter
10's). Where the stand-in venv cannot be built (no PyPI), the chapter runs in this test
environment's kernel instead, still with triton blocked and ``google.colab`` stood in.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import colab
from venvs import REPO, environ, jupyter_dirs

CACHE = REPO / "_build" / "standin"

#: run after a chapter, in its kernel: move every enabled control of every explorer
MOVE_CONTROLS = """\
import json as _json
from attn_edu.widgets import explorers as _explorers, check_controls_matter as _check, _options
_problems, _moved = [], 0
for _i, _box in enumerate(_explorers()):
    _st = _box._attn_edu_explorer
    for _name, _c in _st.controls.items():
        if getattr(_c, "disabled", False):
            continue
        _old, _renders = _c.value, _st.renders
        _new = [v for v in _options(_c) if v != _old]
        if not _new:
            continue
        _c.value = _new[-1]  # what the handler of a front end's message does
        _moved += 1
        _out = _st.output.outputs
        if _st.renders != _renders + 1:
            _problems.append(f"explorer {_i} {_name}: moved, but {_st.renders - _renders} recomputes")
        if any(o.get("output_type") == "error" for o in _out):
            _problems.append(f"explorer {_i} {_name}={_new[-1]!r}: " + _json.dumps(_out)[-400:])
        if not _st.status.value.startswith("<span data-renders"):  # busy, in any language
            _problems.append(f"explorer {_i} {_name}: still 'computing…' after the handler returned")
        _c.value = _old
    _problems += [f"explorer {_i}: {p}" for p in _check(_box)]
print(len(_explorers()), "explorers,", _moved, "controls moved")
assert not _problems, "\\n".join(_problems)
"""

PROBE = ("import sys, importlib.util, ipywidgets, attn_edu\nfrom attn_edu import notebook\n"
         "print(ipywidgets.__version__, 'google.colab' in sys.modules, importlib.util.find_spec('triton'),"
         " attn_edu.HAS_TRITON, notebook.in_colab())")


def kernel_python() -> tuple:
    """(python, where): the Colab stand-in's, or this environment's when it cannot be built."""
    python, why = colab.standin_or_reason()
    if python is None:
        print(f"the Colab stand-in could not be built ({why[-300:]}); using this environment")
        return Path(sys.executable), "this environment"
    return python, "colab stand-in"


def _key(path: Path, where: str) -> str:
    h = hashlib.sha256()
    h.update(path.read_bytes())
    for src in sorted((REPO / "attn_edu").rglob("*")):
        if src.is_file() and "__pycache__" not in src.parts:
            h.update(str(src.relative_to(REPO)).encode())
            h.update(src.read_bytes())
    h.update(json.dumps([where, colab.standin_requirements(), MOVE_CONTROLS, PROBE]).encode())
    return h.hexdigest()[:16]


def executed(stem: str) -> dict:
    """Chapter ``stem`` (e.g. ``"13_inference"``) run in the stand-in, once per content:
    ``{"cells": the executed notebook's cells (nbformat dicts), "probe": what the kernel said
    it is, "where", "run_s": seconds for the chapter's cells, "report": the explorers' line,
    "explorer_error": the move/audit error or None}``."""
    path = REPO / "notebooks" / f"{stem}.ipynb"
    python, where = kernel_python()
    key = _key(path, where)
    CACHE.mkdir(parents=True, exist_ok=True)
    result = CACHE / f"{stem}-{key}.json"
    with open(CACHE / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker running this chapter: wait, then read it
        if result.is_file():
            return json.loads(result.read_text())
        data = _run(path, python, where)
        for stale in CACHE.glob(f"{stem}-*.json"):
            stale.unlink()
        result.write_text(json.dumps(data))
    return data


def _run(path: Path, python: Path, where: str) -> dict:
    import nbformat
    from nbclient import NotebookClient

    # the kernel's Jupyter files in a temporary folder; its PYTHONPATH is the kernelspec's alone
    with tempfile.TemporaryDirectory(prefix="attn-edu-standin-") as tmp, \
            environ({**jupyter_dirs(Path(tmp) / "jupyter"), "PYTHONPATH": None}) as dirs:
        tmp = Path(tmp)
        env = {"PYTHONPATH": str(REPO)} if where == "this environment" else None
        colab.write_colab_kernelspec(Path(dirs["JUPYTER_PATH"]), python, tmp, block=("triton",), env=env)
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        explorer_error = None
        with client.setup_kernel():
            probe = nbformat.v4.new_code_cell(PROBE)
            nb.cells.insert(0, probe)
            client.execute_cell(probe, 0)
            nb.cells.pop(0)
            kernel = _kernel_process(client)
            start, cpu0, own0 = time.perf_counter(), _machine_cpu_seconds(), _cpu_of(kernel)
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
            run_s = time.perf_counter() - start
            # how many cores the rest of the machine kept busy meanwhile, on average
            own_cpu = (_cpu_of(kernel) - own0) if kernel is not None else None
            others = ((_machine_cpu_seconds() - cpu0) - (own_cpu or 0.0)) / max(run_s, 1e-9)
            move = nbformat.v4.new_code_cell(MOVE_CONTROLS)
            nb.cells.append(move)
            try:
                client.execute_cell(move, len(nb.cells) - 1)
            except Exception as err:  # the audit's assert: reported by the test, not here
                explorer_error = str(err)[-3000:]
            nb.cells.pop()
    texts = [o.get("text", "") for o in move.outputs if o.get("output_type") == "stream"]
    return {"cells": [dict(c) for c in nb.cells], "probe": probe.outputs[0]["text"].split(),
            "where": where, "run_s": run_s, "others_busy": max(0.0, others), "cores": os.cpu_count() or 1,
            "own_cpu_s": own_cpu,
            "report": "".join(texts).strip(),
            "explorer_error": explorer_error}


def _machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (user + system, all processes), from
    /proc/stat; 0 where there is none (the run's time is then taken as it is)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        ticks = [int(x) for x in fields]
    except (OSError, ValueError):
        return 0.0
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _kernel_process(client):
    try:
        import psutil

        return psutil.Process(client.km.provisioner.process.pid)
    except Exception:  # no psutil, another provisioner: the run's time is taken as it is
        return None


def _cpu_of(proc) -> float:
    """CPU seconds of the kernel and its children (the ranks chapter 14 starts), so far."""
    if proc is None:
        return 0.0
    try:
        procs = [proc] + proc.children(recursive=True)
        return sum(sum(p.cpu_times()[:4]) for p in procs)
    except Exception:
        return 0.0


def alone_s(data: dict) -> float:
    """The chapter's time as a reader gets it, alone on the machine: the run's wall time scaled
    by the share of a core the rest of the machine left it. In the full suite a chapter runs
    beside the book build on the same two cores (other tests' processes keep about one and a
    half busy); a reader runs it alone. Without the measurement, the run's own time."""
    others, cores = data.get("others_busy"), data.get("cores") or 1
    if others is None:
        return data["run_s"]
    scaled = data["run_s"] * min(1.0, max(cores - others, 0.25))
    # The share estimate is rough where the chapter itself starts processes (chapter 14's
    # ranks) and they fight the suite for the same two cores. The CPU seconds the kernel and
    # its children spent bound a CPU-bound chapter's time alone from above (alone it can
    # only be faster, spread over the cores): take the smaller of the two.
    own = data.get("own_cpu_s")
    return min(scaled, own) if own else scaled


def text(data: dict) -> str:
    """Every stream and plain-text output of the executed chapter, in order."""
    out = []
    for c in data["cells"]:
        for o in c.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o.get("text", ""))
            elif "data" in o and "text/plain" in o["data"]:
                out.append(o["data"]["text/plain"])
    return "\n".join(out)


def errors(data: dict) -> list:
    return [o for c in data["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
