"""The GPU measurement pipeline, run on the CPU: ``bash scripts/gpu-bench.sh --dry-run DIR``
(once per test run: tests/conftest.py's ``gpu_dry_run``, which tests/test_bench_measure.py reads too).

Every step runs (Triton's interpreter, tiny shapes), writes its JSON document with the
schema and a kind, never aborts on a missed goal or a failed point, and the loaders and
figure builders the chapters use read the output. Plus the loaders' behaviour on files
that are not benchmark documents, and the timing helpers.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from attn_edu import bench, profiling

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # the dry run (conftest's gpu_dry_run) runs every step of gpu-bench.sh (about 90 s)
def test_dry_run_runs_every_step_in_order_and_records_each(gpu_dry_run):
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_run

    out, res = gpu_dry_run
    said = res.stdout[-4000:] + res.stderr[-4000:]
    (run,) = [json.loads(p.read_text()) for p in (out / "run").glob("run_*.json")]
    gpu_run.validate(run)
    assert [s["step"] for s in run["steps"]] == [n for n, _ in gpu_run.STEP_NAMES], said
    assert run["dry_run"] is True and run["device"]["kind"] == "cpu"
    # one summary line per step, as it ends and again at the end
    summary = res.stdout.split("==> summary")[1].splitlines()[1:]
    assert [re.match(r"\[\s*\d+/\d+\] (\S+)", line).group(1) for line in summary if line.startswith("[")] == \
        [s["step"] for s in run["steps"]]
    for s in run["steps"]:
        assert sum(s["summary"] in line for line in res.stdout.splitlines()) == 2, s
    status = {s["step"]: s["status"] for s in run["steps"]}
    # what fails in a dry run, by design: the goals (n = 256 on a CPU) and a CUDA-only backend
    assert {k for k, v in status.items() if v != "ok"} == \
        {"sweep", "goals"}, status
    assert res.returncode == 1 and "Traceback" not in said
    assert not list((out / "run" / "logs").glob("*.error.log"))   # no step raised in the driver


@pytest.mark.slow  # the dry run (conftest's gpu_dry_run) runs every step of gpu-bench.sh (about 90 s)
def test_dry_run_executes_a_chapter_in_colabs_stack_and_under_the_t4_profile(gpu_dry_run):
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_run
    import nbformat
    import zipfile

    out, res = gpu_dry_run
    for name, profile in (("chapters", None), ("chapters_t4", "t4")):
        doc = json.loads((out / "run" / f"{name}_dry-run-cpu.json").read_text())
        gpu_run.validate(doc)
        assert doc["dry_run"] is True and doc["profile"] == profile
        (rec,) = doc["chapters"]
        cells = gpu_run.DRY_CELLS[profile]
        assert rec["chapter"] == gpu_run.DRY_CHAPTER and rec["status"] == "ok", rec
        assert rec["cells_run"] == cells == doc["max_cells"] and rec["gpu_memory_note"] == "no CUDA GPU"
        assert rec["kernel"]["gpu_profile"] == profile            # the profile reached the kernel
        if doc["where"] == "colab stand-in":                       # Colab's pins, google.colab stood in
            assert doc["stack"]["colab"] is True and rec["kernel"]["google_colab"], doc["stack"]
            assert rec["kernel"]["versions"]["ipykernel"] == "6.17.1"
        art = doc["artifact"]
        assert art["bytes"] <= art["cap_bytes"] == gpu_run.ARTIFACT_CAP_BYTES
        with zipfile.ZipFile(out / "run" / art["path"]) as z:
            nb = nbformat.reads(z.read(f"{gpu_run.DRY_CHAPTER}.ipynb").decode(), as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count for c in code[:cells]) and not any(c.execution_count for c in code[cells:])
        assert "device: cpu" in "".join(o.get("text", "") for o in code[0].outputs)
    t4 = json.loads((out / "run" / "chapters_t4_dry-run-cpu.json").read_text())["t4_estimates"]
    if t4["exit_code"] == 0:   # printed by the dry run, a line per chapter GPU branch
        assert t4["lines"] and all(line in res.stdout for line in t4["lines"])
    tests = json.loads((out / "run" / "gpu_tests_dry-run-cpu.json").read_text())
    gpu_run.validate(tests)
    assert tests["failed"] == tests["errors"] == 0 and tests["skipped"] >= 1   # CUDA tests skip on a CPU
    assert "triton or cuda" in tests["argv"]


@pytest.mark.slow  # the dry run (conftest's gpu_dry_run) runs every step of gpu-bench.sh (about 90 s)
def test_dry_run_legacy_sweeps_record_their_failures(gpu_dry_run):
    out, res = gpu_dry_run
    assert "kernels against float64, float16" in (out / "run" / "logs" / "correctness.log").read_text()
    assert "FAIL" not in (out / "run" / "logs" / "correctness.log").read_text()
    names = sorted(p.name for p in out.glob("*.json"))
    # the sweeps the chapters plot, one document per measurement (--measure NAME) and the
    # correctness check's document (a submission's proof, attn_edu.bench.validate)
    assert names == sorted(["block_sparse_dry-run-cpu.json", "goals_dry-run-cpu.json",
                            "gpu_dry-run-cpu_d16.json", "gpu_dry-run-cpu_d16_causal.json",
                            "gpu_dry-run-cpu_d32.json", "correctness_dry-run-cpu.json", "ring_overlap_dry-run-cpu.json",
                            *(f"{m}_dry-run-cpu.json" for m in bench.MEASURES)])
    (check,) = bench.load_results(out, kind="correctness")
    assert check["passed"] is True and len(check["results"]) == 7 and check["config"]["dtype"] == "float16"
    for doc in bench.load_results(out):
        assert doc["schema"] == bench.SCHEMA and doc["kind"] in bench.KINDS
        assert doc["dry_run"] is True and doc["device"]["kind"] == "cpu"
    (decode,) = bench.load_results(out / "decode")
    assert decode["kind"] == "decode" and decode["dry_run"] is True and all("median_ms" in r for r in decode["results"])
    goals = bench.load_results(out, kind="goals")[0]["goals"]
    missed = [g for g in goals if g["passed"] is False]
    assert missed and all(g["measured"] is not None for g in missed)  # recorded, with the value
    gpu_goals = [g for g in goals if g["goal"] in ("triton_over_sdpa_flash_tflops",
                                                   "causal_over_noncausal_time")]
    assert len(gpu_goals) == 2 and all("DRY RUN" in g["note"] for g in gpu_goals)
    sweep = bench.load_results(out / "gpu_dry-run-cpu_d16.json")[0]
    failed = [r for r in sweep["results"] if "error" in r]
    assert {r["impl"] for r in failed} == {"torch_sdpa_efficient"}  # CUDA-only backend
    assert all(r["reason"] == "error" for r in failed)
    timed = {r["impl"] for r in sweep["results"] if "median_ms" in r}
    assert {"triton", "torch_sdpa_flash", "torch_naive", "torch_flash"} <= timed
    # the fields a GPU run fills: SDPA's best backend, the timer, the autotuner's choice
    # (none under the interpreter), the host time (GPU only)
    assert sweep["sdpa_backend"] == "flash" and sweep["config"]["dtype"] == "float32"
    assert all(r["timer"] == "perf_counter" and r["host_median_ms"] is None
               for r in sweep["results"] if "median_ms" in r)
    assert all(r["autotune_config"] is None for r in sweep["results"] if r["impl"] == "triton")
    (ratio,) = [g for g in gpu_goals if g["goal"] == "triton_over_sdpa_flash_tflops"]
    assert ratio["details"]["sdpa_backend"] == "flash" and ratio["details"]["dtype"] == "float32"
    assert all("autotune_config" in p for p in ratio["details"]["points"])


@pytest.mark.slow  # the dry run (conftest's gpu_dry_run) runs every step of gpu-bench.sh (about 90 s)
def test_chapter_loaders_and_figures_read_the_dry_run(gpu_dry_run, monkeypatch):
    out, _ = gpu_dry_run
    assert bench.recorded_results("cuda", data_dir=out) == []  # never a GPU number
    sweeps = bench.recorded_results("cpu", data_dir=out)
    assert len(sweeps) == 3 and all(d["kind"] == "sweep" for d in sweeps)   # d = 16, 16 causal, 32
    monkeypatch.setenv("ATTN_EDU_BENCH_DATA", str(out))  # how a chapter is pointed at it
    (sparse,) = bench.recorded_results(what="block_sparse")
    for doc in sweeps:
        fig = bench.recorded_sweep_figure(doc)
        impls = {r["impl"] for r in doc["results"] if "median_ms" in r}
        assert "DRY RUN" in fig.layout.title.text and {t.name for t in fig.data} == impls
    fig = bench.block_sparse_figure(sparse)
    assert "DRY RUN" in fig.layout.title.text
    assert any("ideal" in t.name for t in fig.data) and any("Triton" in t.name for t in fig.data)


def test_unknown_files_are_skipped_with_a_warning_or_named_in_the_error(tmp_path):
    (tmp_path / "old_block_sparse.json").write_text(json.dumps({"meta": {}, "rows": []}))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "future.json").write_text(json.dumps({"schema": bench.SCHEMA, "kind": "flux"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert bench.recorded_results(data_dir=tmp_path) == []
    text = " ".join(str(w.message) for w in caught)
    assert all(name in text for name in ("old_block_sparse.json", "broken.json", "future.json"))
    for name, words in (("old_block_sparse.json", "schema"), ("broken.json", "JSON"),
                        ("future.json", "unknown kind")):
        with pytest.raises(ValueError, match=words) as err:
            bench.load_results(tmp_path / name)
        assert name in str(err.value)


def test_the_packaged_documents_load_as_sweeps():
    docs = bench.recorded_results()
    assert docs and all(d["kind"] == "sweep" for d in docs)


def test_interleaved_timing_gives_a_median_per_function():
    calls = []
    t = profiling.time_interleaved_ms({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                      repeat=3, warmup=1)
    assert calls == ["a", "b"] * 4  # one warm-up round, then a, b, a, b, ...
    assert set(t) == {"a", "b"} and all(x.repeat == 3 and x.min_ms <= x.median_ms for x in t.values())
    with pytest.raises(TypeError):
        profiling.time_interleaved_ms({})


def test_out_of_memory_is_a_reason_of_its_own():
    assert bench.failure_reason(RuntimeError("CUDA out of memory. Tried to allocate 8.00 GiB")) \
        == "out_of_memory"
    assert bench.failure_reason(MemoryError()) == "out_of_memory"
    assert bench.failure_reason(RuntimeError("No viable backend")) == "error"


@pytest.mark.notebooks
@pytest.mark.slow  # reads (or makes) the chapter's run in the Colab stand-in
def test_chapter_10_without_triton_explains_and_skips_the_kernel_cells():
    """A reader without triton (Colab's CPU runtime, macOS, Windows) gets the chapter with the
    kernel's cells explained and skipped: read from the suite's one stand-in run of it."""
    import standin

    run = standin.executed("10_flash_gpu")
    text = standin.text(run)
    assert not standin.errors(run)
    assert "triton is not installed here" in text and text.count("Skipped: this cell runs") >= 4


@pytest.mark.slow  # the dry run (conftest's gpu_dry_run) runs every step of gpu-bench.sh (about 90 s)
def test_chapter_10_draws_a_dry_run_folder_as_cpu_data(gpu_dry_run, monkeypatch):
    """The cells that draw recorded sweeps, pointed at a dry run's folder (no GPU documents
    there): they say so and draw the CPU ones, labelled. Only the cells they need run."""
    import chapter_cells

    out, _ = gpu_dry_run
    monkeypatch.setenv("ATTN_EDU_BENCH_DATA", str(out))
    ids = chapter_cells.ids_until("10", 'gpu_docs = bench.recorded_results("cuda")')
    setup = [i for i, src in chapter_cells.code_cells("10")[:3]]   # first cell, triton switch, imports
    ns, printed = chapter_cells.run("10", setup + ids[-1:])
    assert "No GPU measurements are recorded yet" in printed
    assert ns["docs"] and all(d["device"]["kind"] == "cpu" and d["dry_run"] for d in ns["docs"])


@pytest.mark.slow  # the dry run (conftest's gpu_dry_run) runs every step of gpu-bench.sh (about 90 s)
def test_chapter_11_draws_recorded_block_sparse_runs(gpu_dry_run, monkeypatch):
    import chapter_cells

    out, _ = gpu_dry_run
    monkeypatch.setenv("ATTN_EDU_BENCH_DATA", str(out))
    ids = chapter_cells.ids_until("11", 'bench.recorded_results(what="block_sparse")')
    setup = [i for i, src in chapter_cells.code_cells("11")[:2]]   # first cell, imports
    ns, printed = chapter_cells.run("11", setup + ids[-1:])
    assert "DRY RUN on the CPU, not GPU numbers" in printed
    assert [d["dry_run"] for d in ns["recorded_sparse"]] == [True]


def test_published_numbers_are_cited_and_the_roofline_is_a_model():
    pytest.importorskip("plotly")
    for p in bench.PUBLISHED:
        assert p["cite"] in (ROOT / "book" / "references.bib").read_text() and p["quote"]
        assert p["tflops"] < bench.GPU_SPECS[p["gpu"]]["tflops"]  # below the peak
    # naive attention is memory-bound (I ~ d / 2 FLOP/B in 16-bit), a tiled kernel is not
    h100 = bench.GPU_SPECS["H100 SXM"]
    naive = bench.roofline_tflops(16384, 64, "H100 SXM", tiled=False)
    assert naive == pytest.approx(h100["tb_per_s"] * 64 / 2, rel=0.02)
    assert bench.roofline_tflops(16384, 64, "H100 SXM") == h100["tflops"]
    assert bench.roofline_tflops(128, 64, "H100 SXM") == pytest.approx(128 / 2 * h100["tb_per_s"])
    fig = bench.landscape_figure()
    sweeps = bench.PUBLISHED_SWEEPS
    lines = sum(len(s["tflops"]) for s in sweeps)
    assert sum("published" in (t.name or "") for t in fig.data) == len(bench.PUBLISHED) + lines
    bib = (ROOT / "book" / "references.bib").read_text()
    for s in sweeps:
        assert "@misc{" + s["cite"] + "," in bib and s["quote"] and s["gpu"]
        for impl, values in s["tflops"].items():
            assert len(values) == len(s["n"]) and all(0 < v < bench.GPU_SPECS[s["roofline_gpu"]]["tflops"]
                                                      for v in values), impl
    # one run, one machine: the tutorial-style Triton kernel at ~3/4 of FlashAttention-3
    ratios = bench.sweep_ratios(sweeps[0], "Triton tutorial", "FlashAttention-3")
    assert len(ratios) == 6 and all(0.75 < r < 0.78 for r in ratios)
    assert bench.sweep_ratios(sweeps[1], "cuDNN", "FlashAttention-3")[0] == pytest.approx(1.25, abs=0.01)
    assert [s["pass"] for s in sweeps] == ["forward", "forward", "backward"]
    assert sum(" backward, published" in (t.name or "") for t in fig.data) == len(sweeps[2]["tflops"])
    with pytest.raises(ValueError, match="has no 'FlashAttention-2'"):
        bench.sweep_ratios(sweeps[0], "FlashAttention-2", "FlashAttention-3")


@pytest.mark.slow  # the dry run (conftest's gpu_dry_run) runs every step of gpu-bench.sh (about 90 s)
def test_landscape_refuses_cpu_documents(gpu_dry_run):
    out, _ = gpu_dry_run
    with pytest.raises(ValueError, match="GPU measurements only"):
        bench.landscape_figure(bench.recorded_results("cpu", data_dir=out))


def test_memory_model_matches_the_tensors_allocated():
    pytest.importorskip("plotly")
    # naive: S and P (n x n each) + output; tiled: output + float32 lse
    assert profiling.attention_peak_bytes(1000, 64, 2, 4, 16) == 2 * 4 * 16 * (2 * 1000**2 + 1000 * 64)
    assert profiling.attention_peak_bytes(1000, 64, 2, 4, 16, tiled=True) == 4 * 16 * 1000 * (2 * 64 + 4)
    fig = bench.memory_model_figure()
    assert len(fig.data) == 2 + len(bench.GPU_SPECS)   # one line per GPU
    # the GPUs' lines at what nvidia-smi reports (book/notation.md), not the label's GB as 1e9 B:
    # an "80 GB" H100 holds 81,559 MiB = 79.6 GiB, not 80e9 B = 74.5 GiB
    lines = {t.name.split(' "')[0]: t.y[0] for t in fig.data[2:]}
    assert lines["H100 SXM"] == 81_559 / 1024 and round(lines["H100 SXM"], 1) == 79.6
    assert lines["T4"] == 15.0 and lines["A100 SXM"] == 80.0


class _StandInCuda:
    """torch.cuda's timing parts on the CPU: Events read the CPU clock, ``synchronize`` and
    the L2 flush buffer's ``zero_`` write to ``log``."""

    def __init__(self, monkeypatch, torch):
        import time

        self.log = []
        log = self.log

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.t = None

            def record(self):
                self.t = time.perf_counter()

            def elapsed_time(self, end):
                assert "sync" in log, "events read before torch.cuda.synchronize()"
                return (end.t - self.t) * 1e3

        class Flush:
            def zero_(self):
                log.append("flush")

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append("sync"))
        monkeypatch.setattr(profiling, "_l2_flush_buffer", Flush)


