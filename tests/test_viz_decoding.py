"""attn_edu.viz_decoding: chapter 13's figures show what the package computes."""
from __future__ import annotations

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from attn_edu import decoding  # noqa: E402
from attn_edu import viz_decoding as vd  # noqa: E402

go = pytest.importorskip("plotly.graph_objects")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_roofline_lines_follow_the_published_peaks_and_points_sit_on_the_first_roof():
    fig = vd.roofline_figure([("decode", 1.0), ("prefill", 2048.0)])
    h100 = decoding.GPUS["H100 SXM"]
    line = fig.data[0]
    assert line.name.startswith("H100") and len(fig.data) == len(decoding.GPUS) + 1
    y = np.array(line.y)
    assert y.max() == pytest.approx(h100.flops_16bit / 1e12)
    assert y[0] == pytest.approx(line.x[0] * h100.bandwidth / 1e12)
    pts = fig.data[-1]
    assert list(pts.text) == ["decode", "prefill"]
    assert pts.y[0] == pytest.approx(h100.bandwidth / 1e12) and pts.y[1] == pytest.approx(989)
    with pytest.raises(ValueError, match="at least one"):
        vd.roofline_figure([])


def test_roofline_explorer_has_one_frame_per_value_and_moves_the_points():
    fig = vd.roofline_explorer(lambda t: [("x", float(t))], [1, 10, 100], "tokens")
    assert [f.name for f in fig.frames] == ["1", "10", "100"]
    xs = [f.data[-1].x[0] for f in fig.frames]
    assert xs == [1.0, 10.0, 100.0]
    assert "frames" in fig.to_plotly_json() or fig.frames  # static page: frames are embedded


def test_draw_paged_cache_shows_the_pool_and_every_block_table():
    cache = decoding.PagedKVCache(4, 6, 1, 2)
    z = np.zeros((1, 6, 2), np.float32)
    cache.append("a", z, z)
    cache.fork("a", "b")
    fig = vd.draw_paged_cache(cache, title="t")
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "'a' (6 tokens)" in texts and "'b' (6 tokens)" in texts
    assert "0\n×2" in texts and "1\n×2" in texts  # both pages shared by two sequences
    assert "pool (4 free)" in texts and ax.get_title() == "t"


def test_draw_mla_states_the_cache_and_both_forms_from_its_arguments():
    fig = vd.draw_mla()
    text = "\n".join(t.get_text() for t in fig.axes[0].texts)
    assert "512 + 64 = 576" in text and "2 x 128 x 128 = 32,768" in text  # DeepSeek-V2
    assert "prefill" in text and "decode" in text and "sqrt{128 + 64}" in text
    assert "one shared key head 576 wide for all 128 query heads" in text
    small = "\n".join(t.get_text() for t in vd.draw_mla(16, 4, 4, 8).axes[0].texts)
    assert "16 + 4 = 20" in small and "2 x 4 x 8 = 64" in small
    with pytest.raises(ValueError, match="d_rope"):
        vd.draw_mla(d_rope=0)


def test_occupancy_frames_count_programs_and_busy_sms():
    fig = vd.occupancy_explorer(programs=8, lk=1000, num_sms=20, splits=[1, 2, 4], columns=5)
    assert [f.name for f in fig.frames] == ["1", "2", "4"]
    for s, frame in zip([1, 2, 4], fig.frames):
        z = np.array(frame.data[0].z, dtype=float)
        assert np.nansum(z) == 8 * s and np.count_nonzero(np.nan_to_num(z)) == min(8 * s, 20)
        assert f"{8 * s} programs in {-(-8 * s // 20)} wave(s)" in frame.data[1].text[0]
    # the model time is decoding.split_waves's: 8 programs, 132 SMs, 16 vs 17 splits
    fig = vd.occupancy_explorer(programs=8, lk=32768, num_sms=132, splits=[16, 17], block_k=64)
    assert "x0.062 of one split" in fig.frames[0].data[1].text[0]
    assert "in 2 wave(s)" in fig.frames[1].data[1].text[0]


