"""Figures for chapter 13 (attention at inference time).

* :func:`roofline_figure` / :func:`roofline_explorer` -- published GPU rooflines with
  attention workloads placed by their arithmetic intensity (a slider moves them);
* :func:`draw_paged_cache` -- a :class:`~attn_edu.decoding.PagedKVCache`'s pool of pages
  and every sequence's block table (matplotlib);
* :func:`draw_mla` -- multi-head latent attention's cache and its two ways to attend to it
  (prefill rebuilds the heads, decode attends in latent space);
* :func:`occupancy_explorer` -- which SMs a decode step keeps busy as the keys are split;
* :func:`paged_memory_explorer` -- paged vs. contiguous memory of a batch, by page size;
* :func:`quantization_figure` / :func:`quantization_explorer` -- attention error of a
  quantized cache, keys vs. values, per channel vs. per token, by bit width;
* :func:`decode_bandwidth_figure` -- a measured decode sweep
  (:func:`attn_edu.bench.decode_sweep`), labelled with its device.

The explorers are :func:`attn_edu.viz.sweep_figure` s: every frame is computed now, so the
sliders work on the static page; the single-value functions are what a live
:func:`attn_edu.widgets.live_explorer` recomputes. plotly and matplotlib are imported
inside the functions. Used by chapter 13.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _checks, decoding
from .viz import sweep_figure
from .i18n import gettext as _

__all__ = ["roofline_figure", "roofline_explorer", "draw_paged_cache", "draw_mla", "occupancy_explorer",
           "paged_memory_explorer", "quantization_figure", "quantization_explorer", "decode_bandwidth_figure"]

Workloads = Sequence[Tuple[str, float]]  # (label, FLOPs per byte)
_COLOURS = ("#3a7dbf", "#e4572e", "#54a24b", "#b279a2", "#f2a900", "#4c4c4c", "#17becf", "#9d755d")


# --------------------------------------------------------------------------- roofline
def _roofline_traces(workloads: Workloads, gpus: Dict[str, "decoding.GPUSpec"]) -> list:
    import plotly.graph_objects as go

    if not workloads:
        raise ValueError("workloads must name at least one (label, intensity) pair")
    x = np.logspace(-1, 4.5, 200)  # FLOPs per byte
    traces = []
    for i, gpu in enumerate(gpus.values()):
        y = [decoding.attainable_flops(float(v), gpu) / 1e12 for v in x]
        traces.append(go.Scatter(x=x, y=y, mode="lines", line=dict(color=_COLOURS[i % 8]),
                                 name=f"{gpu.name} (ridge {gpu.ridge:.0f} FLOP/B)"))
    first = next(iter(gpus.values()))
    xs = [float(w) for _, w in workloads]
    traces.append(go.Scatter(
        x=xs, y=[decoding.attainable_flops(w, first) / 1e12 for w in xs], mode="markers+text",
        text=[label for label, _ in workloads], textposition="top center",
        marker=dict(size=11, color="black", symbol="diamond"), name=_("attention, on the {gpu} roof").format(gpu=first.name)))
    return traces


def _roofline_layout(title: Optional[str]) -> dict:
    return dict(height=470, title=title,
                xaxis=dict(type="log", title=_("arithmetic intensity (FLOPs per byte of memory traffic)"),
                           range=[-1.2, 4.6], dtick=1),
                yaxis=dict(type="log", title=_("attainable TFLOP/s (published peaks)"), range=[-1.5, 3.7],
                           dtick=1),
                legend=dict(x=0.99, y=0.02, xanchor="right", yanchor="bottom", bgcolor="rgba(255,255,255,0.8)"))


def roofline_figure(workloads: Workloads, gpus: Optional[Dict[str, "decoding.GPUSpec"]] = None,
                    title: Optional[str] = None):
    """One roofline plot: ``min(peak, intensity x bandwidth)`` for each GPU (published
    figures, ``attn_edu.decoding.GPUS`` by default) and ``workloads`` -- (label, FLOPs per
    byte) pairs -- marked on the first GPU's roof. Returns a plotly figure."""
    import plotly.graph_objects as go

    fig = go.Figure(_roofline_traces(workloads, gpus or decoding.GPUS))
    fig.update_layout(**_roofline_layout(title))
    return fig


