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

:data:`STATIC_EXPLORERS` lists each static explorer with the code cell that builds ``fig``
and the few cells it needs (run as tests/test_checks_can_fail.py runs a chapter's cells);
:func:`test_every_static_explorer_of_the_audited_chapters_is_listed` keeps the list complete
for the chapters in :data:`AUDITED`.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import chapter_cells  # tests/chapter_cells.py: runs the cells an explorer needs

go = pytest.importorskip("plotly.graph_objects")

ROOT = Path(__file__).resolve().parents[1]
#: chapters whose every static explorer must be listed below
AUDITED = ("08", "09", "10", "11")
#: (chapter, cell that builds ``fig``, the cells it needs, in the chapter's order)
STATIC_EXPLORERS = [
    ("08", "05cd6713", ("0946a987", "7db84847")),                      # FLOPs against n, slider d
    ("09", "ch09-15", ("ch09-01", "ch09-02", "ch09-14")),              # the tiled loop, tile by tile
    ("09", "ch09-22", ("ch09-01", "ch09-02", "ch09-18")),              # tiles and traffic, slider B
    ("10", "8522285d", ("ee34fcec", "c091b982", "52c2e296")),          # causal speed-up, slider B
    ("11", "4e45623c", ("616a355c", "05768326", "6b51fc03", "954f06e3")),  # pattern menu, p, tile
]
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
    """One line per pair of steps of ``fig`` (frames, slider steps, menu buttons) that draw
    the same data; an empty list when every step draws something new."""
    problems = []
    frames = [(f.name, _fingerprint(f.data)) for f in fig.frames]
    problems += [f"frames {a!r} and {b!r} draw the same data" for a, b in _repeats(frames)]

    def steps_of(kind, controls, items):
        for i, control in enumerate(controls):
            named = [(s["label"], _fingerprint(s["args"][0])) for s in control[items]
                     if s["method"] in ("restyle", "update") and s["args"]]
            problems.extend(f"{kind} {i}: steps {a!r} and {b!r} draw the same data"
                            for a, b in _repeats(named))

    layout = fig.to_plotly_json()["layout"]
    steps_of("slider", layout.get("sliders", []), "steps")
    steps_of("menu", layout.get("updatemenus", []), "buttons")
    for menu in layout.get("updatemenus", []):       # sliders that a menu puts in place
        for button in menu["buttons"]:
            if button["method"] in ("relayout", "update") and button["args"]:
                new = button["args"][-1].get("sliders", []) if button["method"] == "update" \
                    else button["args"][0].get("sliders", [])
                steps_of(f"slider of menu button {button['label']!r}", new, "steps")
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
    assert static_explorer_problems(fig) == ["slider of menu button 'pattern' 0: steps 'p=1' and "
                                             "'p=2' draw the same data"]


# --- the chapters' static explorers ----------------------------------------------------------------
def _builds_static_explorer(src: str) -> bool:
    return ("viz.sweep_figure(" in src or "sliders=" in src or "updatemenus" in src
            or "tile_trace_figure(" in src)


@pytest.mark.parametrize("chapter", AUDITED)
def test_every_static_explorer_of_the_audited_chapters_is_listed(chapter):
    listed = {cell for ch, cell, _ in STATIC_EXPLORERS if ch == chapter}
    found = {cid for cid, src in chapter_cells.code_cells(chapter) if _builds_static_explorer(src)}
    assert found == listed, f"chapter {chapter}: static explorers {sorted(found)}, listed {sorted(listed)}"


@pytest.mark.parametrize("chapter,cell,setup", STATIC_EXPLORERS,
                         ids=[f"{c}-{cell}" for c, cell, _ in STATIC_EXPLORERS])
def test_no_two_steps_of_a_static_explorer_draw_the_same(chapter, cell, setup, monkeypatch):
    ns = dict(chapter_cells.namespace(chapter, tuple(setup)))
    monkeypatch.setattr(go.Figure, "show", lambda self, *a, **k: None)   # build, do not display
    tree = ast.parse(dict(chapter_cells.code_cells(chapter))[cell])
    last = tree.body.pop() if isinstance(tree.body[-1], ast.Expr) else None   # what the cell shows
    with chapter_cells.plotting():
        exec(compile(tree, f"chapter {chapter} {cell}", "exec"), ns)
        shown = eval(compile(ast.Expression(last.value), f"chapter {chapter} {cell}", "eval"), ns) \
            if last is not None else None
    fig = shown if isinstance(shown, go.Figure) else ns["fig"]
    assert fig.frames or fig.layout.sliders or fig.layout.updatemenus, "not an explorer"
    assert static_explorer_problems(fig) == []