def test_cuda_event_timing_path_with_a_cpu_stand_in(monkeypatch):
    # the GPU branch of the timer (an L2 flush before each call, events recorded around it,
    # read after one final synchronisation), run with stand-ins that read the CPU clock
    import time

    torch = pytest.importorskip("torch")
    cuda = _StandInCuda(monkeypatch, torch)
    log = cuda.log

    def slow():
        log.append("s")
        time.sleep(0.004)  # the host is busy in the call: host time ~ 4 ms

    t = profiling.time_interleaved_ms({"slow": slow, "fast": lambda: log.append("f")},
                                      repeat=3, warmup=1, device="cuda")
    # warm-up round, sync, then every timed call after its own flush, then one sync
    assert log == ["s", "f", "sync"] + ["flush", "s", "flush", "f"] * 3 + ["sync"]
    assert t["slow"].min_ms >= 3.5 > t["fast"].median_ms
    assert t["slow"].method == "cuda_events_l2_flushed" and len(t["slow"].host_times_ms) == 3
    assert t["slow"].host_ms >= 3.5 > t["fast"].host_ms  # the host's time, beside the GPU's
    assert t["slow"].as_dict()["host_median_ms"] == t["slow"].host_ms
    log.clear()
    u = profiling.time_ms(lambda: log.append("x"), repeat=2, warmup=0, device="cuda", l2_flush=False)
    assert log == ["sync", "x", "x", "sync"] and u.repeat == 2 and u.method == "cuda_events"
    cpu = profiling.time_ms(lambda: None, repeat=2)
    assert cpu.method == "perf_counter" and cpu.host_ms is None


