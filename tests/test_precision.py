"""attn_edu.precision: overflow limits, log-sum-exp, the masked-fill recipe, online merging."""
import decimal
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attn_edu
from attn_edu import precision as P



def lse_decimal(xs, prec=60):
    """log(sum(exp(x))) in 60-digit decimal arithmetic (no shift, no overflow)."""
    ctx = decimal.Context(prec=prec)
    total = sum((ctx.exp(decimal.Decimal(float(x))) for x in xs), decimal.Decimal(0))
    return float(ctx.ln(total))


# --------------------------------------------------------------------------- limits
@pytest.mark.parametrize("dtype, expected", [("float16", 11.0898), ("bfloat16", 88.7189),
                                             ("float32", 88.7228), ("float64", 709.7827)])
def test_overflow_threshold_values(dtype, expected):
    assert P.overflow_threshold(dtype) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64"])
def test_overflow_threshold_matches_torch(name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, name)
    t = P.overflow_threshold(dtype)
    assert math.log(torch.finfo(dtype).max) == pytest.approx(t, rel=1e-12)
    assert torch.isfinite(torch.exp(torch.tensor(t - 0.05, dtype=dtype)))
    assert torch.isinf(torch.exp(torch.tensor(t + 0.1, dtype=dtype)))


def test_overflow_threshold_numpy_dtypes():
    torch = pytest.importorskip("torch")
    assert P.overflow_threshold(np.float32) == P.overflow_threshold("float32")
    assert P.overflow_threshold(np.dtype("float16")) == P.overflow_threshold(torch.float16)
    with pytest.raises(TypeError, match="int32"):
        P.overflow_threshold(np.int32)
    with pytest.raises(TypeError):
        P.overflow_threshold("float8")


# --------------------------------------------------------------------------- naive softmax
def test_naive_softmax_matches_stable_on_safe_inputs():
    x = np.random.default_rng(0).standard_normal((4, 7))
    assert np.allclose(P.naive_softmax(x), attn_edu.softmax(x), atol=1e-15)