def roofline_explorer(workloads_at: Callable[[object], Workloads], values: Sequence[object],
                      slider_label: str, gpus: Optional[Dict[str, "decoding.GPUSpec"]] = None,
                      title: Optional[str] = None, initial_index: int = 0, value_format: str = "{}"):
    """:func:`roofline_figure` behind a slider: ``workloads_at(value)`` for each of ``values``."""
    gpus = gpus or decoding.GPUS
    return sweep_figure(values, lambda val: _roofline_traces(workloads_at(val), gpus), slider_label=slider_label,
                        value_format=value_format, initial_index=initial_index,
                        layout=_roofline_layout(title))


# --------------------------------------------------------------------------- paged cache
def draw_paged_cache(cache: "decoding.PagedKVCache", title: Optional[str] = None):
    """Draw the pool of pages (top row: each page coloured by the sequence that owns it, a
    shared page hatched with its reference count, the filled slots shaded) and every
    sequence's block table below it (one row per sequence, the page numbers it lists).
    Returns a matplotlib Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    seqs = cache.sequences
    colour = {s: _COLOURS[i % len(_COLOURS)] for i, s in enumerate(seqs)}
    owners: Dict[int, List] = {}
    fill = np.zeros(cache.num_pages, int)
    for s in seqs:
        n = cache.length(s)
        for i, page in enumerate(cache.block_table(s)):
            owners.setdefault(page, []).append(s)
            fill[page] = max(fill[page], min(cache.page_size, n - i * cache.page_size))
    rows = 1 + len(seqs)
    width = max(cache.num_pages, max((len(cache.block_table(s)) for s in seqs), default=0))
    fig, ax = plt.subplots(figsize=(min(14, 1.6 + 0.5 * width), 1.3 + 0.55 * rows), layout="constrained")
    for page in range(cache.num_pages):
        own = owners.get(page, [])
        face = "#eeeeee" if not own else colour[own[0]]
        ax.add_patch(Rectangle((page, rows - 1), 0.92, 0.8, facecolor=face, alpha=0.35, edgecolor="0.4",
                               hatch="//" if len(own) > 1 else None))
        if own:  # filled slots, as a bar inside the page
            ax.add_patch(Rectangle((page, rows - 1), 0.92 * fill[page] / cache.page_size, 0.2,
                                   facecolor=colour[own[0]], edgecolor="none"))
        label = str(page) if len(own) < 2 else f"{page}\n×{len(own)}"
        ax.text(page + 0.46, rows - 0.55, label, ha="center", va="center", fontsize=8)
    for r, s in enumerate(seqs):
        y = rows - 2 - r
        ax.text(-0.3, y + 0.4, f"{s!r} ({cache.length(s)} tokens)", ha="right", va="center", fontsize=9)
        for i, page in enumerate(cache.block_table(s)):
            ax.add_patch(Rectangle((i, y), 0.92, 0.8, facecolor=colour[s], alpha=0.8, edgecolor="0.3"))
            ax.text(i + 0.46, y + 0.4, str(page), ha="center", va="center", color="white", fontsize=9)
    ax.text(-0.3, rows - 0.6, f"pool ({cache.num_free_pages} free)", ha="right", va="center", fontsize=9,
            weight="bold")
    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(-0.2, rows)
    ax.axis("off")
    ax.set_title(title or f"pages of {cache.page_size} slots: the pool (top) and each sequence's block table")
    return fig


# --------------------------------------------------------------------------- MLA
def draw_mla(d_latent: int = 512, d_rope: int = 64, num_heads: int = 128, d_head: int = 128,
             title: Optional[str] = None):
    """Multi-head latent attention as a serving system runs it (matplotlib).

    Left: what a token puts in the cache, the latent ``c_t`` (``d_latent`` numbers) and the
    shared rotary key ``k^R_t`` (``d_rope``). Top right, prefill: every head's key and value
    rebuilt from the latent (multi-head attention, keys of ``d_head + d_rope``). Bottom right,
    decode: the query reassociated at run time into latent space, attention straight over
    the cached ``[c, k^R]`` (multi-query attention, keys of ``d_latent + d_rope``), and the
    up-projection applied to the latent output. The numbers come from the arguments
    (DeepSeek-V2's by default). Returns a matplotlib Figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    dc = _checks.check_length("d_latent", d_latent, minimum=1)
    dr = _checks.check_length("d_rope", d_rope, minimum=1)
    h = _checks.check_length("num_heads", num_heads, minimum=1)
    dh = _checks.check_length("d_head", d_head, minimum=1)
    fig, ax = plt.subplots(figsize=(11, 4.6), layout="constrained")

    def box(x, y, w, hgt, text, colour):
        ax.add_patch(FancyBboxPatch((x, y), w, hgt, boxstyle="round,pad=0.02,rounding_size=0.08",
                                    facecolor=colour, edgecolor="0.3"))
        ax.text(x + w / 2, y + hgt / 2, text, ha="center", va="center", fontsize=9)

    def arrow(x0, y0, x1, y1):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", color="0.3"))

    box(0.0, 2.0, 1.3, 0.8, "token $x_t$", "#eeeeee")
    box(2.0, 3.0, 2.2, 0.9, f"$c_t = x_t W_{{DKV}}$\nlatent, {dc} numbers", "#c6dbef")
    box(2.0, 1.0, 2.2, 0.9, f"$k^R_t = \\mathrm{{RoPE}}(x_t W_{{KR}})$\nrotary key, {dr} numbers", "#c6dbef")
    ax.text(3.1, 0.55, f"cached per token and layer: {dc} + {dr} = {dc + dr}\n"
                       f"(multi-head attention: 2 x {h} x {dh} = {2 * h * dh:,})",
            ha="center", va="center", fontsize=9, weight="bold")
    arrow(1.3, 2.5, 2.0, 3.4)
    arrow(1.3, 2.3, 2.0, 1.5)
    box(5.2, 3.0, 5.6, 1.4, "prefill (compute-bound): rebuild every head\n"
                            f"$k_{{t,h}} = [c_t W_{{UK,h}},\\ k^R_t]$ ({dh} + {dr}),  $v_{{t,h}} = c_t W_{{UV,h}}$ ({dh})\n"
                            f"multi-head attention over {h} heads of keys {dh + dr} wide", "#fde0c5")
    box(5.2, 0.5, 5.6, 2.0, "decode (memory-bound): reassociate at run time\n"
                            f"$\\tilde q_h = q^C_h W_{{UK,h}}^\\top$ ({dc} wide), then for every cached $t$\n"
                            f"$s_{{t,h}} = (\\tilde q_h \\cdot c_t + q^R_h \\cdot k^R_t)\\,/\\sqrt{{{dh} + {dr}}}$\n"
                            f"$o_h = (\\sum_t p_{{t,h}}\\, c_t)\\, W_{{UV,h}}$: multi-query attention,\n"
                            f"one shared key head {dc + dr} wide for all {h} query heads", "#d9f0d3")
    arrow(4.2, 3.5, 5.2, 3.7)
    arrow(4.2, 3.3, 5.2, 1.8)
    arrow(4.2, 1.4, 5.2, 3.3)
    arrow(4.2, 1.3, 5.2, 1.3)
    ax.set_xlim(-0.1, 11)
    ax.set_ylim(0.1, 4.6)
    ax.axis("off")
    ax.set_title(title or "Multi-head latent attention: one cache, two ways to attend to it")
    return fig


# --------------------------------------------------------------------------- occupancy
def occupancy_explorer(programs: int, lk: int, num_sms: int = 132, splits: Sequence[int] = (1, 2, 4, 8, 16, 32),
                       columns: int = 12, title: Optional[str] = None, block_k: int = 1):
    """Which SMs one decode step keeps busy when the keys are cut into ``s`` splits (slider).

    ``programs`` is the grid without splitting (``B * H_kv``); with ``s`` splits there are
    ``programs * s`` programs, each reading ``ceil(lk / s)`` keys (rounded up to a multiple
    of ``block_k``). Each frame colours the ``num_sms`` SMs by how many programs they run,
    and states the model's time (:func:`attn_edu.decoding.split_waves`, the model the
    Triton kernel's :func:`~attn_edu.kernels.decode_triton.choose_num_splits` minimises):
    waves x keys per program, if every SM reads at an equal share of the bandwidth.
    """
    import plotly.graph_objects as go

    rows = math.ceil(num_sms / columns)

    def traces(s: int):
        total = programs * s
        per_sm = np.zeros(rows * columns)
        per_sm[:num_sms] = [total // num_sms + (1 if i < total % num_sms else 0) for i in range(num_sms)]
        per_sm[num_sms:] = np.nan  # cells past the last SM
        busy = min(total, num_sms)
        waves, keys = decoding.split_waves(programs, lk, s, num_sms, block_k)
        rel = waves * keys / decoding.split_waves(programs, lk, 1, num_sms, block_k)[1]
        text = (f"{total} programs in {waves} wave(s), {busy} of {num_sms} SMs busy "
                f"({busy / num_sms:.0%}),<br>{keys} keys each; model time x{rel:.3f} of one split")
        return [go.Heatmap(z=per_sm.reshape(rows, columns), zmin=0, zmax=max(2, programs * max(splits) // num_sms),
                           colorscale=[[0, "#f0f0f0"], [0.01, "#c6dbef"], [1, "#08306b"]],
                           colorbar=dict(title=_("programs"), len=0.75, y=0.4), xgap=2, ygap=2,
                           hovertemplate="SM %{customdata}: %{z} program(s)<extra></extra>",
                           customdata=np.arange(rows * columns).reshape(rows, columns)),
                go.Scatter(x=[(columns - 1) / 2], y=[-1.4], mode="text", text=[text],
                           textfont=dict(size=13), showlegend=False)]

    return sweep_figure(list(splits), traces, slider_label="num_splits", value_format="{:d}",
                        layout=dict(height=440, title=title, xaxis=dict(visible=False),
                                    yaxis=dict(visible=False, range=[rows - 0.4, -2.3]),
                                    margin=dict(t=40 if title else 20)))


# --------------------------------------------------------------------------- paged memory
def paged_memory_explorer(lengths: Sequence[int], max_len: int, token_bytes: int,
                          page_sizes: Sequence[int] = (1, 4, 16, 64, 256, 1024), title: Optional[str] = None,
                          initial_index: Optional[int] = None):
    """Memory of a batch, contiguous max-length reservation vs. a paged cache, by page size.

    Each frame measures :func:`attn_edu.decoding.paged_vs_contiguous` (a real cache) and
    draws two stacked bars in GiB (slots x ``token_bytes``): tokens + unused reservation,
    and tokens + internal fragmentation, with the block-table entries in the label. The
    slider starts at a page of 16 tokens when offered (vLLM's default).
    """
    import plotly.graph_objects as go

    gib = token_bytes / 2**30
    tokens = sum(int(n) for n in lengths)

    def traces(page: int):
        r = decoding.paged_vs_contiguous(lengths, page, max_len)
        names = ["contiguous, max_len each", f"paged ({r['table_entries']:,} pages)"]
        return [go.Bar(x=names, y=[tokens * gib] * 2, name="tokens", marker_color="#3a7dbf"),
                go.Bar(x=names, y=[(r["reserved"] - tokens) * gib, r["fragmentation"] * gib],
                       name=_("allocated, never written"), marker_color="#e4572e",
                       text=[f"{(r['reserved'] - tokens) / r['reserved']:.0%} wasted",
                             f"{r['fragmentation'] / r['paged']:.1%} wasted"], textposition="outside")]

    page_sizes = list(page_sizes)
    if initial_index is None:
        initial_index = page_sizes.index(16) if 16 in page_sizes else 0
    return sweep_figure(page_sizes, traces, slider_label=_("page size (tokens)"), value_format="{:d}",
                        initial_index=initial_index,
                        layout=dict(barmode="stack", height=430, title=title, yaxis_title="GiB",
                                    legend=dict(x=0.99, y=0.98, xanchor="right")))


# --------------------------------------------------------------------------- quantization
_QUANT_CHOICES = [("keys, per channel", "k", "channel"), ("keys, per token", "k", "token"),
                  ("values, per token", "v", "token"), ("values, per channel", "v", "channel")]


def _quant_traces(q, k, v, fmt: str, group_size: Optional[int]):
    import plotly.graph_objects as go

    errs = []
    for _name, which, per in _QUANT_CHOICES:
        kw = {f"{which}_fmt": fmt, f"{which}_per": per}
        errs.append(decoding.attention_error(q, k, v, group_size=group_size, **kw))
    return [go.Bar(x=[c[0] for c in _QUANT_CHOICES], y=errs, marker_color=["#3a7dbf", "#9ecae1", "#e4572e",
                                                                           "#fdae6b"],
                   text=[f"{e:.2%}" for e in errs], textposition="outside", showlegend=False)]


def _quant_layout(title: Optional[str]) -> dict:
    return dict(height=420, title=title, yaxis=dict(type="log", title=_("relative error of the attention output"),
                                                    range=[-4.5, 0.7]))


def quantization_figure(q, k, v, fmt: str = "int8", group_size: Optional[int] = None,
                        title: Optional[str] = None):
    """Bars: :func:`attn_edu.decoding.attention_error` with only the keys or only the values
    stored as ``fmt``, scaled per channel or per token. Returns a plotly figure."""
    import plotly.graph_objects as go

    fig = go.Figure(_quant_traces(q, k, v, fmt, group_size))
    fig.update_layout(**_quant_layout(title))
    return fig


def quantization_explorer(q, k, v, formats: Sequence[str] = ("int2", "int3", "int4", "int6", "int8", "fp8_e4m3"),
                          group_size: Optional[int] = None, title: Optional[str] = None, initial_index: int = 4):
    """:func:`quantization_figure` behind a slider over the storage format."""
    return sweep_figure(list(formats), lambda f: _quant_traces(q, k, v, f, group_size), slider_label="format",
                        initial_index=initial_index, layout=_quant_layout(title))


# --------------------------------------------------------------------------- measured decoding
def decode_bandwidth_figure(doc: dict, timing: str = "call"):
    """The bandwidth one decode step achieves (KV-cache bytes read / time) against the cache
    length, one line per implementation and batch size, from a
    :func:`attn_edu.bench.decode_sweep` document; the title names the device and date, and for
    a recorded run who measured it (its ``measured_by``, :func:`attn_edu.bench.label`). A GPU
    the datasheet table knows (:func:`attn_edu.decoding.match_gpu`) gets its published memory
    bandwidth as a dashed line, the ceiling of a step that only reads its cache.

    ``timing="call"`` divides by the median time of an ordinary call (``median_ms``, launch
    overhead included: ``gb_per_s``); ``timing="graph"`` by the step's time replayed from a
    CUDA graph (``graph_median_ms``: the GPU's own time, what a server that captures its
    decode step pays), leaving out the rows that could not be captured.
    """
    import plotly.graph_objects as go

    if timing not in ("call", "graph"):
        raise ValueError(f"timing must be 'call' or 'graph'; got {timing!r}")

    def gb_per_s(r):
        if timing == "call":
            return r.get("gb_per_s")
        ms = r.get("graph_median_ms")
        return r["kv_bytes"] / (ms * 1e-3) / 1e9 if ms else None

    rows = [(r, gb_per_s(r)) for r in doc.get("results", []) if "error" not in r]
    rows = [(r, g) for r, g in rows if g]
    if not rows:
        raise ValueError(f"the decode sweep has no timed rows to plot (timing={timing!r})")
    fig = go.Figure()
    keys = sorted({(r["impl"], r["batch"]) for r, _ in rows})
    impls = sorted({impl for impl, _ in keys})
    for impl, batch in keys:
        pts = sorted((r["context"], g) for r, g in rows if (r["impl"], r["batch"]) == (impl, batch))
        fig.add_scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                        name=_("{impl}, batch {batch}").format(impl=impl, batch=batch),
                        line=dict(color=_COLOURS[impls.index(impl) % 8], dash="solid" if batch == 1 else "dot"))
    dev, cfg = doc["device"], doc.get("config", {})
    key = decoding.match_gpu(dev["name"]) if dev.get("kind") == "cuda" else None
    spec = None if key is None else decoding.GPU_TABLE[key]
    if spec is not None:   # the ceiling: the GPU's published memory bandwidth
        fig.add_hline(y=spec.bandwidth / 1e9, line=dict(color="grey", dash="dash", width=1),
                      annotation_text=_("{gpu} datasheet: {tb:.2f} TB/s").format(gpu=spec.name,
                                                                                tb=spec.bandwidth / 1e12),
                      annotation_position="bottom right")
    how = _("replayed from a CUDA graph") if timing == "graph" else _("one ordinary call")
    who = ""
    if doc.get("measured_by") in ("maintainers", "submitted"):   # a recorded run: who measured it
        from .bench.figures import label
        from .i18n import current_language

        who = "<br>" + label(doc["measured_by"], current_language())
    top = max([g for _, g in rows] + ([spec.bandwidth / 1e9] if spec is not None else []))
    fig.update_layout(
        height=440 if who else 420, margin=dict(t=120) if who else None,
        xaxis=dict(type="log", title=_("KV-cache length (tokens)")),
        yaxis=dict(title=_("GB/s read from the KV cache"), range=[0, 1.08 * top]),
        title=(_("One decode step, measured on {gpu} ({kind}), {date}").format(
                   gpu=dev["name"], kind=dev["kind"], date=doc["date"][:10]) + "<br>"
               f"H_q={cfg.get('heads')}, H_kv={cfg.get('kv_heads')}, d={cfg.get('d')}, {cfg.get('dtype')}, "
               f"{how}{who}"))
    return fig
