"""bench.measure: ``python -m attn_edu.bench --measure NAME``, run as its dry run on the CPU.

Each measurement writes a document of its kind with the fields a chapter or a plot reads;
a point that fails is recorded and the run goes on (exit code 1); the backward's FLOP count
is checked against the matmuls PyTorch's FLOP counter sees. Triton runs interpreted, at
d = 16 and one length (the dry-run rule, attn_edu/bench/measure.py). The documents read
here are the GPU run's own dry run (tests/conftest.py's ``gpu_dry_run``: its
``measure-NAME`` steps, each ``python -m attn_edu.bench --measure NAME --dry-run``), made
once for this module and tests/test_gpu_pipeline.py; the failing-point tests run a
measurement again in this process, with a failure planted.
"""
from __future__ import annotations

import json
import os
import statistics

import pytest

from attn_edu import bench, profiling

NS = (32,)  # the dry run's one length (MEASURE_SIZES, the dry-run rule)


@pytest.fixture(scope="module")
def dry_runs(request):
    """Each measurement as the GPU run's dry run made it: name -> (its step's exit code, the
    document it wrote, its step's log: the command line, then what it printed)."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    if bench.cuda_available():
        pytest.skip("the dry run's expectations are the CPU's (no cuDNN, no CUDA graph)")
    out, _ = request.getfixturevalue("gpu_dry_run")   # after the skips: the dry run takes 90 s
    (run,) = [json.loads(p.read_text()) for p in (out / "run").glob("run_*.json")]
    steps = {s["step"]: s for s in run["steps"]}

    def read(name):
        step = steps[f"measure-{name}"]
        assert step["outputs"] == [f"{name}_dry-run-cpu.json"], step
        (doc,) = bench.load_results(out / step["outputs"][0])
        return step["exit_code"], doc, (out / step["log"]).read_text()

    return read


def test_every_measure_has_a_kind_and_sizes():
    assert set(bench.MEASURES) <= set(bench.KINDS)
    assert set(bench.MEASURE_SIZES) == set(bench.MEASURES)
    for name, sizes in bench.MEASURE_SIZES.items():
        dry = sizes["dry_run"]
        assert dry["n"] == NS and dry["d"] == (16,) and dry["heads"] == 1, name  # interpreted: tiny
        # (the FA3 ladder times its steps, and the profile reads the goals' calls, at one long n,
        # 8192: the lengths are the sweeps' job)
        assert len(sizes["gpu"]["n"]) > 1 or name in ("fa3_ladder", "profile"), name
        assert not set(dry["n"]) & set(sizes["gpu"]["n"]), name
    mem = bench.MEASURE_SIZES["memory"]
    assert len(mem["dry_run"]["decode_n"]) == 1 < len(mem["gpu"]["decode_n"])
    for name in ("backward", "forward_cudnn"):
        gpu = bench.MEASURE_SIZES[name]["gpu"]
        assert (gpu["d"], gpu["batch"], gpu["heads"]) == ((64, 128), 4, 16)
        assert min(gpu["n"]) == 4096 and max(gpu["n"]) == 16384
    assert bench.MEASURE_SIZES["causal_d128"]["gpu"]["d"] == (128,)
    gpu = bench.MEASURE_SIZES["decode_graph"]["gpu"]
    assert gpu["batch"] == 1 and (min(gpu["n"]), max(gpu["n"])) == (16384, 65536)


def _as_on_a_gpu(monkeypatch):
    """run_measure as on a GPU (no document of this machine's device; nothing is timed)."""
    monkeypatch.setattr(bench.measure, "cuda_available", lambda: True)
    monkeypatch.setattr(bench.measure, "gpu_half_dtype", lambda device: "bfloat16")
    monkeypatch.setattr(bench.measure, "_document", lambda run, config, **extra: {
        "config": config, **extra, "results": [], "skipped": {}})


def test_host_time_marks_a_point_launch_bound_where_the_host_is_the_slower(monkeypatch):
    _as_on_a_gpu(monkeypatch)
    # (host, GPU) ms: the host slower, then the GPU slower
    monkeypatch.setattr(bench.measure, "_sweeps", lambda run, doc, impls, cfg: doc["results"].extend(
        [{"impl": "triton", "n": 1024, "median_ms": 1.0, "host_median_ms": 2.0},
         {"impl": "triton", "n": 8192, "median_ms": 4.0, "host_median_ms": 0.5}]))
    doc, code = bench.run_measure("host_time", stream=open(os.devnull, "w"))
    assert code == 0
    assert [(r["launch_bound"], r["host_over_device"], r["device_median_ms"]) for r in doc["results"]] == [
        (True, 2.0, 1.0), (False, 0.125, 4.0)]


def test_decode_graph_records_eager_over_graph_replay(monkeypatch):
    _as_on_a_gpu(monkeypatch)
    monkeypatch.setattr(bench.measure, "_decode", lambda run, *a, **k: {"skipped": {}, "results": [
        {"impl": "triton_split_kv", "context": 16384, "median_ms": 0.3, "graph_median_ms": 0.1,
         "loop_ms": 0.05, "graph_loop_ms": 0.04},
        {"impl": "torch_split_kv", "context": 16384, "median_ms": 2.0, "graph_median_ms": None,
         "loop_ms": 2.0, "graph_loop_ms": None}]})
    doc, code = bench.run_measure("decode_graph", stream=open(os.devnull, "w"))
    assert code == 0
    assert [r.get("graph_speedup") for r in doc["results"]] == [pytest.approx(3.0), None]
    assert [r.get("loop_speedup") for r in doc["results"]] == [pytest.approx(1.25), None]


def test_a_decode_loop_is_timed_as_steps_back_to_back_without_flushes(monkeypatch):
    from attn_edu.bench import decode as bd

    seen, calls = [], []

    def timed(fns, repeat, warmup, device, l2_flush):  # the loop run once, timed at 8 ms
        seen.append((repeat, warmup, device, l2_flush))
        fns["loop"]()
        return {"loop": profiling.Timing([8.0], warmup)}

    monkeypatch.setattr(bd.profiling, "time_interleaved_ms", timed)
    assert bd._loop_ms(lambda *a: calls.append(a), (1, 2), "cuda", 4) == 2.0  # per step
    assert calls == [(1, 2)] * 4 and seen == [(5, 1, "cuda", False)]


@pytest.mark.parametrize("results, stopped, code", [
    ([{"impl": "x", "median_ms": 1.0}], None, 0),
    ([{"impl": "x", "median_ms": 1.0}, {"impl": "y", "error": "E: e"}], None, 1),  # a point failed
    ([{"impl": "x", "median_ms": 1.0}], "interrupted after 1 of 2 points", 1),  # interrupted
    ([], None, 1)], ids=["ran", "a point failed", "interrupted", "nothing ran"])  # nothing ran
def test_the_exit_code_says_a_point_failed_the_run_stopped_or_nothing_ran(monkeypatch, results, stopped, code):
    doc = {"results": results, "skipped": {}, **({"stopped": stopped} if stopped else {})}
    monkeypatch.setitem(bench.measure._MEASURE_FNS, "backward", lambda run: doc)
    _as_on_a_gpu(monkeypatch)
    assert bench.run_measure("backward", stream=open(os.devnull, "w"))[1] == code


@pytest.mark.parametrize("name", list(bench.MEASURES))
def test_a_gpu_run_measures_every_length_and_a_dry_run_one(monkeypatch, name):
    """The dry-run rule (one length) is the dry run's alone: a GPU run takes every length of
    MEASURE_SIZES' "gpu" sizes, and ``n`` still replaces them in both."""
    seen = {}

    def measured(run):
        seen[run.dry_run] = run.ns, run.sizes
        return {"results": [{"impl": "x", "median_ms": 1.0}], "skipped": {}}

    monkeypatch.setitem(bench.measure._MEASURE_FNS, name, measured)
    monkeypatch.setattr(bench.measure, "cuda_available", lambda: True)
    monkeypatch.setattr(bench.measure, "gpu_half_dtype", lambda device: "bfloat16")
    monkeypatch.setattr(bench.measure, "interpret_requested", lambda: True)
    quiet = open(os.devnull, "w")
    for dry in (False, True):
        assert bench.run_measure(name, dry_run=dry, stream=quiet)[1] == 0
    sizes = bench.MEASURE_SIZES[name]
    assert seen[False] == (tuple(sizes["gpu"]["n"]), sizes["gpu"])
    assert len(seen[False][0]) > 1 or name in ("fa3_ladder", "profile")  # one long n, as above
    assert seen[True] == (NS, sizes["dry_run"])
    bench.run_measure(name, dry_run=True, n=[32, 64], stream=quiet)
    assert seen[True][0] == (32, 64)


@pytest.mark.triton
@pytest.mark.slow  # reads the GPU run's dry run (conftest's gpu_dry_run: about 90 s, once per test run)
@pytest.mark.parametrize("name", list(bench.MEASURES))
def test_a_dry_run_writes_a_document_of_its_kind(dry_runs, name):
    code, doc, text = dry_runs(name)
    assert code == 0, text
    assert doc["schema"] == bench.SCHEMA and doc["kind"] == name and doc["dry_run"] is True
    assert doc["device"]["kind"] == "cpu" and doc["versions"]["torch"] and doc["date"].endswith("+00:00")
    # the command the step ran (its log's first line, after the interpreter), as the document says
    ran = text.splitlines()[0].split(" ", 2)[2]
    assert doc["command"] == "python " + ran == f"python -m attn_edu.bench --measure {name} --dry-run --out " \
                                                + doc["source"]
    assert doc["results"] and not any("error" in r for r in doc["results"])
    assert f"wrote {doc['source']}" in text
    for r in doc["results"]:
        assert r["median_ms"] > 0 and r["impl"] in text, r
        # the row's own timings: repeat of them, their median and minimum (the decode sweep's
        # rows, the memory's decode part and the profile keep only those two)
        assert "times_ms" in r or name in ("decode_graph", "memory", "profile"), r
        if "times_ms" in r:
            assert len(r["times_ms"]) == doc["repeat"] and r["min_ms"] == min(r["times_ms"]), r
            assert r["median_ms"] == statistics.median(r["times_ms"]), r


@pytest.mark.triton
@pytest.mark.slow  # reads the GPU run's dry run (conftest's gpu_dry_run)
def test_backward_times_both_schedules_against_sdpa(dry_runs):
    from attn_edu.kernels import flash_triton

    _, doc, _ = dry_runs("backward")
    rows = {(r["impl"], r["n"]): r for r in doc["results"]}
    impls = {f"triton_{m}" for m in flash_triton.BACKWARDS} | {"torch_sdpa_flash"}
    assert set(rows) == {(i, n) for i in impls for n in NS}
    assert "torch_sdpa_cudnn" in doc["skipped"] and "RuntimeError" in doc["skipped"]["torch_sdpa_cudnn"]
    for r in rows.values():
        assert r["d"] == 16 and r["causal"] is False and len(r["times_ms"]) == doc["repeat"] == 2
        assert r["tflops"] == pytest.approx(r["flops"] / (r["median_ms"] * 1e-3) / 1e12)
        assert r["timer"] == "perf_counter"
    assert {r["schedule"] for r in rows.values()} == set(flash_triton.BACKWARDS) | {None}
    assert rows[("torch_sdpa_flash", 32)]["backend"] == "FLASH_ATTENTION"
    assert "2.5" in doc["flop_formula"] and "backward only" in doc["timed"]


def _counted_backward_flops(batch, heads, n, d):
    """The FLOPs PyTorch's counter sees in the matmul-by-matmul backward (four matmuls) plus
    the one matmul a fused backward recomputes (Q K^T): the count FlashAttention quotes."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from attn_edu import reference_torch

    q, k, v = (torch.randn(batch, heads, n, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = reference_torch.scaled_dot_product_attention(q, k, v)
    with FlopCounterMode(display=False) as backward:
        out.backward(torch.ones_like(out))
    with FlopCounterMode(display=False) as recompute:
        q.detach() @ k.detach().transpose(-2, -1)
    return backward.get_total_flops() + recompute.get_total_flops()


@pytest.mark.triton
@pytest.mark.slow  # reads the GPU run's dry run (conftest's gpu_dry_run)
def test_backward_flops_are_the_matmuls_a_fused_backward_does(dry_runs):
    _, doc, _ = dry_runs("backward")
    for r in doc["results"]:
        counted = _counted_backward_flops(1, 1, r["n"], r["d"])
        assert r["flops"] == counted == 5 * 2 * r["n"] ** 2 * r["d"]  # five n x n x d matmuls
    assert _counted_backward_flops(2, 3, 40, 16) == profiling.attention_flops(2, 3, 40, 40, 16, backward=True)


@pytest.mark.triton
def test_causal_backward_counts_half():
    pytest.importorskip("triton")
    if bench.cuda_available():
        pytest.skip("a dry run on the CPU")
    doc, code = bench.run_measure("backward", dry_run=True, n=[32], causal=True, repeat=1, warmup=0)
    assert code == 0 and {r["causal"] for r in doc["results"]} == {True}
    for r in doc["results"]:
        assert 2 * r["flops"] == _counted_backward_flops(1, 1, 32, 16)


@pytest.mark.triton
@pytest.mark.slow  # reads the GPU run's dry run (conftest's gpu_dry_run)
@pytest.mark.parametrize("name, causal", [("forward_cudnn", False), ("causal_d128", True)])
def test_forward_sweeps_put_triton_beside_sdpa(dry_runs, name, causal):
    _, doc, _ = dry_runs(name)
    assert doc["config"]["causal"] is causal and doc["interleave"] is True
    assert {(r["impl"], r["n"]) for r in doc["results"]} == {(i, n) for i in ("triton", "torch_sdpa_flash")
                                                             for n in NS}
    assert "torch_sdpa_cudnn" in doc["skipped"]  # no cuDNN on the CPU, and the reason is kept
    for r in doc["results"]:
        assert r["flops"] == profiling.attention_flops(1, 1, r["n"], r["n"], r["d"], causal=causal)
        assert r["d"] == 16


@pytest.mark.triton
@pytest.mark.slow  # reads the GPU run's dry run (conftest's gpu_dry_run)
def test_host_time_covers_every_implementation(dry_runs):
    _, doc, _ = dry_runs("host_time")
    timed = {r["impl"] for r in doc["results"]}
    assert timed | set(doc["skipped"]) == set(bench.impl_names())
    assert {"triton", "block_sparse", "numpy_naive", "torch_sdpa"} <= timed  # Triton interpreted too
    for r in doc["results"]:
        # on the CPU the call computes before it returns: its host time is the whole call
        assert r["host_median_ms"] == r["device_median_ms"] == r["median_ms"]
        assert r["host_over_device"] == 1.0 and r["launch_bound"] is None
    assert "the whole call" in doc["host_timer"]


@pytest.mark.triton
@pytest.mark.slow  # reads the GPU run's dry run (conftest's gpu_dry_run)
def test_decode_graph_and_memory_record_every_decode_implementation(dry_runs):
    _, graph, _ = dry_runs("decode_graph")
    assert {(r["impl"], r["context"]) for r in graph["results"]} == {(i, c) for i in bench.DECODE_IMPLS for c in NS}
    for r in graph["results"]:
        assert r["batch"] == 1 and r["graph_median_ms"] is None and "CUDA" in r["graph_note"]
        assert type(r["loop_ms"]) is float and r["graph_loop_ms"] is None and "loop_speedup" not in r
        assert r["max_abs_err"] < 1e-5  # against float64, in float32
    _, mem, _ = dry_runs("memory")
    parts = {}
    for r in mem["results"]:
        parts.setdefault(r["part"], set()).add(r["impl"])
        assert type(r["peak_bytes"]) is int and r["memory_method"] == "torch_cpu"
    assert parts == {"block_sparse": {"block_sparse", "triton", "torch_sdpa"}, "decode": set(bench.DECODE_IMPLS)}
    sparse = [r for r in mem["results"] if r["part"] == "block_sparse"]
    assert all(r["model_tiled_peak_bytes"] == profiling.attention_peak_bytes(r["n"], 16, 4, tiled=True)
               for r in sparse)
    assert mem["config"]["block_sparse"]["window"] == 16 and mem["config"]["block_sparse"]["causal"] is True


@pytest.mark.triton
@pytest.mark.slow  # a run of each measurement in this process (1-4 s each; 14 s in all on 2 busy cores)
@pytest.mark.parametrize("name", list(bench.MEASURES))
def test_a_failing_point_is_recorded_and_the_run_goes_on(monkeypatch, tmp_path, name):
    """SDPA fails at n = 64 (keys, or the KV cache) of a dry run at n = 32 and 64: its rows
    there carry the error, every other row is measured, and the command exits 1."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if bench.cuda_available():
        pytest.skip("a dry run on the CPU")
    real = torch.nn.functional.scaled_dot_product_attention

    def planted(q, k, v, *args, **kwargs):
        if k.shape[-2] == 64:
            raise RuntimeError("planted failure at 64 keys")
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", planted)
    out = tmp_path / "planted.json"
    assert bench.cli.main(["--measure", name, "--dry-run", "--n", "32", "64", "--no-progress", "--repeat", "1",
                           "--out", str(out)]) == 1
    (doc,) = bench.load_results(out)
    rows = doc["results"]
    length = [r.get("n", r.get("context")) for r in rows]
    failed = [r for r, n in zip(rows, length) if "error" in r]
    assert failed and all(n == 64 for r, n in zip(rows, length) if "error" in r)
    assert all("planted failure" in r["error"] and r["reason"] == "error" for r in failed)
    assert {r["impl"] for r in failed} >= {r["impl"] for r in rows if r["impl"].startswith("torch_sdpa")}
    assert any(n == 64 and "error" not in r for r, n in zip(rows, length))  # the others at 64 ran
    assert all("median_ms" in r for r, n in zip(rows, length) if n == 32)


def test_without_a_gpu_or_an_interpreter_it_says_so(monkeypatch, capsys):
    monkeypatch.setattr(bench.measure, "cuda_available", lambda: False)
    assert bench.cli.main(["--measure", "backward"]) == 1
    assert "measures a CUDA GPU" in capsys.readouterr().err
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert bench.cli.main(["--measure", "memory", "--dry-run"]) == 1
    assert "TRITON_INTERPRET=1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="name must be one of"):
        bench.run_measure("forward")


def test_a_decode_point_whose_reference_does_not_fit_is_recorded(monkeypatch):
    """The float64 reference of a long KV cache (64k, batch 8: tens of GB) can run out of
    memory before any implementation runs: every row of that point says so, the next runs."""
    pytest.importorskip("torch")
    from attn_edu import reference_torch

    real = reference_torch.scaled_dot_product_attention

    def reference(q, k, v, **kwargs):
        if k.shape[-2] == 40:
            raise RuntimeError("CUDA out of memory. Tried to allocate 34.00 GiB (planted)")
        return real(q, k, v, **kwargs)

    monkeypatch.setattr(reference_torch, "scaled_dot_product_attention", reference)
    doc = bench.decode_sweep(contexts=(40, 33), batches=(1,), heads=2, kv_heads=1, d=16, dtype="float32",
                             device="cpu", impls=("torch_sdpa", "torch_split_kv"), repeat=1, warmup=0)
    by = {(r["impl"], r["context"]): r for r in doc["results"]}
    assert set(by) == {(i, c) for i in ("torch_sdpa", "torch_split_kv") for c in (40, 33)}
    assert all(by[(i, 40)]["reason"] == "out_of_memory" and "planted" in by[(i, 40)]["error"]
               for i in ("torch_sdpa", "torch_split_kv"))
    assert all("error" not in by[(i, 33)] and by[(i, 33)]["median_ms"] > 0 for i in ("torch_sdpa", "torch_split_kv"))


@pytest.mark.triton
@pytest.mark.slow  # reads the GPU run's dry run (conftest's gpu_dry_run)
def test_the_fa3_ladder_times_every_variant_causal_and_not_beside_sdpa(dry_runs):
    from attn_edu.bench.validate import _schema_problems  # the schema's part of validate_document
    from attn_edu.kernels import flash_triton

    _, doc, _ = dry_runs("fa3_ladder")
    assert doc["config"]["dtype"] == "float16"  # 16-bit: the inputs of FlashAttention-3's steps
    impls = [f"triton_{v}" for v in flash_triton.FORWARD_VARIANTS] + ["torch_sdpa_flash"]
    rows = {(r["impl"], r["n"], r["causal"]): r for r in doc["results"]}
    assert set(rows) == {(i, n, c) for i in impls for n in NS for c in (False, True)}
    assert "torch_sdpa_cudnn" in doc["skipped"]
    for (impl, n, causal), r in rows.items():
        assert r["flops"] == profiling.attention_flops(1, 1, n, n, 16, causal=causal)
        if causal:  # its time over the same implementation's non-causal time at that point
            plain = rows[impl, n, False]
            assert r["causal_over_noncausal"] == pytest.approx(r["median_ms"] / plain["median_ms"])
        else:
            assert "causal_over_noncausal" not in r
        if impl.startswith("triton_"):
            assert r["variant"] == impl[len("triton_"):] and r["config"]["how"] == "interpreter"
            # the interpreter loads through pointers: a variant left with no step runs fa2's
            # kernel (steps None), and the persistent one says what it left out
            assert (r["steps"] is None) == (r["variant"] != "persistent")
            assert r["steps"] is None or "host_tma (the interpreter" in r["steps"]["left_out"][0]
    assert rows["triton_persistent", 32, True]["steps"]["persistent"] is True
    assert _schema_problems(doc, "ladder") == []
    broken = dict(doc, results=[dict(doc["results"][0], variant="fa4")])
    assert _schema_problems(broken, "ladder")  # the schema knows the variants


def test_a_point_whose_inputs_fail_fails_its_unfinished_rows_and_keeps_them():
    """One point of a side-by-side measurement (bench.measure._timed_point): when making
    the inputs fails (out of memory), every row not yet failed or timed carries that error,
    the rows already settled keep theirs, the rows join the document and the calls are let
    go; an interrupt (SIGTERM) is not swallowed, and still records the rows."""
    from attn_edu.bench import measure

    doc = {"results": []}
    rows = {"a": {"impl": "a"}, "b": {"impl": "b", "error": "RuntimeError: its own", "reason": "error"},
            "c": {"impl": "c", "median_ms": 1.0}}
    calls = {"b": lambda: None}
    with measure._timed_point(None, doc, rows, calls, 1.0):
        raise MemoryError("planted: the inputs do not fit")
    assert [r["impl"] for r in doc["results"]] == ["a", "b", "c"] and calls == {}
    assert rows["a"]["error"].startswith("MemoryError: planted") and rows["a"]["reason"]
    assert rows["b"]["error"] == "RuntimeError: its own" and "error" not in rows["c"]

    doc, calls = {"results": []}, {"a": lambda: None}
    with pytest.raises(KeyboardInterrupt):
        with measure._timed_point(None, doc, {"a": {"impl": "a"}}, calls, 1.0):
            raise KeyboardInterrupt
    assert [r["impl"] for r in doc["results"]] == ["a"] and calls == {}


@pytest.mark.triton
@pytest.mark.slow  # reads the GPU run's dry run (conftest's gpu_dry_run)
def test_the_profile_takes_each_goals_call_apart_and_says_why_ncu_did_not_run(dry_runs):
    _, doc, text = dry_runs("profile")
    rows = {(r["part"], r["impl"]): r for r in doc["results"]}
    assert {("forward_d16", "triton"), ("causal_d16", "triton"), ("backward_d16", "triton_two_kernels"),
            ("backward_d16", "triton_atomic_dq"), ("decode", "triton_split_kv"), ("decode", "torch_sdpa"),
            ("block_sparse", "block_sparse"), ("block_sparse", "triton")} <= set(rows)
    for (part, impl), r in rows.items():
        host = r["host"]
        assert host["calls"] == bench.MEASURE_SIZES["profile"]["dry_run"]["calls"]
        spent = {o: p["python_us"] + p["c_us"] for o, p in host["owners"].items()}
        assert sum(spent.values()) == pytest.approx(host["profiled_us"])
        if impl.startswith("triton") or impl == "block_sparse":   # the interpreter: Triton's Python
            assert max(spent, key=spent.get) == "triton", (part, impl, spent)
    assert 0 < rows["block_sparse", "block_sparse"]["tile_density"] < 1
    assert "a dry run on the CPU" in doc["skipped"]["ncu"] and "ncu" not in doc
    assert "host " in text and "us/call; profiled:" in text
