"""attn_edu.widgets: controls that cannot matter are disabled, slow recomputes coalesce and
show that they are working, and check_controls_matter finds a control that does nothing."""
import asyncio
import threading
import time

import pytest

pytest.importorskip("matplotlib")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from attn_edu import widgets  # noqa: E402

ipywidgets = pytest.importorskip("ipywidgets")


def _mask_like_explorer(active_when=None):
    """A small explorer shaped like chapter 05's: ``n`` matters only for kind "pad"."""
    def compute(kind, n, length):
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.bar(range(length), [min(i, n) if kind == "pad" else i for i in range(length)])
        ax.set_title(kind)
        return fig

    kind = ipywidgets.Dropdown(options=["causal", "pad"], value="causal")
    n = ipywidgets.IntSlider(value=2, min=0, max=4)
    length = ipywidgets.IntSlider(value=4, min=2, max=6)
    box = widgets.live_explorer(compute, kind=kind, n=n, length=length, active_when=active_when)
    return box, kind, n, length


def _output_png(box):
    (out,) = box.children[-1].outputs
    return out["data"]["image/png"]


def test_explorer_box_has_class_status_and_output():
    box, kind, n, length = _mask_like_explorer()
    assert widgets.EXPLORER_CLASS in box._dom_classes
    assert widgets.BUSY_CLASS not in box._dom_classes
    assert isinstance(box.children[-1], ipywidgets.Output)
    status = box.children[-2]
    assert isinstance(status, ipywidgets.HTML) and status.value == '<span data-renders="1"></span>'
    first = _output_png(box)
    length.value = 6
    assert _output_png(box) != first  # replaced, not appended
    assert len(box.children[-1].outputs) == 1
    assert box in widgets.explorers()
    assert plt.get_fignums() == []


def test_a_plotly_figure_is_shown_inside_the_explorer(monkeypatch):
    go = pytest.importorskip("plotly.graph_objects")
    from attn_edu import notebook

    notebook._register_plotly_renderer()
    shown = []  # anything displayed outside the Output widget would land here
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append(a))
    x = ipywidgets.IntSlider(value=1, min=1, max=3)
    box = widgets.live_explorer(lambda x: go.Figure(go.Bar(y=list(range(x)))), x=x)
    x.value = 3
    (out,) = box.children[-1].outputs
    assert {"text/html", "application/vnd.plotly.v1+json"} <= set(out["data"])
    assert out["data"]["application/vnd.plotly.v1+json"]["data"][0]["y"] == [0, 1, 2]
    assert shown == []


def test_active_when_disables_a_control_where_it_cannot_matter():
    box, kind, n, length = _mask_like_explorer({"n": lambda kind, **_: kind == "pad"})
    assert n.disabled and not kind.disabled and not length.disabled
    kind.value = "pad"
    assert not n.disabled
    kind.value = "causal"
    assert n.disabled
    assert widgets.check_controls_matter(box) == []


def test_check_controls_matter_reports_a_control_that_does_nothing():
    box, kind, n, length = _mask_like_explorer()  # n is enabled but useless for "causal"
    problems = widgets.check_controls_matter(box)
    assert problems and all(p.startswith("'n' changes nothing for kind='causal'") for p in problems)
    assert (kind.value, n.value, length.value) == ("causal", 2, 4)  # left as it was


def test_check_controls_matter_reports_compute_errors():
    def compute(x):
        if x == 3:
            raise RuntimeError("boom")
        return f"x = {x}"

    box = widgets.live_explorer(compute, x=ipywidgets.IntSlider(value=0, min=0, max=3))
    assert any("RuntimeError: boom" in p for p in widgets.check_controls_matter(box))


def test_an_exception_in_compute_shows_its_traceback():
    def compute(x):
        if x:
            raise ValueError("x must be 0")
        return "fine"

    x = ipywidgets.IntSlider(value=0, min=0, max=1)
    box = widgets.live_explorer(compute, x=x)
    x.value = 1
    (out,) = box.children[-1].outputs
    assert out["output_type"] == "error" and out["ename"] == "ValueError"
    assert any("x must be 0" in line for line in out["traceback"])
    assert widgets.BUSY_CLASS not in box._dom_classes


class _Kernel:
    """What the explorer looks for in a Jupyter kernel: its shell's kernel's io_loop."""

    def __init__(self, loop):
        self.kernel = type("K", (), {"io_loop": type("L", (), {"asyncio_loop": loop})()})()


def _run_in_own_thread(coro_fn):
    """asyncio.run(coro_fn()) in a thread of its own: this thread may already "run" a
    loop (Playwright's sync API keeps one running during the browser tests)."""
    result, errors = [], []

    def target():
        try:
            result.append(asyncio.run(coro_fn()))
        except BaseException as exc:  # noqa: BLE001  (re-raised below)
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    if errors:
        raise errors[0]
    return result[0]


@pytest.fixture
def in_kernel(monkeypatch):
    """Run a coroutine as if in a kernel whose event loop is the running one."""
    import IPython

    def run(coro_fn):
        async def main():
            monkeypatch.setattr(IPython, "get_ipython", lambda: _Kernel(asyncio.get_running_loop()))
            return await coro_fn()
        return _run_in_own_thread(main)
    return run


