"""Every GPU the book has seen: the "Results by GPU" page's table and figure.

:func:`gpu_runs` gathers the runs: the maintainers' recorded sweeps (``attn_edu/data/bench/``,
one run per device and commit) and every submitted folder (:func:`~attn_edu.bench.submitted_runs`).
:func:`results_table` makes one row per (run, d, causal, implementation) with the TFLOP/s at
n = 4096 and 16384 and the share of that GPU's dense 16-bit peak (its datasheet,
:func:`~attn_edu.bench.gpu_spec`); a run whose correctness check failed gets one row saying so
and no speed. :func:`results_figure` draws TFLOP/s against n, one line per GPU and
implementation, with a drop-down menu for (d, causal) that works on the static page.
``scripts/results_page.py`` writes ``book/results.md`` and ``book/zh/results.md`` from them.
Every word a reader sees comes from :data:`~attn_edu.bench.figures.LABELS` and :data:`WORDS`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from .figures import label
from .published import gpu_spec
from .submission import submitted_runs
from .sweep import DATA_DIR, recorded_results

__all__ = ["WORDS", "gpu_runs", "results_table", "results_figure", "table_markdown"]

#: The page's words, per edition (the labels of who measured a run are ``figures.LABELS``):
#: ``columns`` names the fields of a :func:`results_table` row, ``table`` the columns of a
#: run's table on the page (:func:`table_markdown`).
WORDS: Dict[str, Dict[str, str]] = {
    "columns": {"en": "GPU | measured | dtype | d | causal | implementation | TFLOP/s at 4k | TFLOP/s at 16k | "
                      "% of peak (16k) | versions | date | commit",
                "zh": "GPU | 测量者 | 数据类型 | d | 因果 | 实现 | 4k 时 TFLOP/s | 16k 时 TFLOP/s | "
                      "峰值占比（16k） | 版本 | 日期 | 提交"},
    "table": {"en": "implementation | TFLOP/s 4k | TFLOP/s 16k | % of peak",
              "zh": "实现 | TFLOP/s 4k | TFLOP/s 16k | 峰值占比"},
    "commit": {"en": "commit", "zh": "提交"},
    "peak": {"en": "dense 16-bit peak {tflops:.0f} TFLOP/s (datasheet)",
             "zh": "稠密 16 位峰值 {tflops:.0f} TFLOP/s（数据手册）"},
    "yes": {"en": "yes", "zh": "是"}, "no": {"en": "no", "zh": "否"},
    "failed": {"en": "correctness check FAILED on this GPU: no speeds shown",
               "zh": "正确性检查在此 GPU 上未通过：不显示速度"},
    "no peak": {"en": "no datasheet", "zh": "无数据手册"},
    "x": {"en": "sequence length n", "zh": "序列长度 n"},
    "y": {"en": "TFLOP/s (4BHn²d / time; 2BHn²d causal)", "zh": "TFLOP/s（4BHn²d / 时间；因果时 2BHn²d）"},
    "title": {"en": "Attention forward on every GPU the book has seen", "zh": "本书见过的每块 GPU 上的注意力前向"},
    "menu": {"en": "d = {d}, {c}", "zh": "d = {d}，{c}"},
    "causal": {"en": "causal", "zh": "因果"}, "full": {"en": "not causal", "zh": "非因果"},
}


def _w(key: str, lang: str) -> str:
    return WORDS[key][lang]


def gpu_runs(data_dir: Union[str, Path, None] = None,
             submissions: Union[str, Path, None] = None) -> List[Dict[str, Any]]:
    """Every run: ``{"measured_by", "correctness", "documents"}`` (GPU sweeps only; dry runs
    left out), the recorded ones first (grouped by device and commit), then the submitted."""
    runs: Dict[tuple, Dict[str, Any]] = {}
    for doc in recorded_results("cuda", data_dir=data_dir or DATA_DIR):
        if doc.get("dry_run"):
            continue
        key = (doc["device"]["name"], doc.get("git_commit"))
        runs.setdefault(key, {"measured_by": doc.get("measured_by", "maintainers"), "correctness": None,
                              "documents": []})["documents"].append(doc)
    out = list(runs.values())
    for run in submitted_runs(submissions):
        docs = [d for d in run["documents"] if d.get("kind") == "sweep" and not d.get("dry_run")
                and d.get("device", {}).get("kind") == "cuda"]
        out.append({"measured_by": run["manifest"].get("measured_by", "submitted"),
                    "correctness": run["manifest"].get("correctness"), "documents": docs,
                    "gpu": run["manifest"].get("gpu")})
    return out


def _at(rows: Sequence[Dict[str, Any]], n: int) -> Optional[float]:
    vals = [r["tflops"] for r in rows if r.get("n") == n and r.get("tflops")]
    return max(vals) if vals else None


def _commit(doc: Dict[str, Any]) -> str:
    """The document's commit, short, with git's ``-dirty`` where it had uncommitted changes."""
    commit = str(doc.get("git_commit") or "")[:7]
    return commit + "-dirty" if commit and doc.get("git_dirty") else commit


def results_table(runs: Sequence[Dict[str, Any]], lang: str = "en") -> List[List[str]]:
    """One row per (run, d, causal, implementation), in :data:`WORDS` ``columns`` order."""
    table = []
    for run in runs:
        who = label(run["measured_by"] if run["measured_by"] in ("maintainers", "submitted") else "unstated", lang)
        if run.get("correctness") == "failed":
            doc = (run["documents"] or [{}])[0]
            table.append([str(run.get("gpu") or doc.get("device", {}).get("name", "?")), who,
                          _w("failed", lang), "", "", "", "", "", "", "", str(doc.get("date", ""))[:10],
                          _commit(doc)])
            continue
        for doc in sorted(run["documents"], key=lambda d: (d["config"].get("d", 0), bool(d["config"].get("causal")))):
            cfg, dev = doc["config"], doc["device"]
            spec = gpu_spec(dev["name"])
            versions = ", ".join(f"{k} {v}" for k, v in doc.get("versions", {}).items()
                                 if k in ("torch", "triton") and v)
            for impl in sorted({r["impl"] for r in doc["results"] if r.get("tflops")}):
                rows = [r for r in doc["results"] if r["impl"] == impl]
                t4k, t16k = _at(rows, 4096), _at(rows, 16384)
                share = (f"{100 * t16k / spec['tflops']:.0f}%" if spec and t16k else
                         _w("no peak", lang) if not spec else "")
                table.append([dev["name"], who, str(cfg.get("dtype")), str(cfg.get("d")),
                              _w("yes" if cfg.get("causal") else "no", lang), impl,
                              f"{t4k:.0f}" if t4k else "", f"{t16k:.0f}" if t16k else "", share, versions,
                              str(doc.get("date", ""))[:10], _commit(doc)])
    return table


def table_markdown(table: List[List[str]], lang: str = "en") -> str:
    """The rows of :func:`results_table` as the page shows them, in the edition's language
    (``lang``: ``"en"`` or ``"zh"``): a section per run (consecutive rows of one GPU, who
    measured it, versions, date and commit), headed by the GPU; one line of what the run's
    rows share (the date, who measured it, the commit, the versions, the dtypes, the GPU's
    datasheet peak); then a table per setting, captioned as the figure's menu names it (d and
    the mask; the dtype too where a run has several), of four columns (:data:`WORDS`
    ``table``): the implementation, TFLOP/s at n = 4096 and 16384 and the share of the peak at
    16384, the numbers right-aligned ("–" where not measured). One table of twelve columns was
    cut off at 1280 px, and on a phone its Chinese headers stood one character a line. A run
    whose correctness check failed gets its heading, its line and the failure, no table. A
    ``|`` inside a cell becomes ``/``."""
    runs: List[tuple] = []
    for row in table:
        key = (row[0], row[1], row[9], row[10], row[11])   # GPU, who, versions, date, commit
        if not runs or runs[-1][0] != key:
            runs.append((key, []))
        runs[-1][1].append(row)

    def cell(text: str) -> str:
        return text.replace("|", "/")

    out = []
    for (gpu, who, versions, date, commit), rows in runs:
        failed = any(r[2] == _w("failed", lang) for r in rows)
        spec = gpu_spec(gpu)
        dtypes = [] if failed else sorted({r[2] for r in rows})
        facts = [date, who] + ([f"{_w('commit', lang)} `{commit}`"] if commit else []) + ([versions] if versions else [])
        facts += [", ".join(dtypes)] if dtypes else []
        facts += [_w("peak", lang).format(tflops=spec["tflops"])] if spec and not failed else []
        out.append(f"## {gpu}\n\n" + " · ".join(f for f in facts if f) + "\n")
        if failed:
            out.append(f"**{_w('failed', lang)}**\n")
            continue
        settings: Dict[tuple, List[List[str]]] = {}
        for r in rows:
            settings.setdefault((r[2], r[3], r[4] in WORDS["yes"].values()), []).append(r)
        for (dtype, d, causal), rs in settings.items():
            caption = _w("menu", lang).format(d=d, c=_w("causal" if causal else "full", lang))
            caption = f"{dtype}, {caption}" if len(dtypes) > 1 else caption
            # a colon fence: scripts/zh.py holds the editions' skeletons alike, its caption aside
            lines = [f":::{{table}} {caption}", ":align: left", ":class: attn-edu-results", "",
                     f"| {_w('table', lang)} |", "| --- | ---: | ---: | ---: |"]
            for r in rs:   # "–": not measured at that length (out of memory, or too slow)
                lines.append("| " + " | ".join(cell(c) for c in (f"`{r[5]}`", *(c or "–" for c in r[6:9]))) + " |")
            out.append("\n".join(lines) + "\n:::\n")
    return "\n".join(out)


def results_figure(runs: Sequence[Dict[str, Any]], lang: str = "en"):
    """TFLOP/s against n, a line per (GPU, implementation), a menu for (d, causal); runs whose
    correctness failed are not drawn."""
    import plotly.graph_objects as go

    fig = go.Figure()
    combos: Dict[tuple, List[int]] = {}
    for run in runs:
        if run.get("correctness") == "failed":
            continue
        who = label(run["measured_by"] if run["measured_by"] in ("maintainers", "submitted") else "unstated", lang)
        for doc in run["documents"]:
            cfg = doc["config"]
            key = (int(cfg.get("d", 0)), bool(cfg.get("causal")))
            for impl in sorted({r["impl"] for r in doc["results"] if r.get("tflops")}):
                rs = sorted((r for r in doc["results"] if r["impl"] == impl and r.get("tflops")),
                            key=lambda r: r["n"])
                combos.setdefault(key, []).append(len(fig.data))
                fig.add_trace(go.Scatter(
                    x=[r["n"] for r in rs], y=[r["tflops"] for r in rs], mode="lines+markers",
                    name=f"{doc['device']['name']}, {impl}, {cfg.get('dtype')} ({who})", visible=False))
    keys = sorted(combos)
    if keys:
        for i in combos[keys[0]]:
            fig.data[i].visible = True

    def name(key):
        return _w("menu", lang).format(d=key[0], c=_w("causal" if key[1] else "full", lang))
    buttons = [dict(label=name(k), method="update",
                    args=[{"visible": [i in combos[k] for i in range(len(fig.data))]}]) for k in keys]
    fig.update_layout(
        height=520, title=dict(text=_w("title", lang), font_size=14),
        updatemenus=[dict(buttons=buttons, direction="down", x=0, xanchor="left", y=1.12, yanchor="top")]
        if len(buttons) > 1 else [],
        legend=dict(orientation="h", yanchor="top", y=-0.18, x=0, font_size=10),
        xaxis=dict(type="log", title=_w("x", lang)), yaxis=dict(title=_w("y", lang)))
    return fig
