"""bench: the CLI writes a complete JSON document; the registry and the loader behave."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attn_edu import bench

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "attn_edu.bench", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "sweep.json"
    impls = ["numpy_naive"] + (["torch_naive", "torch_sdpa_math"] if _has("torch") else [])
    proc = _cli("--impl", *impls, "--n", "64", "128", "--d", "16", "--repeat", "2",
                "--memory", "--threads", "1", "--no-progress", "--out", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return impls, out, proc


def _has(mod):
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def test_cli_writes_the_documented_fields(sweep):
    impls, out, proc = sweep
    doc = json.loads(out.read_text())
    assert doc["schema"] == bench.SCHEMA
    assert doc["device"]["kind"] == "cpu" and doc["device"]["name"]
    for key in ("python", "numpy", "torch", "triton", "attn_edu"):
        assert key in doc["versions"]
    assert doc["versions"]["numpy"]
    assert doc["date"].endswith("+00:00")  # UTC
    assert doc["command"].startswith("python -m attn_edu.bench --impl")
    assert "git_commit" in doc and (doc["git_commit"] is None or len(doc["git_commit"]) == 40)
    assert doc["git_dirty"] in (None, True, False)
    assert "4*B*H*n^2*d" in doc["flop_formula"]
    assert doc["config"]["d"] == 16 and doc["config"]["device"] == "cpu"
    got = {(r["impl"], r["n"]) for r in doc["results"]}
    assert got == {(i, n) for i in impls for n in (64, 128)}
    for r in doc["results"]:
        assert r["median_ms"] > 0 and r["min_ms"] <= r["median_ms"] and len(r["times_ms"]) == 2
        assert r["flops"] == 4 * r["n"] ** 2 * 16
        assert r["tflops"] == pytest.approx(r["flops"] / (r["median_ms"] * 1e-3) / 1e12)
        assert r["peak_bytes"] >= r["n"] ** 2 * 4  # the float32 n x n matrix
        assert r["memory_method"] in ("numpy", "torch_cpu")
    if "torch_sdpa_math" in impls:
        assert {r["backend"] for r in doc["results"] if r["impl"] == "torch_sdpa_math"} == {"MATH"}
        assert doc["device"]["threads"]["torch"] == 1
    assert doc["device"]["threads"]["numpy_blas"] in (None, 1)
    assert "numpy_naive" in proc.stdout and "wrote" in proc.stdout


def test_loader_round_trips_and_flattens(sweep, tmp_path):
    _, out, _ = sweep
    doc = json.loads(out.read_text())
    (loaded,) = bench.load_results(out)
    assert loaded["results"] == doc["results"] and loaded["source"] == str(out)
    copy = bench.save_results(doc, tmp_path / "b.json")
    assert bench.load_results(tmp_path / "b.json")[0]["results"] == doc["results"]
    assert len(bench.load_results(str(out.parent / "*.json"))) == 1
    assert len(bench.load_results(out.parent)) == 1
    rows = bench.results_rows(loaded)
    assert len(rows) == len(doc["results"])
    assert all(r["device_kind"] == "cpu" and doc["date"][:10] in r["label"] for r in rows)
    assert copy.exists()


def test_loader_rejects_foreign_and_missing_files(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="schema"):
        bench.load_results(tmp_path / "x.json")
    with pytest.raises(FileNotFoundError):
        bench.load_results(str(tmp_path / "nothing*.json"))


def test_recorded_results_are_labelled_cpu_or_cuda():
    for doc in bench.recorded_results():
        assert doc["schema"] == bench.SCHEMA
        assert doc["device"]["kind"] in ("cpu", "cuda")
        if doc["device"]["kind"] == "cpu":  # never a CPU sweep passed off as a GPU one
            assert "cuda" not in doc["config"]["device"]
    assert all(d["device"]["kind"] == "cuda" for d in bench.recorded_results("cuda"))


def test_unknown_impl_is_a_clear_cli_error():
    proc = _cli("--impl", "numpy_naive", "fast_magic", "--n", "8", "--no-progress")
    assert proc.returncode == 2
    assert "unknown --impl fast_magic" in proc.stderr and "numpy_naive" in proc.stderr


def test_registry_errors_and_unavailable_impls(monkeypatch):
    cfg = bench.BenchConfig(d=8)
    with pytest.raises(ValueError, match="unknown implementation 'nope'"):
        bench.build_impl("nope", cfg)
    with pytest.raises(ValueError, match="unknown implementation"):
        bench.run_sweep(["nope"], [8], cfg, progress=False)
    # NumPy has no bfloat16: skipped with the reason, not a crash
    doc = bench.run_sweep(["numpy_naive"], [8], bench.BenchConfig(d=8, dtype="bfloat16"),
                          repeat=1, progress=False)
    assert doc["results"] == [] and "bfloat16" in doc["skipped"]["numpy_naive"]
    # triton needs a GPU (or the interpreter)
    if not bench.cuda_available():
        with monkeypatch.context() as env:
            env.delenv("TRITON_INTERPRET", raising=False)
            with pytest.raises(bench.ImplUnavailable, match="cuda"):
                bench.build_impl("triton", cfg)
    with pytest.raises(bench.ImplUnavailable, match="window"):
        bench.build_impl("block_sparse", cfg)
    assert {"numpy_naive", "numpy_flash", "torch_naive", "torch_sdpa", "torch_sdpa_flash",
            "torch_sdpa_math", "torch_flash", "triton", "block_sparse"} <= set(bench.impl_names())


def test_register_impl_hook_adds_a_runnable_entry():
    import numpy as np

    bench.register_impl("test_identity", "numpy", lambda cfg: (lambda q, k, v: v), "returns v")
    try:
        row = bench.run_one("test_identity", 16, bench.BenchConfig(d=4), repeat=1, memory=True)
        assert row["impl"] == "test_identity" and row["peak_bytes"] is not None
        q, k, v = bench.make_inputs("numpy", 16, bench.BenchConfig(d=4))
        assert q.shape == (1, 1, 16, 4) and q.dtype == np.float32
    finally:
        del bench.REGISTRY["test_identity"]
    with pytest.raises(ValueError, match="framework"):
        bench.register_impl("x", "jax", lambda cfg: None, "")


def test_goals_report_not_run_without_gpu_and_fail_codes():
    goals, code = bench.run_goals(n=256, repeat=1, sparse=False, gpu=False, stream=open(os.devnull, "w"))
    assert code in (0, 1)
    assert {g["goal"] for g in goals} == {"numpy_peak_naive_over_tiled", "numpy_time_tiled_over_naive"}
    mem = goals[0]
    if mem["passed"] is not None:  # flash_attention present: a real measurement
        assert mem["measured"] > 1 and mem["details"]["peak_naive_bytes"] > mem["details"]["peak_tiled_bytes"]
    if not bench.cuda_available():
        (g,) = bench.goal_gpu_causal_speedup()
        assert g["passed"] is None and "no CUDA" in g["note"]
    fake = bench.goals._goal("numpy_time_tiled_over_naive", 1.5, {})
    assert fake["passed"] is False
    assert bench.goals._goal("numpy_peak_naive_over_tiled", 60.0, {})["passed"] is True


def test_fit_exponent_recovers_known_powers():
    rows = [{"impl": "a", "n": n, "min_ms": 3e-6 * n ** 2, "peak_bytes": 40 * n} for n in (64, 128, 256, 512)]
    rows.append({"impl": "a", "n": 1024, "error": "MemoryError"})
    rows.append({"impl": "b", "n": 64, "min_ms": 1.0})
    assert bench.fit_exponent(rows, "a") == pytest.approx(2.0)
    assert bench.fit_exponent({"results": rows}, "a", "peak_bytes", n_min=128) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two or more"):
        bench.fit_exponent(rows, "b")
    with pytest.raises(ValueError, match="two or more"):
        bench.fit_exponent(rows, "a", n_min=512)


def test_interleaved_sweep_times_every_point_round_robin():
    calls = []

    def build(cfg):
        def fn(q, k, v):
            calls.append(q.shape[-2])
            return v
        return fn

    bench.register_impl("test_counter", "numpy", build, "records its calls")
    try:
        doc = bench.run_sweep(["test_counter", "numpy_naive"], [8, 16], bench.BenchConfig(d=4),
                              repeat=3, warmup=1, memory=True, progress=False, interleave=True)
    finally:
        del bench.REGISTRY["test_counter"]
    assert doc["interleave"] is True
    assert [(r["impl"], r["n"]) for r in doc["results"]] == [
        ("test_counter", 8), ("test_counter", 16), ("numpy_naive", 8), ("numpy_naive", 16)]
    assert all(len(r["times_ms"]) == 3 and r["peak_bytes"] is not None for r in doc["results"])
    # warm-up of both lengths, then rounds 8, 16, 8, 16, 8, 16, then the memory calls
    assert calls == [8, 16, 8, 16, 8, 16, 8, 16, 8, 16]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("causal", [False, True])
def test_window_impls_are_exact_sparse_attention(framework, causal):
    """numpy_window/torch_window = the reference with the sliding-window mask; FLOPs = pairs."""
    if framework == "torch" and not _has("torch"):
        pytest.skip("torch not installed")
    import numpy as np

    import attn_edu
    from attn_edu import masks
    n, w = 129, 24
    cfg = bench.BenchConfig(d=16, dtype="float64", window=w, causal=causal, block_q=16, block_k=16)
    _, fn = bench.build_impl(f"{framework}_window", cfg)
    q, k, v = bench.make_inputs(framework, n, cfg)
    mask = masks.sliding_window_mask(n, w, causal=causal)
    got = fn(q, k, v)
    if framework == "torch":
        got = got.numpy()
        q, k, v = (x.numpy() for x in (q, k, v))
    ref = attn_edu.scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.abs(got - ref).max() <= 1e-10  # float64: tiled vs naive, the project's rule
    assert np.abs(got - attn_edu.scaled_dot_product_attention(q, k, v)).max() > 1e-3  # not dense
    row = bench.run_one(f"{framework}_window", n, cfg, repeat=1)
    pairs = masks.allowed_pairs("sliding_window", n, window=w, causal=causal)
    assert row["flops"] == masks.mask_flops(mask, 16) == 2 * pairs * 32
    # the (n, n) mask is built once, before the measured call: the peak stays below n^2 bytes
    n = 1024
    row = bench.run_one(f"{framework}_window", n, bench.BenchConfig(d=16, window=w, block_q=64, block_k=64),
                        repeat=1, memory=True)
    assert 0 < row["peak_bytes"] < n * n / 2
    with pytest.raises(bench.ImplUnavailable, match="window"):
        bench.build_impl(f"{framework}_window", bench.BenchConfig(d=16))


def test_decode_sweep_records_a_labelled_cpu_dry_run():
    """The L_q = 1 benchmark of chapter 13: on a CPU the Triton rows are skipped (the
    interpreter would be timed), the others are timed, checked against float64 and
    labelled with the device."""
    pytest.importorskip("torch")
    doc = bench.decode_sweep(contexts=(33, 100), batches=(2,), heads=4, kv_heads=2, d=16,
                             dtype="float32", device="cpu", repeat=2, warmup=1)
    assert doc["schema"] == bench.SCHEMA and doc["sweep"] == "decode"
    assert doc["device"]["kind"] == "cpu" and doc["device"]["name"]
    assert set(doc["skipped"]) == {"triton_split_kv", "triton_one_split"}
    assert "interpreter" in doc["skipped"]["triton_split_kv"]
    rows = doc["results"]
    assert {(r["impl"], r["context"]) for r in rows} == {(i, c) for i in ("torch_sdpa", "torch_split_kv")
                                                         for c in (33, 100)}
    for r in rows:
        assert "error" not in r and r["median_ms"] > 0 and r["max_abs_err"] < 1e-5
        assert r["kv_bytes"] == 2 * 2 * 2 * r["context"] * 16 * 4
        assert r["gb_per_s"] == pytest.approx(r["kv_bytes"] / (r["median_ms"] * 1e-3) / 1e9)
    assert bench.recorded_decode_results("cuda") == [d for d in bench.recorded_decode_results()
                                                     if d["device"]["kind"] == "cuda"]


def test_recorded_decode_results_follow_the_data_folder(tmp_path, monkeypatch):
    """ATTN_EDU_BENCH_DATA (or data_dir) points chapter 13 at another folder's decode/, as a
    GPU run's --out folder holds it; an empty folder has none, a stray file is skipped."""
    import shutil

    own = bench.recorded_decode_results()
    assert [d["device"]["name"] for d in own] == ["NVIDIA H100 80GB HBM3"]
    out = tmp_path / "run"
    (out / "decode").mkdir(parents=True)
    monkeypatch.setenv("ATTN_EDU_BENCH_DATA", str(out))
    assert bench.recorded_decode_results() == []            # not the package's own H100 run
    src = Path(own[0]["source"])
    doc = {**json.loads(src.read_text()), "device": {"kind": "cuda", "name": "Tesla T4"}}
    (out / "decode" / "decode_Tesla_T4.json").write_text(json.dumps(doc))
    (out / "decode" / "notes.json").write_text("{}")
    with pytest.warns(UserWarning, match="skipped notes.json"):
        got, cpu = bench.recorded_decode_results("cuda"), bench.recorded_decode_results("cpu")
    assert [d["device"]["name"] for d in got] == ["Tesla T4"] and cpu == []
    other = tmp_path / "other"
    shutil.copytree(src.parent, other / "decode")
    assert [d["source"] for d in bench.recorded_decode_results(data_dir=other)] == [
        str(other / "decode" / src.name)]                   # data_dir wins over the variable


