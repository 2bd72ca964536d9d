"""attn_edu.alt_text: what a screen reader says for a figure, read off the figure itself."""
from __future__ import annotations

import pytest

from attn_edu import alt_text

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture
def two_panels():
    fig, (a, b) = plt.subplots(1, 2)
    im = a.imshow([[0.2, 0.8], [0.5, 0.5]])
    fig.colorbar(im, ax=a)
    a.set_title("weights $w_{ij}$")
    a.set_xlabel("key $j$")
    a.set_ylabel("query $i$")
    b.plot([1, 2, 3], label="max weight")
    b.plot([3, 2, 1], label="entropy")
    b.plot([0, 0, 0], label="_hidden")
    b.legend()
    fig.suptitle("Softmax saturates")
    yield fig
    plt.close(fig)


def test_matplotlib_alt_text_reads_titles_marks_and_axes(two_panels):
    text = alt_text.figure_alt_text(two_panels)
    assert text.startswith("Figure: Softmax saturates. 2 panels.")
    assert "Panel 1: weights w_ij, heatmap (x: key j; y: query i)." in text
    assert "Panel 2: 3 lines, legend: max weight, entropy." in text
    assert "_hidden" not in text and "$" not in text
    assert text.endswith("With a colour scale.")


def test_matplotlib_alt_text_of_a_bare_figure_is_not_empty():
    fig, _ = plt.subplots()
    try:
        assert alt_text.figure_alt_text(fig) == "Figure. It shows: a plot."
    finally:
        plt.close(fig)


def test_alt_text_is_cut_to_a_readable_length():
    fig, axes = plt.subplots(4, 4)
    for i, ax in enumerate(axes.flat):
        ax.set_title(f"a rather long panel title number {i}")
    try:
        text = alt_text.figure_alt_text(fig)
    finally:
        plt.close(fig)
    assert len(text) <= alt_text.MAX_CHARS and text.endswith("…")


def test_plotly_alt_text_reads_title_traces_axes_and_sliders():
    go = pytest.importorskip("plotly.graph_objects")
    fig = go.Figure([go.Heatmap(z=[[1, 2], [3, 4]], name="weights"),
                     go.Scatter(y=[1, 2]), go.Scatter(y=[2, 1])],
                    layout={"title": {"text": "Causal mask <b>top-left</b>"},
                            "xaxis": {"title": {"text": "key"}}, "yaxis": {"title": "query"},
                            "sliders": [{"currentvalue": {"prefix": "L_k = "},
                                         "steps": [{"label": "4"}, {"label": "8"}, {"label": "16"}]}]})
    text = alt_text.plotly_alt_text(fig)
    assert text == ("Interactive figure: Causal mask top-left. It shows heatmap, 2 line or point "
                    "series (weights). Axes (x: key; y: query). A slider steps over L_k through "
                    "3 settings from 4 to 16.")
    assert alt_text.plotly_alt_text(fig.to_plotly_json()) == text


def test_bad_figures_raise_type_error():
    with pytest.raises(TypeError, match="matplotlib Figure"):
        alt_text.figure_alt_text("not a figure")
    with pytest.raises(TypeError, match="plotly figure"):
        alt_text.plotly_alt_text([1, 2])


def test_ipython_attaches_the_alt_text_to_the_png_output(two_panels):
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.pylabtools import select_figure_formats

    shell = InteractiveShell.instance()
    select_figure_formats(shell, {"png"})
    assert alt_text.register_alt_text(shell) is True
    data, metadata = shell.display_formatter.format(two_panels)
    assert "image/png" in data
    assert metadata["image/png"][alt_text.ALT_KEY] == alt_text.figure_alt_text(two_panels)
    assert metadata["image/png"][alt_text.TEXT_PX_KEY] == alt_text.figure_text_px(two_panels)


def test_the_smallest_text_of_a_figure_in_png_pixels():
    plt = pytest.importorskip("matplotlib.pyplot")
    fig, ax = plt.subplots(dpi=100)
    ax.set_xlabel("x", fontsize=14)
    ax.tick_params(labelsize=9)             # tick labels: 9 pt, the smallest text
    ax.text(0.5, 0.5, "", fontsize=3)        # empty: not text anyone reads
    t = ax.text(0.5, 0.5, "hidden", fontsize=4)
    t.set_visible(False)                     # hidden: not drawn
    assert alt_text.figure_text_px(fig) == pytest.approx(9 * 100 / 72, abs=0.05)
    fig.set_dpi(200)
    assert alt_text.figure_text_px(fig) == pytest.approx(9 * 200 / 72, abs=0.05)
    plt.close(fig)
    empty = plt.figure()
    assert alt_text.figure_text_px(empty) == 0.0
    plt.close(empty)
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        alt_text.figure_text_px("not a figure")


def test_register_outside_ipython_does_nothing(monkeypatch):
    ipython = pytest.importorskip("IPython")
    monkeypatch.setattr(ipython, "get_ipython", lambda: None)
    assert alt_text.register_alt_text() is False


def test_a_cut_alt_text_ends_after_a_whole_word():
    """The cut falls between words: half a name ("fl…" for float16) reads as a word of its own
    (a Chinese screen reader spells it; the Chinese page check counts it as English)."""
    parts = [f"legend: float16, bfloat16, float32 number {i}." for i in range(200)]
    for shift in range(12):  # the cut lands at every place within a word once
        text = alt_text._join(["x" * shift] + parts)
        assert len(text) <= alt_text.MAX_CHARS and text.endswith("…"), text[-20:]
        last = text[:-1].split()[-1].strip(",.")
        assert last in {"legend:", "legend", "float16", "bfloat16", "float32", "number"} or last.isdigit(), last
