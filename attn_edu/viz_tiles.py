"""Figures for chapter 09 (tiling and the online softmax): tile layouts and the tiled loop
watched step by step.

* :func:`tile_layout_heatmap` -- a tile plan's schedule (skipped / partial / full tiles,
  :attr:`attn_edu.masks.TilePlan.schedule`) as one plotly heatmap trace;
* :func:`tile_trace_figure` -- ``flash_attention(..., return_trace=True)`` replayed one
  tile per slider step: which tile, the running max ``m`` and sum ``l`` of the current
  query block, and the partial output ``o = A / l`` of every row so far;
* :func:`fit_axis_ranges` -- axis ranges of a slider figure that hold every frame's bars
  (the block-size explorer's bytes and tile counts change by orders of magnitude with B).

plotly is imported inside the functions, so importing this module does not need it.
Used by chapter 09.
"""
from __future__ import annotations

import math
import re
from typing import Any, Optional, Sequence, Union

import numpy as np

from .viz import slider_figure
from .i18n import gettext as _

__all__ = ["TILE_KINDS", "TILE_COLORS", "fit_axis_ranges", "tile_layout_heatmap", "tile_trace_figure"]

#: Names of a tile plan's schedule values 0, 1, 2.
TILE_KINDS = ("skipped", "partial", "full")
#: The colours of the three kinds, in order (grey, orange, blue).
TILE_COLORS = ("#eeeeee", "#fdae6b", "#3a7dbf")


def _step_scale(colors: Sequence[str]) -> list:
    k = len(colors)
    return [[p, c] for i, c in enumerate(colors) for p in (i / k, (i + 1) / k)]


def tile_layout_heatmap(schedule: Any, **kwargs: Any):
    """A ``go.Heatmap`` of a tile schedule, shape ``(n_q_blocks, n_k_blocks)`` with values
    0 (skipped), 1 (partial: masked element by element) and 2 (full), each tile labelled on
    hover. Extra keyword arguments go to ``go.Heatmap`` (e.g. ``xaxis="x2"``). Chapter 09.
    """
    import plotly.graph_objects as go

    grid = np.asarray(schedule)
    if grid.ndim != 2 or not np.isin(grid, (0, 1, 2)).all():
        raise ValueError(f"schedule must be a 2-D array of 0 (skipped), 1 (partial), 2 (full); "
                         f"got shape {grid.shape} with values {np.unique(grid)[:5]}")
    text = [[TILE_KINDS[int(g)] for g in row] for row in grid]
    return go.Heatmap(z=grid, zmin=-0.5, zmax=2.5, colorscale=_step_scale(TILE_COLORS), showscale=False,
                      xgap=1, ygap=1, text=text,
                      hovertemplate="query block %{y}, key block %{x}: %{text}<extra></extra>", **kwargs)


_STATUS = ("waiting", "done", "now", "skipped")
_STATUS_COLORS = ("#f7f7f7", "#9ecae1", "#e4572e", "#cccccc")