# ------------------------------------------------ the GPU's dtype and SDPA backend (issue: a T4)
@pytest.mark.parametrize("capability, expected", [((7, 5), "float16"), ((8, 0), "bfloat16"),
                                                  ((8, 6), "bfloat16"), ((9, 0), "bfloat16")])
def test_gpu_half_dtype_follows_the_compute_capability(monkeypatch, capability, expected):
    torch = pytest.importorskip("torch")
    seen = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: seen.append(a) or capability)
    assert bench.gpu_half_dtype() == expected == bench.gpu_half_dtype(torch.device("cuda", 1))
    assert seen[-1] == (torch.device("cuda", 1),)  # the capability of the device asked about
    assert bench.default_dtype() == expected  # the block-sparse benchmark's, the same rule
    assert bench.gpu_half_dtype("cpu") == "float16"  # the interpreter takes no bfloat16
    with pytest.raises(ValueError, match="device must be"):
        bench.gpu_half_dtype("tpu")


def _fake_gpu(monkeypatch, capability, runs):
    """A GPU of ``capability`` on which the SDPA backends in ``runs`` run; the goals' timing
    replaced by fixed times (the code path, not a measurement)."""
    torch = pytest.importorskip("torch")
    built = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(bench.goals, "cuda_available", lambda: True)
    monkeypatch.setattr(bench.env, "_sdpa_runs", lambda backend, device, dtype, d: backend in runs)

    def build(name, cfg):
        built.append((name, cfg.dtype, cfg.device))
        return None, None

    monkeypatch.setattr(bench.goals, "build_impl", build)
    monkeypatch.setattr(bench.goals, "_ratio_point", lambda fns, cfg, n, repeat: {
        f"{k}_ms": t for k, t in zip(fns, (2.0, 3.0))})
    monkeypatch.setattr(bench.goals, "autotune_config", lambda: {"_attn_fwd": {"BLOCK_M": 64}})
    return built


