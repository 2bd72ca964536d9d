"""Positional encodings: the sinusoidal table, its shift structure, and RoPE (chapter 04)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_edu import positions as pos_mod
from attn_edu.positions import (rotary, sinusoidal_frequencies, sinusoidal_positions,
                                sinusoidal_shift_matrix)


# --------------------------------------------------------------------------- sinusoidal
def test_shape_dtype_and_position_zero():
    pe = sinusoidal_positions(7, 6)
    assert pe.shape == (7, 6) and pe.dtype == np.float64
    np.testing.assert_array_equal(pe[0], [0, 1, 0, 1, 0, 1])  # sin 0, cos 0 for every pair


def test_hand_values_match_the_paper_formula():
    # d_model = 4, base 10000: omega = (1, 10000^(-1/2)) = (1, 0.01)
    pe = sinusoidal_positions(3, 4)
    np.testing.assert_allclose(pe[1], [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)], rtol=0, atol=1e-15)
    np.testing.assert_allclose(pe[2], [np.sin(2), np.cos(2), np.sin(0.02), np.cos(0.02)], rtol=0, atol=1e-15)
    np.testing.assert_allclose(sinusoidal_frequencies(4), [1.0, 0.01], rtol=1e-15)
    # a loop over the definition, entry by entry, for another base
    L, d, base = 9, 10, 50.0
    table = sinusoidal_positions(L, d, base=base)
    for p in range(L):
        for i in range(d // 2):
            w = base ** (-2 * i / d)
            assert table[p, 2 * i] == pytest.approx(np.sin(p * w), abs=1e-15)
            assert table[p, 2 * i + 1] == pytest.approx(np.cos(p * w), abs=1e-15)


def test_bounded_and_constant_row_norm():
    pe = sinusoidal_positions(500, 64)
    assert np.all(np.abs(pe) <= 1.0)
    np.testing.assert_allclose(np.linalg.norm(pe, axis=1), np.sqrt(32), rtol=1e-12)


def test_frequencies_decrease_from_one_towards_one_over_base():
    w = sinusoidal_frequencies(512)
    assert w.shape == (256,) and w[0] == 1.0
    assert np.all(np.diff(w) < 0)
    assert 1e-4 < w[-1] < 1.1e-4  # 10000^(-510/512)


@pytest.mark.parametrize("k", [0, 1, 3, 17, -5, 2.5])
def test_shift_is_the_same_rotation_at_every_position(k):
    d, L = 16, 40
    pe = sinusoidal_positions(L + 30, d)
    r = sinusoidal_shift_matrix(k, d)
    np.testing.assert_allclose(r @ r.T, np.eye(d), atol=1e-14)  # orthogonal
    if float(k).is_integer():
        lo = max(0, -int(k))
        np.testing.assert_allclose(pe[lo:L] @ r, pe[lo + int(k):L + int(k)], atol=1e-12)
    # also for non-integer shifts, via the formula at shifted positions
    p = np.arange(L, dtype=float)[:, None]
    w = sinusoidal_frequencies(d)
    shifted = np.empty((L, d))
    shifted[:, 0::2], shifted[:, 1::2] = np.sin((p + k) * w), np.cos((p + k) * w)
    np.testing.assert_allclose(pe[:L] @ r, shifted, atol=1e-12)


def test_shift_matrices_compose_and_the_check_can_fail():
    d = 8
    np.testing.assert_allclose(sinusoidal_shift_matrix(2, d) @ sinusoidal_shift_matrix(3, d),
                               sinusoidal_shift_matrix(5, d), atol=1e-14)
    pe = sinusoidal_positions(10, d)
    assert not np.allclose(pe[1:] @ sinusoidal_shift_matrix(2, d), pe[:-1])  # wrong shift


def test_dot_product_depends_only_on_the_offset():
    pe = sinusoidal_positions(60, 32)
    gram = pe @ pe.T                                    # (60, 60)
    w = sinusoidal_frequencies(32)
    for k in range(-10, 11):
        diag = np.diagonal(gram, offset=k)
        np.testing.assert_allclose(diag, np.cos(k * w).sum(), atol=1e-12)


def test_zero_length_is_an_empty_table():
    assert sinusoidal_positions(0, 4).shape == (0, 4)


@pytest.mark.parametrize("call,exc,match", [
    (lambda: sinusoidal_positions(5, 7), ValueError, "even"),
    (lambda: sinusoidal_positions(5, 0), ValueError, "d_model"),
    (lambda: sinusoidal_positions(-1, 4), ValueError, "length"),
    (lambda: sinusoidal_positions(5.0, 4), TypeError, "length"),
    (lambda: sinusoidal_positions(True, 4), TypeError, "length"),
    (lambda: sinusoidal_positions(5, "8"), TypeError, "d_model"),
    (lambda: sinusoidal_positions(5, 4, base=0), ValueError, "base"),
    (lambda: sinusoidal_positions(5, 4, base=float("inf")), ValueError, "base"),
    (lambda: sinusoidal_positions(5, 4, base="e"), TypeError, "base"),
    (lambda: sinusoidal_shift_matrix(float("nan"), 4), ValueError, "offset"),
    (lambda: sinusoidal_shift_matrix("1", 4), TypeError, "offset"),
    (lambda: sinusoidal_frequencies(3), ValueError, "even"),
])
def test_bad_arguments_raise_clear_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_numpy_integers_are_accepted():
    np.testing.assert_array_equal(sinusoidal_positions(np.int64(4), np.int32(6)), sinusoidal_positions(4, 6))


# --------------------------------------------------------------------------- rotary
def test_rotary_position_zero_is_identity_and_norms_are_kept():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 11, 8))            # (B, H, L, d)
    y = rotary(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(y[..., 0, :], x[..., 0, :])
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)
    assert not np.allclose(y[..., 1:, :], x[..., 1:, :])


def test_rotary_matches_complex_multiplication():
    # pair (x_2i, x_2i+1) as the complex number x_2i + i x_2i+1, multiplied by e^{i p w_i}
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 10))
    p = np.array([0, 1, 2, 7, 100, -3.5])
    z = (x[:, 0::2] + 1j * x[:, 1::2]) * np.exp(1j * p[:, None] * sinusoidal_frequencies(10))
    y = rotary(x, positions=p)
    np.testing.assert_allclose(y[:, 0::2], z.real, atol=1e-12)
    np.testing.assert_allclose(y[:, 1::2], z.imag, atol=1e-12)


def test_rotary_is_the_transposed_shift_matrix():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 12))
    np.testing.assert_allclose(rotary(x, positions=[5]), x @ sinusoidal_shift_matrix(5, 12).T, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(-50, 50), n=st.integers(-50, 50), shift=st.integers(-1000, 1000),
       seed=st.integers(0, 2**32 - 1))
def test_rotary_scores_depend_only_on_the_offset(m, n, shift, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, 1, 16))
    score = (rotary(q, [m]) @ rotary(k, [n]).T).item()
    moved = (rotary(q, [m + shift]) @ rotary(k, [n + shift]).T).item()
    assert moved == pytest.approx(score, abs=1e-9)
    # and equals q R_{n-m} k^T: the shift matrix of the offset n - m
    assert score == pytest.approx((q @ sinusoidal_shift_matrix(n - m, 16) @ k.T).item(), abs=1e-9)


def test_rotary_scores_do_change_with_the_offset():
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 1, 16))
    scores = [(rotary(q, [0]) @ rotary(k, [n]).T).item() for n in range(5)]
    assert len(set(np.round(scores, 9))) == 5


def test_rotary_keeps_float32():
    x = np.ones((3, 4), dtype=np.float32)
    assert rotary(x).dtype == np.float32


@pytest.mark.parametrize("call,exc,match", [
    (lambda: rotary(np.ones((3, 5))), ValueError, "even"),
    (lambda: rotary(np.ones(4)), ValueError, "2 dimensions"),
    (lambda: rotary(np.ones((3, 4), dtype=int)), TypeError, "floating"),
    (lambda: rotary(np.ones((3, 4)), positions=[0, 1]), ValueError, "shape"),
    (lambda: rotary(np.ones((3, 4)), positions=[0, 1, np.nan]), ValueError, "finite"),
    (lambda: rotary(np.ones((3, 4)), positions=["a", "b", "c"]), TypeError, "numeric"),
    (lambda: rotary(np.ones((3, 4)), base=-1.0), ValueError, "base"),
    (lambda: rotary(np.ones((3, 0))), ValueError, "at least 2"),
])
def test_rotary_bad_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_module_exports():
    assert set(pos_mod.__all__) == {"sinusoidal_frequencies", "sinusoidal_positions",
                                    "sinusoidal_shift_matrix", "rotary", "alibi_slopes", "alibi_bias"}


# ------------------------------------------------------------------ ALiBi and position interpolation
def test_alibi_slopes_powers_of_two_and_the_papers_rule_otherwise():
    from attn_edu.positions import alibi_slopes
    assert np.array_equal(alibi_slopes(8), 2.0 ** -np.arange(1, 9))          # 1/2 ... 1/256
    assert np.allclose(alibi_slopes(4), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8])
    # 12 heads: the 8 slopes of 8 heads, then slopes 0, 2, 4, 6 of 16 heads
    s16 = 2.0 ** (-0.5 * np.arange(1, 17))
    assert np.allclose(alibi_slopes(12), np.concatenate([alibi_slopes(8), s16[[0, 2, 4, 6]]]))
    assert alibi_slopes(1).tolist() == [2.0 ** -8]
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)
    with pytest.raises(TypeError, match="num_heads"):
        alibi_slopes(2.5)


def test_alibi_bias_is_a_causal_distance_penalty_that_extends_to_any_length():
    from attn_edu.positions import alibi_bias, alibi_slopes
    b = alibi_bias(4, 6)                                          # (H, L, L)
    assert b.shape == (4, 6, 6) and b.dtype == np.float64
    i, j = 5, 2
    assert np.allclose(b[:, i, j], -alibi_slopes(4) * (i - j))
    assert np.isneginf(b[:, 0, 1:]).all() and (np.diagonal(b, axis1=1, axis2=2) == 0).all()
    assert np.array_equal(alibi_bias(4, 12)[:, :6, :6], b)     # longer contains shorter
    with pytest.raises(ValueError, match="length"):
        alibi_bias(4, 0)


def test_alibi_as_a_float_mask_equals_adding_it_to_the_scores():
    import attn_edu
    from attn_edu.positions import alibi_bias
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 2, 5, 4))                  # (H=2, L=5, d=4) each
    bias = alibi_bias(2, 5)
    got = attn_edu.scaled_dot_product_attention(q, k, v, mask=bias)
    s = q @ np.swapaxes(k, -1, -2) / 2.0 + bias                 # scale 1/sqrt(4)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    assert np.allclose(got, want, atol=1e-12)
    causal = attn_edu.scaled_dot_product_attention(q, k, v, causal=True)
    assert not np.allclose(got, causal)                          # the penalty changes the weights


def test_rope_position_interpolation_keeps_scores_a_function_of_the_scaled_offset():
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((2, 1, 16))
    s = 4.0                                                      # stretch factor
    def score(m, n, scale=1.0):
        return (rotary(q, [m / scale]) @ rotary(k, [n / scale]).T).item()
    assert np.isclose(score(10, 30, s), score(110, 130, s))      # shift-invariant after scaling
    assert np.isclose(score(40, 120, s), score(10, 30))          # offset 80 / 4 == offset 20
