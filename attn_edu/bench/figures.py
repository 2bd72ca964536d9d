"""Figures of recorded benchmark documents (plotly), each labelled with where it was measured.

:func:`recorded_sweep_figure` draws a sweep (throughput and peak memory against n),
:func:`block_sparse_figure` a block-sparse benchmark (speed-up against tile density,
with the ideal ``1 / density``). The title always names the device and says CPU or
GPU; a document from ``bash scripts/gpu-bench.sh --dry-run`` says DRY RUN, so a CPU
number is never shown as a GPU one. Chapters 10 and 11 draw the recorded files with
them; the CI test of the dry run builds them from its output. :func:`landscape_figure`
draws published GPU numbers (labelled "published") against the roofline, and
:func:`memory_model_figure` the modelled peak memory of naive and tiled attention
against the memory of common GPUs.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Sequence

from .. import profiling
from .published import GPU_SPECS, PUBLISHED, PUBLISHED_SWEEPS, roofline_tflops
from .sweep import results_rows

__all__ = ["LABELS", "label", "document_label", "recorded_sweep_figure", "block_sparse_figure", "landscape_figure",
           "memory_model_figure"]


#: Every label a reader sees on a recorded document, in one place, per edition (``"en"``,
#: ``"zh"``): who measured it (its ``measured_by``) and what a dry run is.
LABELS: Dict[str, Dict[str, str]] = {
    "maintainers": {"en": "measured by the maintainers", "zh": "维护者实测"},
    "submitted": {"en": "submitted, not reproduced", "zh": "读者提交，未复现"},
    "unstated": {"en": "who measured it not stated", "zh": "未注明测量者"},
    "dry_run": {"en": "DRY RUN on the CPU, not GPU numbers: ", "zh": "CPU 上的演练，不是 GPU 数据："},
    "GPU": {"en": "GPU", "zh": "GPU"},
    "CPU": {"en": "CPU", "zh": "CPU"},
    "device unknown": {"en": "device unknown", "zh": "设备未知"},
}


def label(key: str, lang: str = "en") -> str:
    """One of :data:`LABELS` in ``lang`` ("en" or "zh")."""
    if key not in LABELS:
        raise ValueError(f"key must be one of {', '.join(LABELS)}; got {key!r}")
    if lang not in ("en", "zh"):
        raise ValueError(f"lang must be 'en' or 'zh'; got {lang!r}")
    return LABELS[key][lang]


def document_label(doc: Dict[str, Any], lang: str = "en") -> str:
    """``"<device> (GPU|CPU), <date>, <who measured it>"``, with ``"DRY RUN on the CPU"`` for a
    dry-run document; who: ``measured_by`` ("measured by the maintainers" or "submitted, not
    reproduced", :data:`LABELS`). ``lang="zh"``: the Chinese edition's words."""
    dev = doc.get("device", {})
    kind = label({"cuda": "GPU", "cpu": "CPU"}.get(dev.get("kind"), "device unknown"), lang)
    who = doc.get("measured_by")
    who = label(who if who in ("maintainers", "submitted") else "unstated", lang)
    text = f"{dev.get('name', 'unknown device')} ({kind}), {str(doc.get('date', ''))[:10]}, {who}"
    return (label("dry_run", lang) + text) if doc.get("dry_run") else text


def recorded_sweep_figure(doc: Dict[str, Any], note: str = ""):
    """Throughput (TFLOP/s) and peak memory (MiB above the inputs) against n, one line per
    implementation; failed points (out of memory, ...) are left out and listed in the title."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = results_rows(doc)
    ok = [r for r in rows if r.get("tflops")]
    failed = sorted({f"{r['impl']} n={r['n']} ({r.get('reason', 'error')})" for r in rows if "error" in r})
    fig = make_subplots(rows=1, cols=2, subplot_titles=("throughput", "peak memory"))
    for i, impl in enumerate(sorted({r["impl"] for r in ok})):
        rs = sorted((r for r in ok if r["impl"] == impl), key=lambda r: r["n"])
        color = f"hsl({(i * 67) % 360}, 60%, 45%)"
        fig.add_trace(go.Scatter(x=[r["n"] for r in rs], y=[r["tflops"] for r in rs], name=impl,
                                 line_color=color, legendgroup=impl), 1, 1)
        mem = [r for r in rs if r.get("peak_bytes")]
        if mem:
            fig.add_trace(go.Scatter(x=[r["n"] for r in mem], y=[r["peak_bytes"] / 2**20 for r in mem],
                                     name=impl, line_color=color, legendgroup=impl, showlegend=False), 1, 2)
    fig.update_xaxes(type="log", title_text="sequence length n",
                     tickvals=sorted({r["n"] for r in ok}), tickangle=-45)
    fig.update_yaxes(title_text="TFLOP/s", col=1)
    fig.update_yaxes(type="log", title_text="peak MiB above inputs", col=2, dtick=1)
    cfg = doc.get("config", {})
    shape = f"B={cfg.get('batch')}, H={cfg.get('heads')}, d={cfg.get('d')}, {cfg.get('dtype')}" + (
        ", causal" if cfg.get("causal") else "")
    title = f"{document_label(doc)}<br>{shape}{'; ' + note if note else ''}"
    if failed:
        title += f"<br>failed: {', '.join(failed[:4])}{' ...' if len(failed) > 4 else ''}"
    fig.update_layout(height=420 if failed else 380, title=dict(text=title, font_size=13))
    return fig


def block_sparse_figure(doc: Dict[str, Any]):
    """Speed-up of the block-sparse kernel over its full layout against tile density, per n
    and pattern, with the ideal ``1 / tile density`` and FlexAttention's speed-up on the
    same masks where it was measured."""
    import plotly.graph_objects as go

    rows = doc["rows"]
    fig = go.Figure()
    for n in sorted({r["n"] for r in rows}):
        for pattern in sorted({r["pattern"] for r in rows}):
            rs = sorted((r for r in rows if r["n"] == n and r["pattern"] == pattern),
                        key=lambda r: r["tile_density"])
            if not rs:
                continue
            x = [r["tile_density"] for r in rs]
            fig.add_trace(go.Scatter(x=x, y=[r["speedup"] for r in rs], mode="lines+markers",
                                     name=f"block-sparse Triton, {pattern}, n={n}"))
            if any("flex_speedup" in r for r in rs):
                fig.add_trace(go.Scatter(x=x, y=[r.get("flex_speedup") for r in rs], mode="lines+markers",
                                         line_dash="dash", name=f"FlexAttention, {pattern}, n={n}"))
    dens = sorted({r["tile_density"] for r in rows})
    fig.add_trace(go.Scatter(x=dens, y=[1 / x for x in dens], mode="lines", line_dash="dot",
                             line_color="gray", name="ideal 1 / tile density"))
    cfg = doc.get("config", {})
    fig.update_layout(
        height=380, title=dict(text=f"{document_label(doc)}<br>speed-up over the full layout, "
                                    f"{cfg.get('dtype')}, d={cfg.get('d')}, tiles {cfg.get('block_q')}"
                                    f"x{cfg.get('block_k')}", font_size=13),
        xaxis=dict(type="log", title="tile density (fraction of tiles computed)"),
        yaxis=dict(type="log", title="speed-up (time full / time sparse)"))
    return fig


def landscape_figure(recorded: Optional[Iterable[Dict[str, Any]]] = None, d: int = 128,
                     ns: Sequence[int] = (512, 1024, 2048, 4096, 8192, 16384)):
    """Attention TFLOP/s on A100 and H100: the roofline bound of naive and tiled
    attention (:func:`attn_edu.bench.roofline_tflops`), the peak, the published
    FlashAttention-2/-3 numbers (markers labelled "published", with their citation) and
    the published per-length sweeps (:data:`attn_edu.bench.PUBLISHED_SWEEPS`, lines).
    ``recorded``: GPU sweep documents (``recorded_results("cuda")``), drawn with their
    device label; CPU documents are refused, and those of another head dimension or causal
    (another FLOP count) are left out: the figure is one ``d``, not causal."""
    import plotly.graph_objects as go

    fig = go.Figure()
    colors = {"H100 SXM": "#4c78a8", "A100 SXM": "#f58518"}
    for gpu, color in colors.items():
        peak = GPU_SPECS[gpu]["tflops"]
        fig.add_trace(go.Scatter(x=list(ns), y=[peak] * len(ns), mode="lines", line=dict(color=color),
                                 name=f"{gpu}: peak {peak:.0f} TFLOP/s (datasheet)"))
        for tiled, dash in ((True, "dash"), (False, "dot")):
            fig.add_trace(go.Scatter(
                x=list(ns), y=[roofline_tflops(n, d, gpu, tiled=tiled) for n in ns], mode="lines",
                line=dict(color=color, dash=dash),
                name=f"{gpu}: roofline, {'tiled (Q, K, V, O once)' if tiled else 'naive (n x n via HBM)'}"))
    for p in PUBLISHED:
        fig.add_trace(go.Scatter(
            x=[max(ns)], y=[p["tflops"]], mode="markers+text", text=[f"{p['impl']} (published)"],
            textposition="middle left", marker=dict(size=11, symbol="diamond", color=colors[p["gpu"]]),
            name=f"{p['impl']} on {p['gpu']}, published: {p['tflops']:.0f} [{p['cite']}]",
            hovertext=p["quote"]))
    impl_colors = {"FlashAttention-3": "#9467bd", "Triton tutorial": "#2ca02c", "cuDNN": "#d62728",
                   "Triton TLX kernel": "#17becf"}  # one colour per kernel across sources
    for i, sweep in enumerate(PUBLISHED_SWEEPS):
        for impl, values in sweep["tflops"].items():
            fig.add_trace(go.Scatter(
                x=sweep["n"], y=values, mode="lines+markers",
                line=dict(color=impl_colors.get(impl, "#7f7f7f"), width=1.5,
                          dash="solid" if sweep["pass"] == "forward" else "dash"),
                marker=dict(symbol=("circle", "square", "triangle-up")[i % 3], size=7),
                name=f"{impl} {sweep['pass']}, published [{sweep['cite']}]: d = {sweep['d']}, {sweep['dtype']}",
                hovertext=f"{sweep['gpu']}; {sweep['source']}"))
    for doc in recorded or []:
        if doc.get("device", {}).get("kind") != "cuda" or doc.get("dry_run"):
            raise ValueError(f"landscape_figure draws GPU measurements only; got {document_label(doc)}")
        cfg = doc.get("config", {})
        if cfg.get("d") != d or cfg.get("causal"):
            continue
        for impl in sorted({r["impl"] for r in doc["results"] if r.get("tflops")}):
            rs = sorted((r for r in doc["results"] if r["impl"] == impl and r.get("tflops")),
                        key=lambda r: r["n"])
            fig.add_trace(go.Scatter(x=[r["n"] for r in rs], y=[r["tflops"] for r in rs],
                                     mode="lines+markers", name=f"{impl}, measured: {document_label(doc)}"))
    fig.update_layout(  # the legend below the axes: the plot keeps the page's width
        height=720, legend=dict(font_size=10, orientation="h", yanchor="top", y=-0.14, x=0),
        margin=dict(l=60, r=20, t=60, b=40),
        title=dict(text=f"Attention on GPUs, d = {d}, 16-bit: models and published numbers<br>"
                        "(forward unless labelled backward; measured lines: recorded runs, not causal)",
                   font_size=13),
        xaxis=dict(type="log", title="sequence length n", tickvals=list(ns), ticktext=[str(n) for n in ns]),
        yaxis=dict(type="log", title="TFLOP/s (4BHn²d / time)",
                   tickvals=[50, 100, 200, 300, 500, 700, 1000]))
    return fig


def memory_model_figure(batch: int = 4, heads: int = 16, d: int = 64, itemsize: int = 2,
                        ns: Sequence[int] = (1024, 2048, 4096, 8192, 16384, 32768)):
    """Modelled extra memory of one attention forward (:func:`attn_edu.profiling.attention_peak_bytes`),
    naive against tiled, with the memory of a T4, an A100 and an H100 as horizontal lines."""
    import plotly.graph_objects as go

    gib = 2.0 ** 30
    fig = go.Figure()
    for tiled, name in ((False, "naive: S and P alive (2 n x n per head)"),
                        (True, "tiled: output + log-sum-exp")):
        fig.add_trace(go.Scatter(
            x=list(ns), y=[profiling.attention_peak_bytes(n, d, itemsize, batch, heads, tiled=tiled) / gib
                           for n in ns], mode="lines+markers", name=name))
    for gpu, spec in sorted(GPU_SPECS.items(), key=lambda item: item[1]["memory_bytes"]):
        size = spec["memory_bytes"] / gib    # what nvidia-smi reports, not the label's GB
        fig.add_trace(go.Scatter(x=list(ns), y=[size] * len(ns), mode="lines",
                                 line=dict(dash="dot", color="gray"),
                                 name=f"{gpu} \"{spec['memory_gb']} GB\": {size:.1f} GiB"))
    fig.update_layout(
        height=400, title=dict(text=f"Extra memory of one forward (model): B={batch}, H={heads}, d={d}, "
                                    f"{8 * itemsize}-bit", font_size=13),
        xaxis=dict(type="log", title="sequence length n", tickvals=list(ns), ticktext=[str(n) for n in ns]),
        yaxis=dict(type="log", title="GiB above the inputs"))
    return fig
