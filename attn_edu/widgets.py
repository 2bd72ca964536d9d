"""Live explorers: ipywidgets controls that recompute a figure in a running kernel.

The static book page cannot run Python, so every explorer in the book comes twice:
a plotly slider figure with precomputed frames (:func:`attn_edu.viz.sweep_figure`),
which works online with no kernel, and a live version built here, which recomputes
with :mod:`attn_edu` on every change in Jupyter or Colab. On the static page a live
explorer shows, instead of controls that could do nothing there, the figure it was saved
with and a note that it recomputes in Jupyter or Colab: its display bundle carries that as
``text/html`` next to the widget view, and the book build prefers it.

What every live explorer does, so no chapter has to:

* **Controls that cannot matter are disabled.** ``active_when={"lq": lambda kind, **_:
  kind.startswith("causal")}`` greys out ``lq`` whenever the predicate is false for the
  current values of the controls: a reader never moves a control that changes nothing.
* **It shows that it is working.** While a recompute is pending or running, a
  "computing…" note appears between the controls and the figure (and the explorer's
  box carries the CSS class ``attn-edu-busy``; the class ``attn-edu-explorer`` marks
  every explorer). When idle the note is an empty ``<span data-renders="N">`` that counts
  the recomputes, which is what a browser test waits for.
* **Every update happens in the handler of the change that caused it.** A control's
  change (a ``comm_msg`` from the front end) disables what cannot matter, shows
  "computing…", recomputes and replaces the figure *before its handler returns*, so every
  update reaches the front end before the kernel reports idle for that message -- as
  ipywidgets' own ``interact`` does. Colab's front end drops widget messages that arrive
  after that idle (googlecolab/colabtools#3373); a recompute deferred to a later turn of
  the event loop would never show there.
* **No backlog of stale recomputes.** Sliders update on release
  (``continuous_update=False``). When the reader moves controls faster than the figure
  recomputes, the kernel queues their messages; before recomputing, the handler looks at
  that queue (``_queued_changes``) and, if a queued message will change one of this
  explorer's controls again, leaves the recompute to that message's handler and keeps
  showing "computing…". So only the latest values are computed, and the last change
  always is. Where the queue cannot be read (another kernel), every change recomputes.
* **The figure is replaced in one step**: the new output replaces the old one (no blank
  flash), and an exception in ``compute`` shows its traceback in the output.

:func:`check_controls_matter` drives an explorer in the kernel (every control, many
settings of the others) and lists the controls that changed nothing while enabled;
the tests run it on every chapter's explorers.

ipywidgets, IPython and matplotlib are imported inside the functions, so
``import attn_edu`` needs NumPy only. First used in chapter 01.

(It has more than 600 lines: an explorer, its static stand-in in both editions, and the
check that its controls matter read the same private state, so they stay in one module.)
"""
from __future__ import annotations

import base64
import functools
import hashlib
import io
import itertools
import random
import traceback
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional

from .i18n import N_, translate
from .i18n import gettext as _

__all__ = [
    "live_explorer",
    "check_controls_matter",
    "explorers",
    "live_note",
    "colab_link",
    "localize_live_notes",
]

#: CSS class of every explorer's outer box, and the one it carries while busy
EXPLORER_CLASS, BUSY_CLASS = "attn-edu-explorer", "attn-edu-busy"
_COMPUTING = "<i style='color:#777'>{}</i>"  # the busy note; its words: _("computing…")

# every explorer made in this process, oldest first (weak: none is kept alive by this list)
_EXPLORERS: List["weakref.ref[Any]"] = []


# --------------------------------------------------------------------------- rendering
def _is_matplotlib_figure(obj: Any) -> bool:
    return type(obj).__module__.startswith("matplotlib") and hasattr(obj, "savefig")


