"""A static explorer's every step draws something new.

The book's rule for explorers: a control that cannot matter is disabled or removed. The live
(ipywidgets) explorers are audited by ``attn_edu.widgets.check_controls_matter``
(tests/test_colab_standin.py). The *static* explorers are plotly figures that work on the
rendered page without a kernel: a slider stepping through precomputed frames
(``viz.sweep_figure``), or sliders and drop-down menus whose steps restyle the traces. For
those the rule reads: **no two steps of one slider (or buttons of one menu) draw the same
data**. What a step draws is its traces' ``x``, ``y``, ``z`` (and ``visible``); a title, a
legend name or a text label does not count, so a slider that only renames its curve (chapter
10's ``BLOCK_M`` slider drew three identical curves under three names) is reported.

:data:`STATIC_EXPLORERS` is every static explorer of every chapter, with the code cell that
builds ``fig`` and the cells it needs (tests/chapter_cells.py finds them from the names the
cell reads; :data:`LISTED` writes them out where that is not enough), run in this process.
"""
from __future__ import annotations

import ast
import re
import json
from pathlib import Path

import pytest

import chapter_cells  # tests/chapter_cells.py: runs the cells an explorer needs

go = pytest.importorskip("plotly.graph_objects")

ROOT = Path(__file__).resolve().parents[1]
#: every chapter: each static explorer is audited
AUDITED = tuple(sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
#: (chapter, cell that builds ``fig``, the cells it needs, in the chapter's order), written out
#: where the cells an explorer reads (tests/chapter_cells.needed) are not all it needs
LISTED = [
    ("08", "05cd6713", ("0946a987", "7db84847")),                      # FLOPs against n, slider d
    ("09", "ch09-15", ("ch09-01", "ch09-02", "ch09-14")),              # the tiled loop, tile by tile
    ("09", "ch09-22", ("ch09-01", "ch09-02", "ch09-18")),              # tiles and traffic, slider B
    ("10", "8522285d", ("ee34fcec", "c091b982", "52c2e296")),          # causal speed-up, slider B
    ("11", "4e45623c", ("616a355c", "05768326", "6b51fc03", "954f06e3")),  # pattern menu, p, tile
]


#: the package's functions that build a static explorer (sliders, frames or menus)
_EXPLORER_CALLS = ("sweep_figure(", "slider_figure(", "tile_trace_figure(", "mask_explorer(",
                   "roofline_explorer(", "occupancy_explorer(", "paged_memory_explorer(",
                   "quantization_explorer(", "ring_figure(", "scaling.explorer_figure(")


def _builds_static_explorer(src: str) -> bool:
    """Whether a cell builds a static explorer (a live explorer's cell is audited live, by
    tests/test_live_explorers.py and tests/test_colab_standin.py)."""
    if "live_explorer(" in src:
        return False
    calls = (re.escape(c) for c in _EXPLORER_CALLS)   # whole names: not recorded_sweep_figure(
    return "sliders=" in src or "updatemenus" in src or any(re.search(r"(?<!\w)" + c, src) for c in calls)


def _discovered() -> list:
    """Every other static explorer of every chapter, with the cells it reads."""
    listed = {(ch, cell) for ch, cell, _ in LISTED}
    found = []
    for ch in AUDITED:
        cells = chapter_cells.code_cells(ch)
        sources = [src for _, src in cells]
        for k, (cid, src) in enumerate(cells):
            if _builds_static_explorer(src) and (ch, cid) not in listed:
                setup = tuple(cells[i][0] for i in chapter_cells.needed(sources, [k]) if i != k)
                found.append((ch, cid, setup))
    return found


STATIC_EXPLORERS = LISTED + _discovered()
_DRAWN = ("x", "y", "z", "visible")


def _plain(value):
    return value.tolist() if hasattr(value, "tolist") else value


def _fingerprint(traces) -> str:
    """What a list of traces (or a restyle's data argument) draws, as a comparable string."""
    if isinstance(traces, dict):   # restyle / update args[0]: {"z": [...], ...}
        drawn = {k: _plain(traces[k]) for k in _DRAWN if k in traces}
    else:
        drawn = []
        for t in traces:
            d = t.to_plotly_json() if hasattr(t, "to_plotly_json") else dict(t)
            drawn.append({k: _plain(d[k]) for k in _DRAWN if d.get(k) is not None})
    return json.dumps(drawn, sort_keys=True, default=_plain)


def _repeats(named: list) -> list:
    """[(label, fingerprint)] -> the pairs of labels that draw the same."""
    seen, found = {}, []
    for label, fp in named:
        if fp in seen:
            found.append((seen[fp], label))
        else:
            seen[fp] = label
    return found


def static_explorer_problems(fig) -> list:
    """One line per pair of steps of one control (a slider's steps, a menu's buttons, the
    frames a slider animates to) that draw the same data; an empty list when every step of
    every control draws something new. Frames that different controls reach may agree (chapter
    05: a square causal mask is the same top-left and bottom-right, which is the lesson)."""
    problems = []
    drawn = {f.name: _fingerprint(f.data) for f in fig.frames}
    layout = fig.to_plotly_json()["layout"]
    sliders = [(f"slider {i}", c) for i, c in enumerate(layout.get("sliders", []))]
    for menu in layout.get("updatemenus", []):       # sliders that a menu puts in place
        for button in menu["buttons"]:
            if button["method"] in ("relayout", "update") and button["args"]:
                # update's args are [data, layout(, trace indices)]; relayout's [layout]
                args = button["args"]
                lay = (args[1] if len(args) > 1 else {}) if button["method"] == "update" else args[0]
                new = lay.get("sliders", []) if isinstance(lay, dict) else []
                sliders += [(f"slider {i} of menu button {button['label']!r}", c) for i, c in enumerate(new)]

    def check(kind, named):
        problems.extend(f"{kind}: {a!r} and {b!r} draw the same data" for a, b in _repeats(named))

    animated = set()
    for kind, control in sliders:
        check(kind + " steps", [(s["label"], _fingerprint(s["args"][0])) for s in control["steps"]
                                if s["method"] in ("restyle", "update") and s["args"]])
        names = [n for s in control["steps"] if s["method"] == "animate" and s["args"]
                 for n in (s["args"][0] or []) if n in drawn]
        animated.update(names)
        check(kind + " frames", [(n, drawn[n]) for n in names])
    for i, menu in enumerate(layout.get("updatemenus", [])):
        check(f"menu {i} buttons", [(b["label"], _fingerprint(b["args"][0])) for b in menu["buttons"]
                                    if b["method"] in ("restyle", "update") and b["args"]])
    # frames no slider animates to (a play button's): all of them are one control
    check("frames", [(n, fp) for n, fp in drawn.items() if n not in animated])
    return problems


# --- the auditor itself can fail --------------------------------------------------------------
def test_identical_frames_are_reported_and_distinct_ones_pass():
    from attn_edu import viz

    def traces(b):   # a "control" that only renames the curve: dead
        return [go.Scatter(x=[1, 2, 3], y=[1, 4, 9], name=f"B={b}")]
    dead = viz.sweep_figure([16, 32, 64], traces, slider_label="B")
    assert len(static_explorer_problems(dead)) == 2       # 16 = 32, 16 = 64
    alive = viz.sweep_figure([1, 2, 3], lambda p: [go.Scatter(x=[1, 2, 3], y=[1, 2 ** p, 3])])
    assert static_explorer_problems(alive) == []


def test_restyle_steps_and_menu_sliders_are_audited():
    def step(label, z):
        return dict(method="restyle", label=label, args=[{"z": [z]}])

    fig = go.Figure(go.Heatmap(z=[[0, 1]]))
    fig.update_layout(sliders=[dict(steps=[step("a", [[0, 1]]), step("b", [[1, 0]])])])
    assert static_explorer_problems(fig) == []
    menu_slider = dict(steps=[step("p=1", [[0, 0]]), step("p=2", [[0, 0]])])
    fig.update_layout(updatemenus=[dict(buttons=[dict(
        method="update", label="pattern", args=[{"z": [[[0, 0]]]}, {"sliders": [menu_slider]}])])])
    assert static_explorer_problems(fig) == ["slider 0 of menu button 'pattern' steps: 'p=1' and "
                                             "'p=2' draw the same data"]


def test_frames_of_one_slider_must_differ_but_two_menus_may_reach_the_same_picture():
    anim = {"mode": "immediate"}

    def slider(*names):
        return {"steps": [{"method": "animate", "label": n, "args": [[n], anim]} for n in names]}

    def frame(name, z):
        return go.Frame(name=name, data=[go.Heatmap(z=z)], traces=[0])

    fig = go.Figure(go.Heatmap(z=[[0]]), frames=[frame("a1", [[0]]), frame("a2", [[1]]),
                                                  frame("b1", [[0]]), frame("b2", [[2]])])
    menu = [{"method": "update", "label": k, "args": [{"z": [[[ord(k)]]]}, {"sliders": [slider(k + "1", k + "2")]}]}
            for k in "ab"]
    fig.update_layout(updatemenus=[{"buttons": menu}])
    assert static_explorer_problems(fig) == []          # a1 = b1, reached by different buttons
    fig.frames[3].data[0].z = [[0]]                     # b2 = b1: menu b's slider is dead there
    assert static_explorer_problems(fig) == ["slider 0 of menu button 'b' frames: 'b1' and 'b2' "
                                             "draw the same data"]


# --- the chapters' static explorers ----------------------------------------------------------------
def test_the_finder_sees_every_explorer_written_out_and_one_in_most_chapters():
    """The explorers are found by :func:`_builds_static_explorer`: it must see the ones
    :data:`LISTED` writes out, and a static explorer in at least 10 of the 14 chapters."""
    for ch, cell, _ in LISTED:
        assert _builds_static_explorer(dict(chapter_cells.code_cells(ch))[cell]), (ch, cell)
    chapters = {ch for ch, _, _ in STATIC_EXPLORERS}
    assert len(chapters) >= 10, sorted(chapters)


@pytest.mark.parametrize("chapter,cell,setup", STATIC_EXPLORERS,
                         ids=[f"{c}-{cell}" for c, cell, _ in STATIC_EXPLORERS])
def test_no_two_steps_of_a_static_explorer_draw_the_same(chapter, cell, setup, monkeypatch):
    ns = dict(chapter_cells.namespace(chapter, tuple(setup)))
    displayed = []   # figures the cell shows with display() or .show(): kept, not displayed
    monkeypatch.setattr(go.Figure, "show", lambda self, *a, **k: displayed.append(self))
    import IPython.display
    monkeypatch.setattr(IPython.display, "display",
                        lambda *objs, **k: displayed.extend(o for o in objs if isinstance(o, go.Figure)))
    tree = ast.parse(dict(chapter_cells.code_cells(chapter))[cell])
    last = tree.body.pop() if isinstance(tree.body[-1], ast.Expr) else None   # what the cell shows
    with chapter_cells.plotting():
        exec(compile(tree, f"chapter {chapter} {cell}", "exec"), ns)
        shown = eval(compile(ast.Expression(last.value), f"chapter {chapter} {cell}", "eval"), ns) \
            if last is not None else None
    figs = [shown] if isinstance(shown, go.Figure) else displayed or [ns["fig"]]
    explorers = [f for f in figs if f.frames or f.layout.sliders or f.layout.updatemenus]
    assert explorers, "not an explorer"
    assert [p for f in explorers for p in static_explorer_problems(f)] == []
