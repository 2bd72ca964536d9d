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