def tile_trace_figure(trace: Sequence[Any], out: Any, title: Optional[str] = None, frame_duration_ms: int = 700):
    """Replay a tiled loop one tile per slider step (with a Play button), four panels.

    ``trace`` is the list that ``flash_attention(q, k, v, ..., return_trace=True)`` returns
    for one head (records with ``q_block``, ``k_block``, ``skipped``, ``q_rows``, ``m``,
    ``l``, ``o``) and ``out`` its output ``(L_q, d_v)``. Panels: the grid of tiles (waiting,
    done, now, skipped); the running max ``m`` and sum ``l`` of the current query block
    after this tile; the partial output ``o = A / l`` of every row so far. Chapter 09.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    out = np.asarray(out)
    if not len(trace) or out.ndim != 2:
        raise ValueError(f"need a non-empty trace and a 2-D output (L_q, d_v); got {len(trace)} records "
                         f"and an output of shape {out.shape}")
    L, dv = out.shape
    nq = 1 + max(r.q_block for r in trace)
    nk = 1 + max(r.k_block for r in trace)
    finite_m = np.concatenate([np.asarray(r.m)[np.isfinite(r.m)] for r in trace] + [np.zeros(1)])
    m_range = [min(0.0, finite_m.min()) - 0.5, finite_m.max() + 0.5]
    l_max = max(float(np.max(r.l)) for r in trace) * 1.1 or 1.0
    o_lim = float(np.abs(out).max()) or 1.0
    rows_x = np.arange(L)

    def frame(t: int) -> list:
        r = trace[t]
        grid = np.zeros((nq, nk))
        for u in trace[:t]:
            grid[u.q_block, u.k_block] = 3 if u.skipped else 1
        grid[r.q_block, r.k_block] = 3 if r.skipped else 2
        m_bar, l_bar = np.full(L, np.nan), np.full(L, np.nan)
        r0, r1 = r.q_rows
        m_bar[r0:r1] = np.where(np.isfinite(r.m), r.m, np.nan)
        l_bar[r0:r1] = r.l
        o_now = np.full((L, dv), np.nan)
        for u in trace[:t + 1]:  # the latest state of each row block
            o_now[u.q_rows[0]:u.q_rows[1]] = u.o
        return [
            go.Heatmap(z=grid, zmin=-0.5, zmax=3.5, colorscale=_step_scale(_STATUS_COLORS), showscale=False,
                       text=[[_STATUS[int(g)] for g in row] for row in grid], texttemplate="%{text}",
                       xgap=2, ygap=2, xaxis="x", yaxis="y",
                       hovertemplate="query block %{y}, key block %{x}<extra></extra>"),
            go.Bar(x=rows_x, y=m_bar, marker_color="#3a7dbf", xaxis="x2", yaxis="y2", name="m"),
            go.Bar(x=rows_x, y=l_bar, marker_color="#54a24b", xaxis="x3", yaxis="y3", name="ℓ"),
            go.Heatmap(z=o_now, zmin=-o_lim, zmax=o_lim, colorscale="RdBu", xaxis="x4", yaxis="y4",
                       colorbar=dict(len=0.4, y=0.2),
                       hovertemplate="row %{y}, column %{x}: %{z:.3f}<extra></extra>"),
        ]

    base = make_subplots(rows=2, cols=2, horizontal_spacing=0.12, vertical_spacing=0.16,
                         subplot_titles=("tiles: query block × key block", "running max m (current query block)",
                                         "running sum ℓ (current query block)",
                                         "partial output o = A/ℓ (all rows so far)"))
    labels = [f"{t}: ({r.q_block},{r.k_block})" + (" skip" if r.skipped else "") for t, r in enumerate(trace)]
    fig = slider_figure(
        [(lab, frame(t)) for t, lab in enumerate(labels)], slider_label=_("step: tile"), play_button=True,
        frame_duration_ms=frame_duration_ms, base_figure=base,
        layout=dict(height=660, showlegend=False, margin=dict(t=100), title=title,
                    yaxis=dict(autorange="reversed", title=_("query block")),
                    xaxis=dict(title=_("key block"), side="bottom"),
                    xaxis2=dict(range=[-0.5, L - 0.5], title=_("query row")), yaxis2=dict(range=m_range),
                    xaxis3=dict(range=[-0.5, L - 0.5], title=_("query row")), yaxis3=dict(range=[0, l_max]),
                    yaxis4=dict(autorange="reversed", title=_("query row")), xaxis4=dict(title=_("output column"))))
    fig.layout.sliders[0].currentvalue.xanchor = "right"  # clear of the Play button
    return fig


def fit_axis_ranges(fig: Any, axes: Union[str, Sequence[str]]):
    """Set the range of each axis in ``axes`` (layout names: ``"yaxis2"``, ``"xaxis"``) so
    that it holds every value drawn on it in the figure's data and in all its frames (a
    :func:`attn_edu.viz.sweep_figure`'s steps): no step clips a bar. A linear axis gets
    ``[0, 1.2 x max]`` (room for a label outside a bar; from ``1.2 x min`` when that is
    negative); a log axis runs from half the smallest positive value to three times the
    largest, so that a bar of 1 still shows (a log axis has no 0 for a bar to rise from).
    Returns ``fig``, changed in place. Chapter 09's block-size explorer uses it.
    """
    names = [axes] if isinstance(axes, str) else list(axes)
    for name in names:
        if not (isinstance(name, str) and re.fullmatch(r"[xy]axis([2-9]|[1-9][0-9]+)?", name)):
            raise ValueError(f"axes names layout axes such as 'yaxis' or 'xaxis2'; got {name!r}")
        letter, ref = name[0], name[0] + name[5:]  # "yaxis2" -> "y", "y2"
        values = []
        for traces in [fig.data] + [f.data for f in fig.frames]:
            for tr in traces:
                if (getattr(tr, letter + "axis", None) or letter) == ref and getattr(tr, letter, None) is not None:
                    values.extend(np.ravel(np.asarray(getattr(tr, letter), dtype=float)).tolist())
        values = np.array([x for x in values if np.isfinite(x)])
        if values.size == 0:
            raise ValueError(f"no trace draws a finite {letter} value on {name}")
        if fig.layout[name].type == "log":
            positive = values[values > 0]
            if positive.size == 0:
                raise ValueError(f"{name} is a log axis but no value on it is positive")
            fig.layout[name].range = [math.log10(positive.min() / 2), math.log10(positive.max() * 3)]
        else:
            low, high = min(values.min(), 0.0), max(values.max(), 0.0)
            fig.layout[name].range = [1.2 * low, 1.2 * high if high > 0 else 1.0]
    return fig
