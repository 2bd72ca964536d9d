"""Figures for chapter 14 (attention across devices): the ring, step by step.

* :func:`ring_step_traces` / :func:`ring_step_figure` -- one step of ring attention: the
  score blocks each rank has computed, the ring and its transfers, the work per rank;
* :func:`ring_figure` -- every step of both layouts (contiguous, zigzag) behind a slider
  that works on the static page (:func:`attn_edu.viz.slider_figure`);
* :func:`draw_ulysses` -- Ulysses' all-to-all: who holds which (positions, heads) block
  before and after (matplotlib).

plotly and the schedule (:func:`attn_edu.distributed.ring_schedule`, which imports torch)
are imported inside the functions, so importing this module needs neither. Used by
chapter 14.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .viz import slider_figure
from .i18n import gettext as _

__all__ = ["RANK_COLORS", "ring_step_traces", "ring_step_figure", "ring_figure", "draw_ulysses"]

#: One colour per rank (Vega's palette), for the ring figures.
RANK_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#9d755d")


def _lighter(hex_colour: str, amount: float = 0.6) -> str:
    rgb = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


def ring_step_traces(world_size: int, layout: str = "zigzag", causal: bool = True, step: Optional[int] = None,
                     axes: Sequence[str] = ("", "2", "3")) -> list:
    """The plotly traces of the ring at ``step`` (None: after the last step), for three panels.

    1. a heatmap of the (query chunk, key chunk) blocks of the score matrix, in chunks of
       L/2P: masked (grey), not yet computed (white), computed at an earlier step (light, in
       the colour of the rank that did it) or at this step (full colour);
    2. the ring: every rank with its query chunks and whose keys/values it holds, arrows to
       the next rank for the transfer that overlaps this step;
    3. the work each rank has done so far, in tiles of (L/2P)^2 scores, and the ring's time
       so far (the sum over steps of the slowest rank's work).

    ``axes`` are the suffixes of the panels' axes (``x``, ``x2``, ``x3`` by default).
    Used by :func:`ring_figure` and chapter 14's live explorer; the plan is
    :func:`attn_edu.distributed.ring_schedule`.
    """
    import plotly.graph_objects as go

    from .distributed import sharding

    p = int(world_size)
    if not 1 <= p <= len(RANK_COLORS):
        raise ValueError(f"world_size must be between 1 and {len(RANK_COLORS)} to be drawn; got {world_size}")
    plan = sharding.ring_schedule(p, layout, causal)
    last = p - 1 if step is None else int(step)
    if not 0 <= last < p:
        raise ValueError(f"step must be in [0, {p}) or None; got {step!r}")
    g, unit = 2 * p, 2 if layout == "contiguous" else 1  # grid in chunks of L/2P
    z = np.where(np.tril(np.ones((g, g), bool)) | (not causal), 1, 0)  # 1: waiting, 0: masked
    work = np.zeros((p, last + 1))
    for t in range(last + 1):
        for r in range(p):
            for w in plan[t][r]:
                rows = range(w.q_chunk * unit, (w.q_chunk + 1) * unit)
                cols = range(w.k_chunk * unit, (w.k_chunk + 1) * unit)
                for a in rows:
                    for b in cols:
                        if z[a, b]:
                            z[a, b] = (2 + p + r) if (t == last and step is not None) else (2 + r)
                            work[r, t] += 1
    names = ["masked", "not yet"] + [f"done by rank {r}" for r in range(p)] + [f"rank {r}, now" for r in range(p)]
    colours = ["#e9e9e9", "#ffffff"] + [_lighter(RANK_COLORS[r]) for r in range(p)] + list(RANK_COLORS[:p])
    n = len(colours)
    scale = [[pos, c] for i, c in enumerate(colours) for pos in (i / n, (i + 1) / n)]
    grid = go.Heatmap(z=z, zmin=-0.5, zmax=n - 0.5, colorscale=scale, showscale=False, xgap=1, ygap=1,
                      text=[[names[v] for v in row] for row in z], xaxis="x" + axes[0], yaxis="y" + axes[0],
                      hovertemplate="query chunk %{y}, key chunk %{x}: %{text}<extra></extra>")
    angle = np.pi / 2 - 2 * np.pi * np.arange(p) / max(p, 1)  # rank 0 at the top, clockwise
    x, y = np.cos(angle), np.sin(angle)
    labels = []
    for r in range(p):
        source = (r - last) % p
        q_ids = ", ".join(map(str, sharding.chunk_ids(r, p, layout)))
        labels.append(f"<b>rank {r}</b><br>Q chunk {q_ids}<br>K/V of rank {source}")
    nodes = go.Scatter(x=x, y=y, mode="markers+text", text=labels, textposition="middle center",
                       marker=dict(size=74 if p <= 4 else 50, color=[_lighter(c, 0.45) for c in RANK_COLORS[:p]]),
                       textfont=dict(size=9), hoverinfo="skip", xaxis="x" + axes[1], yaxis="y" + axes[1])
    sending = step is not None and last < p - 1 and p > 1
    ax, ay, heads, tips = [], [], [], []
    for r in range(p):
        nx_, ny_ = x[(r + 1) % p], y[(r + 1) % p]
        x0, y0 = x[r] + 0.32 * (nx_ - x[r]), y[r] + 0.32 * (ny_ - y[r])  # clear of the nodes
        x1, y1 = x[r] + 0.62 * (nx_ - x[r]), y[r] + 0.62 * (ny_ - y[r])
        ax += [x0, x1, None] if sending else [None]
        ay += [y0, y1, None] if sending else [None]
        tips.append((x1, y1))
        heads.append(90 - np.degrees(np.arctan2(y1 - y0, x1 - x0)))
    arrows = go.Scatter(x=ax, y=ay, mode="lines", line=dict(color="#555555", width=2), hoverinfo="skip",
                        xaxis="x" + axes[1], yaxis="y" + axes[1])
    tip_x = [t[0] for t in tips] if sending else [None]
    tip_y = [t[1] for t in tips] if sending else [None]
    arrow_heads = go.Scatter(x=tip_x, y=tip_y, mode="markers", hoverinfo="skip",
                             marker=dict(symbol="triangle-up", size=12, color="#555555",
                                         angle=heads if sending else [0]),
                             xaxis="x" + axes[1], yaxis="y" + axes[1])
    done = work.sum(axis=1)
    pace = work.max(axis=0).sum()
    caption = f"step {last}" if step is not None else "all steps done"
    centre = go.Scatter(x=[0], y=[0], mode="text", hoverinfo="skip", textfont=dict(size=11),
                        text=[f"{layout}<br>{caption}<br>ring time: {pace:g} tiles"],
                        xaxis="x" + axes[1], yaxis="y" + axes[1])
    bars = go.Bar(x=[f"rank {r}" for r in range(p)], y=done, marker_color=list(RANK_COLORS[:p]),
                  text=[f"{v:g}" for v in done], textposition="outside", xaxis="x" + axes[2],
                  yaxis="y" + axes[2], hovertemplate="%{x}: %{y} tiles so far<extra></extra>")
    return [grid, arrows, arrow_heads, nodes, centre, bars]


def _ring_layout(world_size: int, causal: bool) -> dict:
    g = 2 * world_size
    top = 4 * world_size if causal else 8 * world_size
    return dict(
        height=460, showlegend=False, margin=dict(t=70, l=50, r=20, b=40), plot_bgcolor="white",
        xaxis=dict(title=_("key chunk"), range=[-0.5, g - 0.5], dtick=1, domain=[0.0, 0.27],
                   constrain="domain", anchor="y", showgrid=False),
        yaxis=dict(title=_("query chunk"), range=[g - 0.5, -0.5], dtick=1, scaleanchor="x",
                   constrain="domain", anchor="x", showgrid=False),
        xaxis2=dict(visible=False, range=[-1.5, 1.5], domain=[0.31, 0.69], anchor="y2"),
        yaxis2=dict(visible=False, range=[-1.5, 1.5], scaleanchor="x2", anchor="x2"),
        xaxis3=dict(domain=[0.78, 1.0], anchor="y3"),
        yaxis3=dict(title=_("tiles computed so far"), range=[0, top * 1.15], anchor="x3",
                    gridcolor="#eeeeee"),
    )


def ring_step_figure(world_size: int, layout: str = "zigzag", causal: bool = True, step: Optional[int] = None):
    """One state of the ring as a plotly figure (see :func:`ring_step_traces`). Chapter 14."""
    import plotly.graph_objects as go

    fig = go.Figure(ring_step_traces(world_size, layout, causal, step))
    fig.update_layout(**_ring_layout(world_size, causal),
                      title=(_("Ring attention on {n} ranks, {layout} layout, causal") if causal
                             else _("Ring attention on {n} ranks, {layout} layout")).format(n=world_size, layout=layout))
    return fig


def ring_figure(world_size: int = 4, causal: bool = True, layouts: Sequence[str] = ("contiguous", "zigzag")):
    """The ring step by step, for each layout, behind a slider (works with no kernel).

    Frames "contiguous · step 0" ... "zigzag · done": the three panels of
    :func:`ring_step_traces` at every step of every layout. Chapter 14.
    """
    frames = []
    for layout in layouts:
        for t in range(world_size):
            frames.append((f"{layout} · step {t}", ring_step_traces(world_size, layout, causal, t)))
        frames.append((f"{layout} · done", ring_step_traces(world_size, layout, causal, None)))
    fig = slider_figure(frames, slider_label="", play_button=True, frame_duration_ms=900,
                        layout=dict(**_ring_layout(world_size, causal),
                                    title=(_("Ring attention on {n} ranks, causal mask") if causal
                                           else _("Ring attention on {n} ranks")).format(n=world_size)))
    fig.layout.sliders[0].currentvalue.update(prefix="", xanchor="right")  # clear of Play
    return fig




def draw_ulysses(world_size: int = 4, num_heads: int = 8, title: Optional[str] = None):
    """Ulysses' all-to-all as a picture: the (position chunk, head) blocks of one tensor
    (Q, K, V or O), coloured by the rank that holds them, before (sequence shards: rank r
    holds positions chunk r of every head) and after (head shards: rank r holds every
    position of heads ``r H/P .. (r+1) H/P - 1``). Each rank keeps the ``1/P`` of its blocks
    that stay and sends the rest, one share to every other rank. Returns a matplotlib Figure
    (each block a Rectangle with gid ``"before-<chunk>-<head>"`` / ``"after-<chunk>-<head>"``).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from . import _checks

    p = _checks.check_length("world_size", world_size, minimum=1)
    h = _checks.check_length("num_heads", num_heads, minimum=1)
    if p > len(RANK_COLORS):
        raise ValueError(f"world_size must be at most {len(RANK_COLORS)} to draw; got {p}")
    if h % p:
        raise ValueError(f"num_heads must be divisible by world_size (Ulysses gives each rank H/P heads); "
                         f"got num_heads={h}, world_size={p}")
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4), layout="constrained")
    panels = (("before", "sequence shards: rank r holds positions chunk r", lambda i, j: i),
              ("after", f"head shards: rank r holds all positions of {h // p} heads", lambda i, j: j // (h // p)))
    for ax, (name, caption, owner) in zip(axes, panels):
        for i in range(p):          # position chunk (rows, top = first positions)
            for j in range(h):      # head (columns)
                stays = i == j // (h // p)  # rank i holds it before and after: not sent
                ax.add_patch(Rectangle((j, p - 1 - i), 0.94, 0.9, facecolor=RANK_COLORS[owner(i, j)],
                                       edgecolor="black" if stays else "0.6", linewidth=2.0 if stays else 0.4,
                                       gid=f"{name}-{i}-{j}"))
        for r in range(p):
            ax.text(-0.2, p - 1 - r + 0.45, f"L/P chunk {r}", ha="right", va="center", fontsize=8)
        ax.set_xlim(-2.2, h + 0.1)
        ax.set_ylim(-0.6, p + 0.2)
        ax.text(h / 2, -0.35, "heads 0 .. H-1", ha="center", va="center", fontsize=8)
        ax.set_title(caption, fontsize=10)
        ax.axis("off")
    fig.suptitle(title or f"Ulysses' all-to-all, P = {p} ranks, H = {h} heads: each rank keeps the 1/P of its "
                          f"blocks outlined in black\nand sends the rest, one share to each other rank", fontsize=10)
    for r in range(p):  # legend: one swatch per rank
        axes[1].add_patch(Rectangle((h + 0.3, p - 1 - r + 0.2), 0.5, 0.5, facecolor=RANK_COLORS[r],
                                    edgecolor="none", clip_on=False))
        axes[1].text(h + 1.0, p - 1 - r + 0.45, f"rank {r}", va="center", fontsize=8, clip_on=False)
    return fig