@pytest.mark.parametrize("capability, runs, dtype, backend", [
    ((7, 5), ("efficient", "math"), "float16", "efficient"),  # a T4: no flash backend, no bf16
    ((9, 0), ("flash", "efficient", "math"), "bfloat16", "flash"),
])
def test_gpu_goals_pick_the_half_type_and_the_best_sdpa_backend(monkeypatch, capability, runs, dtype,
                                                                 backend):
    built = _fake_gpu(monkeypatch, capability, runs)
    (g,) = bench.goal_gpu_triton_vs_sdpa(ns=(256,), ds=(64,), batch=1, heads=1, repeat=1)
    assert g["details"]["dtype"] == dtype and g["details"]["sdpa_backend"] == backend
    (point,) = g["details"]["points"]
    assert point["sdpa_backend"] == backend and point["autotune_config"] == {"_attn_fwd": {"BLOCK_M": 64}}
    assert g["measured"] == 1.5 and json.loads(json.dumps(g)) == g  # recorded as JSON
    assert built == [("triton", dtype, "cuda"), (f"torch_sdpa_{backend}", dtype, "cuda")]
    built.clear()
    (c,) = bench.goal_gpu_causal_speedup(n=256, d=64, batch=1, heads=1, repeat=1)
    assert c["details"]["dtype"] == dtype and {b[1] for b in built} == {dtype}


