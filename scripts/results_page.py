#!/usr/bin/env python3
"""Write the "Results by GPU" page in both editions: book/results.md and book/zh/results.md.

    python scripts/results_page.py [--data DIR] [--submissions DIR] [--out BOOKDIR]

Built from the maintainers' recorded runs (attn_edu/data/bench/) and every submitted folder
(attn_edu/data/submissions/, attn_edu.bench.submitted_runs): a plotly figure with a
(d, causal) menu that works on the static page (the book's extension loads plotly.js where
the figure is), then a section per run: its GPU and date, one line of what the run shares
(who measured it, commit, versions, dtype, the datasheet peak) and a table of four columns per
setting (implementation, TFLOP/s at 4k and 16k, share of peak; bench.table_markdown), which
fits a page at 1280 px and a 390 px phone. scripts/build-book.sh
runs it before building, so the page always shows every folder; the Chinese page carries the
English page's sha in its first line (scripts/zh.py). The words: attn_edu.bench.results.WORDS
and attn_edu.bench.figures.LABELS.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEXT = {
    "en": ("# Results by GPU\n\n"
           "Attention forward throughput on every GPU the book has seen: the maintainers' runs "
           "(\"{maintainers}\") and the runs readers submitted (\"{submitted}\": checked by "
           "`python -m attn_edu.bench validate` against the schema and the GPU's datasheet, not "
           "re-measured by us). TFLOP/s count the matmul FLOPs, 4BHn²d for B sequences of H heads, half "
           "of that when causal; the share of peak is against the GPU's dense 16-bit tensor-core peak. "
           "Below the figure, a section per run: a table per setting, of TFLOP/s at n = 4096 (4k) and "
           "16384 (16k) and the share of the peak at 16k, \"–\" where a length was not measured (out of "
           "memory, or too slow). The implementations: `triton` the book's kernel (chapter 10), "
           "`torch_flash` chapter 09's tiled loop in PyTorch, `torch_naive` matmul, softmax, matmul, "
           "`torch_sdpa_*` PyTorch's SDPA with one backend each. A commit marked `-dirty` had "
           "uncommitted changes. Submit yours: "
           "`bash scripts/gpu-bench.sh --submission` (`CONTRIBUTING.md`, \"Submit your GPU's numbers\").\n\n"
           "Runs: {n_runs}; GPUs: {n_gpus}.\n\n"),
    "zh": ("# 各 GPU 上的结果 / Results by GPU\n\n"
           "本书见过的每块 GPU 上注意力前向的吞吐：维护者的测量（“{maintainers}”）和读者提交的测量"
           "（“{submitted}”：由 `python -m attn_edu.bench validate` 按模式和该 GPU 的数据手册检查过，"
           "我们没有重新测量）。TFLOP/s 只计矩阵乘法的 FLOPs：B 条序列、H 个头共 4BHn²d，因果时减半；峰值占比"
           "相对于该 GPU 的稠密 16 位张量核心峰值。图下每次运行一节：每种设置一张表，列出 n = 4096（4k）和 "
           "16384（16k）时的 TFLOP/s，以及 16k 时的峰值占比；“–”表示该长度没有测量（显存不足或太慢）。"
           "各实现：`triton` 是本书的内核（第 10 章），`torch_flash` 是第 09 章的分块循环（PyTorch），"
           "`torch_naive` 是矩阵乘法、softmax、矩阵乘法，`torch_sdpa_*` 是各用一种后端的 PyTorch SDPA。"
           "标有 `-dirty` 的提交当时有未提交的改动。"
           "提交你的结果：`bash scripts/gpu-bench.sh --submission`"
           "（见 `CONTRIBUTING.md` 的 “Submit your GPU's numbers”）。\n\n"
           "共 {n_runs} 次运行，{n_gpus} 块 GPU。\n\n"),
}


def page(lang: str, runs) -> str:
    from attn_edu.bench.figures import label
    from attn_edu.bench.results import results_figure, results_table, table_markdown
    from attn_edu.notebook import _make_renderer_class

    gpus = {d["device"]["name"] for r in runs for d in r["documents"]} | {r.get("gpu") for r in runs if r.get("gpu")}
    head = TEXT[lang].format(maintainers=label("maintainers", lang), submitted=label("submitted", lang),
                             n_runs=len(runs), n_gpus=len(gpus))
    html = _make_renderer_class()(plotly_json=False).to_mimebundle(results_figure(runs, lang).to_dict())["text/html"]
    stable = "attn-edu-plotly-" + hashlib.sha256(f"results-{lang}".encode()).hexdigest()[:12]
    html = html.replace(html.split('id="', 1)[1].split('"', 1)[0], stable)   # the same page, the same id
    # the figure first (every GPU, a menu for d and the mask), then a section per run
    return head + "```{raw} html\n" + html + "\n```\n\n" + table_markdown(results_table(runs, lang), lang)


def write(book: Path, data=None, submissions=None) -> tuple:
    from attn_edu.bench.results import gpu_runs
    sys.path.insert(0, str(ROOT / "scripts"))
    import zh

    runs = gpu_runs(data, submissions)
    en, zh_path = book / "results.md", book / "zh" / "results.md"
    book.mkdir(parents=True, exist_ok=True)
    en.write_text(page("en", runs), encoding="utf-8")
    zh_path.parent.mkdir(parents=True, exist_ok=True)
    zh_path.write_text(f"<!-- en: book/results.md en_sha: {zh.page_sha(en)} -->\n" + page("zh", runs),
                       encoding="utf-8")
    return en, zh_path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=None, help="the recorded runs (default attn_edu/data/bench)")
    p.add_argument("--submissions", default=None, help="the submitted folders (default attn_edu/data/submissions)")
    p.add_argument("--out", default=str(ROOT / "book"), help="the book folder (default book/)")
    args = p.parse_args(argv)
    for path in write(Path(args.out), args.data, args.submissions):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
