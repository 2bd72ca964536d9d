"""attn_edu.viz_tiles: chapter 09's tile-layout heatmap and the tiled loop replayed."""
import numpy as np
import pytest

pytest.importorskip("plotly")

from attn_edu import masks, viz_tiles  # noqa: E402
from attn_edu.flash import flash_attention  # noqa: E402


def test_tile_layout_heatmap_shows_the_plan_and_labels_each_tile():
    plan = masks.plan_tiles(None, 8, 8, "bottom_right", lq=40, lk=88)
    h = viz_tiles.tile_layout_heatmap(plan.schedule, xaxis="x2")
    assert np.array_equal(np.asarray(h.z), plan.schedule) and h.xaxis == "x2"
    kinds = {t for row in h.text for t in row}
    assert kinds == {"skipped", "partial", "full"}
    assert h.text[0][-1] == "skipped" and h.text[-1][0] == "full"


def test_tile_layout_heatmap_rejects_what_is_not_a_schedule():
    with pytest.raises(ValueError, match="schedule"):
        viz_tiles.tile_layout_heatmap(np.full((2, 2), 3))
    with pytest.raises(ValueError, match="schedule"):
        viz_tiles.tile_layout_heatmap(np.zeros(4))


def test_tile_trace_figure_has_one_step_per_tile_and_ends_at_the_output():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((11, 4)), rng.standard_normal((11, 4)), rng.standard_normal((11, 3))
    out, trace = flash_attention(q, k, v, causal=True, block_q=4, block_k=4, return_trace=True)
    fig = viz_tiles.tile_trace_figure(trace, out, title="t")
    assert len(fig.frames) == len(trace) == 9 and len(fig.layout.sliders[0].steps) == len(trace)
    last = fig.frames[-1].data
    assert np.allclose(np.asarray(last[3].z, dtype=float), out)  # o after the last tile is the output
    grid = np.asarray(last[0].z)
    assert (grid == 3).sum() == sum(r.skipped for r in trace) == 3  # the 3 tiles above the diagonal
    with pytest.raises(ValueError, match="trace"):
        viz_tiles.tile_trace_figure([], out)


def test_fit_axis_ranges_holds_every_frame_so_no_step_clips_a_bar():
    """Chapter 09's block-size explorer fixed [0, 1.2] for a bytes ratio that reached 4.02 at
    B = 1, and a log tile-count axis from 10^0, where a count of 1 has no bar. Fitted, every
    frame's values lie inside, a bar of 1 rises above the log axis' bottom, and an axis not
    named is left as it was."""
    import math

    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from attn_edu import viz

    ratio = {1: 4.02, 2: 2.08, 8: 0.61}
    counts = {1: [1944, 1, 1128], 2: [480, 48, 240], 8: [1, 12, 3]}

    def traces(b):
        return [go.Bar(y=counts[b], xaxis="x", yaxis="y"), go.Bar(y=[ratio[b]], xaxis="x2", yaxis="y2")]

    fig = viz.sweep_figure([1, 2, 8], traces, base_figure=make_subplots(rows=1, cols=2), initial_index=2,
                           layout=dict(yaxis=dict(type="log", range=[0, 3.6]), yaxis2=dict(range=[0, 1.2]),
                                       xaxis2=dict(range=[-1, 1])))
    clipped = [f.name for f in fig.frames if max(f.data[1].y) > fig.layout.yaxis2.range[1]]
    assert clipped == ["1", "2"]                       # the explorer as it was
    assert viz_tiles.fit_axis_ranges(fig, ("yaxis", "yaxis2")) is fig
    lo, hi = fig.layout.yaxis.range                    # log axis: in powers of ten
    assert lo < math.log10(1) and hi > math.log10(1944)
    assert list(fig.layout.yaxis2.range) == pytest.approx([0, 1.2 * 4.02])
    assert tuple(fig.layout.xaxis2.range) == (-1, 1)   # not named: left as given
    for f in fig.frames:
        assert 10 ** lo < min(f.data[0].y) and max(f.data[0].y) < 10 ** hi
        assert 0 <= f.data[1].y[0] < fig.layout.yaxis2.range[1]
    neg = viz_tiles.fit_axis_ranges(viz.sweep_figure([1, 2], lambda s: go.Bar(y=[-s, 3])), "yaxis")
    assert list(neg.layout.yaxis.range) == pytest.approx([-2.4, 3.6])
    bar = viz.sweep_figure([1], lambda s: go.Bar(y=[s]))
    with pytest.raises(ValueError, match="names layout axes"):
        viz_tiles.fit_axis_ranges(bar, "y2")
    with pytest.raises(ValueError, match="no trace draws"):
        viz_tiles.fit_axis_ranges(bar, "yaxis3")
    zero = viz.sweep_figure([1], lambda s: go.Bar(y=[0]), layout=dict(yaxis_type="log"))
    with pytest.raises(ValueError, match="no value on it is positive"):
        viz_tiles.fit_axis_ranges(zero, "yaxis")