def test_sdpa_backends_are_probed_best_first(monkeypatch):
    pytest.importorskip("torch")
    assert bench.SDPA_PREFERENCE == ("flash", "efficient", "math")
    # on this CPU: PyTorch's CPU flash kernel and math run, the CUDA-only efficient one does not
    assert bench.sdpa_backends("cpu", "float32") == ["flash", "math"]
    asked = []
    monkeypatch.setattr(bench.env, "_sdpa_runs", lambda b, dev, dt, d: asked.append((b, dt, d)) or b == "math")
    assert bench.best_sdpa_backend("cpu", "float16", 128) == "math"
    assert asked == [(b, "float16", 128) for b in bench.SDPA_PREFERENCE]
    monkeypatch.setattr(bench.env, "_sdpa_runs", lambda *a: False)
    assert bench.best_sdpa_backend("cpu", "float32") is None


def test_sweeps_record_the_sdpa_backend_and_the_timer():
    pytest.importorskip("torch")
    cfg = bench.BenchConfig(d=16)
    doc = bench.run_sweep(["torch_sdpa_math", "numpy_naive"], [32], cfg, repeat=1, progress=False)
    assert doc["sdpa_backend"] == "flash"  # best backend on this device for float32, d = 16
    assert all(r["timer"] == "perf_counter" and r["host_median_ms"] is None for r in doc["results"])
    assert bench.run_sweep(["numpy_naive"], [32], cfg, repeat=1, progress=False)["sdpa_backend"] is None


