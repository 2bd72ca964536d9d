"""The "Results by GPU" page (scripts/results_page.py), both editions, from the committed runs
and from a fabricated T4 submission, and with a failed correctness run. About 3 s."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from attn_edu.bench.results import gpu_runs, results_figure, results_table
from attn_edu.bench.submission import make_submission

from fake_runs import write_t4_run

pytest.importorskip("plotly")
ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("results_page", ROOT / "scripts" / "results_page.py")
results_page = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results_page)


def test_the_committed_page_is_in_the_toc_and_both_editions():
    assert "- file: book/results" in (ROOT / "_toc.yml").read_text()
    assert "measured by the maintainers" in (ROOT / "book" / "results.md").read_text()
    assert "维护者实测" in (ROOT / "book" / "zh" / "results.md").read_text()


def test_a_t4_submission_and_a_failed_one_reach_the_page(tmp_path):
    subs = tmp_path / "subs"
    make_submission(write_t4_run(tmp_path / "ok"), subs)
    bad = make_submission(write_t4_run(tmp_path / "bad", correct=False), subs)
    runs = gpu_runs(submissions=subs)
    assert [r["measured_by"] for r in runs] == ["maintainers", "submitted", "submitted"]
    table = results_table(runs)
    t4 = [row for row in table if row[0] == "Tesla T4"]
    assert any("FAILED" in row[2] for row in t4) and sum("FAILED" in row[2] for row in t4) == 1
    speeds = [row for row in t4 if "FAILED" not in row[2]]
    assert speeds and {row[2] for row in speeds} == {"float16"} and "torch_naive" not in {row[5] for row in speeds}
    assert all(row[1] == "submitted, not reproduced" for row in t4)
    share = [row[8] for row in speeds if row[5] == "triton" and row[3] == "64" and row[4] == "no"][0]
    assert share.endswith("%") and 0 < float(share[:-1]) <= 100
    fig = results_figure(runs)
    names = [t.name for t in fig.data]
    assert sum("Tesla T4" in n for n in names) == len({(r[3], r[4], r[5]) for r in speeds})  # the failed run: none
    menu = fig.layout.updatemenus[0].buttons
    assert [b.label for b in menu] == ["d = 64, not causal", "d = 64, causal", "d = 128, not causal"]
    visible = [tuple(b.args[0]["visible"]) for b in menu]
    assert len(set(visible)) == len(visible) and all(any(v) for v in visible)   # each button draws its own
    book = tmp_path / "book"
    en, zh = results_page.write(book, submissions=subs)
    assert "Tesla T4" in en.read_text() and "读者提交，未复现" in zh.read_text()
    assert zh.read_text().startswith("<!-- en: book/results.md en_sha: ")
    assert "正确性检查在此 GPU 上未通过" in zh.read_text()
    assert json.loads((bad / "submission.json").read_text())["correctness"] == "failed"


def test_no_runs_at_all_still_makes_a_page(tmp_path):
    runs = gpu_runs(data_dir=tmp_path, submissions=tmp_path)
    assert runs == [] and results_table(runs) == [] and len(results_figure(runs).data) == 0
    en, _ = results_page.write(tmp_path / "book", data=tmp_path, submissions=tmp_path)
    assert "Runs: 0; GPUs: 0." in en.read_text()
