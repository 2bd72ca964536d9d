"""The "Results by GPU" page (scripts/results_page.py), both editions, from the committed runs
and from a fabricated T4 submission, and with a failed correctness run; its layout: a section
per run and tables of five columns, which a page at 1280 px and a 390 px phone hold. About 3 s."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from attn_edu.bench.results import WORDS, gpu_runs, results_figure, results_table, table_markdown
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


def _sections(md: str) -> list:
    """``[(heading, line of facts, {caption: [table rows as cell lists]})]``: the page's runs."""
    out = []
    for part in ("\n" + md).split("\n## ")[1:]:
        lines = part.strip().splitlines()
        tables, caption = {}, None
        for ln in lines:
            if ln.startswith(":::{table} "):
                caption = ln[len(":::{table} "):]
                tables[caption] = []
            elif ln.startswith("|"):
                tables[caption].append([c.strip() for c in ln.strip("|").split("|")])
        out.append((lines[0], lines[2], tables))
    return out


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_has_a_section_per_run_and_a_narrow_table_per_setting(tmp_path, lang):
    subs = tmp_path / "subs"
    make_submission(write_t4_run(tmp_path / "ok"), subs)
    make_submission(write_t4_run(tmp_path / "bad", correct=False), subs)
    runs = gpu_runs(submissions=subs)
    table = results_table(runs, lang)
    md = table_markdown(table, lang)
    sections = _sections(md)
    # three runs, each its own section (the two T4 runs of one date and commit: kept apart)
    assert [h for h, _, _ in sections] == ["NVIDIA H100 80GB HBM3"] + ["Tesla T4"] * 2
    _, facts, tables = sections[0]
    assert facts.split(" · ")[:4] == ["2026-11-26", {"en": "measured by the maintainers", "zh": "维护者实测"}[lang],
                                      f"{WORDS['commit'][lang]} `c2ef7af-dirty`", "torch 2.11.0, triton 3.6.0"]
    assert "bfloat16" in facts and "989 TFLOP/s" in facts          # the run's dtype and its datasheet peak
    menu = WORDS["menu"][lang]
    settings = [menu.format(d=d, c=WORDS[c][lang]) for d, c in ((64, "full"), (64, "causal"), (128, "full"))]
    assert list(tables) == settings          # a table per setting, named as the figure's menu names it
    mine = [r for r in table if r[0] == "NVIDIA H100 80GB HBM3"]
    got = []
    for caption, rows in tables.items():
        head, align, body = rows[0], rows[1], rows[2:]
        assert head == WORDS["table"][lang].split(" | ") and len(head) == 4
        assert align == ["---", "---:", "---:", "---:"]                 # the numbers right-aligned
        got += [(caption, *r) for r in body]
    # every speed row of the run, nothing lost in the folding: (setting, implementation, numbers)
    want = [(menu.format(d=r[3], c=WORDS["causal" if r[4] == WORDS["yes"][lang] else "full"][lang]),
             f"`{r[5]}`", *(c or "–" for c in r[6:9])) for r in mine]
    assert got == want and len(got) == 13
    # the T4: float16 only in its facts, no torch_naive; the failed run: its verdict, no table
    (_, ok, ok_tables), (_, bad, bad_tables) = sections[1:]
    assert ok.split(" · ")[:2] == ["2026-12-01", {"en": "submitted, not reproduced", "zh": "读者提交，未复现"}[lang]]
    assert "float16" in ok and "65 TFLOP/s" in ok
    assert ok_tables and "`torch_naive`" not in {r[0] for rows in ok_tables.values() for r in rows}
    assert bad_tables == {} and WORDS["failed"][lang] in md.split("## Tesla T4")[2]
    assert "TFLOP/s" not in bad                       # a failed run: no peak either, no speed
    # no header is one CJK character (what stood one character a line); none names the run
    assert all(len(h) > 1 for h in WORDS["table"][lang].split(" | "))


def test_the_committed_page_puts_the_figure_first_then_the_runs():
    for md in ((ROOT / "book" / "results.md").read_text(), (ROOT / "book" / "zh" / "results.md").read_text()):
        assert md.index("```{raw} html") < md.index("\n## ") < md.index(":::{table} ")
        assert md.count(":class: attn-edu-results") == md.count(":::{table} ") == 3
        widest = max(ln.count("|") - 1 for ln in md.splitlines() if ln.startswith("| "))
        assert widest == 4                                   # four columns, not the old twelve
    css = (ROOT / "book" / "_static" / "attn-edu" / "book.css").read_text()
    assert "table.attn-edu-results th" in css and "keep-all" in css   # headers break between words only
