"""A live explorer as a front end sees it: the messages on the wire, in order.

Colab's front end does not show widget messages that arrive after the kernel went idle
for the request that caused them (googlecolab/colabtools#3373). So when a reader moves a
control -- a ``comm_msg`` from the front end to the kernel -- the new figure (the Output
widget's ``outputs``) and the status note must reach the front end on iopub *before* the
kernel's ``status: idle`` whose parent is that ``comm_msg``.

The test is a front end made of ``jupyter_client`` (what JupyterLab and Colab speak): it
starts a real kernel, builds an explorer in it, sends ``comm_msg`` updates of a control's
value as a front end does, and records every iopub message. It runs in two kernels:

* ``project``: this test environment (ipywidgets 8, the project's ipykernel);
* ``colab``: the Colab stand-in (tests/colab.py: Colab's ipywidgets 7.7.1, ipykernel 6.17.1,
  jupyter_client 7.4.9 ..., with ``google.colab`` stood in); slow, built once and cached,
  skipped with pip's reason where it cannot be built.

On the code that deferred the recompute (``loop.call_later``) all three tests fail in both
kernels: the figure and the status arrive after idle.
"""
from __future__ import annotations

import json
import queue
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real kernels: a few seconds each

pytest.importorskip("ipywidgets")
jupyter_client = pytest.importorskip("jupyter_client")

import colab  # noqa: E402
from venvs import REPO, jupyter_dirs, write_kernelspec  # noqa: E402

SETUP = """
import time, ipywidgets as W
from attn_edu.widgets import live_explorer
calls = []
def compute(x, kind):
    calls.append(x)
    time.sleep({sleep})
    return f"x = {{x}}, kind = {{kind}}"
x = W.IntSlider(value=0, min=0, max=9)
kind = W.Dropdown(options=["a", "b"], value="a")
box = live_explorer(compute, x=x, kind=kind)
print(json.dumps({{"x": x.model_id, "kind": kind.model_id, "status": box.children[-2].model_id,
                  "output": box.children[-1].model_id}}))
"""


