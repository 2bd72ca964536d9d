"""Figures for the book: attention heatmaps (matplotlib) and slider figures (plotly).

Chapters import these instead of repeating plot code (one home per figure type):

* :func:`heatmap` -- one (L_q, L_k) weight matrix, axes "key" (x) / "query" (y);
* :func:`heatmap_grid` -- rows x cols of matrices (heads, layers, scales) with one shared
  colour bar, so colours mean the same number in every panel;
* :func:`soft_lookup` -- one query's soft lookup in a 2-D dictionary: key space and value
  space side by side, markers sized by the weights (chapter 01's first figure);
* :func:`slider_figure` / :func:`sweep_figure` -- a plotly figure whose slider steps
  through *precomputed* frames. It keeps working on the static, rendered book page,
  where no kernel runs; the ipywidgets twin that recomputes live is in
  :mod:`attn_edu.widgets`.

matplotlib and plotly are imported inside the functions, so ``import attn_edu`` needs
NumPy only. Inputs may be NumPy arrays, nested lists or (any-device) torch tensors.

First used in chapter 01; reused by chapters 02, 05, 06, 07, 09 and 11.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np
from ._checks import is_torch_tensor
from .i18n import N_
from .i18n import gettext as _

__all__ = ["heatmap", "heatmap_grid", "soft_lookup", "slider_figure", "sweep_figure"]

Labels = Optional[Sequence[Any]]


# --------------------------------------------------------------------------- helpers
def _to_numpy(name: str, x: object) -> np.ndarray:
    """A float64 NumPy copy of an array-like or a torch tensor (detached, moved to the CPU)."""
    if is_torch_tensor(x):
        x = x.detach().to("cpu").double().numpy()  # type: ignore[attr-defined]
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged nested lists and the like
        raise TypeError(f"{name} must be array-like; got {type(x).__name__} ({exc})") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a numeric array; got dtype {arr.dtype}")
    return arr.astype(np.float64)


def _matrix(name: str, x: object) -> np.ndarray:
    arr = _to_numpy(name, x)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be one 2-D (L_q, L_k) matrix; got shape {arr.shape}. "
            "Index a single head/batch entry first, or use heatmap_grid for several."
        )
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); nothing to draw")
    return arr


def _check_labels(name: str, labels: Labels, n: int) -> Optional[List[str]]:
    if labels is None:
        return None
    if isinstance(labels, str):
        raise TypeError(f"{name} must be a sequence of labels, not a single string ({labels!r})")
    out = [str(s) for s in labels]
    if len(out) != n:
        raise ValueError(f"{name} has {len(out)} labels but the matrix has {n} along that axis")
    return out


def _set_ticks(ax, n_rows: int, n_cols: int, x_labels: Optional[List[str]],
               y_labels: Optional[List[str]], max_ticks: int = 32) -> None:
    """Integer ticks at cell centres (thinned for big matrices), or the given labels."""
    if x_labels is not None:
        ax.set_xticks(range(n_cols))
        rotate = max(len(s) for s in x_labels) > 2
        ax.set_xticklabels(x_labels, rotation=45 if rotate else 0, ha="right" if rotate else "center",
                           rotation_mode="anchor")
    else:
        step = max(1, math.ceil(n_cols / max_ticks))
        ax.set_xticks(range(0, n_cols, step))
    if y_labels is not None:
        ax.set_yticks(range(n_rows))
        ax.set_yticklabels(y_labels)
    else:
        step = max(1, math.ceil(n_rows / max_ticks))
        ax.set_yticks(range(0, n_rows, step))


def _annotate(ax, mat: np.ndarray, image, fmt: str) -> None:
    """Write each cell's value on it, dark text on light cells and light text on dark ones."""
    cmap, norm = image.get_cmap(), image.norm
    for i in range(mat.shape[0]):
        for j in range(mat.shape[1]):
            value = mat[i, j]
            if not np.isfinite(value):
                text, colour = str(value), "black"
            else:
                r, g, b, _alpha = cmap(norm(value))
                colour = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
                text = format(value, fmt)
            ax.text(j, i, text, ha="center", va="center", color=colour, fontsize=8)


