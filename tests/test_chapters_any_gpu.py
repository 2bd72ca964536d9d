"""Chapters 08, 10 and 11 draw and check any number of recorded documents from any GPU
(issue 44): pointed (ATTN_EDU_BENCH_DATA) at the recorded H100 run plus a fabricated T4-like
run (float16 only, no torch_naive, its long naive points out of memory), and at an empty
folder, the cells that read recorded sweeps run without an error. Only those cells run
(tests/chapter_cells.py), about 20 s in all. Chapter 13 reads its decode sweep from the
package's decode/ folder, which ATTN_EDU_BENCH_DATA does not redirect; its cell picks the
H100 by attn_edu.decoding.match_gpu."""
from __future__ import annotations

import shutil

import pytest

import chapter_cells
from attn_edu.bench.sweep import DATA_DIR

from fake_runs import write_t4_run

pytest.importorskip("plotly")
pytest.importorskip("torch")

CH10 = ["922c0f4f", "134dc918", "d3df4340", "ch10-33b", "1d7c2e27", "ch10-37b"]


@pytest.fixture(params=["h100_and_t4", "none"])
def data_dir(request, tmp_path, monkeypatch):
    out = tmp_path / "bench"
    out.mkdir()
    if request.param == "h100_and_t4":
        for f in DATA_DIR.glob("*.json"):
            shutil.copy(f, out / f.name)
        write_t4_run(out)
    monkeypatch.setenv("ATTN_EDU_BENCH_DATA", str(out))
    return request.param


def _setup(chapter: str, k: int) -> list:
    return [cid for cid, _ in chapter_cells.code_cells(chapter)[:k]]


def test_chapter_10_draws_and_checks_every_gpu(data_dir):
    ns, printed = chapter_cells.run("10", _setup("10", 3) + CH10)
    names = {d["device"]["name"] for d in ns["gpu_docs"]}
    if data_dir == "none":
        assert ns["gpu_docs"] == [] and "No GPU measurements are recorded yet" in printed
        return
    assert names == {"NVIDIA H100 80GB HBM3", "Tesla T4"}
    assert ns["ref"] == "NVIDIA H100 80GB HBM3" and ns["speed"]     # the ratios: one GPU's run
    assert "Tesla T4 (GPU), 2026-12-01, submitted, not reproduced, d = 64: memory exponent" in printed
    assert "torch_naive" not in printed.split("Tesla T4 (GPU), 2026-12-01")[1].split("\n")[0]
    # cell 8's last row is the T4's tile loop (files in name order): its own 320 GB/s, not the H100's
    assert ns["hbm"] == 320e9


def test_chapter_08_lists_every_recorded_sweep(data_dir):
    ids = chapter_cells.ids_until("08", "recorded_gpu = bench.recorded_results")
    plot, src = next((cid, src) for cid, src in chapter_cells.code_cells("08") if "def plot_sweep" in src)
    only_def = src[:src.rindex("\nplot_sweep(cpu_sweep")]      # the CPU sweep itself is not needed
    ns, printed = chapter_cells.run("08", _setup("08", 2) + [plot, ids[-1]], replace={plot: only_def})
    assert (len(ns["recorded_gpu"]) == 6) if data_dir != "none" else ("No GPU sweep has been recorded" in printed)


def test_chapter_11_draws_the_recorded_block_sparse_runs(data_dir):
    ids = chapter_cells.ids_until("11", 'bench.recorded_results(what="block_sparse")')
    ns, printed = chapter_cells.run("11", _setup("11", 2) + ids[-1:])
    assert len(ns["recorded_sparse"]) == (1 if data_dir != "none" else 0)