class Frontend:
    """A kernel and a client that talks to it the way a notebook front end does."""

    def __init__(self, km, kc) -> None:
        self.km, self.kc = km, kc

    def execute(self, code: str, timeout: float = 120) -> str:
        """Run ``code``; return its stdout (fails on an error)."""
        msg_id = self.kc.execute(code)
        out, deadline = [], time.time() + timeout
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(deadline - time.time(), 0.1))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["header"]["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                raise AssertionError("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out)

    def send_update(self, comm_id: str, state: dict) -> str:
        """Send what a front end sends when the reader moves a control; return its msg_id."""
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {
            "method": "update", "state": state, "buffer_paths": []}})
        self.kc.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def record(self, until_idle_of: set, grace: float = 1.0, timeout: float = 120) -> list:
        """Every iopub message until each of ``until_idle_of`` went idle, and ``grace`` s more."""
        seen, waiting, deadline, quiet_until = [], set(until_idle_of), time.time() + timeout, None
        while True:
            now = time.time()
            if quiet_until is not None and now >= quiet_until:
                return seen
            assert now < deadline, f"no idle for {waiting} within {timeout} s: {seen}"
            try:
                msg = self.kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            seen.append(msg)
            parent = msg["parent_header"].get("msg_id")
            if msg["header"]["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                waiting.discard(parent)
                if not waiting and quiet_until is None:
                    quiet_until = time.time() + grace


def _updates(messages: list, comm_id: str, key: str) -> list:
    """(index, value) of every iopub update of ``key`` of widget ``comm_id``."""
    out = []
    for i, msg in enumerate(messages):
        if msg["header"]["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == comm_id:
            state = msg["content"]["data"].get("state", {})
            if key in state:
                out.append((i, state[key]))
    return out


def _idle_index(messages: list, parent: str) -> int:
    return next(i for i, m in enumerate(messages) if m["header"]["msg_type"] == "status"
                and m["content"]["execution_state"] == "idle" and m["parent_header"].get("msg_id") == parent)


def _describe(messages: list) -> str:
    lines = []
    for m in messages:
        kind, c = m["header"]["msg_type"], m["content"]
        what = c.get("execution_state") or json.dumps(c.get("data", {}).get("state", c), default=str)[:90]
        lines.append(f"  {kind} (parent {m['parent_header'].get('msg_type')} "
                     f"{m['parent_header'].get('msg_id', '')[:8]}): {what}")
    return "\n".join(lines)


def _outputs_text(outputs: list) -> str:
    return " ".join(o.get("data", {}).get("text/plain", "") for o in outputs)


@pytest.fixture(params=["project", "colab"])
def frontend(request, tmp_path, monkeypatch):
    from jupyter_client.manager import start_new_kernel

    dirs = jupyter_dirs(tmp_path / "jupyter")
    for key, value in dirs.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    if request.param == "colab":
        python = colab.standin_or_skip()
        colab.write_colab_kernelspec(Path(dirs["JUPYTER_PATH"]), python, tmp_path)
    else:
        write_kernelspec(Path(dirs["JUPYTER_PATH"]), Path(sys.executable), env={"PYTHONPATH": str(REPO)})
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120, cwd=str(tmp_path))
    try:
        fe = Frontend(km, kc)
        fe.execute("import json, sys")
        yield fe
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_control_change_reaches_the_front_end_before_the_kernel_goes_idle(frontend):
    ids = json.loads(frontend.execute(SETUP.format(sleep=0.05)).strip().splitlines()[-1])
    msg_id = frontend.send_update(ids["x"], {"value": 5})
    messages = frontend.record({msg_id})
    idle = _idle_index(messages, msg_id)
    outputs = _updates(messages, ids["output"], "outputs")
    status = _updates(messages, ids["status"], "value")
    where = f"iopub after the comm_msg:\n{_describe(messages)}"
    assert outputs, f"the new figure never reached the front end; {where}"
    assert "x = 5" in _outputs_text(outputs[-1][1]), where
    assert outputs[-1][0] < idle, f"the new figure arrived after the kernel went idle; {where}"
    assert status and "computing" in status[0][1], f"no 'computing…' state; {where}"
    assert status[-1][0] < idle and 'data-renders="2"' in status[-1][1], (
        f"the status was not back to idle before the kernel went idle; {where}")
    assert status[0][0] < outputs[-1][0] < status[-1][0], where
    for index, _ in outputs + status:  # each one caused by this message, not by a later one
        assert messages[index]["parent_header"].get("msg_id") == msg_id, where


def test_a_dropdown_that_disables_a_control_updates_before_idle(frontend):
    """Greying out a control is a widget update too: it must also arrive before idle."""
    code = SETUP.format(sleep=0.01).replace(
        "box = live_explorer(compute, x=x, kind=kind)",
        "box = live_explorer(compute, x=x, kind=kind, active_when={'x': lambda kind, **_: kind == 'a'})")
    ids = json.loads(frontend.execute(code).strip().splitlines()[-1])
    msg_id = frontend.send_update(ids["kind"], {"index": 1})  # a Dropdown syncs its index
    messages = frontend.record({msg_id})
    idle = _idle_index(messages, msg_id)
    disabled = _updates(messages, ids["x"], "disabled")
    outputs = _updates(messages, ids["output"], "outputs")
    where = _describe(messages)
    assert disabled and disabled[-1][1] is True and disabled[-1][0] < idle, where
    assert outputs and "kind = b" in _outputs_text(outputs[-1][1]) and outputs[-1][0] < idle, where


def test_quick_changes_compute_only_the_latest_and_lose_none(frontend):
    """Three quick moves of a slow explorer's slider: the stale values are never computed,
    the last one is, and every figure update still arrives before its message's idle.

    The moves are sent while the kernel is busy (a reader dragging while it computes), so
    they wait in its queue together: sent to an idle kernel one after the other, the third
    could arrive only after the second had begun (a loaded CI machine: computed [0, 2, 3])."""
    ids = json.loads(frontend.execute(SETUP.format(sleep=0.5)).strip().splitlines()[-1])
    frontend.kc.execute("time.sleep(2)")  # busy: the moves below queue up behind it
    sent = [frontend.send_update(ids["x"], {"value": v}) for v in (1, 2, 3)]
    messages = frontend.record(set(sent))
    where = _describe(messages)
    calls = json.loads(frontend.execute("print(json.dumps(calls))").strip())
    assert calls == [0, 3], f"computed {calls}\n{where}"   # the first render, then only the latest
    outputs = _updates(messages, ids["output"], "outputs")
    assert "x = 3" in _outputs_text(outputs[-1][1]), where
    for index, _ in outputs:
        parent = messages[index]["parent_header"].get("msg_id")
        assert parent in sent and index < _idle_index(messages, parent), where
    status = _updates(messages, ids["status"], "value")
    assert status[-1][0] < _idle_index(messages, sent[-1]) and "data-renders" in status[-1][1], where
