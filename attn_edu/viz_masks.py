"""Figures for chapter 05 (masks, cross-attention and decoding): every kind of mask.

* :data:`MASK_KINDS` -- the five kinds the chapter's explorers offer (causal top-left and
  bottom-right, encoder padding, decoder causal + padding, cross-attention + padding);
* :func:`causal_rule` -- the causal condition ``j ≤ i + offset`` as text, for titles;
* :func:`mask_for_kind` -- one kind's boolean mask (True = may attend) with its tick
  labels and title, built with :mod:`attn_edu.masks`: what a live
  :func:`attn_edu.widgets.live_explorer` redraws with :func:`attn_edu.viz.plot_mask`;
* :func:`mask_explorer` -- the static explorer: a menu picks the kind, a slider runs
  through its configurations ((L_q, L_k) for the causal kinds, the number of real tokens
  for the padding kinds); every frame is computed now, so it works on the static page.

plotly is imported inside :func:`mask_explorer`, so importing this module needs NumPy
only. Used by chapter 05.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from .masks import causal_mask, causal_offset, padding_mask, query_key_mask
from .i18n import gettext as _

__all__ = ["MASK_KINDS", "causal_rule", "mask_for_kind", "mask_explorer"]

#: The mask kinds of chapter 05's explorers, in menu order.
MASK_KINDS = ("causal, top-left", "causal, bottom-right", "padding (encoder self)",
              "causal + padding (decoder self)", "cross + encoder padding")

_BLUE, _GREY = "#2c6fbb", "#e6e6e6"  # may attend, masked (the colours of viz.plot_mask)


def causal_rule(offset: int) -> str:
    """The causal condition ``j ≤ i + offset`` as text: ``"j ≤ i"``, ``"j ≤ i + 3"`` or
    ``"j ≤ i − 3"``. ``offset`` is 0 for top-left alignment and ``L_k − L_q`` for
    bottom-right (chapter 05)."""
    offset = int(offset)
    if offset > 0:
        return f"j ≤ i + {offset}"
    if offset < 0:
        return f"j ≤ i − {-offset}"
    return "j ≤ i"


def _check_kind(kind: str) -> None:
    if kind not in MASK_KINDS:
        raise ValueError(f"kind must be one of {list(MASK_KINDS)}; got {kind!r}")


def mask_for_kind(kind: str, lq: int, lk: int, n_valid: int
                  ) -> Tuple[np.ndarray, List[str], List[str], str]:
    """The mask of one kind of :data:`MASK_KINDS`, with its tick labels and a title.

    Returns ``(mask, q_labels, k_labels, title)``, ``mask`` a boolean (L_q, L_k) array
    (True = may attend):

    * ``"causal, top-left"`` / ``"causal, bottom-right"``: ``causal_mask(lq, lk, align)``;
      the query labels name the position each query stands for (``i + L_k − L_q`` for
      bottom-right); ``n_valid`` is not used;
    * ``"padding (encoder self)"``: L_k tokens of which the first ``n_valid`` are real,
      padded queries and keys masked (``query_key_mask``); ``lq`` is not used (L_q = L_k);
    * ``"causal + padding (decoder self)"``: the same AND the causal mask;
    * ``"cross + encoder padding"``: ``lq`` decoder queries (no padding) against ``lk``
      encoder keys, the first ``n_valid`` real.

    ``n_valid`` is clipped to ``lk``. Chapter 05's live explorer draws the result with
    :func:`attn_edu.viz.plot_mask`; :func:`mask_explorer` uses it for every frame.
    """
    _check_kind(kind)
    q_labels = [f"q{i}" for i in range(lq)]
    if kind.startswith("causal,"):
        align = "top_left" if "top" in kind else "bottom_right"
        off = causal_offset(lq, lk, align)
        m = causal_mask(lq, lk, align).view(np.ndarray)
        q_labels = [f"q{i} (pos {i + off})" for i in range(lq)]
        return (m, q_labels, [f"k{j}" for j in range(lk)],
                f"{kind}, Lq={lq}, Lk={lk}: {causal_rule(off)}")
    n_valid = min(n_valid, lk)
    k_valid = padding_mask([n_valid], lk)  # (1, Lk)
    name = "k" if kind.startswith("cross") else "t"  # t: token
    k_labels = [f"{name}{j}" if j < n_valid else "pad" for j in range(lk)]
    if kind.startswith("cross"):  # decoder: no pads
        m = query_key_mask(np.ones((1, lq), bool), k_valid)[0]
        return (m, q_labels, k_labels, f"cross-attention: {lq} decoder "
                f"queries, {n_valid} of {lk} encoder keys real")
    m = query_key_mask(k_valid, k_valid)[0]  # (L, L)
    if "decoder" in kind:
        m = m & causal_mask(lk).view(np.ndarray)
    return (m, k_labels, k_labels, f"{kind}: {n_valid} of {lk} tokens real")


def _mask_traces_layout(kind: str, lq: int, lk: int, n_valid: int) -> Tuple[list, dict]:
    """Heatmap + "fully masked" labels, and the axes (flat ``"xaxis.tickvals"`` keys)."""
    import plotly.graph_objects as go

    m, ql, kl, title = mask_for_kind(kind, lq, lk, n_valid)
    empty = np.flatnonzero(~m.any(axis=1))  # fully masked rows
    traces = [
        go.Heatmap(z=m.astype(int), x=list(range(m.shape[1])),
                   y=list(range(m.shape[0])), zmin=0, zmax=1,
                   colorscale=[[0, _GREY], [0.5, _GREY], [0.5, _BLUE], [1, _BLUE]],
                   showscale=False, xgap=2, ygap=2,
                   hovertemplate="query %{y}, key %{x}<extra></extra>"),
        go.Scatter(x=[(m.shape[1] - 1) / 2] * len(empty), y=empty,
                   mode="text", text=["all masked → 0"] * len(empty),
                   textfont=dict(color="firebrick", size=12),
                   hoverinfo="skip", showlegend=False),
    ]
    layout = {"title.text": title,
              "xaxis.tickvals": list(range(len(kl))), "xaxis.ticktext": kl,
              "yaxis.tickvals": list(range(len(ql))), "yaxis.ticktext": ql}
    return traces, layout


def _nested(flat: Dict[str, object]) -> dict:
    """``{"xaxis.tickvals": v, ...}`` -> ``{"xaxis": {"tickvals": v}, ...}`` (a frame's layout)."""
    out: dict = {}
    for key, value in flat.items():
        outer, inner = key.split(".")
        out.setdefault(outer, {})[inner] = value
    return out


def mask_explorer(l_max: int = 8):
    """Chapter 05's static mask explorer: a plotly figure whose menu picks one of
    :data:`MASK_KINDS` and whose slider runs through that kind's configurations.

    * causal kinds: every (L_q, L_k) with both in 1..``l_max`` (starting at L_q = 3, L_k = 6);
    * padding kinds (encoder, decoder): 6 tokens, 1 to 6 of them real (starting at 4);
    * cross-attention: 4 decoder queries, 7 encoder keys, 1 to 7 real (starting at 5).

    Every frame is precomputed (``go.Frame`` per configuration, the slider steps animate to
    them), so it works on a page with no kernel. Fully masked rows are labelled "all masked
    → 0". Each frame's mask is :func:`mask_for_kind`'s.
    """
    import plotly.graph_objects as go

    l_max = int(l_max)
    if l_max < 7:
        raise ValueError(f"l_max must be at least 7 (cross-attention shows 7 keys); got {l_max}")
    kinds = MASK_KINDS
    configs = {k: [(lq, lk, 0) for lk in range(1, l_max + 1)
                   for lq in range(1, l_max + 1)] for k in kinds[:2]}
    for k in kinds[2:4]:
        configs[k] = [(6, 6, n) for n in range(1, 7)]
    configs[kinds[4]] = [(4, 7, n) for n in range(1, 8)]
    start = {kinds[0]: (3, 6, 0), kinds[1]: (3, 6, 0), kinds[2]: (6, 6, 4),
             kinds[3]: (6, 6, 4), kinds[4]: (4, 7, 5)}

    def step_label(kind, lq, lk, n):
        return f"Lq={lq}, Lk={lk}" if kind in kinds[:2] else f"{n} of {lk} real"

    frames, sliders, buttons = [], {}, []
    anim = {"mode": "immediate", "frame": {"duration": 0, "redraw": True},
            "transition": {"duration": 0}}
    for kind in kinds:
        steps = []
        for lq, lk, n in configs[kind]:
            name = f"{kind} | {lq}x{lk}, {n}"
            traces, layout = _mask_traces_layout(kind, lq, lk, n)
            frames.append(go.Frame(name=name, data=traces, traces=[0, 1],
                                   layout=_nested(layout)))
            steps.append({"method": "animate", "args": [[name], anim],
                          "label": step_label(kind, lq, lk, n)})
        many = len(steps) > 10  # 64 steps: hide the tick labels
        sliders[kind] = {
            "active": configs[kind].index(start[kind]), "steps": steps,
            "currentvalue": {"prefix": "", "font": {"size": 14, "color": "#222"}},
            "font": {"color": "rgba(0,0,0,0)" if many else "#444"},
            "x": 0.0, "len": 1.0, "y": -0.04, "yanchor": "top",
            "pad": {"t": 0, "b": 0}}
        traces, layout = _mask_traces_layout(kind, *start[kind])
        restyle = {"z": [traces[0].z, None], "x": [traces[0].x, traces[1].x],
                   "y": [traces[0].y, traces[1].y], "text": [None, traces[1].text]}
        buttons.append({"label": kind, "method": "update",
                        "args": [restyle, {**layout, "sliders": [sliders[kind]]}, [0, 1]]})

    traces, layout = _mask_traces_layout(kinds[0], *start[kinds[0]])
    legend_items = [go.Scatter(x=[None], y=[None], mode="markers", name=name,
                               marker=dict(symbol="square", size=14, color=c))
                    for name, c in [("may attend (True)", _BLUE), ("masked (False)", _GREY)]]
    fig = go.Figure(data=traces + legend_items, frames=frames)
    # pixel layout: 200 px above the 400 px plot (menu, title, legend, key axis), 110 px
    # below (slider); in paper units y = 1 + pixels / 400
    fig.update_layout(
        height=710, margin=dict(t=200, b=110, l=110, r=20),
        title=dict(x=0.5, y=1 - 62 / 710, yanchor="middle"),
        xaxis=dict(title=_("key position j"), range=[-0.5, l_max - 0.5],
                   side="top", tickangle=0, showgrid=False, zeroline=False),
        yaxis=dict(title=_("query position i"), range=[l_max - 0.5, -0.5],
                   scaleanchor="x", showgrid=False, zeroline=False),
        legend=dict(orientation="h", x=0.5, xanchor="center", y=1 + 110 / 400, yanchor="top"),
        plot_bgcolor="white",
        updatemenus=[dict(buttons=buttons, type="dropdown", active=0,
                          x=0.0, xanchor="left", y=1 + 190 / 400, yanchor="top")],
        sliders=[sliders[kinds[0]]],
    )
    fig.update_layout(**layout)
    return fig