class _Config:  # what triton.Config carries
    def __init__(self, **kwargs):
        self.kwargs, self.num_warps, self.num_stages = kwargs, 4, 3


def test_autotune_config_reads_the_kernels_choice_either_way():
    import types

    tuned = types.SimpleNamespace(configs=[1, 2], best_config=_Config(BLOCK_M=128, BLOCK_N=64))
    untuned = types.SimpleNamespace(configs=[1, 2], best_config=None)
    module = types.SimpleNamespace(_attn_fwd=tuned, _attn_bwd=untuned, other=3)
    want = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    assert bench.autotune_config(module) == {"_attn_fwd": want}  # read off Triton's autotuners
    module.chosen_config = lambda: _Config(BLOCK_M=32, BLOCK_N=32)  # the kernel module says it
    assert bench.autotune_config(module) == {"forward": {**want, "BLOCK_M": 32, "BLOCK_N": 32}}
    module.chosen_config = lambda: {"forward": (64, 64, 4, 2), "backward": {"BLOCK_M": 32}}
    assert bench.autotune_config(module) == {"forward": [64, 64, 4, 2], "backward": {"BLOCK_M": 32}}
    module.chosen_config = lambda kernel: None  # a signature it does not know: the autotuners
    assert bench.autotune_config(module) == {"_attn_fwd": want}
    assert bench.autotune_config(types.SimpleNamespace()) is None
    if not bench.cuda_available():  # the interpreter tunes nothing
        assert bench.autotune_config() is None


@pytest.mark.parametrize("capability, dtype", [((7, 5), "float16"), ((8, 0), "bfloat16")])
def test_cli_sweeps_on_a_gpu_default_to_its_half_type(monkeypatch, capability, dtype):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(bench.cli, "cuda_available", lambda: True)
    seen = []
    monkeypatch.setattr(bench.cli, "run_sweep", lambda impls, ns, config, **kw: seen.append(config) or {
        "results": [], "skipped": {}, "device": {"name": "stand-in", "kind": "cuda"}, "date": "-"})
    assert bench.cli.main(["--device", "cuda", "--impl", "triton", "--n", "64", "--no-progress"]) == 1
    assert seen[0].dtype == dtype and seen[0].device == "cuda"
    bench.cli.main(["--device", "cuda", "--dtype", "float32", "--impl", "triton", "--n", "64"])
    assert seen[1].dtype == "float32"  # an explicit --dtype wins
    bench.cli.main(["--impl", "numpy_naive", "--n", "64"])
    assert seen[2].dtype == "float32"  # the CPU's default


def test_correctness_needs_a_gpu_or_a_dry_run():
    proc = _cli("--correctness")
    if not bench.cuda_available():
        assert proc.returncode == 2 and "--correctness checks the kernels on a CUDA GPU" in proc.stderr


def test_a_sweep_stopped_by_sigterm_writes_the_points_it_measured(tmp_path, monkeypatch):
    """gpu-bench.sh's deadline stops a step with `timeout` (SIGTERM): the sweep keeps what it
    measured, says where it stopped, and the command exits 1."""
    import signal

    from attn_edu.bench import cli, sweep

    real, calls = sweep.run_one, []

    def run_one(name, n, *args, **kwargs):
        calls.append(n)
        if len(calls) == 3:  # the third point: the deadline arrives
            os.kill(os.getpid(), signal.SIGTERM)
        return real(name, n, *args, **kwargs)

    monkeypatch.setattr(sweep, "run_one", run_one)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "stopped.json"
    try:
        code = cli.main(["--impl", "numpy_naive", "--n", "16", "32", "48", "64", "--repeat", "1",
                         "--warmup", "0", "--no-progress", "--out", str(out)])
    finally:
        signal.signal(signal.SIGTERM, before)
    (doc,) = bench.load_results(out)
    assert code == 1 and calls == [16, 32, 48]
    assert [r["n"] for r in doc["results"]] == [16, 32]
    assert doc["stopped"] == "interrupted after 2 of 4 points"