def _figure_output(fig: Any) -> Dict[str, Any]:
    """A display_data output of a matplotlib figure as PNG (what the inline backend shows),
    with its alternative text in the metadata (:mod:`attn_edu.alt_text`)."""
    from . import i18n_outputs
    from .alt_text import ALT_KEY, figure_alt_text
    from .i18n import current_language

    def png(fig: Any) -> tuple:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight", dpi=fig.dpi,
                    facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor())
        return base64.b64encode(buf.getvalue()).decode("ascii"), {}

    if current_language() != "en":  # a Chinese kernel: the figure's words in Chinese
        i18n_outputs.translate_figure(fig)
    metadata = {"image/png": {ALT_KEY: figure_alt_text(fig)}}
    renders = i18n_outputs.figure_renders(fig, png, alt=figure_alt_text)  # the book's English execution: also in Chinese
    if renders:
        metadata[i18n_outputs.META_KEY] = renders
    return {"output_type": "display_data", "metadata": metadata,
            "data": {"image/png": png(fig)[0], "text/plain": repr(fig)}}


def _figures_of(result: Any) -> list:
    """The matplotlib figures a compute function's result shows: ``None`` means "drew with
    pyplot" (every open pyplot figure), a figure is itself; anything else shows none."""
    import sys

    if result is None:
        if "matplotlib.pyplot" not in sys.modules:
            return []
        import matplotlib.pyplot as plt

        return [plt.figure(num) for num in plt.get_fignums()]
    return [result] if _is_matplotlib_figure(result) else []


def _close(figures: list) -> None:
    """Close pyplot's figures once shown (no second copy at the end of the cell)."""
    import sys

    if figures and "matplotlib.pyplot" in sys.modules:
        import matplotlib.pyplot as plt

        for fig in figures:
            plt.close(fig)


def _outputs_of(result: Any) -> tuple:
    """The Output-widget outputs that show what a compute function returned.

    A matplotlib figure becomes a PNG and is closed; ``None`` means "drew with pyplot":
    every open pyplot figure is shown and closed; anything else goes through IPython's
    display formatter (plotly figures, HTML, text ...).
    """
    if result is None or _is_matplotlib_figure(result):
        figures = _figures_of(result)
        outputs = tuple(_figure_output(fig) for fig in figures)
        _close(figures)
        return outputs
    if hasattr(result, "_repr_mimebundle_"):
        # plotly figures: their bundle from the default renderer. (IPython's formatter
        # would call their _ipython_display_, which displays outside the Output widget.)
        bundle = result._repr_mimebundle_()
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        if data:
            return ({"output_type": "display_data", "data": data, "metadata": metadata or {}},)
    from IPython import get_ipython
    from IPython.core.formatters import DisplayFormatter

    formatter = getattr(get_ipython(), "display_formatter", None) or DisplayFormatter()
    data, metadata = formatter.format(result)
    return ({"output_type": "display_data", "data": data, "metadata": metadata},)


#: CSS class of the static stand-in of an explorer, and of its note; the book build fills
#: the element of class COLAB_SLOT_CLASS with the chapter's Colab link
STATIC_CLASS, NOTE_CLASS, COLAB_SLOT_CLASS = ("attn-edu-explorer-static", "attn-edu-live-note",
                                              "attn-edu-colab-slot")


