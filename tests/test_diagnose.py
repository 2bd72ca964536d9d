"""bench.diagnose and ``--measure profile``: whose code spends a call's host time, and the
kernels an ncu report gives back to the calls that launched them.

The host split is checked on cProfile tables made by hand (each attribution rule apart) and on
a real call; ncu's CSV on text in its layout; the whole profile as the GPU run's dry run makes
it, once more with ncu stood in (tests/fake_ncu.py: it runs the child as ncu does and prints a
report in ncu's CSV layout), and once with an ncu that cannot read the counters.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attn_edu.bench import diagnose as dg

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "attn_edu"


def _stats(entries):
    """A pstats table: {func: (cc, nc, tt, ct, {caller: (cc, nc, tt, ct)})}."""
    return {f: (1, nc, tt, ct, callers) for f, (nc, tt, ct, callers) in entries.items()}


def test_each_owner_gets_its_python_and_the_c_functions_its_python_called():
    ours = (str(PKG / "masks" / "tiles.py"), 10, "plan_tiles")
    harness = (str(PKG / "bench" / "_profile_measure.py"), 5, "<lambda>")
    binder = ("<string>", 2, "dynamic_func")          # code with no file: its caller's
    empty = ("~", 0, "<built-in method torch.empty>")
    sdpa = ("~", 0, "<built-in method torch._C._nn.scaled_dot_product_attention>")
    stats = _stats({
        harness: (1, 0.001, 0.020, {}),
        ours: (1, 0.004, 0.010, {harness: (1, 1, 0.004, 0.010)}),
        binder: (1, 0.003, 0.003, {ours: (1, 1, 0.003, 0.003)}),
        empty: (2, 0.002, 0.002, {ours: (1, 1, 0.0015, 0.0015), binder: (1, 1, 0.0005, 0.0005)}),
        sdpa: (1, 0.006, 0.006, {harness: (1, 1, 0.006, 0.006)}),
    })
    got = dg._split(stats, calls=2, host_s=1e-3, top=3)
    us = {o: (round(p["python_us"], 3), round(p["c_us"], 3)) for o, p in got["owners"].items()}
    # per call (2 calls): ours 4 ms + the binder's 3 ms of Python, and all 2 ms of torch.empty
    assert us["attn_edu"] == (3500.0, 1000.0)
    assert us["harness"] == (500.0, 0.0)               # the closure's own line
    assert us["torch"] == (0.0, 3000.0)                # the library the closure called, by its name
    assert us["triton"] == us["other"] == (0.0, 0.0)
    assert got["profiled_us"] == pytest.approx(8000.0) and got["host_us"] == pytest.approx(1000.0)
    assert [t["function"] for t in got["top"]] == [
        "<built-in method torch._C._nn.scaled_dot_product_attention>", "masks/tiles.py:10(plan_tiles)",
        "<string>:2(dynamic_func)"]
    assert got["top"][2]["owner"] == "attn_edu" and got["top"][1]["calls"] == 0.5


def test_host_breakdown_of_a_real_call_finds_the_package():
    torch = pytest.importorskip("torch")
    from attn_edu import reference_torch

    q = torch.randn(1, 2, 32, 16)
    got = dg.host_breakdown(lambda: reference_torch.scaled_dot_product_attention(q, q, q), calls=20)
    parts = got["owners"]
    total = sum(p["python_us"] + p["c_us"] for p in parts.values())
    assert got["profiled_us"] == pytest.approx(total) and got["host_us"] > 0
    assert max(parts, key=lambda o: parts[o]["python_us"] + parts[o]["c_us"]) == "attn_edu"
    assert parts["attn_edu"]["c_us"] > 0                 # torch.exp, amax ... its Python called
    assert any(t["function"].startswith("attn_edu/reference_torch.py") for t in got["top"])
    assert "attn_edu" in dg.format_host_breakdown(got)


def test_host_breakdown_refuses_bad_arguments():
    with pytest.raises(TypeError, match="fn must be callable"):
        dg.host_breakdown(3)
    with pytest.raises(ValueError, match="calls"):
        dg.host_breakdown(lambda: None, calls=0)
    with pytest.raises(TypeError, match="sync must be callable"):
        dg.host_breakdown(lambda: None, sync="cuda")


def test_ncu_command_profiles_only_between_the_childs_start_and_stop():
    cmd = dg.ncu_command(["python", "-m", "x"], "out/r.ncu-rep", "my-ncu")
    assert cmd[0] == "my-ncu" and cmd[-3:] == ["python", "-m", "x"]
    joined = " ".join(cmd)
    assert "--profile-from-start off" in joined and "--clock-control none" in joined
    assert "--check-exit-code 0" in joined     # a child with one failed call still leaves its report
    assert all(f"--section {s}" in joined for s in dg.NCU_SECTIONS)
    assert "--export out/r.ncu-rep" in joined
    assert dg.ncu_import_command("r.ncu-rep", "raw", "ncu") == ["ncu", "--import", "r.ncu-rep", "--csv", "--page",
                                                                 "raw"]
    with pytest.raises(ValueError, match="child"):
        dg.ncu_command([], "r")
    with pytest.raises(ValueError, match="page must be"):
        dg.ncu_import_command("r", "summary")


def _fake_pages(calls: int, tmp_path: Path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"calls": calls}))
    run = lambda page: subprocess.run([sys.executable, str(ROOT / "tests" / "fake_ncu.py"), "--import", str(report),
                                       "--csv", "--page", page], capture_output=True, text=True, check=True).stdout
    return run("details"), run("raw")


def test_ncu_kernels_go_back_to_their_calls_with_units_and_stalls(tmp_path):
    details, raw = _fake_pages(3, tmp_path)
    assert details.startswith("==WARNING==")               # not CSV: left out
    assert len(dg.parse_ncu_csv(raw)) == 6                 # the units row left out too
    got = dg.ncu_kernels(details, raw, calls=[["a"], ["b"], ["c"]])
    assert got["problem"] is None and [k["name"] for k in got["kernels"]] == [f"fake_kernel_{c}" for c in range(3)]
    for c, ks in got["by_call"].items():
        (k,) = ks
        assert k["name"] == f"fake_kernel_{c}"
        assert k["duration_ms"] == pytest.approx((1000 + 10 * c + 0.5) / 1e3)   # "1020.5 usecond"
        assert k["sm_throughput_pct"] == 61.25 and k["registers_per_thread"] == 168
        assert k["dynamic_shared_bytes"] == pytest.approx(98300)
        assert list(k["stalls"]) == ["long_scoreboard", "barrier", "not_selected"]  # longest first; not "selected"
        assert k["issue_slots_busy_pct"] is None                                   # ncu's "n/a"
    # one marker short: the kernels are listed, but given to no call
    short = "\n".join(line for line in details.splitlines() if not line.startswith('"0"'))   # kernel 0: a marker
    lost = dg.ncu_kernels(short, raw, calls=[["a"], ["b"], ["c"]])
    assert lost["by_call"] == {} and "2 marker kernels" in lost["problem"] and len(lost["kernels"]) == 3


def _profile(tmp_path: Path, **env):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    wrapper = tmp_path / "ncu"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "tests" / "fake_ncu.py"}" "$@"\n')
    wrapper.chmod(0o755)
    out = tmp_path / "profile.json"
    done = subprocess.run([sys.executable, "-m", "attn_edu.bench", "--measure", "profile", "--dry-run", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_INTERPRET": "1", "ATTN_EDU_NCU": str(wrapper), **env})
    assert out.exists(), done.stderr[-3000:]
    return done, json.loads(out.read_text())


@pytest.mark.triton
def test_the_profile_gives_every_call_its_kernels_through_ncu(tmp_path):
    done, doc = _profile(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = [r for r in doc["results"] if "error" not in r]
    parts = {r["part"] for r in ran}
    assert parts == {"forward_d16", "causal_d16", "backward_d16", "decode", "block_sparse"}
    assert {r["impl"] for r in ran} >= {"triton", "triton_two_kernels", "triton_atomic_dq", "triton_split_kv",
                                        "block_sparse", "torch_sdpa"}
    assert doc["ncu"]["exit_code"] == 0 and doc["ncu"]["problem"] is None and doc["ncu"]["kernels"] == len(ran)
    for c, r in enumerate(ran):   # the child ran the same calls in the same order
        assert [k["name"] for k in r["kernels"]] == [f"fake_kernel_{c}"], r["impl"]
        assert r["host"]["host_us"] > 0 and r["median_ms"] > 0
    assert "kernel fake_kernel_0" in done.stdout and "ncu" not in doc["skipped"]


@pytest.mark.triton
def test_an_ncu_that_cannot_read_the_counters_is_recorded_and_the_rest_kept(tmp_path):
    done, doc = _profile(tmp_path, FAKE_NCU_FAIL="1")
    assert "LibraryNotLoaded" in doc["skipped"]["ncu"] and doc["ncu"]["exit_code"] == 1
    ran = [r for r in doc["results"] if "error" not in r]
    assert ran and all("kernels" not in r and r["host"]["calls"] == 3 for r in ran)


def test_a_timed_out_ncu_is_ended_with_the_child_it_started(tmp_path):
    """ncu's child is its own process: the timeout (or the GPU run's deadline) must end both,
    or the child goes on using the GPU under the next step."""
    import time

    from attn_edu.bench import _profile_measure as pm

    pid_file = tmp_path / "child.pid"
    grandchild = "import time; time.sleep(60)"
    parent = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {grandchild!r}]); "
              f"open({str(pid_file)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)")
    t0 = time.monotonic()
    code, said = pm._run_whole([sys.executable, "-c", parent], dict(os.environ), timeout=3)
    assert code is None and "started" in said and time.monotonic() - t0 < 30
    pid = int(pid_file.read_text())
    time.sleep(0.5)
    status = Path(f"/proc/{pid}/status")
    state = status.read_text().split("State:")[1].split()[0] if status.exists() else "gone"
    assert state in ("gone", "Z", "X"), f"the child {pid} still runs: {state}"