def test_paged_memory_frames_are_measured_on_a_real_cache():
    lengths = [3, 17, 40]
    fig = vd.paged_memory_explorer(lengths, max_len=64, token_bytes=2**30, page_sizes=[1, 16])
    for page, frame in zip([1, 16], fig.frames):
        r = decoding.paged_vs_contiguous(lengths, page, 64)
        tokens, waste = frame.data
        assert list(tokens.y) == [60, 60]
        assert list(waste.y) == [r["reserved"] - 60, r["fragmentation"]]


def test_quantization_bars_are_the_measured_errors():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 1, 8)), rng.standard_normal((2, 32, 8)), rng.standard_normal((2, 32, 8))
    fig = vd.quantization_figure(q, k, v, "int4")
    bars = fig.data[0]
    assert bars.y[0] == pytest.approx(decoding.attention_error(q, k, v, k_fmt="int4", k_per="channel"))
    assert bars.y[2] == pytest.approx(decoding.attention_error(q, k, v, v_fmt="int4", v_per="token"))
    ex = vd.quantization_explorer(q, k, v, formats=["int2", "int8"], initial_index=0)
    assert [f.name for f in ex.frames] == ["int2", "int8"]
    assert ex.frames[0].data[0].y[0] > ex.frames[1].data[0].y[0]  # fewer bits, more error


def test_decode_bandwidth_figure_plots_the_measured_rows_with_the_device():
    doc = {"device": {"name": "NVIDIA H100 80GB HBM3", "kind": "cuda"}, "date": "2026-01-02T03:04:05",
           "config": {"heads": 32, "kv_heads": 8, "d": 128, "dtype": "bfloat16"},
           "results": [{"impl": "a", "batch": 1, "context": c, "gb_per_s": c / 10} for c in (4096, 1024)]
           + [{"impl": "b", "batch": 8, "context": 1024, "error": "OutOfMemoryError"}]}
    fig = vd.decode_bandwidth_figure(doc)
    assert len(fig.data) == 1 and list(fig.data[0].x) == [1024, 4096] and list(fig.data[0].y) == [102.4, 409.6]
    (ceiling,) = fig.layout.shapes   # the H100 SXM's published 3.35 TB/s, in the plot's GB/s
    assert ceiling.y0 == ceiling.y1 == pytest.approx(3350.0)
    assert fig.layout.annotations[0].text == "H100 SXM datasheet: 3.35 TB/s"
    cpu = vd.decode_bandwidth_figure({**doc, "device": {"name": "NVIDIA H100 (a CPU run's label)", "kind": "cpu"}})
    assert not cpu.layout.shapes   # no GPU, no ceiling
    assert "H100" in fig.layout.title.text and "cuda" in fig.layout.title.text and "2026-01-02" in fig.layout.title.text
    with pytest.raises(ValueError, match="no timed rows"):
        vd.decode_bandwidth_figure({**doc, "results": doc["results"][2:]})
    # the GPU's own time, from a CUDA graph: bytes / graph time; rows never captured are left out
    doc["results"][0].update(kv_bytes=8e9, graph_median_ms=2.0)   # 4,000 GB/s
    graph = vd.decode_bandwidth_figure(doc, timing="graph")
    assert len(graph.data) == 1 and list(graph.data[0].x) == [4096] and list(graph.data[0].y) == [4000.0]
    assert "CUDA graph" in graph.layout.title.text and "CUDA graph" not in fig.layout.title.text
    assert graph.layout.yaxis.range[1] >= 4000 and fig.layout.yaxis.range[1] >= 3350   # data and ceiling drawn
    with pytest.raises(ValueError, match="timing must be"):
        vd.decode_bandwidth_figure(doc, timing="wall")
    # a recorded run says who measured it (a live sweep, without measured_by, says nothing)
    assert "measured by" not in fig.layout.title.text and "submitted" not in fig.layout.title.text
    who = vd.decode_bandwidth_figure({**doc, "measured_by": "submitted"}).layout.title.text
    assert who.endswith("<br>H_q=32, H_kv=8, d=128, bfloat16, one ordinary call<br>submitted, not reproduced")
    assert "measured by the maintainers" in vd.decode_bandwidth_figure({**doc, "measured_by": "maintainers"}
                                                                     ).layout.title.text
    from attn_edu.i18n import language
    with language("zh"):
        assert "读者提交" in vd.decode_bandwidth_figure({**doc, "measured_by": "submitted"}).layout.title.text