# --------------------------------------------------------------------------- matplotlib
def heatmap(
    weights: object,
    ax: Any = None,
    x_labels: Labels = None,
    y_labels: Labels = None,
    title: Optional[str] = None,
    cmap: str = "viridis",
    colorbar: bool = True,
    annotate: bool = False,
    *,
    x_label: str = N_("key"),
    y_label: str = N_("query"),
    vmin: Optional[float] = None,
    vmax: Optional[float] = None,
    colorbar_label: str = N_("attention weight"),
    fmt: str = ".2f",
    figsize: Optional[Tuple[float, float]] = None,
    aspect: str = "equal",
):
    """Draw one attention-weight matrix as a heatmap; returns the matplotlib ``Figure``.

    Args:
        weights: shape (L_q, L_k); row i = how much query i attends to each key.
        ax: draw into this Axes (its figure is returned); default a new figure.
        x_labels, y_labels: tick labels for keys (L_k of them) and queries (L_q), e.g. tokens.
        title: the axes title.
        cmap: a matplotlib colour map name.
        colorbar: add a colour bar labelled ``colorbar_label``.
        annotate: write each weight in its cell (formatted with ``fmt``); for small matrices.
        x_label, y_label: axis labels, "key" and "query" by default.
        vmin, vmax: colour limits; default the matrix's min and max.
        aspect: "equal" (square cells) or "auto" (fill the axes).

    The figure is made with pyplot, so a notebook shows it at the end of the cell; end the
    cell with ``plt.show()`` (not with the returned figure) to see it once.

    Raises ValueError for anything but one non-empty 2-D matrix (index a head first, or use
    :func:`heatmap_grid`) and for label lists of the wrong length. Chapter 01 introduces it.
    """
    mat = _matrix("weights", weights)
    xl = _check_labels("x_labels", x_labels, mat.shape[1])
    yl = _check_labels("y_labels", y_labels, mat.shape[0])
    import matplotlib.pyplot as plt

    if ax is None:
        if figsize is None:
            figsize = (min(10.0, 2.0 + 0.55 * mat.shape[1]), min(8.0, 1.2 + 0.5 * mat.shape[0]))
            figsize = (max(figsize[0], 4.0), max(figsize[1], 2.8))
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    else:
        fig = ax.figure
    image = ax.imshow(mat, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest", aspect=aspect)
    ax.grid(False)  # grid lines (a common rc default) would cut through the cells
    _set_ticks(ax, mat.shape[0], mat.shape[1], xl, yl)
    ax.set_xlabel(_(x_label))  # a label the catalog has is shown translated
    ax.set_ylabel(_(y_label))
    if title is not None:
        ax.set_title(title)
    if annotate:
        _annotate(ax, mat, image, fmt)
    if colorbar:
        cb = fig.colorbar(image, ax=ax, shrink=0.9)
        cb.set_label(_(colorbar_label))
    return fig


def heatmap_grid(
    matrices: object,
    titles: Optional[Sequence[str]] = None,
    nrows: Optional[int] = None,
    ncols: Optional[int] = None,
    shared_colorbar: bool = True,
    x_label: str = N_("key"),
    y_label: str = N_("query"),
    *,
    cmap: str = "viridis",
    vmin: Optional[float] = None,
    vmax: Optional[float] = None,
    suptitle: Optional[str] = None,
    x_labels: Labels = None,
    y_labels: Labels = None,
    annotate: bool = False,
    fmt: str = ".2f",
    colorbar_label: str = N_("attention weight"),
    panel_size: float = 2.6,
):
    """Draw several (L_q, L_k) matrices in a grid; returns the matplotlib ``Figure``.

    Args:
        matrices: a sequence of 2-D arrays (shapes may differ), a (N, L_q, L_k) array, or a
            (R, C, L_q, L_k) array such as (batch, heads, L_q, L_k) weights, drawn as R rows
            of C panels.
        titles: one per matrix (row-major order), optional.
        nrows, ncols: grid size; by default one row of up to 4 panels (or (R, C) for 4-D input).
        shared_colorbar: one colour bar for the whole grid and the same colour limits in every
            panel (default the global min and max), so equal colours mean equal numbers.
            With ``False`` each panel gets its own limits and colour bar.
        x_label, y_label: drawn once, on the bottom row and the left column.

    Raises ValueError for an empty input, a matrix that is not 2-D, a grid too small for
    the matrices, or a wrong number of titles. Chapter 01 introduces it; chapters 05-07 use it.
    """
    if is_torch_tensor(matrices) or isinstance(matrices, np.ndarray):
        arr = _to_numpy("matrices", matrices)
        if arr.ndim == 4:
            if nrows is None and ncols is None:
                nrows, ncols = arr.shape[0], arr.shape[1]
            arr = arr.reshape(-1, *arr.shape[2:])  # (R*C, Lq, Lk), row-major
        if arr.ndim != 3:
            raise ValueError(
                f"matrices as one array must have shape (N, L_q, L_k) or (R, C, L_q, L_k); got {arr.shape}"
            )
        mats = list(arr)
    else:
        if isinstance(matrices, (str, bytes)) or not isinstance(matrices, Sequence):
            raise TypeError(f"matrices must be a sequence of 2-D arrays or one array; got {type(matrices).__name__}")
        mats = [_matrix(f"matrices[{i}]", m) for i, m in enumerate(matrices)]
    n = len(mats)
    if n == 0:
        raise ValueError("heatmap_grid needs at least one matrix; got none")
    for i, m in enumerate(mats):
        _matrix(f"matrices[{i}]", m)
    if titles is not None:
        titles = [str(t) for t in titles]
        if len(titles) != n:
            raise ValueError(f"got {len(titles)} titles for {n} matrices")
    for name, value in (("nrows", nrows), ("ncols", ncols)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
            raise ValueError(f"{name} must be a positive integer; got {value!r}")
    if nrows is None and ncols is None:
        ncols = min(n, 4)
    if ncols is None:
        ncols = math.ceil(n / nrows)  # type: ignore[operator]
    if nrows is None:
        nrows = math.ceil(n / ncols)
    if nrows * ncols < n:
        raise ValueError(f"a {nrows} x {ncols} grid has room for {nrows * ncols} matrices; got {n}")

    if shared_colorbar:
        finite = [m[np.isfinite(m)] for m in mats]
        lo = vmin if vmin is not None else min((float(f.min()) for f in finite if f.size), default=0.0)
        hi = vmax if vmax is not None else max((float(f.max()) for f in finite if f.size), default=1.0)
    import matplotlib.pyplot as plt

    # panel height follows the matrices' aspect (cells stay square), within limits
    aspect = min(1.5, max(0.4, max(m.shape[0] / m.shape[1] for m in mats)))
    width = panel_size * ncols + (1.0 if shared_colorbar else 0.8 * ncols)
    height = (panel_size * aspect + 0.7) * nrows + (0.4 if suptitle else 0.0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained")
    image = None
    for idx, ax in enumerate(axes.flat):
        if idx >= n:
            ax.set_visible(False)
            continue
        r, c = divmod(idx, ncols)
        mat = mats[idx]
        heatmap(mat, ax=ax, title=titles[idx] if titles else None, cmap=cmap,
                colorbar=not shared_colorbar, annotate=annotate, fmt=fmt,
                x_labels=x_labels if x_labels is not None and len(x_labels) == mat.shape[1] else None,
                y_labels=y_labels if y_labels is not None and len(y_labels) == mat.shape[0] else None,
                x_label=x_label if r == nrows - 1 or idx + ncols >= n else "",
                y_label=y_label if c == 0 else "",
                vmin=lo if shared_colorbar else vmin, vmax=hi if shared_colorbar else vmax,
                colorbar_label=colorbar_label, aspect="auto")  # panels fill their cells
        image = ax.images[-1]
    if shared_colorbar and image is not None:
        visible = [ax for ax in axes.flat if ax.get_visible()]
        cb = fig.colorbar(image, ax=visible, shrink=0.95 if nrows > 1 else 1.0, aspect=12 * nrows)
        cb.set_label(_(colorbar_label))
    if suptitle is not None:
        fig.suptitle(suptitle)
    return fig

def soft_lookup(query: object, keys: object, values: object, scale: float = 1.0,
                key_names: Labels = None):
    """Draw the soft lookup of one query in a dictionary of 2-D keys and 2-D values.

    Left, key space ("where to look"): keys as grey arrows, the query as a red one. Right,
    value space ("what you get"): the values, their convex hull (shaded), their mean (x) and
    the output (red star), which never leaves the hull. Marker areas grow with the weights
    ``softmax(scale * keys @ query)`` (:func:`attn_edu.reference.scaled_dot_product_attention`).
    Returns the matplotlib ``Figure``.

    Args:
        query: shape (2,); keys: (L_k, 2); values: (L_k, 2), one value per key.
        scale: the scale s (inverse temperature) of the scores.
        key_names: one label per key (default ``k0, k1, ...``), written with its weight.

    Raises ValueError for other shapes. Chapter 01 draws its toy dictionary with it.
    """
    q, k, v = (_to_numpy(n, x) for n, x in (("query", query), ("keys", keys), ("values", values)))
    if q.shape != (2,) or k.shape != v.shape or k.ndim != 2 or k.shape[1] != 2 or len(k) == 0:
        raise ValueError(f"soft_lookup needs query (2,), keys and values (L_k, 2), L_k >= 1; "
                         f"got query {q.shape}, keys {k.shape}, values {v.shape}")
    names = _check_labels("key_names", key_names, k.shape[0]) or [f"k{j}" for j in range(k.shape[0])]
    from .reference import scaled_dot_product_attention

    out, w = (a[0] for a in scaled_dot_product_attention(q[None], k, v, scale=scale,
                                                          return_weights=True))  # (2,), (L_k,)
    import matplotlib.pyplot as plt
    fig, (ax_k, ax_v) = plt.subplots(1, 2, figsize=(10, 5.4), layout="constrained")
    size = 30 + 1500 * w                         # marker areas grow with the weights
    gap = 6 + np.sqrt(size / np.pi)              # labels just outside the markers
    ax_k.scatter(*k.T, s=size, alpha=0.6, label=_("keys (area ∝ weight)"))
    for j, kj in enumerate(k):
        ax_k.annotate("", xy=kj, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color="0.5"))
        ax_k.annotate(f"{names[j]}\nw = {w[j]:.3f}", kj, xytext=kj / max(np.hypot(*kj), 1e-12) * (gap[j] + 14),
                      textcoords="offset points", ha="center", va="center", fontsize=9)
    ax_k.annotate("", xy=q, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color="tab:red", lw=2))
    ax_k.plot(*q, "o", color="tab:red", label=_("query q = {q}").format(q=f"({q[0]:g}, {q[1]:g})"))
    lim = max(2 * np.abs(k).max(), np.abs(q).max()) + 0.6
    ax_k.set(xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal", xlabel=_("key dim 0"),
             ylabel=_("key dim 1"), title=_("key space: where to look"))
    u = np.linspace(0, 2 * np.pi, 720, endpoint=False)              # 720 directions, in order
    best = (v @ np.stack([np.cos(u), np.sin(u)])).argmax(0)           # furthest value along each
    hull = v[best[np.sort(np.unique(best, return_index=True)[1])]]   # the hull's corners, in turn
    ax_v.fill(*hull.T, color="tab:green", alpha=0.12, label=_("convex hull of the values"))
    ax_v.scatter(*v.T, s=size, color="tab:green", alpha=0.6, label=_("values (area ∝ weight)"))
    for j, vj in enumerate(v):
        ax_v.annotate(f"v{j}", vj, xytext=(0, gap[j]), ha="center", textcoords="offset points", fontsize=9)
    ax_v.plot(*v.mean(0), "x", color="0.3", ms=9, label=_("mean of the values"))
    ax_v.plot(*out, "*", color="tab:red", ms=16, label=_("output {o}").format(o=f"({out[0]:.2f}, {out[1]:.2f})"))
    ax_v.set(xlim=(v[:, 0].min() - 0.7, v[:, 0].max() + 0.9), aspect="equal",
             ylim=(v[:, 1].min() - 0.7, v[:, 1].max() + 0.9), xlabel=_("value dim 0"),
             ylabel=_("value dim 1"), title=_("value space: what you get"))
    for ax in (ax_k, ax_v):
        leg = ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8)
        for handle in (h for h in leg.legend_handles if hasattr(h, "set_sizes")):
            handle.set_sizes([40])                # legend markers at one small size
    fig.suptitle(f"Soft lookup with scale s = {scale:.3g}")
    return fig


