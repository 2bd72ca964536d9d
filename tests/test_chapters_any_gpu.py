"""Chapters 08, 10, 11 and 13 draw and check any number of recorded documents from any GPU
(issue 44): pointed (ATTN_EDU_BENCH_DATA) at the recorded H100 run plus a fabricated T4-like
run (float16 only, no torch_naive, its long naive points out of memory; its decode sweep the
H100's scaled to the T4's bandwidth), at the T4-like run alone (chapter 13) and at an empty
folder, the cells that read recorded sweeps run without an error. Only those cells run
(tests/chapter_cells.py), about 20 s in all. Chapter 13 reads the folder's decode/, as a GPU
run writes it (bench.recorded_decode_results); it holds the H100's run to the wave model
of the text and prints the others'."""
from __future__ import annotations

import re
import shutil

import pytest

import chapter_cells
from attn_edu.bench.decode import DECODE_DIR
from attn_edu.bench.sweep import DATA_DIR
from attn_edu.bench.validate import validate_document

from fake_runs import t4_decode_document, write_t4_decode, write_t4_run

pytest.importorskip("plotly")
pytest.importorskip("torch")

CH10 = ["922c0f4f", "134dc918", "d3df4340", "ch10-33b", "1d7c2e27", "ch10-37b"]


def _point_at(folder: str, tmp_path, monkeypatch) -> str:
    """ATTN_EDU_BENCH_DATA at a new folder: the recorded H100 run (its decode/ too) and the
    T4-like one ("h100_and_t4"), the T4-like one alone ("t4_only") or nothing ("none")."""
    out = tmp_path / "bench"
    (out / "decode").mkdir(parents=True)
    if folder == "h100_and_t4":
        for f in [*DATA_DIR.glob("*.json"), *DECODE_DIR.glob("*.json")]:
            shutil.copy(f, out / f.relative_to(DATA_DIR))
    if folder != "none":
        write_t4_run(out)
        write_t4_decode(out)
    monkeypatch.setenv("ATTN_EDU_BENCH_DATA", str(out))
    return folder


@pytest.fixture(params=["h100_and_t4", "none"])
def data_dir(request, tmp_path, monkeypatch):
    return _point_at(request.param, tmp_path, monkeypatch)


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


def test_the_fabricated_t4_decode_sweep_is_a_plausible_submission():
    doc = t4_decode_document()
    assert [str(p) for p in validate_document(doc, "decode_Tesla_T4.json") if p.fatal] == []
    assert max(r["gb_per_s"] for r in doc["results"] if "gb_per_s" in r) < 320   # the T4's 320 GB/s


@pytest.mark.parametrize("folder", ["h100_and_t4", "t4_only", "none"])
def test_chapter_13_sets_every_recorded_decode_run_against_the_model(folder, tmp_path, monkeypatch):
    _point_at(folder, tmp_path, monkeypatch)
    cells = chapter_cells.code_cells("13")
    target = [cid for cid, _ in cells].index("ch13-32")
    ids = [cells[i][0] for i in chapter_cells.needed([src for _, src in cells], [target])]
    ns, printed = chapter_cells.run("13", ids)
    names = [d["device"]["name"] for d in ns["decode_docs"]]
    h100 = "NVIDIA H100 80GB HBM3 (GPU), 2026-11-26, measured by the maintainers, bfloat16:"
    t4 = "Tesla T4 (GPU), 2026-12-01, submitted, not reproduced, float16:"
    if folder == "none":   # the package's own H100 run is not read: the folder has none
        assert names == [] and "No GPU decode run is recorded" in printed and "(GPU)" not in printed
        return
    assert "No GPU decode run is recorded" not in printed
    assert names == (["NVIDIA H100 80GB HBM3", "Tesla T4"] if folder == "h100_and_t4" else ["Tesla T4"])
    assert (h100 in printed) == (folder == "h100_and_t4") and t4 in printed
    t4_part = printed.split(t4)[1]
    # the T4's two batches at its longest cache, each split against one; the H100's wave model
    # (its 132 SMs, its key block) is not applied to it
    assert t4_part.count("65,536 cached tokens:") == 2 and "wave model" not in t4_part
    assert printed.count("the wave model says") == (2 if folder == "h100_and_t4" else 0)
    # the T4's bandwidth: its scaled times, about a tenth of the H100's TB/s
    tb = [float(x) for x in re.findall(r"TB/s ours ([0-9.]+), PyTorch ([0-9.]+)", t4_part)[0]]
    assert 0 < max(tb) < 0.32