@pytest.mark.parametrize("dtype, big", [(np.float16, 11.5), (np.float32, 89.0), (np.float64, 710.0)])
def test_naive_softmax_overflows_just_above_the_threshold(dtype, big):
    x = np.array([big, 0.0], dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        w = P.naive_softmax(x)
    assert np.isnan(w[0]) and w[1] == 0  # inf / inf and 1 / inf
    ok = P.naive_softmax(np.array([big - 1.0, 0.0], dtype=dtype))  # below: fine
    assert np.all(np.isfinite(ok))
    assert attn_edu.softmax(x)[0] == pytest.approx(1.0)  # the stable one is fine


def test_naive_softmax_underflows_to_nan():
    with np.errstate(invalid="ignore"):
        w = P.naive_softmax(np.array([-800.0, -801.0]))  # exp underflows to 0: 0/0
    assert np.isnan(w).all()


def test_naive_softmax_torch_bfloat16():
    torch = pytest.importorskip("torch")
    x = torch.tensor([89.0, 0.0], dtype=torch.bfloat16)
    assert torch.isnan(P.naive_softmax(x)[0])
    assert P.naive_softmax(x).dtype == torch.bfloat16


# --------------------------------------------------------------------------- logsumexp
def test_logsumexp_safe_inputs_match_the_definition():
    x = np.random.default_rng(1).standard_normal((3, 5, 6))
    for axis in (0, 1, -1):
        assert np.allclose(P.logsumexp(x, axis=axis), np.log(np.sum(np.exp(x), axis=axis)), atol=1e-14)
    assert P.logsumexp(x, keepdims=True).shape == (3, 5, 1)


@pytest.mark.parametrize("xs", [[1000.0, 999.0, -5.0], [-1000.0, -1001.0], [700.0] * 50,
                                [1e4, 1e4 - 30.0], [-745.0, -746.0, -800.0]])
def test_logsumexp_extreme_inputs_against_decimal(xs):
    got = float(P.logsumexp(np.array(xs)))
    assert got == pytest.approx(lse_decimal(xs), rel=1e-14, abs=1e-12)


def test_the_unshifted_formula_fails_where_logsumexp_does_not():
    with np.errstate(over="ignore", divide="ignore"):
        assert np.log(np.sum(np.exp(np.array([1000.0, 999.0])))) == np.inf
        assert np.log(np.sum(np.exp(np.array([-1000.0, -1001.0])))) == -np.inf
    assert float(P.logsumexp(np.array([-1000.0, -1001.0]))) == pytest.approx(
        lse_decimal([-1000.0, -1001.0]), rel=1e-15)


def test_logsumexp_masks_and_special_values():
    x = np.array([[1.0, 2.0, 3.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0], [np.nan, 0.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the empty slice must not warn
        out = P.logsumexp(x)
    assert out[0] == pytest.approx(lse_decimal([1, 2, 3]))
    assert out[1] == -np.inf and out[2] == np.inf and np.isnan(out[3])
    mask = np.array([True, False, True])
    assert P.logsumexp(x[0], mask=mask) == pytest.approx(lse_decimal([1, 3]))
    assert P.logsumexp(x[0], mask=np.zeros(3, bool)) == -np.inf


def test_logsumexp_torch_matches_torch_logsumexp():
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 9, dtype=torch.float64) * 300
    assert torch.allclose(P.logsumexp(x), torch.logsumexp(x, dim=-1))
    x[1] = float("-inf")
    assert P.logsumexp(x)[1] == float("-inf")


def test_softmax_is_exp_of_x_minus_lse():
    x = np.random.default_rng(2).standard_normal((5, 8)) * 50
    assert np.allclose(np.exp(x - P.logsumexp(x, keepdims=True)), attn_edu.softmax(x), atol=1e-15)


# --------------------------------------------------------------------------- masked fills
def test_masked_fill_softmax_outcomes():
    s = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], dtype=np.float32)
    keep = np.array([[True, True, False], [False, False, False]])
    part = attn_edu.softmax(s[0], mask=keep[0])
    for fill in (-1e9, "finfo.min"):
        w = P.masked_fill_softmax(s, keep, fill)
        assert np.allclose(w[0], part) and np.allclose(w[1], 1 / 3)  # uniform: silently wrong
    with np.errstate(invalid="ignore"):
        w = P.masked_fill_softmax(s, keep, -np.inf)
    assert np.allclose(w[0], part) and np.isnan(w[1]).all()
    with np.errstate(over="ignore", invalid="ignore"):  # NumPy: -1e9 -> -inf in float16
        w16 = P.masked_fill_softmax(s.astype(np.float16), keep, -1e9)
    assert np.isnan(w16[1]).all()


def test_masked_fill_softmax_torch_float16_refuses_minus_1e9():
    torch = pytest.importorskip("torch")
    s = torch.zeros(2, 3, dtype=torch.float16)
    keep = torch.tensor([[True, False, True], [False, False, False]])
    with pytest.raises(RuntimeError, match="overflow"):
        P.masked_fill_softmax(s, keep, -1e9)
    w = P.masked_fill_softmax(s, keep, "finfo.min")
    assert torch.allclose(w[1].float(), torch.full((3,), 1 / 3), atol=1e-3)


def test_additive_finfo_min_overflows_in_float16():
    torch = pytest.importorskip("torch")
    s = torch.tensor([[-20.0, 1.0], [-20.0, -30.0]], dtype=torch.float16)
    keep = torch.zeros(2, 2, dtype=torch.bool)  # both rows fully masked
    w = P.masked_fill_softmax(s, keep, "finfo.min", how="add")
    assert w[0].tolist() == [0.0, 1.0]  # -65504 - 20 rounds to -inf; 1 - 65504 does not
    assert torch.isnan(w[1]).all()  # both -inf: -inf - (-inf)
    w32 = P.masked_fill_softmax(s.float(), keep, "finfo.min", how="add")
    assert torch.allclose(w32, torch.full((2, 2), 0.5))  # float32: uniform


def test_masked_fill_softmax_bad_input():
    torch = pytest.importorskip("torch")
    s = np.zeros((2, 3))
    with pytest.raises(TypeError, match="boolean"):
        P.masked_fill_softmax(s, np.ones((2, 3), int), -1e9)
    with pytest.raises(ValueError, match="broadcast"):
        P.masked_fill_softmax(s, np.ones((4, 3), bool), -1e9)
    with pytest.raises(ValueError, match="how"):
        P.masked_fill_softmax(s, np.ones((2, 3), bool), -1e9, how="mul")
    with pytest.raises(ValueError):
        P.masked_fill_softmax(s, np.ones((2, 3), bool), "finfo.max")
    with pytest.raises(TypeError):
        P.masked_fill_softmax(s, np.ones((2, 3), bool), None)
    with pytest.raises(ValueError):
        P.masked_fill_softmax(s, np.ones((2, 3), bool), float("nan"))
    with pytest.raises(TypeError, match="all NumPy arrays or all torch tensors"):
        P.masked_fill_softmax(s, torch.ones(2, 3, dtype=torch.bool), -1e9)


# --------------------------------------------------------------------------- online softmax
def block_stats(scores, v, keep):
    """(m, l, o) of one block: scores (Lq, n), v (n, d), keep (Lq, n) bool."""
    m, l = P.softmax_partial(scores, mask=keep)
    o = attn_edu.softmax(scores, mask=keep) @ v  # normalised within the block
    return m, l, o


def merged_attention(scores, v, keep, cuts):
    """Split the keys at `cuts`, compute each block's stats, merge left to right."""
    lq, d = scores.shape[0], v.shape[1]
    m, l, o = np.full(lq, -np.inf), np.zeros(lq), np.zeros((lq, d))
    edges = [0, *cuts, scores.shape[1]]
    for a, b in zip(edges[:-1], edges[1:]):
        mb, lb, ob = block_stats(scores[:, a:b], v[a:b], keep[:, a:b])
        m, l, o = P.merge_softmax_stats(m, l, o, mb, lb, ob)
    return m, l, o


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 24), lq=st.integers(1, 5), seed=st.integers(0, 2**32 - 1),
       cuts=st.lists(st.integers(0, 24), max_size=4), p_keep=st.sampled_from([0.0, 0.3, 1.0]),
       scale=st.sampled_from([1.0, 30.0, 300.0]))
