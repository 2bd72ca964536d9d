"""Mask helpers: shapes, polarity (True = may attend) and both causal alignments."""
import numpy as np
import pytest

from attn_edu import masks


@pytest.mark.parametrize("lq,lk", [(1, 1), (3, 3), (2, 5), (5, 2), (4, 0)])
def test_causal_alignments_match_their_definitions(lq, lk):
    tl = masks.causal_mask(lq, lk)
    br = masks.causal_mask(lq, lk, "bottom_right")
    for i in range(lq):
        for j in range(lk):
            assert tl[i, j] == (j <= i)
            assert br[i, j] == (j <= i + lk - lq)
    assert tl.dtype == bool and tl.shape == (lq, lk)
    np.testing.assert_array_equal(masks.causal_mask(lq, lk, True), tl)


def test_square_alignments_agree_and_default_is_square():
    np.testing.assert_array_equal(masks.causal_mask(4), masks.causal_mask(4, 4, "bottom_right"))


def test_decoding_step_sees_everything_with_bottom_right():
    # one new query at the end of a cached sequence of 6 keys
    assert masks.causal_mask(1, 6, "bottom_right").all()
    assert masks.causal_mask(1, 6, "top_left").sum() == 1


def test_padding_key_and_query_masks():
    valid = masks.padding_mask([2, 4, 0], 4)
    np.testing.assert_array_equal(valid.astype(int), [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    assert masks.padding_mask([1, 3]).shape == (2, 3)
    km = masks.key_mask(valid)
    assert km.shape == (3, 1, 4) and masks.key_mask(valid, heads=True).shape == (3, 1, 1, 4)
    qk = masks.query_key_mask(valid, valid)
    assert qk.shape == (3, 4, 4)
    np.testing.assert_array_equal(qk[0], np.outer([1, 1, 0, 0], [1, 1, 0, 0]).astype(bool))
    assert masks.query_key_mask(valid, valid, heads=True).shape == (3, 1, 4, 4)


def test_combine_masks_intersection_union_and_none():
    c = masks.causal_mask(3)
    pad = np.array([True, True, False])
    both = masks.combine_masks(c, None, pad)
    np.testing.assert_array_equal(both, c & pad)
    np.testing.assert_array_equal(masks.combine_masks(c, pad, op="or"), c | pad)
    assert masks.combine_masks(None, None) is None
    assert masks.combine_masks(pad, masks.causal_mask(3)[None]).shape == (1, 3, 3)


def test_to_additive_and_torch_key_padding_polarity():
    m = np.array([[True, False]])
    np.testing.assert_array_equal(masks.to_additive(m), [[0.0, -np.inf]])
    assert masks.to_additive(m, np.float16).dtype == np.float16
    kpm = np.array([[False, False, True]])  # nn.MultiheadAttention: True = ignore
    np.testing.assert_array_equal(masks.from_key_padding_mask(kpm), [[[True, True, False]]])
    assert masks.from_key_padding_mask(kpm, heads=True).shape == (1, 1, 1, 3)


def test_causal_mask_is_tagged_and_derived_masks_are_plain():
    c = masks.causal_mask(3, 5, "bottom_right")
    assert isinstance(c, masks.CausalMask) and c.causal_alignment == "bottom_right"
    assert c[None].causal_alignment == "bottom_right"  # a view is still that mask
    for derived in (c & np.ones(5, bool), ~c, masks.combine_masks(c, np.ones(5, bool))):
        assert type(derived) is np.ndarray
    assert "bottom_right" in repr(c)


# --- block layouts ---------------------------------------------------------------------------

@pytest.mark.parametrize("lq,lk,bq,bk", [(17, 17, 4, 4), (5, 17, 3, 4), (17, 5, 4, 2), (1, 1, 3, 3),
                                         (64, 64, 16, 16), (63, 65, 8, 16)])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_causal_block_layout_matches_layout_of_the_mask(lq, lk, bq, bk, alignment):
    mask = masks.causal_mask(lq, lk, alignment)
    expected = masks.block_layout(mask, bq, bk)
    got = masks.causal_block_layout(lq, lk, bq, bk, alignment)
    np.testing.assert_array_equal(got, expected)


def test_block_layout_against_loops():
    rng = np.random.default_rng(0)
    mask = rng.random((2, 13, 11)) < 0.05
    bq, bk = 4, 3
    layout, full = masks.block_layout(mask, bq, bk), masks.full_blocks(mask, bq, bk)
    assert layout.shape == full.shape == (2, 4, 4)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                tile = mask[b, i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]
                assert layout[b, i, j] == tile.any()
                assert full[b, i, j] == tile.all()
    assert masks.block_density(layout) == pytest.approx(layout.mean())
    assert 0 < masks.block_density(layout) < 1


def test_causal_layout_skips_about_half_the_tiles():
    layout = masks.causal_block_layout(1024, 1024, 64, 64)
    assert masks.block_density(layout) == pytest.approx((16 * 17 / 2) / 256)


@pytest.mark.parametrize("bad", [0, -1])
def test_block_layout_rejects_small_blocks(bad):
    with pytest.raises(ValueError, match="block_q must be at least 1"):
        masks.block_layout(np.ones((4, 4), bool), bad, 2)
    with pytest.raises(ValueError, match="block_k must be at least 1"):
        masks.causal_block_layout(4, 4, 2, bad)


def test_block_layout_rejects_non_boolean_mask():
    with pytest.raises(TypeError, match="boolean"):
        masks.block_layout(np.ones((4, 4)), 2, 2)


def test_causal_offset_and_causal_block_are_the_one_causal_rule():
    assert masks.causal_offset(5, 9, "top_left") == masks.causal_offset(5, 9, True) == 0
    assert masks.causal_offset(5, 9, "bottom_right") == 4 and masks.causal_offset(9, 5, "bottom_right") == -4
    with pytest.raises(ValueError, match="alignment"):
        masks.causal_offset(5, 9, False)
    for align in ("top_left", "bottom_right"):
        full = np.asarray(masks.causal_mask(7, 11, align))
        off = masks.causal_offset(7, 11, align)
        np.testing.assert_array_equal(masks.causal_block(2, 6, 3, 10, off), full[2:6, 3:10])  # a tile
    torch = pytest.importorskip("torch")
    t = masks.causal_mask(3, 5, "bottom_right", device="cpu")
    assert isinstance(t, torch.Tensor) and t.causal_alignment == "bottom_right"
    np.testing.assert_array_equal(t.numpy(), np.asarray(masks.causal_mask(3, 5, "bottom_right")))