def test_another_librarys_running_loop_is_not_used():
    """Outside a kernel (e.g. under Playwright's loop) a change recomputes at once."""
    calls = []

    async def scenario():
        x = ipywidgets.IntSlider(value=0, min=0, max=9)
        widgets.live_explorer(lambda x: calls.append(x), x=x)
        x.value = 4
        assert calls == [0, 4]

    _run_in_own_thread(scenario)


def test_slow_recomputes_coalesce_and_show_that_they_are_working(in_kernel):
    """In a kernel's running loop, changes made while a slow recompute runs are merged:
    only the latest values are computed, and the box is marked busy meanwhile."""
    calls = []

    def compute(x):
        calls.append(x)
        time.sleep(0.3)  # slower than DEBOUNCE_AFTER_S
        return f"x = {x}"

    async def scenario():
        loop = asyncio.get_running_loop()
        x = ipywidgets.IntSlider(value=0, min=0, max=9)
        box = widgets.live_explorer(compute, x=x)  # initial render: at once
        assert calls == [0]
        x.value = 1  # scheduled after DEBOUNCE_S (the last recompute was slow)
        assert widgets.BUSY_CLASS in box._dom_classes
        assert "computing" in box.children[-2].value
        # two more moves arrive while the recompute of x = 1 blocks the loop
        loop.call_later(widgets.DEBOUNCE_S + 0.01, setattr, x, "value", 2)
        loop.call_later(widgets.DEBOUNCE_S + 0.02, setattr, x, "value", 3)
        x.value = 1  # no change: nothing new scheduled
        for _ in range(100):
            await asyncio.sleep(0.05)
            if calls[-1] == 3 and widgets.BUSY_CLASS not in box._dom_classes:
                break
        return box

    box = in_kernel(scenario)
    assert calls == [0, 1, 3], "the stale value 2 was computed, or the latest one was not"
    assert box.children[-1].outputs[0]["data"]["text/plain"] == "'x = 3'"
    assert box.children[-2].value == '<span data-renders="3"></span>'


def test_fast_recomputes_run_without_a_pause(in_kernel):
    calls = []

    async def scenario():
        x = ipywidgets.IntSlider(value=0, min=0, max=9)
        widgets.live_explorer(lambda x: calls.append(x), x=x)
        start = time.perf_counter()
        x.value = 5
        while calls[-1] != 5:
            await asyncio.sleep(0.001)
        return time.perf_counter() - start

    assert in_kernel(scenario) < widgets.DEBOUNCE_S


def test_live_explorer_rejects_bad_active_when():
    x = ipywidgets.IntSlider()
    with pytest.raises(ValueError, match="'y', which is not a control"):
        widgets.live_explorer(lambda x: None, x=x, active_when={"y": lambda **_: True})
    with pytest.raises(TypeError, match=r"active_when\['x'\] must be callable"):
        widgets.live_explorer(lambda x: None, x=x, active_when={"x": True})
    with pytest.raises(ValueError, match="columns"):
        widgets.live_explorer(lambda x: None, x=x, columns=0)
    with pytest.raises(ValueError, match="settings"):
        widgets.check_controls_matter(widgets.live_explorer(lambda x: None, x=x), settings=0)


def test_options_cover_every_kind_of_control():
    assert widgets._options(ipywidgets.Dropdown(options=[("a", 1), ("b", 2)])) == [1, 2]
    assert widgets._options(ipywidgets.SelectionSlider(options=[4, 8], value=8)) == [4, 8]
    assert widgets._options(ipywidgets.Checkbox()) == [False, True]
    assert widgets._options(ipywidgets.IntSlider(min=1, max=7, step=3)) == [1, 4, 7]
    assert widgets._options(ipywidgets.FloatLogSlider(base=2, min=-1, max=1, step=1)) == [0.5, 1.0, 2.0]


# --------------------------------------------------------------------------- the static page
def test_the_display_bundle_carries_a_static_stand_in_with_the_current_figure():
    """The widget view for Jupyter and Colab, and text/html for a page without a kernel:
    the figure as it is now (with its alt text) and a note naming every control's value."""
    box, kind, n, length = _mask_like_explorer()
    bundle = box._repr_mimebundle_()
    assert {"application/vnd.jupyter.widget-view+json", "text/html", "text/plain"} <= set(bundle)
    html = bundle["text/html"]
    assert html.startswith(f'<div class="{widgets.STATIC_CLASS}"><p class="{widgets.NOTE_CLASS}">')
    assert "recomputes as you move its controls" in html
    assert f'<span class="{widgets.COLAB_SLOT_CLASS}"></span>' in html  # the book fills it
    assert "kind = causal, n = 2, length = 4" in html
    assert html.count("<img ") == 1 and 'alt="Figure. It shows: causal, bars.' in html
    kind.value = "pad"
    assert "kind = pad," in box._repr_mimebundle_()["text/html"]


def test_the_stand_in_of_a_plotly_explorer_is_its_figure(monkeypatch):
    go = pytest.importorskip("plotly.graph_objects")
    from attn_edu import notebook

    notebook._register_plotly_renderer()
    box = widgets.live_explorer(lambda x: go.Figure(go.Bar(y=list(range(x)))),
                                x=ipywidgets.IntSlider(value=2, min=1, max=3))
    html = box._repr_mimebundle_()["text/html"]
    assert html.count('class="plotly-graph-div"') == 1 and "Plotly.newPlot" in html
    assert "<img" not in html