def test_merging_blocks_equals_the_full_softmax(n, lq, seed, cuts, p_keep, scale):
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((lq, n)) * scale
    v = rng.standard_normal((n, 3))
    keep = rng.random((lq, n)) < p_keep
    keep[0] = False  # always one fully masked row
    cuts = sorted(min(c, n) for c in cuts)  # repeated cuts make empty blocks
    m, l, o = merged_attention(scores, v, keep, cuts)
    full_w = attn_edu.softmax(scores, mask=keep)
    assert not np.isnan(o).any()
    assert np.allclose(o, full_w @ v, atol=1e-12)
    lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), -np.inf)
    assert np.allclose(lse, P.logsumexp(scores, mask=keep), atol=1e-12)
    assert np.all(o[0] == 0) and m[0] == -np.inf and l[0] == 0


def test_merge_is_order_independent_and_handles_empty_blocks():
    rng = np.random.default_rng(3)
    s, v = rng.standard_normal((2, 6)), rng.standard_normal((6, 4))
    keep = np.ones((2, 6), bool)
    a = block_stats(s[:, :2], v[:2], keep[:, :2])
    b = block_stats(s[:, 2:], v[2:], keep[:, 2:])
    empty = P.softmax_partial(np.zeros((2, 0)))
    e = (*empty, np.zeros((2, 4)))
    ab, ba = P.merge_softmax_stats(*a, *b), P.merge_softmax_stats(*b, *a)
    for x, y in zip(ab, ba):
        assert np.allclose(x, y, atol=1e-15)
    for x, y in zip(P.merge_softmax_stats(*a, *e), a):  # empty block: no change
        assert np.allclose(x, y, rtol=1e-15, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no -inf - (-inf), no 0/0
        m, l, o = P.merge_softmax_stats(*e, *e)
    assert np.all(m == -np.inf) and np.all(l == 0) and np.all(o == 0)


def test_merge_torch_float32_and_nan_propagates():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    s, v = torch.randn(3, 10), torch.randn(10, 2)
    m1, l1 = P.softmax_partial(s[:, :4])
    m2, l2 = P.softmax_partial(s[:, 4:])
    o1 = torch.softmax(s[:, :4], -1) @ v[:4]
    o2 = torch.softmax(s[:, 4:], -1) @ v[4:]
    m, l, o = P.merge_softmax_stats(m1, l1, o1, m2, l2, o2)
    assert torch.allclose(o, torch.softmax(s, -1) @ v, atol=1e-6)
    assert torch.allclose(m + torch.log(l), torch.logsumexp(s, -1), atol=1e-6)
    m1 = m1.clone()
    m1[1] = float("nan")
    _, _, o = P.merge_softmax_stats(m1, l1, o1, m2, l2, o2)
    assert torch.isnan(o[1]).all() and not torch.isnan(o[[0, 2]]).any()


def test_merge_bad_input():
    torch = pytest.importorskip("torch")
    m, l, o = np.zeros(3), np.ones(3), np.zeros((3, 2))
    with pytest.raises(ValueError, match="same shape"):
        P.merge_softmax_stats(m, l, o, np.zeros(4), np.ones(4), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="shape"):
        P.merge_softmax_stats(m, l, o, m, l, np.zeros((3, 2, 1)))
    with pytest.raises(ValueError, match="both"):
        P.merge_softmax_stats(m, l, o, m, l, None)
    with pytest.raises(TypeError, match="mix"):
        P.merge_softmax_stats(m, l, o, torch.zeros(3), torch.ones(3), torch.zeros(3, 2))
    with pytest.raises(TypeError, match="dtype"):
        P.merge_softmax_stats(m, l, o, m, np.ones(3, int), o)


def test_bad_input_for_the_softmax_functions():
    with pytest.raises(TypeError, match="dtype int"):
        P.naive_softmax(np.arange(3))
    with pytest.raises(ValueError, match="0-d"):
        P.logsumexp(np.float64(1.0))
    with pytest.raises(ValueError, match="out of range"):
        P.softmax_partial(np.zeros((2, 3)), axis=2)
    with pytest.raises(TypeError, match="axis"):
        P.logsumexp(np.zeros(3), axis=0.5)
    with pytest.raises(ValueError, match="at least one entry"):
        P.logsumexp(np.zeros((2, 0)))
    with pytest.raises(TypeError):
        P.logsumexp("1, 2, 3")