def _value_text(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def live_note(shown: str, lang: str | None = None) -> str:
    """The stand-in's note (HTML) in ``lang`` (default: the current language): that the figure
    recomputes in Jupyter or Colab and is shown here for ``shown`` (its controls' values)."""
    return translate(LIVE_NOTE, lang).format(shown=shown)


#: the stand-in's note, in English (the source of its translations; ``{shown}`` is the values)
LIVE_NOTE = N_("<strong>Live explorer.</strong> In Jupyter or Colab this figure recomputes as you "
               "move its controls; here it is shown for {shown}.")


#: the sentence the book build puts in the note's Colab slot (``{url}`` is the chapter on Colab)
COLAB_LINK = N_('<a href="{url}">Open this chapter in Colab</a> to move them.')
#: what separates the controls' values in the stand-in's note (``{a}, {b}``; Chinese ``，``)
VALUES_SEPARATOR = N_("{before}, {after}")


def colab_link(url: str, lang: str | None = None) -> str:
    """The note's Colab sentence (HTML) in ``lang`` (default: the current language), linking
    ``url``, which is escaped here."""
    import html  # noqa: PLC0415

    return translate(COLAB_LINK, lang).format(url=html.escape(url))


def localize_live_notes(body: str, lang: str) -> str:
    """``body`` (a page's HTML) with every English stand-in note, which the English execution
    wrote, in ``lang``: the Chinese book shows the English build's outputs (scripts/zh.py)."""
    import re  # noqa: PLC0415

    if lang == "en":
        return body
    head, tail = LIVE_NOTE.split("{shown}")
    pattern = re.compile(re.escape(f'<p class="{NOTE_CLASS}">{head}') + "(?P<shown>.*?)" + re.escape(tail))
    return pattern.sub(lambda m: f'<p class="{NOTE_CLASS}">' + live_note(m.group("shown"), lang), body)


def _static_html(state: "_Explorer", lang: Optional[str] = None) -> str:
    """What a page without a kernel shows for an explorer: its current figure and a note.

    The explorer's ``text/html`` representation. Jupyter and Colab draw the widget
    instead; the static book prefers this (no controls that cannot do anything there).
    ``lang`` (default: the current language): the note's language, and with ``"zh"`` the
    figures' Chinese renderings where the English execution made them
    (``attn_edu.i18n_outputs.figure_renders``).
    """
    import html

    from .i18n_outputs import META_KEY

    figures = []
    for out in state.output.outputs:
        data = out.get("data") or {}
        other = ((out.get("metadata") or {}).get(META_KEY) or {}).get(lang or "") or {}
        if "text/html" in data:  # plotly figures: their book renderer's div and script
            figures.append(data["text/html"])
        elif "image/png" in data:
            alt = ((out.get("metadata") or {}).get("image/png") or {}).get("alt") or _("Figure")
            alt, png = other.get("alt", alt), other.get("image/png", data["image/png"])
            figures.append(f'<img src="data:image/png;base64,{png}" '
                           f'alt="{html.escape(alt)}" style="max-width:100%">')
        elif out.get("output_type") == "error":
            figures.append(f"<pre>{html.escape(chr(10).join(out.get('traceback', [])))}</pre>")
        elif "text/plain" in data:
            figures.append(f"<pre>{html.escape(str(data['text/plain']))}</pre>")
    from .i18n_outputs import translate_text

    def say(text: str) -> str:  # a control's name and value, in the stand-in's language
        return translate_text(text, lang) if lang else text

    sep = translate(VALUES_SEPARATOR, lang).format(before="", after="")
    shown = sep.join(f"{html.escape(say(str(getattr(c, 'description', '') or name)))} = "
                     f"{html.escape(say(_value_text(c.value)))}" for name, c in state.controls.items())
    # (one sentence after another: a space in English, none in Chinese)
    note = (f'<p class="{NOTE_CLASS}">'
            + translate("{text} {sentence}", lang).format(
                text=live_note(shown, lang), sentence=f'<span class="{COLAB_SLOT_CLASS}"></span>')
            + "</p>")
    return f'<div class="{STATIC_CLASS}">{note}{"".join(figures)}</div>'


def _static_renders(state: "_Explorer") -> Dict[str, Any]:
    """The bundle metadata of an explorer in the book's English execution: its stand-in in
    Chinese (figures drawn with Chinese words) and the English texts of its figures, under
    ``attn_edu.i18n_outputs.META_KEY``; empty elsewhere."""
    from .i18n_outputs import META_KEY

    metas = [((out.get("metadata") or {}).get(META_KEY) or {}) for out in state.output.outputs]
    if not any(metas):
        return {}
    texts = list(dict.fromkeys(t for m in metas for t in m.get("texts", [])))
    meta: Dict[str, Any] = {"texts": texts}
    if any("zh" in m for m in metas):
        meta["zh"] = {"text/html": _static_html(state, "zh")}
    return {META_KEY: meta}


@functools.lru_cache(maxsize=None)
def _explorer_box_class() -> type:
    """An ipywidgets VBox whose display bundle also carries the ``text/html`` stand-in.

    (ipywidgets 7, Colab's, displays through ``_ipython_display_`` and never calls this:
    Colab always gets the widget alone.)
    """
    import ipywidgets as widgets

    class ExplorerBox(widgets.VBox):
        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            state = getattr(self, "_attn_edu_explorer", None)
            if isinstance(bundle, dict) and state is not None:
                bundle["text/html"] = _static_html(state)
                renders = _static_renders(state)
                if renders:  # the book's English execution: the Chinese stand-in too
                    return bundle, renders
            return bundle

    return ExplorerBox


def _error_outputs(exc: BaseException) -> tuple:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return ({"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc),
             "traceback": [line.rstrip("\n") for line in tb]},)


def _queued_changes() -> List[tuple]:
    """``(comm_id, state)`` of every widget update waiting in this kernel's shell queue.

    The messages a front end sent while the current one is handled: they wait on the
    kernel's shell socket (moved into its queue by ``shell_stream.flush()``, as
    ``Kernel.do_one_iteration`` does) and are handled, in order, after this one. Read
    without consuming them. ipykernel 6 (Colab's 6.17 and later 6.x) keeps them in
    ``kernel.msg_queue``; anywhere else (plain Python, another kernel) this returns ``[]``.
    """
    import sys

    if "ipykernel" not in sys.modules:
        return []
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        items = getattr(getattr(kernel, "msg_queue", None), "_queue", None)
        stream, session = getattr(kernel, "shell_stream", None), getattr(kernel, "session", None)
        if items is None or stream is None or session is None:
            return []
        stream.flush()  # what arrived meanwhile, into the queue (its on_recv callback)
        changes = []
        for _index, _dispatch, args in list(items):  # (index, dispatch, (frames,)), in order
            frames = args[0]
            _, parts = session.feed_identities(frames, copy=not hasattr(frames[0], "bytes"))
            raw = [getattr(p, "bytes", p) for p in parts]
            if session.unpack(raw[1]).get("msg_type") != "comm_msg":
                continue
            content = session.unpack(raw[4])
            data = content.get("data") or {}
            if data.get("method") in ("update", "backbone") and isinstance(data.get("state"), dict):
                changes.append((content.get("comm_id"), data["state"]))
        return changes
    except Exception:  # noqa: BLE001  (an unknown kernel: recompute every change)
        return []


# --------------------------------------------------------------------------- the explorer
class _Explorer:
    """The state behind one explorer box: its controls, compute function and scheduling."""

    def __init__(self, compute: Callable[..., object], controls: Dict[str, Any],
                 active_when: Dict[str, Callable[..., bool]], box: Any, output: Any,
                 status: Any) -> None:
        self.compute, self.controls, self.active_when = compute, controls, active_when
        self.box, self.output, self.status = box, output, status
        self.renders = 0

    def values(self) -> Dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def active(self, values: Optional[Mapping[str, Any]] = None) -> Dict[str, bool]:
        """Which controls matter for ``values`` (default: the current ones)."""
        values = self.values() if values is None else dict(values)
        return {name: bool(self.active_when[name](**values)) if name in self.active_when else True
                for name in self.controls}

    def update_disabled(self) -> None:
        for name, on in self.active().items():
            if name in self.active_when:
                self.controls[name].disabled = not on

    def set_busy(self, busy: bool) -> None:
        # idle: an empty span that counts the renders (browser tests wait on it)
        self.status.value = (_COMPUTING.format(_("computing…")) if busy
                             else f'<span data-renders="{self.renders}"></span>')

        classes = [c for c in self.box._dom_classes if c != BUSY_CLASS]
        self.box._dom_classes = tuple(classes + [BUSY_CLASS] if busy else classes)

    def render(self) -> None:
        """Compute with the current values and replace the output in one step."""
        try:
            outputs = _outputs_of(self.compute(**self.values()))
        except Exception as exc:  # shown to the reader, never swallowed
            outputs = _error_outputs(exc)
        self.output.outputs = outputs
        self.renders += 1
        self.set_busy(False)

    def superseded(self) -> bool:
        """Whether a queued message will change one of the controls again (see the module doc).

        Only a real change counts: a queued value equal to the current one triggers no
        handler, so it must not stop this one from computing.
        """
        import json

        by_id = {getattr(c, "model_id", None): c for c in self.controls.values()}
        for comm_id, state in _queued_changes():
            control = by_id.get(comm_id)
            for key in ("value", "index"):  # what a value widget syncs (a Dropdown: its index)
                if control is not None and key in state and control.has_trait(key):
                    now = json.loads(json.dumps(control.get_state(key)[key], default=str))
                    if state[key] != now:  # both as JSON (a range slider's tuple is a list)
                        return True
        return False

    def changed(self, _change: Any = None) -> None:
        """A control moved: all of its consequences happen here, before this returns."""
        self.update_disabled()
        self.set_busy(True)  # sent to the front end now, before the recompute blocks
        if self.superseded():
            return  # the queued change's handler recomputes with the latest values
        self.render()


def live_explorer(compute: Callable[..., object], *, columns: int = 2,
                  active_when: Optional[Mapping[str, Callable[..., bool]]] = None,
                  **controls: Any):
    """Build a live explorer: ``compute(**values)`` re-runs whenever a control changes.

    Args:
        compute: called with one keyword argument per control, named as in ``controls``,
            holding that control's current value. It may return a matplotlib ``Figure``
            (shown as a PNG, then closed), a plotly figure or anything else IPython can
            display, or ``None`` after drawing with pyplot.
        columns: how many controls per row above the output.
        active_when: for a control that matters only for some settings of the others,
            ``{name: predicate}``; ``predicate(**values)`` gets every control's current
            value and returns whether ``name`` changes the output. Where it returns
            False the control is disabled (greyed out). Controls not listed always matter.
        **controls: ipywidgets value widgets, e.g.
            ``scale=ipywidgets.FloatLogSlider(value=1, base=10, min=-1, max=1)``.

    Returns an ``ipywidgets.VBox`` (the controls, a status note, then an ``Output`` with
    the figure), with CSS class ``attn-edu-explorer``. Make it the last expression of a
    cell to show it. ``compute`` runs once immediately, so the saved notebook (and the
    static page) shows the initial state.

    Raises ValueError without controls, for a bad ``columns`` or an ``active_when`` name
    that is not a control, and TypeError when ``compute`` or a predicate is not callable
    or a control is not an ipywidgets value widget. Chapter 01 introduces it.

    Example::

        live_explorer(lambda scale, query: plot_weights(scale, query),
                      scale=widgets.FloatLogSlider(value=1, min=-1.3, max=1, description="scale"),
                      query=widgets.IntSlider(value=0, min=0, max=2, description="query"))
    """
    if not callable(compute):
        raise TypeError(f"compute must be callable; got {type(compute).__name__}")
    if not controls:
        raise ValueError("live_explorer needs at least one control, e.g. scale=ipywidgets.FloatSlider(...)")
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise ValueError(f"columns must be a positive integer; got {columns!r}")
    active_when = dict(active_when or {})
    for name, predicate in active_when.items():
        if name not in controls:
            raise ValueError(f"active_when names {name!r}, which is not a control; "
                             f"the controls are {sorted(controls)}")
        if not callable(predicate):
            raise TypeError(f"active_when[{name!r}] must be callable; got {type(predicate).__name__}")
    import ipywidgets as widgets

    for name, control in controls.items():
        if not isinstance(control, widgets.ValueWidget):
            raise TypeError(
                f"control {name!r} must be an ipywidgets value widget (FloatSlider, IntSlider, "
                f"Dropdown, ...); got {type(control).__name__}"
            )
        if name in active_when and not control.has_trait("disabled"):
            raise TypeError(f"control {name!r} is in active_when but {type(control).__name__} "
                            "cannot be disabled")
        if not getattr(control, "description", None) and hasattr(control, "description"):
            control.description = name
        if hasattr(control, "continuous_update"):
            control.continuous_update = False  # recompute on release, not on every pixel

    boxes = list(controls.values())
    rows = [widgets.HBox(boxes[i:i + columns]) for i in range(0, len(boxes), columns)]
    status = widgets.HTML(value="")
    output = widgets.Output()
    box = _explorer_box_class()([*rows, status, output])  # + a static text/html stand-in
    box.add_class(EXPLORER_CLASS)
    state = _Explorer(compute, dict(controls), active_when, box, output, status)
    box._attn_edu_explorer = state  # for check_controls_matter and explorers()
    state.update_disabled()
    state.render()  # the initial state, computed now (the saved page shows it)
    for control in controls.values():
        control.observe(state.changed, names="value")
    _EXPLORERS.append(weakref.ref(box))
    return box


def explorers() -> List[Any]:
    """Every live explorer made in this process (e.g. by a notebook's cells), oldest first."""
    return [box for box in (ref() for ref in _EXPLORERS) if box is not None]


# --------------------------------------------------------------------------- the audit
def _options(control: Any) -> List[Any]:
    """Values a control can take: its options, or its min..max range in steps."""
    if getattr(control, "_options_values", None) is not None:  # Dropdown, SelectionSlider ...
        return list(control._options_values)  # the values behind (label, value) options
    if isinstance(control.value, bool):
        return [False, True]
    if hasattr(control, "min") and hasattr(control, "max"):
        if hasattr(control, "base"):  # FloatLogSlider: min/max are exponents
            lo, hi, step = control.min, control.max, control.step or (control.max - control.min) / 8
            n = int(round((hi - lo) / step))
            return [control.base ** (lo + i * step) for i in range(n + 1)]
        lo, hi = control.min, control.max
        step = getattr(control, "step", None) or 1
        n = int(round((hi - lo) / step))
        return [type(control.value)(lo + i * step) for i in range(n + 1)]
    return [control.value]


def _samples(values: List[Any], current: Any, k: int = 3) -> List[Any]:
    """At most ``k`` values spread over ``values``: the ends and the current one first."""
    if len(values) <= k:
        return list(values)
    picks = [values[0], values[-1], current, values[len(values) // 2]]
    out: List[Any] = []
    for v in picks:
        if v not in out:
            out.append(v)
    return out[:k]


def _figure_signature(fig: Any) -> list:
    """What a matplotlib figure draws, read from its artists without drawing it: each
    visible axes' limits and scales, and each visible line's, text's, image's, collection's
    and patch's data and colours, in order. Two figures that differ here draw differently.
    Drawing to PNG (:func:`_figure_output`) costs about 0.5 s for chapter 08's two log-log
    panels, this a few milliseconds: :func:`check_controls_matter` compares many settings."""
    import numpy as np
    from matplotlib import collections, image, lines, patches, text
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis

    def arr(x: Any) -> Any:
        a = np.ma.filled(np.ma.asarray(x, dtype=float), np.nan) if x is not None else None
        return None if a is None else (a.shape, hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest())

    def visible(artist: Any) -> Any:
        # depth first, in drawing order. Not into an Axis: its ticks are made and labelled
        # when drawn, from the limits and scales read below (a log axis makes thousands)
        for child in artist.get_children():
            if child.get_visible() and not isinstance(child, Axis):
                yield child
                yield from visible(child)

    parts: list = []
    for a in visible(fig):
        if isinstance(a, Axes):
            parts.append(("axes", a.get_xlim(), a.get_ylim(), a.get_xscale(), a.get_yscale(),
                          tuple(a.get_position().bounds)))
        elif isinstance(a, lines.Line2D):
            parts.append(("line", arr(a.get_xydata()), str(a.get_color()), a.get_linestyle(),
                          a.get_linewidth(), str(a.get_marker())))
        elif isinstance(a, text.Text):
            if a.get_text():
                parts.append(("text", a.get_text(), tuple(map(float, a.get_position())), str(a.get_color())))
        elif isinstance(a, image.AxesImage):
            parts.append(("image", arr(a.get_array()), a.get_cmap().name, a.get_clim(), tuple(a.get_extent())))
        elif isinstance(a, collections.Collection):
            parts.append(("collection", type(a).__name__, arr(a.get_offsets()),
                          arr(a.get_array()), arr(a.get_facecolor()), arr(a.get_edgecolor()),
                          [arr(p.vertices) for p in a.get_paths()]))
        elif isinstance(a, patches.Patch):
            parts.append(("patch", type(a).__name__, arr(a.get_path().vertices),
                          arr(a.get_patch_transform().get_matrix()), arr(a.get_facecolor())))
    return parts


def _signature_of(result: Any) -> str:
    """A hash of what ``result`` shows (for :func:`check_controls_matter`): matplotlib
    figures by :func:`_figure_signature` (and closed), anything else by its outputs."""
    import json

    figures = _figures_of(result)
    if not figures:
        return _fingerprint(_outputs_of(result))
    text = json.dumps([_figure_signature(f) for f in figures], default=repr)
    _close(figures)
    return hashlib.sha256(text.encode()).hexdigest()


def _fingerprint(outputs: tuple) -> str:
    """What the reader sees, as a hash: the outputs' data (plotly's random ids removed)."""
    import json
    import re

    text = json.dumps([o.get("data", o.get("traceback")) for o in outputs], sort_keys=True, default=str)
    text = re.sub(r"attn-edu-plotly-[0-9a-f]+", "", text)  # the book renderer's div id
    text = re.sub(r'"uid": ?"[^"]*"', "", text)
    return hashlib.sha256(text.encode()).hexdigest()


def check_controls_matter(explorer: Any, *, settings: int = 6, seed: int = 0) -> List[str]:
    """Every control of ``explorer`` must change the output wherever it is enabled.

    For each control, up to ``settings`` settings of the other controls are tried (the
    explorer's current one, every combination when there are few, else a seeded random
    sample); in each setting where the control is enabled (see ``active_when``), it is
    set to up to three of its values (its ends and its current value) and what it shows
    is compared (it matters there as soon as two differ): a matplotlib figure by what its
    artists hold (data, colours, texts, limits and scales; it is not drawn, which would
    cost about 0.5 s a figure), anything else by its outputs.
    Returns one line per (control, setting) where the control changed nothing, or where
    ``compute`` raised; an empty list means every control matters.

    The explorer's controls are left as they were. ``compute`` runs directly (the widgets
    do not move), so this works in any kernel and in plain Python.
    """
    state: _Explorer = explorer._attn_edu_explorer
    if isinstance(settings, bool) or not isinstance(settings, int) or settings < 1:
        raise ValueError(f"settings must be a positive integer; got {settings!r}")
    rng = random.Random(seed)
    current = state.values()
    domains = {name: _options(c) for name, c in state.controls.items()}
    cache: Dict[tuple, str] = {}
    problems: List[str] = []

    def look(values: Dict[str, Any]) -> str:
        key = tuple(sorted((k, repr(v)) for k, v in values.items()))
        if key not in cache:
            try:
                cache[key] = _signature_of(state.compute(**values))
            except Exception as exc:  # noqa: BLE001  (reported, not raised)
                problems.append(f"compute raised {type(exc).__name__}: {exc} for {values}")
                cache[key] = f"error {key}"
        return cache[key]

    for name in state.controls:
        others = [n for n in state.controls if n != name]
        grids = [domains[n] for n in others]
        n_all = 1
        for g in grids:
            n_all *= len(g)
        if n_all <= settings:
            combos = [dict(zip(others, combo)) for combo in itertools.product(*grids)]
        else:
            combos = [{n: current[n] for n in others}]
            while len(combos) < settings:
                combos.append({n: rng.choice(domains[n]) for n in others})
        for combo in combos:
            values = {**combo, name: current[name]}
            if not state.active(values)[name]:
                continue
            tried, prints = [], set()
            for v in _samples(domains[name], current[name]):  # the ends first: usually enough
                tried.append(v)
                prints.add(look({**combo, name: v}))
                if len(prints) > 1:
                    break
            if len(tried) > 1 and len(prints) == 1:
                shown = ", ".join(f"{k}={v!r}" for k, v in combo.items())
                problems.append(f"{name!r} changes nothing for {shown} "
                                f"(tried {name}={tried}) but is enabled there")
    return problems
