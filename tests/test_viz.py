"""Tests for attn_edu.viz (heatmaps, slider figures) and attn_edu.widgets (live explorers)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from attn_edu import masks, viz, widgets  # noqa: E402

go = pytest.importorskip("plotly.graph_objects")
ipywidgets = pytest.importorskip("ipywidgets")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _weights(lq: int = 3, lk: int = 5, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(lq, lk))
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ----------------------------------------------------------------------------- heatmap
def test_heatmap_draws_the_matrix_with_labels_and_title():
    w = _weights()
    fig = viz.heatmap(w, title="weights")
    assert isinstance(fig, matplotlib.figure.Figure)
    main = fig.axes[0]
    np.testing.assert_array_equal(np.asarray(main.images[0].get_array()), w)
    assert main.get_xlabel() == "key"
    assert main.get_ylabel() == "query"
    assert main.get_title() == "weights"
    assert len(fig.axes) == 2  # the heatmap and its colour bar
    assert fig.axes[1].get_ylabel() == "attention weight"


def test_heatmap_tick_labels_annotations_and_no_colorbar():
    w = _weights(2, 3)
    fig = viz.heatmap(w, x_labels=["the", "cat", "sat"], y_labels=["q0", "q1"], colorbar=False,
                      annotate=True, x_label="token", y_label="position")
    ax = fig.axes[0]
    assert len(fig.axes) == 1
    assert [t.get_text() for t in ax.get_xticklabels()] == ["the", "cat", "sat"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["q0", "q1"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("token", "position")
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == sorted(format(v, ".2f") for v in w.ravel())


def test_heatmap_into_given_axes_returns_its_figure():
    fig, ax = plt.subplots()
    out = viz.heatmap(_weights(), ax=ax, colorbar=False)
    assert out is fig
    assert len(ax.images) == 1


def test_heatmap_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    w = _weights()
    fig = viz.heatmap(torch.tensor(w, dtype=torch.float32))
    np.testing.assert_allclose(np.asarray(fig.axes[0].images[0].get_array()), w, rtol=1e-6)


@pytest.mark.parametrize("bad", [np.zeros((2, 3, 4)), np.zeros(5), np.zeros((0, 3))])
def test_heatmap_rejects_non_matrices(bad):
    with pytest.raises(ValueError, match="2-D|empty"):
        viz.heatmap(bad)


def test_heatmap_rejects_wrong_labels_and_non_numbers():
    with pytest.raises(ValueError, match="x_labels has 2 labels"):
        viz.heatmap(_weights(3, 5), x_labels=["a", "b"])
    with pytest.raises(TypeError, match="sequence of labels"):
        viz.heatmap(_weights(3, 5), y_labels="abc")
    with pytest.raises(TypeError, match="numeric"):
        viz.heatmap([["a", "b"], ["c", "d"]])


# ------------------------------------------------------------------------ heatmap_grid
def test_heatmap_grid_shares_one_colorbar_and_colour_limits():
    mats = [_weights(seed=s) * (s + 1) for s in range(6)]
    fig = viz.heatmap_grid(mats, titles=[f"head {i}" for i in range(6)], nrows=2, ncols=3)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 6
    colorbars = [ax for ax in fig.axes if not ax.images and ax.get_visible()]
    assert len(colorbars) == 1  # exactly one colour bar
    lo = min(float(m.min()) for m in mats)
    hi = max(float(m.max()) for m in mats)
    for im in images:
        assert im.get_clim() == pytest.approx((lo, hi))
    for im, m in zip(images, mats):
        np.testing.assert_array_equal(np.asarray(im.get_array()), m)
    assert [ax.get_title() for ax in fig.axes if ax.images] == [f"head {i}" for i in range(6)]
    # axis labels once: bottom row gets "key", left column gets "query"
    grid = [ax for ax in fig.axes if ax.images]
    assert [ax.get_xlabel() for ax in grid] == ["", "", "", "key", "key", "key"]
    assert [ax.get_ylabel() for ax in grid] == ["query", "", "", "query", "", ""]


def test_heatmap_grid_takes_a_4d_array_as_rows_by_columns():
    w = np.stack([np.stack([_weights(seed=b * 10 + h) for h in range(3)]) for b in range(2)])  # (2, 3, 3, 5)
    fig = viz.heatmap_grid(w)
    grid = [ax for ax in fig.axes if ax.images]
    assert len(grid) == 6
    rows = {round(ax.get_position().y0, 3) for ax in grid}
    assert len(rows) == 2
    np.testing.assert_array_equal(np.asarray(grid[4].images[0].get_array()), w[1, 1])


def test_heatmap_grid_hides_unused_panels_and_separate_colorbars():
    mats = [_weights(seed=s) for s in range(3)]
    fig = viz.heatmap_grid(mats, nrows=2, ncols=2, shared_colorbar=False)
    assert sum(1 for ax in fig.axes if ax.images) == 3
    assert sum(1 for ax in fig.axes if not ax.get_visible()) == 1
    colorbars = [ax for ax in fig.axes if ax.get_visible() and not ax.images]
    assert len(colorbars) == 3
    clims = [ax.images[0].get_clim() for ax in fig.axes if ax.images]
    for clim, m in zip(clims, mats):
        assert clim == pytest.approx((m.min(), m.max()))


def test_heatmap_grid_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        viz.heatmap_grid([])
    with pytest.raises(ValueError, match="2-D"):
        viz.heatmap_grid([np.zeros((2, 2)), np.zeros((2, 2, 2))])
    with pytest.raises(ValueError, match="room for 2"):
        viz.heatmap_grid([_weights()] * 3, nrows=1, ncols=2)
    with pytest.raises(ValueError, match="titles"):
        viz.heatmap_grid([_weights()] * 2, titles=["only one"])
    with pytest.raises(ValueError, match=r"\(N, L_q, L_k\)"):
        viz.heatmap_grid(np.zeros((2, 3)))


# ------------------------------------------------------------------------ soft_lookup
def _toy_dictionary():
    keys = np.array([[1.0, 0], [0, 1], [-1, 0], [0, -1]])      # E, N, W, S
    values = np.array([[1.0, 0], [3, 1], [2, 3], [0, 2]])
    return np.array([2.0, 1.0]), keys, values


@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])
def test_soft_lookup_sizes_markers_by_the_weights_and_puts_the_output_in_the_hull(scale):
    q, keys, values = _toy_dictionary()
    w = np.exp(scale * keys @ q)
    w /= w.sum()                                  # the weights, by hand
    fig = viz.soft_lookup(q, keys, values, scale=scale, key_names=list("ENWS"))
    ax_k, ax_v = fig.axes
    assert fig._suptitle.get_text() == f"Soft lookup with scale s = {scale:.3g}"
    for ax in (ax_k, ax_v):                       # marker areas grow with the weights
        np.testing.assert_allclose(ax.collections[-1].get_sizes(), 30 + 1500 * w)
    star = next(l for l in ax_v.get_lines() if l.get_marker() == "*")
    np.testing.assert_allclose(np.ravel(star.get_data()), w @ values)   # the output
    hull = ax_v.patches[0].get_xy()[:-1]          # the shaded hull: the four values, in turn
    assert sorted(map(tuple, hull)) == sorted(map(tuple, values))
    labels = [t.get_text() for t in ax_k.texts if t.get_text()]
    assert labels == [f"{n}\nw = {x:.3f}" for n, x in zip("ENWS", w)]


def test_soft_lookup_hull_leaves_out_a_value_inside_it():
    q, keys, values = _toy_dictionary()
    keys, values = np.vstack([keys, [1, 1]]), np.vstack([values, values.mean(0)])
    fig = viz.soft_lookup(q, keys, values)
    assert len(fig.axes[1].patches[0].get_xy()) == 4 + 1   # 4 corners, closed


@pytest.mark.parametrize("args", [(np.zeros(3), np.zeros((4, 2)), np.zeros((4, 2))),
                                  (np.zeros(2), np.zeros((4, 3)), np.zeros((4, 3))),
                                  (np.zeros(2), np.zeros((4, 2)), np.zeros((5, 2))),
                                  (np.zeros(2), np.zeros((0, 2)), np.zeros((0, 2)))])
def test_soft_lookup_rejects_shapes_it_cannot_draw(args):
    with pytest.raises(ValueError, match="soft_lookup needs"):
        viz.soft_lookup(*args)


# ----------------------------------------------------------------------- sweep_figure
def _bar_traces(scale: float):
    scores = np.array([2.0, 1.0, -2.0, -1.0])
    e = np.exp(scale * scores - (scale * scores).max())
    return [go.Bar(x=["k0", "k1", "k2", "k3"], y=e / e.sum(), name="weights")]


def test_sweep_figure_frames_steps_and_initial_data():
    values = [0.1, 0.5, 1.0, 2.0, 10.0]
    fig = viz.sweep_figure(values, _bar_traces, slider_label="scale", title="t",
                           xaxis_title="key", yaxis_title="weight", value_format="{:.3g}")
    assert len(fig.frames) == len(values)
    steps = fig.layout.sliders[0].steps
    assert len(steps) == len(values)
    assert [s.label for s in steps] == ["0.1", "0.5", "1", "2", "10"]
    assert [f.name for f in fig.frames] == [s.label for s in steps]
    assert all(list(s.args[0]) == [f.name] for s, f in zip(steps, fig.frames))
    assert fig.layout.sliders[0].currentvalue.prefix == "scale = "
    np.testing.assert_array_equal(np.asarray(fig.data[0].y), np.asarray(fig.frames[0].data[0].y))
    for k, v in enumerate(values):
        np.testing.assert_allclose(np.asarray(fig.frames[k].data[0].y), _bar_traces(v)[0].y)
    assert fig.layout.title.text == "t"
    assert fig.layout.xaxis.title.text == "key"
    assert fig.layout.yaxis.title.text == "weight"


def test_sweep_figure_initial_index_play_button_and_base_layout():
    from plotly.subplots import make_subplots

    values = np.geomspace(0.25, 4, 5)

    def traces(s):
        w = _bar_traces(s)[0].y
        return [go.Bar(y=w, xaxis="x", yaxis="y"), go.Scatter(x=[s], y=[w.max()], xaxis="x2", yaxis="y2")]

    base = make_subplots(rows=1, cols=2)
    fig = viz.sweep_figure(values, traces, initial_index=2, play_button=True, base_figure=base,
                           layout={"yaxis_range": [0, 1]})
    assert fig.layout.sliders[0].active == 2
    np.testing.assert_allclose(np.asarray(fig.data[0].y), traces(values[2])[0].y)
    assert fig.data[1].xaxis == "x2"
    assert fig.layout.xaxis2 is not None and fig.layout.xaxis2.domain[0] > 0.5
    assert tuple(fig.layout.yaxis.range) == (0, 1)
    labels = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert labels == ["Play", "Pause"]
    assert len(base.data) == 0  # the base figure is not modified


def test_sweep_figure_serialises_with_frames_for_a_static_page():
    import json

    fig = viz.sweep_figure([1, 2], lambda s: {"type": "bar", "y": [s, 1]})
    spec = json.loads(fig.to_json())
    assert [f["name"] for f in spec["frames"]] == ["1", "2"]
    assert [f["data"][0]["y"] for f in spec["frames"]] == [[1, 1], [2, 1]]
    html = fig.to_html(include_plotlyjs=False, full_html=False, auto_play=False)
    assert "Plotly.addFrames" in html and '"sliders"' in html


def test_sweep_figure_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one value"):
        viz.sweep_figure([], _bar_traces)
    with pytest.raises(TypeError, match="callable"):
        viz.sweep_figure([1.0], "not a function")
    with pytest.raises(ValueError, match="same number of traces"):
        viz.sweep_figure([1, 2], lambda s: [go.Bar(y=[1])] * s)
    with pytest.raises(TypeError, match="plotly traces"):
        viz.sweep_figure([1], lambda s: [np.zeros(3)])
    with pytest.raises(ValueError, match="distinct"):
        viz.sweep_figure([1.0001, 1.0002], _bar_traces, value_format="{:.2f}")
    with pytest.raises(ValueError, match="initial_index"):
        viz.sweep_figure([1, 2], _bar_traces, initial_index=2)
    with pytest.raises(ValueError, match="at least one frame"):
        viz.slider_figure([])
    with pytest.raises(TypeError, match="pair"):
        viz.slider_figure([go.Bar(y=[1])])


# ----------------------------------------------------------------------- live_explorer
def test_live_explorer_contains_controls_and_recomputes_on_change():
    calls = []

    def compute(scale, query):
        calls.append((scale, query))
        fig, ax = plt.subplots()
        ax.bar(range(4), _bar_traces(scale)[0].y)
        return fig

    scale = ipywidgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1)
    query = ipywidgets.IntSlider(value=0, min=0, max=2)
    box = widgets.live_explorer(compute, scale=scale, query=query)
    assert isinstance(box, ipywidgets.Box)
    children = [c for row in box.children if isinstance(row, ipywidgets.HBox) for c in row.children]
    assert scale in children and query in children
    assert isinstance(box.children[-1], ipywidgets.Output)
    assert calls == [(1.0, 0)]  # computed once, immediately
    scale.value = 2.0
    assert calls[-1] == (2.0, 0)
    query.value = 2
    assert calls[-1] == (2.0, 2)
    assert len(calls) == 3
    assert plt.get_fignums() == []  # each returned figure was shown once and closed
    assert scale.description == "scale" and scale.continuous_update is False


def test_live_explorer_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one control"):
        widgets.live_explorer(lambda: None)
    with pytest.raises(TypeError, match="callable"):
        widgets.live_explorer(42, x=ipywidgets.IntSlider())
    with pytest.raises(TypeError, match="value widget"):
        widgets.live_explorer(lambda x: None, x=3)


# ----------------------------------------------------------------------- import hygiene
def test_importing_attn_edu_does_not_import_plotting_libraries():
    code = ("import sys, attn_edu, attn_edu.viz, attn_edu.widgets; "
            "bad = [m for m in ('matplotlib', 'plotly', 'ipywidgets', 'torch') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- plot_mask
def test_plot_mask_draws_the_mask_with_axis_names_and_legend():
    m = masks.causal_mask(3, 5, "bottom_right")
    fig = viz.plot_mask(m, title="bottom-right", k_labels=list("abcde"))
    ax = fig.axes[0]
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), np.asarray(m).astype(int))
    assert ax.get_xlabel() == "key position j" and ax.get_ylabel() == "query position i"
    assert ax.get_title() == "bottom-right"
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcde")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["may attend (True)", "masked (False)"]
    # the legend's colours are the image's colours for True and False
    image = ax.images[0]
    handles = ax.get_legend().legend_handles
    np.testing.assert_allclose(handles[0].get_facecolor(), image.cmap(image.norm(1)))
    np.testing.assert_allclose(handles[1].get_facecolor(), image.cmap(image.norm(0)))
    assert ax.yaxis_inverted()  # row 0 at the top, like a matrix
    assert len(ax.get_xticks(minor=True)) == 6  # grid lines between the 5 key columns


def test_plot_mask_torch_tensor_and_into_axes():
    torch = pytest.importorskip("torch")
    fig0, ax = plt.subplots()
    m = torch.tensor([[True, False], [True, True]])
    assert viz.plot_mask(m, ax=ax, q_labels=["q0", "q1"], legend=False) is fig0
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), [[1, 0], [1, 1]])
    assert ax.get_legend() is None


def test_plot_mask_errors():
    with pytest.raises(TypeError, match="boolean"):
        viz.plot_mask(np.ones((2, 2)))
    with pytest.raises(TypeError, match="boolean"):
        viz.plot_mask(np.ones((2, 2), dtype=int))
    with pytest.raises(ValueError, match="2-D"):
        viz.plot_mask(masks.key_mask(masks.padding_mask([1, 2])))
    with pytest.raises(ValueError, match="k_labels has 2 labels"):
        viz.plot_mask(np.ones((2, 3), dtype=bool), k_labels=["a", "b"])
    assert "plot_mask" in viz.__all__
