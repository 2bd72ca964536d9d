"""attn_edu.viz_masks: chapter 05's mask explorer shows the masks the rules define."""
from __future__ import annotations

import numpy as np
import pytest

from attn_edu import viz_masks as vm

go = pytest.importorskip("plotly.graph_objects")


def test_causal_rule_reads_the_offset():
    assert vm.causal_rule(0) == "j ≤ i"
    assert vm.causal_rule(3) == "j ≤ i + 3"
    assert vm.causal_rule(-2) == "j ≤ i − 2"


@pytest.mark.parametrize("lq,lk", [(3, 6), (6, 3), (4, 4), (1, 8)])
def test_causal_kinds_are_the_two_alignments(lq, lk):
    i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
    m, ql, kl, title = vm.mask_for_kind("causal, top-left", lq, lk, 99)
    assert np.array_equal(m, j <= i) and title.endswith("j ≤ i")
    m, ql, kl, title = vm.mask_for_kind("causal, bottom-right", lq, lk, 99)
    assert np.array_equal(m, j <= i + (lk - lq))  # the queries are the last lq positions
    assert ql[0] == f"q0 (pos {lk - lq})" and kl == [f"k{t}" for t in range(lk)]
    assert title == f"causal, bottom-right, Lq={lq}, Lk={lk}: {vm.causal_rule(lk - lq)}"


def test_padding_kinds_mask_pads_and_the_decoder_adds_causality():
    real = np.arange(6) < 4  # 4 of 6 tokens real
    m, ql, kl, title = vm.mask_for_kind("padding (encoder self)", 2, 6, 4)
    assert m.shape == (6, 6) and np.array_equal(m, real[:, None] & real[None, :])
    assert kl == ["t0", "t1", "t2", "t3", "pad", "pad"] and ql == kl
    assert title == "padding (encoder self): 4 of 6 tokens real"
    m_dec, *_ = vm.mask_for_kind("causal + padding (decoder self)", 2, 6, 4)
    assert np.array_equal(m_dec, m & np.tril(np.ones((6, 6), bool)))
    m_clip, *_ = vm.mask_for_kind("padding (encoder self)", 6, 6, 50)  # clipped to L_k
    assert m_clip.all()


def test_cross_attention_masks_only_the_encoder_pads():
    m, ql, kl, title = vm.mask_for_kind("cross + encoder padding", 4, 7, 5)
    assert m.shape == (4, 7) and np.array_equal(m, np.broadcast_to(np.arange(7) < 5, (4, 7)))
    assert ql == ["q0", "q1", "q2", "q3"] and kl[-2:] == ["pad", "pad"] and kl[0] == "k0"
    assert "4 decoder queries, 5 of 7 encoder keys real" in title


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind must be one of"):
        vm.mask_for_kind("causal", 3, 3, 3)
    with pytest.raises(ValueError, match="l_max"):
        vm.mask_explorer(l_max=5)


@pytest.fixture(scope="module")
def explorer():
    return vm.mask_explorer()


def test_the_explorer_has_one_frame_per_configuration_drawn_from_mask_for_kind(explorer):
    names = [f.name for f in explorer.frames]
    assert len(names) == len(set(names)) == 64 + 64 + 6 + 6 + 7
    for frame in explorer.frames:
        kind, rest = frame.name.split(" | ")
        shape, n = rest.split(", ")
        lq, lk = (int(v) for v in shape.split("x"))
        m, ql, kl, title = vm.mask_for_kind(kind, lq, lk, int(n))
        heat, labels = frame.data
        assert np.array_equal(np.asarray(heat.z), m.astype(int)), frame.name
        assert frame.layout.title.text == title and list(frame.layout.xaxis.ticktext) == kl
        assert list(frame.layout.yaxis.ticktext) == ql
        empty = np.flatnonzero(~m.any(axis=1))  # fully masked rows are labelled
        assert list(labels.y) == list(empty) and set(labels.text or ()) <= {"all masked → 0"}


def test_the_menu_offers_every_kind_with_its_own_slider(explorer):
    (menu,) = explorer.layout.updatemenus
    assert [b.label for b in menu.buttons] == list(vm.MASK_KINDS)
    frames = {f.name for f in explorer.frames}
    starts = {"causal, top-left": "Lq=3, Lk=6", "causal, bottom-right": "Lq=3, Lk=6",
              "padding (encoder self)": "4 of 6 real", "causal + padding (decoder self)": "4 of 6 real",
              "cross + encoder padding": "5 of 7 real"}
    for button in menu.buttons:
        slider = button.args[1]["sliders"][0]
        steps = slider["steps"]
        assert all(s["args"][0][0] in frames and s["args"][0][0].startswith(button.label + " |")
                   for s in steps)
        assert steps[slider["active"]]["label"] == starts[button.label]
        # every step of a kind's slider shows a different mask (no step that does nothing)
        zs = {str(next(f for f in explorer.frames if f.name == s["args"][0][0]).data[0].z)
              for s in steps}
        assert len(zs) == len(steps)
    assert explorer.layout.sliders[0].steps[0].label == "Lq=1, Lk=1"
    assert explorer.data[0].z is not None and explorer.layout.title.text.startswith("causal, top-left, Lq=3, Lk=6")
    assert [t.name for t in explorer.data[2:]] == ["may attend (True)", "masked (False)"]