def test_sweep_rows_and_decode_record_gpu_and_host_times(monkeypatch):
    # what lands in the JSON on a GPU, with the stand-in timer: the method and the host time
    torch = pytest.importorskip("torch")
    cuda = _StandInCuda(monkeypatch, torch)
    monkeypatch.setattr(bench.sweep, "environment", lambda device: {"device": {"kind": device, "name": "stand-in"}})
    bench.register_impl("test_cuda_copy", "numpy", lambda cfg: (lambda q, k, v: v.copy()), "a copy")
    try:
        cfg = bench.BenchConfig(d=4, device="cuda")
        row = bench.run_one("test_cuda_copy", 16, cfg, repeat=2, warmup=1)
        doc = bench.run_sweep(["test_cuda_copy"], [8, 16], cfg, repeat=2, progress=False, interleave=True)
    finally:
        del bench.REGISTRY["test_cuda_copy"]
    assert cuda.log.count("flush") == 2 + 4  # one per timed call
    for r in [row] + doc["results"]:
        assert r["timer"] == "cuda_events_l2_flushed" and r["host_median_ms"] > 0
        assert json.loads(json.dumps(r))["host_median_ms"] == r["host_median_ms"]


def _gpu_bench_check(tmp_path):
    # the interpreter is the active virtual environment's, not a `python` found on PATH
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # stands for the venv's python
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "TRITON_INTERPRET")}
    env.update(VIRTUAL_ENV=str(venv), PATH="/usr/bin:/bin", PYTHONPATH=str(ROOT))
    return subprocess.run(["bash", "scripts/gpu-bench.sh", "--check"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # runs gpu-bench.sh --check: several interpreters importing torch
@pytest.mark.skipif(bench.cuda_available(), reason="on a GPU --check goes on to the GPU tests")
def test_check_says_there_is_no_gpu_and_fails(tmp_path):
    pytest.importorskip("torch")
    res = _gpu_bench_check(tmp_path)
    out = res.stdout
    assert res.returncode == 1, out + res.stderr
    assert f"python: {tmp_path / 'venv' / 'bin' / 'python'}" in out
    assert "ok    torch" in out  # found through that interpreter
    assert "C compiler" in out and "Python.h" in out and "nvidia-smi" in out
    assert "no CUDA GPU: torch.cuda.is_available() is False" in out
    assert "==> GPU tests" not in out.split("no CUDA GPU")[1]  # the GPU tests were not run


@pytest.mark.slow  # a second pytest collects three test modules (imports torch and triton)
def test_gpu_markers_select_the_kernel_and_cuda_only_tests():
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "triton or cuda",
                          "tests/test_reference_torch.py", "tests/test_triton_decode.py",
                          "tests/test_profiling.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    ids = [line for line in res.stdout.splitlines() if "::" in line]
    files = {i.split("::")[0] for i in ids}
    if pytest.importorskip("triton"):
        assert "tests/test_triton_decode.py" in files
    assert "tests/test_profiling.py" not in files
    assert {i.split("::")[1].split("[")[0] for i in ids if "test_reference_torch" in i} == {
        "test_cuda_matches_reference", "test_cuda_device_mismatch_and_sdpa_agreement"}


def test_cuda_graph_timing_captures_once_and_replays_with_a_stand_in(monkeypatch):
    # time_cuda_graph_ms: eager warm-up on a side stream, one capture, then replays each
    # after an L2 flush, timed by events; the stand-ins log what would reach the GPU
    import contextlib

    torch = pytest.importorskip("torch")
    cuda = _StandInCuda(monkeypatch, torch)
    log, capturing = cuda.log, []

    class Stream:
        def wait_stream(self, other):
            pass

    class Graph:
        def replay(self):
            log.append("replay")

    @contextlib.contextmanager
    def graph(g):
        capturing.append(True)
        yield
        capturing.pop()

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    t = profiling.time_cuda_graph_ms(lambda x: log.append("capture" if capturing else f"eager {x}"), 7,
                                     repeat=3, warmup=2)
    assert log == ["eager 7", "eager 7", "capture", "replay", "sync"] + ["flush", "replay"] * 3 + ["sync"]
    assert t.method == "cuda_graph" and t.repeat == 3 and t.warmup == 2 and t.host_ms is not None
    # steps: each timed run replays that many back to back, no flush between them, per replay
    log.clear()
    loop = profiling.time_cuda_graph_ms(lambda: log.append("capture" if capturing else "eager"),
                                        repeat=2, warmup=1, steps=3, l2_flush=False)
    assert log == ["eager", "capture"] + ["replay"] * 3 + ["sync"] + ["replay"] * 6 + ["sync"]
    assert loop.method == "cuda_graph_loop" and loop.repeat == 2
    # one capture timed two ways (decode's step and loop): capture_cuda_graph, then graph=
    log.clear()
    g = profiling.capture_cuda_graph(lambda: log.append("capture" if capturing else "eager"), warmup=1)
    profiling.time_cuda_graph_ms(lambda: log.append("called"), graph=g, repeat=1)
    profiling.time_cuda_graph_ms(lambda: log.append("called"), graph=g, repeat=1, steps=2, l2_flush=False)
    assert log == ["eager", "capture"] + ["replay", "sync", "flush", "replay", "sync"] + ["replay"] * 2 + ["sync"] \
        + ["replay"] * 2 + ["sync"]   # the given graph replayed: fn neither called nor captured again
    with pytest.raises(TypeError, match="graph must be a torch.cuda.CUDAGraph"):
        profiling.time_cuda_graph_ms(lambda: None, graph=object())
    # decode's timing captures each step once for both of its graph columns
    captures = []
    real_capture = profiling.capture_cuda_graph
    monkeypatch.setattr(profiling, "capture_cuda_graph", lambda *a, **k: captures.append(1) or real_capture(*a, **k))
    log.clear()
    one, per_step, note = bench.decode._graph_ms(lambda q: log.append("capture" if capturing else "eager"), (1,),
                                                 "cuda", 3)
    assert captures == [1] and log.count("capture") == 1 and note is None
    assert one is not None and per_step is not None
    assert bench.decode._graph_ms(lambda q: None, (1,), "cpu", 3) == (None, None, "CUDA graphs need a CUDA GPU")
    monkeypatch.setattr(profiling, "time_interleaved_ms", lambda fns, **kw: {
        "graph": profiling.Timing([9.0], 1, "cuda_events", [3.0])})  # a loop of 3 replays: 9 ms
    per = profiling.time_cuda_graph_ms(lambda: None, steps=3)
    assert (per.median_ms, per.host_ms) == (3.0, 1.0)  # per replay, the GPU's and the host's
    with pytest.raises(ValueError, match="repeat"):
        profiling.time_cuda_graph_ms(lambda: None, repeat=0)


def test_contributing_compile_counts_follow_the_autotune_configs():
    # CONTRIBUTING.md's table of compiles per GPU follows the autotuners' search spaces (the
    # backward's configurations per kernel beside the forward's):
    # five forward specializations (d = 64 non-causal and causal, d = 128, and the
    # correctness step's ragged length, causal and not), four of them at d = 64
    pytest.importorskip("torch")
    import re

    from attn_edu.kernels import flash_triton as ft
    from attn_edu.kernels._targets import TARGETS

    guide = (ROOT / "CONTRIBUTING.md").read_text()
    assert "**Measured on an NVIDIA H100 80GB HBM3 (2026-11-26" in guide   # the run it reports
    for example, arch in (("T4", "sm_75"), ("A100", "sm_80"), ("H100", "sm_90a")):
        row = re.search(rf"^\| {example} \({arch}, \w+\) \| (\d+) / (\d+) \| (\d+) / (\d+) \| (\d+) \|",
                        guide, re.M)
        assert row, f"CONTRIBUTING.md has no compile-count row for the {example}"
        t = TARGETS[arch]
        cc = divmod(t.capability, 10)
        n64, n128 = (len(ft.forward_configs(cc, d, t.shared_memory, 2)) for d in (64, 128))
        b64, b128 = (len(ft.backward_configs(cc, d)) for d in (64, 128))   # the backward's, per kernel
        assert [int(x) for x in row.groups()] == [n64, n128, b64, b128, 4 * n64 + n128], example


@pytest.mark.skipif(bench.cuda_available(), reason="the dry run is the CPU's (the interpreter)")
def test_correctness_step_runs_in_the_half_type_and_records_a_wrong_kernel(monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from attn_edu.kernels import flash_triton as ft

    seen = []
    real = ft.triton_attention_forward

    def off_by_a_bit(q, k, v, causal=False):  # a forward that is wrong by 1e-2 where causal
        seen.append(q.dtype)
        out, lse = real(q, k, v, causal=causal)
        return (out + 1e-2 if causal else out), lse

    monkeypatch.setattr(ft, "triton_attention_forward", off_by_a_bit)
    records, code = bench.gpu_correctness(dry_run=True, stream=open(os.devnull, "w"))
    assert code == 1 and seen == [torch.float16] * 3  # the half type, never float32
    assert [r["passed"] for r in records] == [True, False, False, True, True, True, True]
    assert "exceeds the tolerance" in records[1]["error"] and records[0]["dtype"] == "float16"
    assert all(r["max_error"] < 1e-2 for r in records if r["passed"])


def _synthetic_machine(monkeypatch, gpu_run, names):
    """scripts/gpu_run.py on a stand-in machine (a dry run's header) with steps ``names``."""
    header = {"device": {"kind": "cpu", "name": "test"}, "versions": {"python": "3", "attn_edu": "0"},
              "git_commit": "abc", "git_dirty": False}
    monkeypatch.setattr(gpu_run.Run, "_machine", lambda self: {"header": header, "label": "dry-run-cpu",
                                                               "half": "float32", "sdpa": []})
    monkeypatch.setattr(gpu_run, "STEP_NAMES", [(n, n) for n in names])


def test_a_step_that_raises_or_writes_a_gpu_document_in_a_dry_run_fails_and_the_next_runs(tmp_path, monkeypatch):
    """A failed step is recorded with its reason and the run goes on (exit code 1): a step
    whose function raises (its traceback kept in logs/NAME.error.log), and one that writes a
    document marked as a GPU run's (``"dry_run": false``) in a dry run, CPU numbers that would
    pass for GPU ones."""
    pytest.importorskip("jsonschema")  # the run document is validated against the schema
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_run

    _synthetic_machine(monkeypatch, gpu_run, ["first", "raises", "gpu-flag", "last"])
    claim = tmp_path / "claim.json"
    write = f"import json; open({str(claim)!r}, 'w').write(json.dumps({{'schema': 'attn_edu.bench/1', 'dry_run': False}}))"

    def raises():
        raise RuntimeError("planted")

    def steps(run):
        quick = lambda name: (lambda: run.command(name, [sys.executable, "-c", f"print('{name} done')"]))  # noqa: E731
        return [gpu_run.Step("first", "", quick("first")), gpu_run.Step("raises", "", raises),
                gpu_run.Step("gpu-flag", "", lambda: run.command("gpu-flag", [sys.executable, "-c", write], [claim])),
                gpu_run.Step("last", "", quick("last"))]

    monkeypatch.setattr(gpu_run, "steps", steps)
    assert gpu_run.main(["--dry-run", "--out", str(tmp_path)]) == 1
    run = json.loads((tmp_path / "run" / "run_dry-run-cpu.json").read_text())
    assert [(s["step"], s["status"]) for s in run["steps"]] == [
        ("first", "ok"), ("raises", "failed"), ("gpu-flag", "failed"), ("last", "ok")]
    assert run["steps"][1]["summary"] == "RuntimeError: planted"
    assert "RuntimeError: planted" in (tmp_path / "run" / "logs" / "raises.error.log").read_text()
    assert "dry_run is False in a dry run" in run["steps"][2]["summary"]


@pytest.mark.slow  # a step runs until the deadline stops it (8 s)
def test_deadline_stops_a_step_skips_the_rest_and_from_continues(tmp_path, monkeypatch, capsys):
    """A lease or a Colab session that ends before the run does still gets the most-needed
    steps: the step running at the deadline is stopped (SIGTERM: it writes what it has), the
    later ones are skipped and named, and a second command --from the first skipped step
    completes the record. Synthetic steps (scripts/gpu_run.py's own machinery) in place of
    the real ones, so the times are the test's."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_run

    monkeypatch.setenv("GPU_BENCH_DEADLINE", "12")
    assert gpu_run.parse(["--dry-run", "--out", "x"]).deadline == 12
    monkeypatch.delenv("GPU_BENCH_DEADLINE")
    assert gpu_run.parse(["--dry-run", "--out", "x"]).deadline == gpu_run.DEFAULT_DEADLINE_S == 540
    _synthetic_machine(monkeypatch, gpu_run, ["first", "slow", "third", "fourth"])
    partial = tmp_path / "slow.json"
    slow = ("import json, signal, sys, time\n"
            "def stop(*a):\n"
            f"    open({str(partial)!r}, 'w').write(json.dumps({{'schema': 'attn_edu.bench/1', 'dry_run': True,"
            " 'stopped': 'SIGTERM'}))\n"
            "    sys.exit(1)\n"
            "signal.signal(signal.SIGTERM, stop)\nprint('started', flush=True)\ntime.sleep(120)\n")

    def steps(run):
        quick = lambda name: (lambda: run.command(name, [sys.executable, "-c", f"print('{name} done')"]))
        return [gpu_run.Step("first", "", quick("first")),
                gpu_run.Step("slow", "", lambda: run.command("slow", [sys.executable, "-c", slow], [partial])),
                gpu_run.Step("third", "", quick("third")), gpu_run.Step("fourth", "", quick("fourth"))]

    monkeypatch.setattr(gpu_run, "steps", steps)
    # no step starts with less than MIN_STEP_S left: 3 s here (10 s in a run), so that a
    # deadline of 8 s leaves "first" and "slow" time to start and the later two none
    monkeypatch.setattr(gpu_run, "MIN_STEP_S", 3)
    start = time.monotonic()
    assert gpu_run.main(["--dry-run", "--out", str(tmp_path), "--deadline", "8"]) == 1
    assert 7 < time.monotonic() - start < 37
    said = capsys.readouterr().out
    run_path = tmp_path / "run" / "run_dry-run-cpu.json"
    run = json.loads(run_path.read_text())
    assert [(s["step"], s["status"]) for s in run["steps"]] == [
        ("first", "ok"), ("slow", "stopped"), ("third", "skipped"), ("fourth", "skipped")]
    assert run["steps"][1]["outputs"] == ["slow.json"]               # written when SIGTERM came
    assert json.loads(partial.read_text())["stopped"] == "SIGTERM"
    assert "continue with  bash scripts/gpu-bench.sh --from third" in said
    assert said.count("third") >= 2 and "out of time" in said
    # the second command: the rest, added to the same record
    assert gpu_run.main(["--dry-run", "--out", str(tmp_path), "--from", "third", "--bundle", str(tmp_path / "b")]) == 0
    import tarfile

    with tarfile.open(tmp_path / "b" / "gpu-run.tgz") as tar:   # a few files for a lease's $OUT
        packed = set(tar.getnames())
    assert {"run/run_dry-run-cpu.json", "run/logs/third.log", "slow.json"} <= packed
    run = json.loads(run_path.read_text())
    gpu_run.validate(run)
    assert [(s["step"], s["status"]) for s in run["steps"]] == [
        ("first", "ok"), ("slow", "stopped"), ("third", "ok"), ("fourth", "ok")]
    assert "third done" in (tmp_path / "run" / "logs" / "third.log").read_text()
    with pytest.raises(SystemExit, match="unknown step 'nope'"):
        gpu_run.main(["--dry-run", "--out", str(tmp_path), "--from", "nope"])