# --------------------------------------------------------------------------- plotly
Frame = Tuple[Any, Any]


def _as_traces(where: str, traces: object) -> list:
    """Normalise what a frame holds (a trace, a dict, or a list of them) to a list."""
    if isinstance(traces, (list, tuple)):
        out = list(traces)
    else:
        out = [traces]
    if not out:
        raise ValueError(f"{where} has no traces")
    for t in out:
        if not (isinstance(t, dict) or hasattr(t, "to_plotly_json")):
            raise TypeError(f"{where} must hold plotly traces (go.Bar, go.Scatter, ...) or dicts; got {type(t).__name__}")
    return out


def slider_figure(
    frames: Sequence[Frame],
    *,
    slider_label: str = N_("scale"),
    value_format: str = "{:.3g}",
    title: Optional[str] = None,
    xaxis_title: Optional[str] = None,
    yaxis_title: Optional[str] = None,
    initial_index: int = 0,
    play_button: bool = False,
    frame_duration_ms: int = 400,
    base_figure: Any = None,
    layout: Optional[dict] = None,
):
    """A plotly figure with a slider that steps through precomputed frames.

    Args:
        frames: a sequence of ``(value, traces)``; ``traces`` is a plotly trace, a dict, or a
            list of them, and every frame must have the same number of traces (plotly
            matches them by position). One slider step per frame, labelled
            ``value_format.format(value)`` (or ``str(value)`` for a non-number).
        slider_label: shown before the current value, e.g. "scale = 1".
        initial_index: the frame shown first; the figure's data is that frame's traces.
        play_button: add Play/Pause buttons that animate through the frames.
        base_figure: a figure whose layout (e.g. subplots from ``make_subplots``, axis ranges)
            is kept; traces may then name their axes (``xaxis="x2"``).
        layout: extra ``update_layout`` arguments, e.g. ``{"yaxis_range": [0, 1]}``.

    Everything is precomputed, so the slider works on a static HTML page with no kernel.
    Notebook renderers do not auto-play; ``fig.to_html``/``write_html`` do by default (the
    page would run through every frame on load), so pass ``auto_play=False`` there.
    Chapter 01 introduces it (one query's weights as the scale changes).
    """
    import plotly.graph_objects as go

    frames = list(frames)
    if not frames:
        raise ValueError("slider_figure needs at least one frame; got none")
    labels, traces_per_frame = [], []
    for i, item in enumerate(frames):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError(f"frames[{i}] must be a (value, traces) pair; got {type(item).__name__}")
        value, traces = item
        traces = _as_traces(f"frames[{i}]", traces)
        if traces_per_frame and len(traces) != len(traces_per_frame[0]):
            raise ValueError(
                f"every frame must have the same number of traces; frame 0 has {len(traces_per_frame[0])}, "
                f"frame {i} has {len(traces)}"
            )
        label = value_format.format(value) if isinstance(value, numbers.Number) else str(value)
        labels.append(label)
        traces_per_frame.append(traces)
    if len(set(labels)) != len(labels):
        raise ValueError(f"slider labels must be distinct (they name the frames); got {labels}. "
                         "Use a value_format with more digits.")
    if isinstance(initial_index, bool) or not isinstance(initial_index, numbers.Integral) \
            or not 0 <= initial_index < len(frames):
        raise ValueError(f"initial_index must be an integer in [0, {len(frames)}); got {initial_index!r}")

    fig = go.Figure(base_figure) if base_figure is not None else go.Figure()
    fig.data = ()
    for t in traces_per_frame[initial_index]:
        fig.add_trace(t)
    fig.frames = [go.Frame(data=traces, name=label) for label, traces in zip(labels, traces_per_frame)]

    def animate_args(names, duration):
        return [names, {"mode": "immediate", "frame": {"duration": duration, "redraw": True},
                        "transition": {"duration": 0}}]

    steps = [{"method": "animate", "label": label, "args": animate_args([label], 0)} for label in labels]
    slider = {
        "active": int(initial_index),
        "steps": steps,
        "currentvalue": {"prefix": f"{_(slider_label)} = ", "font": {"size": 14}},
        "pad": {"t": 55, "b": 10},
        "len": 0.9 if play_button else 1.0,
        "x": 0.1 if play_button else 0.0,
    }
    update = {"sliders": [slider]}
    if play_button:
        update["updatemenus"] = [{
            "type": "buttons", "direction": "left", "showactive": False,
            "x": 0.0, "y": 0.0, "xanchor": "left", "yanchor": "top", "pad": {"t": 60, "r": 10},
            "buttons": [
                {"label": "Play", "method": "animate", "args": animate_args(None, frame_duration_ms)},
                {"label": "Pause", "method": "animate", "args": animate_args([None], 0)},
            ],
        }]
    if title is not None:
        update["title"] = {"text": title}
    if xaxis_title is not None:
        update["xaxis_title"] = xaxis_title
    if yaxis_title is not None:
        update["yaxis_title"] = yaxis_title
    fig.update_layout(**update)
    if layout:
        fig.update_layout(**layout)
    return fig


