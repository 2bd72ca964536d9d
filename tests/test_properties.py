"""Hypothesis property tests of the invariants every attention implementation keeps."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_edu.reference import scaled_dot_product_attention as sdpa
from attn_edu.testing import assert_same_up_to_rounding

settings.register_profile("attn_edu", max_examples=60, deadline=None)
settings.load_profile("attn_edu")


@st.composite
def problems(draw, with_mask=True):
    """q, k, v (float64), a boolean mask (maybe with fully masked rows) and a causal option."""
    lq = draw(st.integers(1, 9))
    lk = draw(st.integers(1, 9))
    dk = draw(st.integers(1, 6))
    dv = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mag = draw(st.sampled_from([0.1, 1.0, 5.0]))
    q = rng.standard_normal((lq, dk)) * mag
    k = rng.standard_normal((lk, dk)) * mag
    v = rng.standard_normal((lk, dv))
    mask = None
    if with_mask and draw(st.booleans()):
        mask = rng.random((lq, lk)) < draw(st.sampled_from([0.2, 0.5, 0.9]))
    causal = draw(st.sampled_from([False, "top_left", "bottom_right"]))
    return q, k, v, mask, causal, rng


def allowed_of(mask, causal, lq, lk):
    allowed = np.ones((lq, lk), bool) if mask is None else mask.copy()
    if causal:
        off = 0 if causal == "top_left" else lk - lq
        allowed &= np.tri(lq, lk, k=off, dtype=bool)
    return allowed


@given(problems())
def test_changing_masked_out_k_and_v_leaves_output_unchanged(p):
    q, k, v, mask, causal, rng = p
    allowed = allowed_of(mask, causal, len(q), len(k))
    out = sdpa(q, k, v, mask=mask, causal=causal)
    # keys that no query may see can change arbitrarily (finite values)
    hidden = ~allowed.any(axis=0)
    k2, v2 = k.copy(), v.copy()
    k2[hidden] = rng.standard_normal(k2[hidden].shape) * 100
    v2[hidden] = rng.standard_normal(v2[hidden].shape) * 100
    assert_same_up_to_rounding(sdpa(q, k2, v2, mask=mask, causal=causal), out)
    # per query: changing K at that query's blocked positions leaves that row unchanged
    i = int(rng.integers(len(q)))
    k3 = k.copy()
    k3[~allowed[i]] += 50.0
    np.testing.assert_allclose(sdpa(q, k3, v, mask=mask, causal=causal)[i], out[i], atol=1e-12, rtol=0)


@given(problems())
def test_permuting_keys_and_values_together_leaves_output_unchanged(p):
    q, k, v, mask, causal, rng = p
    allowed = allowed_of(mask, causal, len(q), len(k))
    perm = rng.permutation(len(k))
    out = sdpa(q, k, v, mask=allowed)
    out_p = sdpa(q, k[perm], v[perm], mask=allowed[:, perm])
    np.testing.assert_allclose(out_p, out, atol=1e-12, rtol=0)


@given(problems())
def test_permuting_queries_permutes_the_output(p):
    q, k, v, mask, causal, rng = p
    allowed = allowed_of(mask, causal, len(q), len(k))
    perm = rng.permutation(len(q))
    out = sdpa(q, k, v, mask=allowed)
    # equal up to rounding: BLAS may sum a row differently depending on where it sits
    np.testing.assert_allclose(sdpa(q[perm], k, v, mask=allowed[perm]), out[perm], atol=1e-12, rtol=0)


@given(problems(with_mask=False))
def test_zero_queries_and_keys_give_the_mean_of_v(p):
    q, k, v, _, causal, rng = p
    out = sdpa(np.zeros_like(q), np.zeros_like(k), v)
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=0), out.shape), atol=1e-12, rtol=0)
    # with a causal mask, query i averages the values it may see
    out_c = sdpa(np.zeros_like(q), np.zeros_like(k), v, causal=causal or "top_left")
    allowed = allowed_of(None, causal or "top_left", len(q), len(k))
    for i in range(len(q)):
        expect = v[allowed[i]].mean(axis=0) if allowed[i].any() else np.zeros(v.shape[1])
        np.testing.assert_allclose(out_c[i], expect, atol=1e-12, rtol=0)


@given(problems())
def test_repeated_runs_are_bitwise_equal(p):
    q, k, v, mask, causal, _ = p
    a, wa = sdpa(q, k, v, mask=mask, causal=causal, return_weights=True)
    b, wb = sdpa(q.copy(), k.copy(), v.copy(), mask=mask, causal=causal, return_weights=True)
    assert a.tobytes() == b.tobytes() and wa.tobytes() == wb.tobytes()


@given(problems())
def test_weights_are_a_distribution_or_zero_and_output_in_convex_hull(p):
    q, k, v, mask, causal, _ = p
    allowed = allowed_of(mask, causal, len(q), len(k))
    out, w = sdpa(q, k, v, mask=mask, causal=causal, return_weights=True)
    assert np.all(w >= 0) and np.all(w[~allowed] == 0)
    sums = w.sum(axis=-1)
    rows = allowed.any(axis=-1)
    np.testing.assert_allclose(sums[rows], 1.0, atol=1e-12)
    assert np.all(sums[~rows] == 0) and np.all(out[~rows] == 0)
    assert not np.isnan(out).any()
    for i in np.flatnonzero(rows):  # each output coordinate between the min and max of visible values
        vis = v[allowed[i]]
        assert np.all(out[i] >= vis.min(axis=0) - 1e-12) and np.all(out[i] <= vis.max(axis=0) + 1e-12)


@given(problems(), st.floats(-4, 4).filter(lambda c: abs(c) > 1e-3))
def test_adding_a_constant_to_a_row_of_scores_changes_nothing(p, c):
    """Shift invariance through a float mask: a row-constant bias leaves the output unchanged."""
    q, k, v, mask, causal, _ = p
    allowed = allowed_of(mask, causal, len(q), len(k))
    bias = np.where(allowed, c, -np.inf)
    np.testing.assert_allclose(sdpa(q, k, v, mask=bias), sdpa(q, k, v, mask=allowed), atol=1e-12, rtol=0)
