"""Tests for attn_edu.viz_distributed (chapter 14's ring figures)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("plotly.graph_objects")

from attn_edu import viz_distributed  # noqa: E402


@pytest.mark.parametrize("causal", [True, False])
def test_ring_figure_frames_every_step_of_both_layouts(causal):
    pytest.importorskip("torch")
    from attn_edu import distributed

    p = 4
    fig = viz_distributed.ring_figure(p, causal=causal)
    names = [f.name for f in fig.frames]
    assert names == [f"{lay} · {s}" for lay in ("contiguous", "zigzag")
                     for s in [f"step {t}" for t in range(p)] + ["done"]]
    assert all(len(f.data) == 6 for f in fig.frames)
    g = 2 * p
    for layout in ("contiguous", "zigzag"):
        done = fig.frames[names.index(f"{layout} · done")].data
        z = np.asarray(done[0].z)
        assert (z == 0).sum() == (g * (g - 1) // 2 if causal else 0)  # masked blocks
        assert (z == 1).sum() == 0  # nothing left to compute
        per_rank = [(z == 2 + r).sum() for r in range(p)]  # blocks each rank computed
        tiles = distributed.tiles_per_rank(p, layout, causal)  # contiguous causal: 4r + 3
        assert per_rank == tiles.tolist()
        assert list(done[5].y) == tiles.tolist()  # the bars: work per rank so far
        first = np.asarray(fig.frames[names.index(f"{layout} · step 0")].data[0].z)
        assert ((first >= 2 + p)).sum() == distributed.ring_steps_in_tiles(p, layout, causal)[0].sum()
    assert "ring time: 15 tiles" in fig.frames[names.index("contiguous · done")].data[4].text[0] or not causal
    assert "ring time: 9 tiles" in fig.frames[names.index("zigzag · done")].data[4].text[0] or not causal


def test_ring_step_figure_and_its_errors():
    pytest.importorskip("torch")
    fig = viz_distributed.ring_step_figure(3, "zigzag", True, 1)
    assert "rank 0" in fig.data[3].text[0] and "K/V of rank 2" in fig.data[3].text[0]
    assert fig.data[1].x[0] is not None  # step 1 of 3: the next transfer is drawn
    assert viz_distributed.ring_step_figure(3, "zigzag", True, 2).data[1].x[0] is None  # the last step sends nothing
    with pytest.raises(ValueError, match="world_size must be between 1 and 8"):
        viz_distributed.ring_step_traces(9)
    with pytest.raises(ValueError, match="step must be in"):
        viz_distributed.ring_step_traces(3, step=3)
    with pytest.raises(ValueError, match="layout must be"):
        viz_distributed.ring_step_traces(3, "striped")


@pytest.mark.parametrize("p,h", [(4, 8), (2, 2), (3, 6)])
def test_draw_ulysses_colours_blocks_by_their_rank_before_and_after(p, h):
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    fig = viz_distributed.draw_ulysses(p, h)
    blocks = {patch.get_gid(): patch for ax in fig.axes for patch in ax.patches if patch.get_gid()}
    assert len(blocks) == 2 * p * h
    for i in range(p):
        for j in range(h):
            before, after = blocks[f"before-{i}-{j}"], blocks[f"after-{i}-{j}"]
            assert mcolors.to_hex(before.get_facecolor()) == viz_distributed.RANK_COLORS[i]  # chunk i: rank i
            assert mcolors.to_hex(after.get_facecolor()) == viz_distributed.RANK_COLORS[j // (h // p)]
    stay = [g for g, patch in blocks.items() if g.startswith("before") and patch.get_linewidth() > 1]
    assert len(stay) == h  # 1/P of each rank's blocks stay: H/P per rank, H in all
    plt.close(fig)
    with pytest.raises(ValueError, match="num_heads must be divisible by world_size.*num_heads=6, world_size=4"):
        viz_distributed.draw_ulysses(4, 6)