def sweep_figure(
    values: Sequence[Any],
    make_traces: Callable[[Any], object],
    *,
    slider_label: str = N_("scale"),
    title: Optional[str] = None,
    xaxis_title: Optional[str] = None,
    yaxis_title: Optional[str] = None,
    value_format: str = "{:.3g}",
    initial_index: int = 0,
    play_button: bool = False,
    frame_duration_ms: int = 400,
    base_figure: Any = None,
    layout: Optional[dict] = None,
):
    """Sweep a parameter: ``make_traces(value)`` for every value, shown behind a slider.

    ``make_traces(value)`` returns a plotly trace, a dict, or a list of them (the same
    number for every value). The result is :func:`slider_figure` of
    ``[(v, make_traces(v)) for v in values]``: ``len(values)`` frames and slider steps,
    all computed now, so the figure works on the static page. Other arguments as in
    :func:`slider_figure`.

    >>> fig = sweep_figure([0.5, 1, 2], lambda s: go.Bar(y=softmax(s * scores)))  # doctest: +SKIP

    Chapter 01 introduces it; chapter 02 sweeps d_k and the temperature with it.
    """
    if not callable(make_traces):
        raise TypeError(f"make_traces must be callable, value -> traces; got {type(make_traces).__name__}")
    if isinstance(values, (str, bytes)):
        raise TypeError("values must be a sequence of parameter values, not a string")
    try:
        values = list(values)
    except TypeError:
        raise TypeError(f"values must be a sequence of parameter values; got {type(values).__name__}") from None
    if not values:
        raise ValueError("sweep_figure needs at least one value to sweep; got none")
    return slider_figure(
        [(v, make_traces(v)) for v in values],
        slider_label=slider_label, value_format=value_format, title=title,
        xaxis_title=xaxis_title, yaxis_title=yaxis_title, initial_index=initial_index,
        play_button=play_button, frame_duration_ms=frame_duration_ms,
        base_figure=base_figure, layout=layout,
    )


