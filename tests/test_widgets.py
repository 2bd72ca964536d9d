"""attn_edu.widgets: controls that cannot matter are disabled, every update happens in the
handler of the change that caused it, a change superseded by a queued one is not computed,
and check_controls_matter finds a control that does nothing.

The message order seen by a front end (a real kernel, jupyter_client) is tested in
tests/test_widget_messages.py."""
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


@pytest.mark.parametrize("what", ["data", "colour", "title", "limits", "image", "scatter", "bar", "nothing"])
def test_check_controls_matter_reads_matplotlib_figures_without_drawing_them(what):
    """The audit compares matplotlib figures by their artists (no PNG): a control that
    changes any of these is seen to matter; one that changes nothing is reported."""
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def compute(x, y):
        fig, ax = plt.subplots()
        k = {"nothing": 0}.get(what, x)
        ax.plot([0, 1, 2], [0, 1, 2 + (k if what == "data" else 0)],
                color="C1" if what == "colour" and k else "C0")
        ax.set_title(f"x = {k}" if what == "title" else "fixed")
        if what == "limits":
            ax.set_xlim(0, 2 + k)
        if what == "image":
            ax.imshow(np.arange(4.0).reshape(2, 2) * (1 + k))
        if what == "scatter":
            ax.scatter([0, 1], [1, 1 + k])
        if what == "bar":
            ax.bar([0, 1], [1, 1 + k])
        return fig

    box = widgets.live_explorer(compute, x=ipywidgets.IntSlider(value=0, min=0, max=2),
                                y=ipywidgets.IntSlider(value=0, min=0, max=1))
    problems = widgets.check_controls_matter(box)
    assert any(p.startswith("'y' changes nothing") for p in problems)  # y never matters
    x_problems = [p for p in problems if p.startswith("'x' changes nothing")]
    assert bool(x_problems) == (what == "nothing"), problems
    assert not plt.get_fignums()  # every figure it made is closed


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


class _QueueKernel:
    """What the explorer reads of an ipykernel 6 kernel: ``msg_queue`` (a queue whose
    ``_queue`` holds ``(index, dispatch, (frames,))``), ``shell_stream`` and ``session``."""

    def __init__(self, pending=()):
        from jupyter_client.session import Session

        self.session = Session(key=b"secret")
        self.flushed = 0
        self.msg_queue = type("Q", (), {"_queue": []})()
        self.shell_stream = type("S", (), {"flush": lambda _self: setattr(self, "flushed", self.flushed + 1)})()
        for comm_id, state in pending:
            self.queue("comm_msg", {"comm_id": comm_id, "data": {"method": "update", "state": state}})

    def queue(self, msg_type, content):
        frames = self.session.serialize(self.session.msg(msg_type, content), ident=[b"client"])
        self.msg_queue._queue.append((len(self.msg_queue._queue), None, (frames,)))


@pytest.fixture
def kernel(monkeypatch):
    """A stand-in kernel with a shell queue the test fills (see _QueueKernel)."""
    import sys

    import IPython

    pytest.importorskip("ipykernel")
    import ipykernel  # noqa: F401  (the explorer only looks for a queue in an ipykernel)

    holder = type("Shell", (), {})()
    holder.kernel = _QueueKernel()
    monkeypatch.setattr(IPython, "get_ipython", lambda: holder)
    assert "ipykernel" in sys.modules
    return holder.kernel


def test_every_update_happens_inside_the_change_handler(kernel):
    """No deferral: when the assignment (the handler of the front end's message) returns,
    the figure, the status and the disabled controls are already updated."""
    kind = ipywidgets.Dropdown(options=["causal", "pad"], value="causal")
    n = ipywidgets.IntSlider(value=2, min=0, max=4)
    box = widgets.live_explorer(lambda kind, n: f"{kind} {n}", kind=kind, n=n,
                                active_when={"n": lambda kind, **_: kind == "pad"})
    statuses = []
    box.children[-2].observe(lambda ch: statuses.append(ch["new"]), names="value")
    assert n.disabled
    kind.value = "pad"
    assert not n.disabled and box.children[-1].outputs[0]["data"]["text/plain"] == "'pad 2'"
    assert "computing" in statuses[0] and statuses[-1] == '<span data-renders="2"></span>'
    assert widgets.BUSY_CLASS not in box._dom_classes
    assert kernel.flushed == 1  # it looked for newer changes first


def test_a_queued_change_to_the_same_explorer_supersedes_the_recompute(kernel):
    """A change queued behind this one (the reader moved on) leaves the recompute to its
    handler: "computing…" stays, nothing stale is computed; then the queued one computes."""
    calls = []
    x = ipywidgets.IntSlider(value=0, min=0, max=9)
    y = ipywidgets.IntSlider(value=0, min=0, max=9)
    box = widgets.live_explorer(lambda x, y: calls.append((x, y)) or f"{x} {y}", x=x, y=y)
    other = ipywidgets.IntSlider()
    kernel.queue("execute_request", {"code": "1"})  # not a widget update: ignored
    kernel.queue("comm_msg", {"comm_id": other.model_id, "data": {"method": "update", "state": {"value": 7}}})
    kernel.queue("comm_msg", {"comm_id": y.model_id, "data": {"method": "update", "state": {"value": 0}}})
    x.value = 1  # only updates of other explorers, or of nothing new, are queued: computes
    assert calls == [(0, 0), (1, 0)]
    kernel.queue("comm_msg", {"comm_id": x.model_id, "data": {"method": "update", "state": {"value": 3}}})
    x.value = 2  # a newer value of x is queued: superseded
    assert calls == [(0, 0), (1, 0)]
    assert "computing" in box.children[-2].value and widgets.BUSY_CLASS in box._dom_classes
    kernel.msg_queue._queue.clear()  # the queued message is handled: it sets x = 3
    x.value = 3
    assert calls[-1] == (3, 0) and box.children[-1].outputs[0]["data"]["text/plain"] == "'3 0'"
    assert box.children[-2].value == '<span data-renders="3"></span>'


def test_a_dropdowns_queued_index_counts_as_a_change(kernel):
    kind = ipywidgets.Dropdown(options=["a", "b", "c"], value="a")
    calls = []
    widgets.live_explorer(lambda kind: calls.append(kind), kind=kind)
    kernel.queue("comm_msg", {"comm_id": kind.model_id, "data": {"method": "update", "state": {"index": 1}}})
    kind.value = "b"  # the queued index 1 is what we have now: not newer, computes
    assert calls == ["a", "b"]
    kind.value = "c"  # the queued index 1 differs from c's index 2: superseded
    assert calls == ["a", "b"]


def test_outside_a_kernel_every_change_recomputes_at_once():
    calls = []
    x = ipywidgets.IntSlider(value=0, min=0, max=9)
    widgets.live_explorer(lambda x: calls.append(x), x=x)
    x.value = 4
    x.value = 5
    assert calls == [0, 4, 5]
    assert widgets._queued_changes() == []


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


def test_a_queued_update_that_changes_nothing_does_not_supersede(kernel):
    """A range slider's value is a tuple here and a list on the wire: equal, not newer."""
    span = ipywidgets.IntRangeSlider(value=(2, 5), min=0, max=9)
    calls = []
    widgets.live_explorer(lambda span: calls.append(span), span=span)
    kernel.queue("comm_msg", {"comm_id": span.model_id, "data": {"method": "update", "state": {"value": [3, 5]}}})
    span.value = (3, 5)
    assert calls == [(2, 5), (3, 5)]


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