# --------------------------------------------------------------------------- masks
def plot_mask(
    mask: object,
    ax: Any = None,
    title: Optional[str] = None,
    q_labels: Labels = None,
    k_labels: Labels = None,
    cmap: Union[str, Sequence[Any]] = ("#e6e6e6", "#2c6fbb"),
    *,
    legend: bool = True,
    grid_max: int = 48,
    figsize: Optional[Tuple[float, float]] = None,
):
    """Draw a boolean attention mask (True = may attend); returns the matplotlib ``Figure``.

    Like a matrix: row i (y axis, "query position i", top to bottom) is the query,
    column j (x axis, "key position j", left to right) the key, cell (i, j) coloured
    "may attend" (True) or "masked" (False). A legend names the two colours, and thin
    lines separate the cells when both sides are at most ``grid_max`` long.

    Args:
        mask: a 2-D boolean (L_q, L_k) NumPy array or torch tensor (e.g.
            ``attn_edu.masks.causal_mask(4, 6, "bottom_right")`` or one batch entry of a
            padding mask). Index a batch/head entry first for bigger masks.
        ax: draw into this Axes (its figure is returned); default a new figure.
        title: the axes title.
        q_labels, k_labels: tick labels for the L_q queries and the L_k keys (e.g. tokens).
        cmap: a pair of colours ``(masked, may attend)`` or a matplotlib colour-map name
            (its two ends are used).
        legend: add the legend that names the colours.

    The image data is the mask as 0/1 (``fig.axes[0].images[0].get_array()``).
    Raises TypeError for a non-boolean mask (a 0/1 integer or float mask is ambiguous:
    convert with ``mask.astype(bool)``) and ValueError for anything but one non-empty 2-D
    matrix or label lists of the wrong length. Chapter 05 draws both causal alignments with it.
    """
    if is_torch_tensor(mask):
        if str(mask.dtype) != "torch.bool":  # type: ignore[attr-defined]
            raise TypeError(f"mask must be boolean (True = may attend); got dtype {mask.dtype}")  # type: ignore[attr-defined]
        mask = mask.detach().to("cpu").numpy()  # type: ignore[attr-defined]
    arr = np.asarray(mask)
    if arr.dtype != bool:
        raise TypeError(
            f"mask must be boolean (True = may attend); got dtype {arr.dtype}. "
            "Convert a 0/1 mask with mask.astype(bool) (NumPy) or mask.bool() (torch)."
        )
    arr = _matrix("mask", arr)  # one non-empty 2-D (L_q, L_k) matrix
    lq, lk = arr.shape
    kl = _check_labels("k_labels", k_labels, lk)
    ql = _check_labels("q_labels", q_labels, lq)
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap, to_rgba
    from matplotlib.patches import Patch

    if isinstance(cmap, str):
        cm = plt.get_cmap(cmap)
        colours = [cm(0.0), cm(1.0)]
    else:
        colours = list(cmap)
        if len(colours) != 2:
            raise ValueError(f"cmap must be a colour-map name or two colours (masked, may attend); got {cmap!r}")
    colours = [to_rgba(c) for c in colours]

    if ax is None:
        if figsize is None:
            width = min(8.0, 1.2 + 0.45 * lk) + (2.2 if legend else 0.0)  # room for the legend
            figsize = (max(width, 4.2), max(min(8.0, 1.2 + 0.45 * lq), 2.6))
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    else:
        fig = ax.figure
    ax.imshow(arr.astype(np.int64), cmap=ListedColormap(colours), vmin=0, vmax=1,
              interpolation="nearest", origin="upper", aspect="equal")
    ax.grid(False)
    _set_ticks(ax, lq, lk, kl, ql)
    if lq <= grid_max and lk <= grid_max:  # thin lines between the cells
        ax.set_xticks(np.arange(-0.5, lk, 1.0), minor=True)
        ax.set_yticks(np.arange(-0.5, lq, 1.0), minor=True)
        ax.grid(which="minor", color="white", linewidth=1.0)
        ax.tick_params(which="minor", length=0)
    ax.set_xlabel(_("key position j"))
    ax.set_ylabel(_("query position i"))
    if title is not None:
        ax.set_title(title)
    if legend:
        handles = [Patch(facecolor=colours[1], edgecolor="0.5", label=_("may attend (True)")),
                   Patch(facecolor=colours[0], edgecolor="0.5", label=_("masked (False)"))]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  frameon=False)
    return fig


__all__.append("plot_mask")
