"""Tests for attn_edu.linear: linear attention (three forms), FAVOR+ and additive attention.

Gold answers: the masked quadratic form (float64) for linear attention; a per-pair loop
for additive attention; the exact softmax kernel / softmax attention for FAVOR+, which
is random, so its tests are statistical with tolerances computed from the samples
(fixed seeds: the tests are deterministic).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import attn_edu
from attn_edu import linear as L
from attn_edu import masks
from attn_edu.testing import assert_close_to_reference
from conftest import qkv, rand

torch = pytest.importorskip("torch")

TOL = 1e-10  # float64 fast form vs float64 quadratic form


def _x(shape, seed, scale=1.0):
    return rand(np.random.default_rng(seed), *shape) * scale


def _qkv(lq, lk, d, dv, seed=0, batch=(2,)):
    return qkv(lq, lk, d, dv, lead=batch, seed=seed)


# --------------------------------------------------------------------------- the three forms
SHAPES = [(1, 1, 16), (3, 17, 16), (17, 3, 59), (63, 65, 16), (65, 63, 59), (129, 127, 16)]


@pytest.mark.parametrize("lq,lk,d", SHAPES)
@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
def test_fast_recurrent_and_quadratic_forms_agree(lq, lk, d, causal):
    q, k, v = _qkv(lq, lk, d, 7, seed=lq + lk)
    gold = L.linear_attention_quadratic(q, k, v, causal=causal)
    fast = L.linear_attention(q, k, v, causal=causal)
    rec = L.linear_attention_recurrent(q, k, v, causal=causal)
    assert fast.shape == gold.shape == (2, lq, 7)
    assert np.abs(fast - gold).max() <= TOL
    assert np.abs(rec - gold).max() <= TOL
    assert not np.isnan(fast).any()


def test_causal_rows_see_exactly_their_prefix():
    # the causal output of row i equals the non-causal output on keys 0..i
    q, k, v = _qkv(9, 9, 16, 5, seed=3)
    out = L.linear_attention(q, k, v, causal=True)
    for i in range(9):
        row = L.linear_attention(q[:, i:i + 1], k[:, :i + 1], v[:, :i + 1])
        assert np.abs(out[:, i:i + 1] - row).max() <= TOL


def test_bottom_right_with_more_queries_than_keys_gives_zero_rows():
    q, k, v = _qkv(7, 4, 16, 3, seed=5)
    for fn in (L.linear_attention, L.linear_attention_recurrent, L.linear_attention_quadratic):
        out = fn(q, k, v, causal="bottom_right")
        assert not np.isnan(out).any()
        assert np.all(out[:, :3] == 0)  # queries 0..2 see no key (j <= i - 3)
        assert np.abs(out[:, 3:]).min() > 0


def test_float32_meets_the_tolerance_rule():
    q, k, v = _qkv(65, 63, 59, 16, seed=11)
    gold = L.linear_attention_quadratic(q, k, v, causal=True)
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    naive = L.linear_attention_quadratic(q32, k32, v32, causal=True)
    for impl in (L.linear_attention(q32, k32, v32, causal=True),
                 L.linear_attention_recurrent(q32, k32, v32, causal=True)):
        assert impl.dtype == np.float32
        assert_close_to_reference(impl, gold, naive)


def test_broadcast_leading_axes():
    q = _x((2, 3, 5, 8), 0)
    k, v = _x((1, 3, 6, 8), 1), _x((1, 3, 6, 4), 2)
    out = L.linear_attention(q, k, v, causal=True)
    assert out.shape == (2, 3, 5, 4)
    assert np.abs(out - L.linear_attention_quadratic(q, k, v, causal=True)).max() <= TOL


def test_quadratic_weights_are_a_normalised_kernel_smoother():
    # linear attention = kernel smoother with kappa(q, k) = phi(q).phi(k); here phi = x (x) x,
    # the exact features of the polynomial kernel (q.k)^2 (d_phi = d^2 != d)
    q, k, v = _qkv(6, 9, 4, 3, seed=7, batch=())

    def outer(x):
        return (x[..., :, None] * x[..., None, :]).reshape(x.shape[:-1] + (-1,))

    kern = (q @ k.T) ** 2  # (6, 9)
    gold = (kern / kern.sum(-1, keepdims=True)) @ v
    out, w = L.linear_attention_quadratic(q, k, v, feature_map=outer, return_weights=True)
    assert np.abs(out - gold).max() <= TOL
    assert np.allclose(w.sum(-1), 1.0, atol=1e-12) and (w >= 0).all()
    assert np.abs(L.linear_attention(q, k, v, feature_map=outer) - gold).max() <= TOL


def test_elu_plus_one():
    x = np.array([-50.0, -1.0, 0.0, 0.5, 3.0, 800.0])
    y = L.elu_plus_one(x)
    assert np.array_equal(y[3:], x[3:] + 1) and np.allclose(y[:3], np.exp(x[:3]))
    assert (y > 0).all()
    assert np.allclose(L.elu_plus_one(torch.tensor(x)).numpy(), y)
    assert L.elu_plus_one(x.astype(np.float32)).dtype == np.float32


def test_relu_feature_map_zero_rows_give_zeros_not_nan():
    q, k, v = _qkv(4, 5, 3, 2, seed=2, batch=())
    q[1] = -1.0  # relu(q_1) = 0: denominator 0
    out = L.linear_attention(q, k, v, feature_map="relu")
    assert np.all(out[1] == 0) and not np.isnan(out).any()
    assert np.abs(out - L.linear_attention_quadratic(q, k, v, feature_map="relu")).max() <= TOL


def test_eps_is_added_to_the_denominator():
    q, k, v = _qkv(5, 6, 4, 2, seed=9, batch=())
    for causal in (False, True):
        gold = L.linear_attention_quadratic(q, k, v, causal=causal, eps=0.5)
        assert np.abs(L.linear_attention(q, k, v, causal=causal, eps=0.5) - gold).max() <= TOL
        assert np.abs(L.linear_attention_recurrent(q, k, v, causal=causal, eps=0.5) - gold).max() <= TOL
        assert np.abs(gold - L.linear_attention_quadratic(q, k, v, causal=causal)).max() > 1e-3


# --------------------------------------------------------------------------- masks
def test_key_mask_fully_masked_rows_and_masked_kv_invariance():
    q, k, v = _qkv(5, 6, 8, 3, seed=4)
    valid = masks.padding_mask([4, 0], 6)  # batch 1 has no key at all
    km = masks.key_mask(valid)  # (2, 1, 6)
    for causal in (False, True):
        gold = L.linear_attention_quadratic(q, k, v, causal=causal, mask=km)
        for fn in (L.linear_attention, L.linear_attention_recurrent):
            out = fn(q, k, v, causal=causal, mask=km)
            assert np.abs(out - gold).max() <= TOL
            assert np.all(out[1] == 0) and not np.isnan(out).any()
            # masked keys and values may change (even to huge values) without effect
            k2, v2 = k.copy(), v.copy()
            k2[0, 4:], v2[0, 4:] = 1e3, -1e6
            assert np.abs(fn(q, k2, v2, causal=causal, mask=km) - out).max() <= TOL
    # same as dropping the padded keys
    out = L.linear_attention(q, k, v, mask=km)
    assert np.abs(out[0] - L.linear_attention(q[0], k[0, :4], v[0, :4])).max() <= TOL


def test_query_dependent_mask_is_refused_by_fast_forms_but_not_by_the_quadratic_one():
    q, k, v = _qkv(4, 4, 8, 3, seed=4)
    m = np.tri(4, dtype=bool)
    for fn in (L.linear_attention, L.linear_attention_recurrent, L.performer_attention):
        with pytest.raises(ValueError, match="mask over keys only"):
            fn(q, k, v, mask=m)
    gold = L.linear_attention_quadratic(q, k, v, mask=m)
    assert np.abs(gold - L.linear_attention(q, k, v, causal=True)).max() <= TOL


def test_mask_errors():
    q, k, v = _qkv(4, 5, 8, 3, seed=4)
    with pytest.raises(TypeError, match="boolean masks only"):
        L.linear_attention(q, k, v, mask=np.zeros((1, 5)))
    with pytest.raises(TypeError, match="mask must be boolean"):
        L.linear_attention(q, k, v, mask=np.ones((1, 5), dtype=int))
    with pytest.raises(ValueError, match="does not broadcast"):
        L.linear_attention(q, k, v, mask=np.ones((1, 4), dtype=bool))
    with pytest.raises(ValueError, match="already a causal mask"):
        L.linear_attention_quadratic(q, k, v, mask=masks.causal_mask(4, 5), causal=True)
    with pytest.raises(TypeError, match="torch tensor"):
        L.linear_attention(q, k, v, mask=torch.ones(1, 5, dtype=torch.bool))


# --------------------------------------------------------------------------- argument errors
def test_errors_match_the_reference_where_they_overlap():
    q, k, v = _qkv(4, 5, 8, 3)
    bad = [
        (q, k[..., :7], v),  # d_k mismatch
        (q, k, v[:, :4]),  # k/v length mismatch
        (q[0, 0], k, v),  # rank 1
    ]
    for args in bad:
        with pytest.raises(ValueError) as ref_err:
            attn_edu.scaled_dot_product_attention(*args)
        for fn in (L.linear_attention, L.linear_attention_quadratic, L.performer_attention):
            with pytest.raises(ValueError) as err:
                fn(*args)
            assert str(err.value) == str(ref_err.value)
    with pytest.raises(TypeError, match="q must be a floating"):
        L.linear_attention(q.astype(int), k, v)
    with pytest.raises(TypeError, match="same dtype"):
        L.linear_attention(q.astype(np.float32), k, v)
    with pytest.raises(TypeError, match="got a mix"):
        L.linear_attention(torch.tensor(q), k, v)
    with pytest.raises(ValueError, match="causal must be"):
        L.linear_attention(q, k, v, causal="top")


def test_feature_map_errors_name_the_argument():
    q, k, v = _qkv(4, 5, 8, 3)
    with pytest.raises(ValueError, match="feature_map must be one of 'elu\\+1', 'relu'"):
        L.linear_attention(q, k, v, feature_map="softmax")
    with pytest.raises(TypeError, match="feature_map must be a name"):
        L.linear_attention(q, k, v, feature_map=3)
    with pytest.raises(ValueError, match="feature_map must map"):
        L.linear_attention(q, k, v, feature_map=lambda x: x[..., 0])
    with pytest.raises(TypeError, match="feature_map must keep the dtype"):
        L.linear_attention(q, k, v, feature_map=lambda x: x.astype(np.float32))
    with pytest.raises(TypeError, match="same kind"):
        L.linear_attention(q, k, v, feature_map=lambda x: torch.tensor(x))
    with pytest.raises(ValueError, match="eps must be >= 0"):
        L.linear_attention(q, k, v, eps=-1.0)


# --------------------------------------------------------------------------- torch twin
@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
def test_torch_twin_equals_numpy(causal):
    q, k, v = _qkv(9, 11, 8, 5, seed=21)
    km = masks.key_mask(masks.padding_mask([11, 6], 11))
    tq, tk, tv, tm = (torch.tensor(x) for x in (q, k, v, km))
    for fn in (L.linear_attention, L.linear_attention_recurrent, L.linear_attention_quadratic):
        got = fn(tq, tk, tv, causal=causal, mask=tm)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
        assert np.abs(got.numpy() - fn(q, k, v, causal=causal, mask=km)).max() <= TOL
    got = L.performer_attention(tq, tk, tv, causal=causal, mask=tm, num_features=32, seed=3)
    assert np.abs(got.numpy() - L.performer_attention(q, k, v, causal=causal, mask=km,
                                                      num_features=32, seed=3)).max() <= TOL


def test_torch_gradients():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 5, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    for causal in (False, True):
        assert torch.autograd.gradcheck(lambda a, b, c: L.linear_attention(a, b, c, causal=causal), (q, k, v))
    omega = torch.as_tensor(L.random_features(3, 8, seed=1))
    assert torch.autograd.gradcheck(
        lambda a, b, c: L.performer_attention(a, b, c, omega=omega, causal=True), (q, k, v))


# --------------------------------------------------------------------------- FAVOR+
def test_random_features_shapes_seeds_and_orthogonality():
    w = L.random_features(8, 20, seed=0)
    assert w.shape == (20, 8)
    assert np.array_equal(w, L.random_features(8, 20, seed=0))
    assert not np.array_equal(w, L.random_features(8, 20, seed=1))
    assert np.array_equal(L.random_features(8, 5, seed=np.random.default_rng(4)),
                          L.random_features(8, 5, seed=np.random.default_rng(4)))
    block = w[:8] / np.linalg.norm(w[:8], axis=1, keepdims=True)  # one block: orthonormal directions
    assert np.abs(block @ block.T - np.eye(8)).max() < 1e-12
    iid = L.random_features(8, 20, seed=0, orthogonal=False)
    assert np.abs(iid[:8] @ iid[:8].T - np.diag(np.diag(iid[:8] @ iid[:8].T))).max() > 0.1


def test_orthogonal_rows_are_marginally_standard_normal():
    # E|w|^2 = d and E[w w^T] = I: checked within 5 standard errors computed from the sample
    d, n = 6, 3000
    w = L.random_features(d, n, seed=7)
    sq = (w ** 2).sum(1)
    assert abs(sq.mean() - d) <= 5 * sq.std(ddof=1) / math.sqrt(n)
    outer = w[:, :, None] * w[:, None, :]  # (n, d, d)
    se = outer.std(0, ddof=1) / math.sqrt(n)
    assert np.all(np.abs(outer.mean(0) - np.eye(d)) <= 5 * se)


def test_feature_argument_errors():
    with pytest.raises(ValueError, match="num_features must be at least 1; got 0"):
        L.random_features(4, 0)
    with pytest.raises(ValueError, match="num_features must be at least 1"):
        L.performer_attention(*_qkv(3, 3, 4, 2), num_features=0)
    with pytest.raises(ValueError, match="num_features must be at least 1"):
        L.softmax_kernel_estimate(_x((3, 4), 0), _x((3, 4), 1), num_features=-2)
    with pytest.raises(TypeError, match="num_features must be a positive integer"):
        L.random_features(4, 2.5)
    with pytest.raises(ValueError, match="d must be at least 1"):
        L.random_features(0, 4)
    with pytest.raises(TypeError, match="seed must be an integer"):
        L.random_features(4, 4, seed="a")
    with pytest.raises(ValueError, match="omega must have shape"):
        L.favor_features(_x((3, 4), 0), np.ones((5, 3)))
    with pytest.raises(ValueError, match="scale must be non-zero"):
        L.performer_attention(*_qkv(3, 3, 4, 2), scale=0)


def test_softmax_kernel_estimate_is_unbiased():
    """Mean over many seeds = the exact kernel, within 4 standard errors of that mean
    (computed from the same samples), for i.i.d. and orthogonal features."""
    d, n_seeds = 8, 1500
    q, k = _x((3, d), 1, scale=0.5), _x((4, d), 2, scale=0.5)
    exact = L.softmax_kernel(q, k)
    assert np.allclose(exact, np.exp(q @ k.T / math.sqrt(d)))
    for orthogonal in (False, True):
        est = np.stack([L.softmax_kernel_estimate(q, k, num_features=16, seed=s, orthogonal=orthogonal)
                        for s in range(n_seeds)])  # (S, 3, 4)
        se = est.std(0, ddof=1) / math.sqrt(n_seeds)
        assert np.all(np.abs(est.mean(0) - exact) <= 4 * se), orthogonal
        assert np.all(se > 0)  # the estimate is random: the test has teeth
    # and a biased estimator fails the same test: a tenth too large
    biased = 1.1 * est
    assert not np.all(np.abs(biased.mean(0) - exact) <= 4 * se)


def test_error_matches_the_exact_variance_and_shrinks_like_one_over_sqrt_m():
    """Mean squared error of the i.i.d. estimate = favor_variance = V1 / m, within 5 standard
    errors computed from the samples; so the RMS error falls like 1/sqrt(m)."""
    d, n_seeds = 8, 1000
    q, k = _x((2, d), 3, scale=0.2), _x((3, d), 4, scale=0.2)  # light tails: the CLT applies
    exact = L.softmax_kernel(q, k)
    for m in (4, 64):
        est = np.stack([L.softmax_kernel_estimate(q, k, num_features=m, seed=s, orthogonal=False)
                        for s in range(n_seeds)])
        sq = (est - exact) ** 2
        se = sq.std(0, ddof=1) / math.sqrt(n_seeds)
        theory = L.favor_variance(q, k, m)
        assert np.all(np.abs(sq.mean(0) - theory) <= 5 * se), m
    assert np.allclose(L.favor_variance(q, k, 64) * 16, L.favor_variance(q, k, 4))
    # orthogonal features: no worse than i.i.d. (the theory bound, with the same slack)
    est = np.stack([L.softmax_kernel_estimate(q, k, num_features=8, seed=s) for s in range(n_seeds)])
    sq = (est - exact) ** 2
    assert np.all(sq.mean(0) <= L.favor_variance(q, k, 8) + 5 * sq.std(0, ddof=1) / math.sqrt(n_seeds))


def _grouped_mse(q, k, m, orthogonal, total=2 ** 14):
    """Mean squared relative error of many independent m-feature estimates, all drawn in one
    call to random_features and split into consecutive groups of m rows (for m <= d a
    group lies inside one orthogonal block, as in a single draw of m features)."""
    groups = total // m
    omega = L.random_features(q.shape[-1], groups * m, seed=11, orthogonal=orthogonal)
    qs, ks = q / q.shape[-1] ** 0.25, k / k.shape[-1] ** 0.25  # fold in 1/sqrt(d)
    fq = L.favor_features(qs, omega) * math.sqrt(groups)  # each group: 1/sqrt(m)
    fk = L.favor_features(ks, omega) * math.sqrt(groups)
    est = np.einsum("igf,jgf->gij", fq.reshape(len(q), groups, m), fk.reshape(len(k), groups, m))
    return np.mean((est / L.softmax_kernel(q, k) - 1) ** 2)


def test_orthogonal_features_lower_the_variance_by_a_constant_factor():
    """Var_orth / Var_iid = 1 + (min(m, d) - 1) rho with rho < 0 (chapter 12): about 1 for
    m = 2, lower at m = d, and no lower again at m = 4d (independent blocks)."""
    d = 8
    q, k = _x((6, d), 5, scale=0.35), _x((6, d), 6, scale=0.35)  # light tails
    ratio = {m: _grouped_mse(q, k, m, True) / _grouped_mse(q, k, m, False) for m in (2, d, 4 * d)}
    assert ratio[d] < 0.93 and ratio[4 * d] < 0.93, ratio
    assert ratio[2] > ratio[d] + 0.04, ratio
    assert abs(ratio[4 * d] - ratio[d]) < 0.1, ratio

def test_favor_variance_formula_and_torch():
    q, k = _x((2, 4), 0), _x((3, 4), 1)
    qs, ks = q / 4 ** 0.25, k / 4 ** 0.25
    by_hand = np.exp(2 * qs @ ks.T) * (np.exp(((qs[:, None] + ks[None]) ** 2).sum(-1)) - 1) / 10
    assert np.allclose(L.favor_variance(q, k, 10), by_hand, rtol=1e-12)
    tq, tk = torch.tensor(q), torch.tensor(k)
    assert np.allclose(L.favor_variance(tq, tk, 10).numpy(), by_hand, rtol=1e-12)
    assert np.allclose(L.softmax_kernel_estimate(tq, tk, seed=2).numpy(),
                       L.softmax_kernel_estimate(q, k, seed=2), rtol=1e-12)


def test_performer_equals_linear_attention_with_favor_features():
    """The stabilisers cancel: performer_attention = linear attention with the plain
    (unstabilised) FAVOR+ features of q/d^(1/4), k/d^(1/4)."""
    q, k, v = _qkv(7, 9, 8, 3, seed=5)
    omega = L.random_features(8, 40, seed=2)
    km = masks.key_mask(masks.padding_mask([9, 5], 9))
    c = 8 ** -0.25
    for causal in (False, True, "bottom_right"):
        for mask in (None, km):
            got = L.performer_attention(q, k, v, omega=omega, causal=causal, mask=mask)
            ref = L.linear_attention_quadratic(q * c, k * c, v, causal=causal, mask=mask,
                                               feature_map=lambda x: L.favor_features(x, omega))
            assert np.abs(got - ref).max() <= TOL
    # a negative scale is folded in as well
    got = L.performer_attention(q, k, v, omega=omega, scale=-0.3)
    s = math.sqrt(0.3)
    num = L.favor_features(q * s, omega) @ L.favor_features(-k * s, omega).swapaxes(-1, -2)
    assert np.abs(got - (num / num.sum(-1, keepdims=True)) @ v).max() <= TOL


def test_performer_is_stable_where_plain_features_underflow():
    q, k, v = _qkv(6, 8, 4, 3, seed=8)
    q, k = q * 40, k * 40  # |x|^2 / 2 ~ 10^3: exp(w.x - |x|^2/2) underflows to 0 in float64
    omega = L.random_features(4, 64, seed=0)
    c = 4 ** -0.25
    plain = L.linear_attention_quadratic(q * c, k * c, v, feature_map=lambda x: L.favor_features(x, omega))
    assert (plain == 0).all(-1).any()  # 0 / 0 rows: the plain features carry no information
    out = L.performer_attention(q, k, v, omega=omega)
    assert np.isfinite(out).all() and not (out == 0).all(-1).any()
    # each output is a convex combination of the values
    assert np.all(out <= v.max(-2, keepdims=True) + 1e-12) and np.all(out >= v.min(-2, keepdims=True) - 1e-12)


def test_performer_converges_to_softmax_attention_and_is_seeded():
    q, k, v = _qkv(16, 24, 8, 4, seed=12)
    q, k = q * 0.5, k * 0.5
    exact = attn_edu.scaled_dot_product_attention(q, k, v, causal=True)
    errs = [np.sqrt(np.mean([(L.performer_attention(q, k, v, num_features=m, seed=s, causal=True)
                              - exact) ** 2 for s in range(8)])) for m in (16, 1024)]
    assert errs[1] < errs[0] / 4  # 64x the features: ~8x less error in theory
    a = L.performer_attention(q, k, v, num_features=32, seed=5)
    assert np.array_equal(a, L.performer_attention(q, k, v, num_features=32, seed=5))
    assert not np.array_equal(a, L.performer_attention(q, k, v, num_features=32, seed=6))


# --------------------------------------------------------------------------- additive
def _additive_loop(q, k, v, p, allowed=None):
    lq, lk = q.shape[0], k.shape[0]
    e = np.empty((lq, lk))
    for i in range(lq):
        for j in range(lk):
            e[i, j] = p["w_v"] @ np.tanh(p["W_q"].T @ q[i] + p["W_k"].T @ k[j])
    out, w = np.zeros((lq, v.shape[1])), np.zeros((lq, lk))
    for i in range(lq):
        ok = np.ones(lk, bool) if allowed is None else allowed[i]
        if ok.any():
            ex = np.exp(e[i, ok] - e[i, ok].max())
            w[i, ok] = ex / ex.sum()
            out[i] = w[i] @ v
    return out, w


def test_additive_attention_equals_the_loop():
    q, k, v = _x((5, 3), 0), _x((7, 6), 1), _x((7, 2), 2)  # d_q != d_k
    p = L.init_additive_params(3, 6, 10, seed=1)
    out, w = L.additive_attention(q, k, v, **p, return_weights=True)
    gold_o, gold_w = _additive_loop(q, k, v, p)
    assert np.abs(out - gold_o).max() <= 1e-12 and np.abs(w - gold_w).max() <= 1e-12
    allowed = np.tri(5, 7, k=-2, dtype=bool)  # rows 0 and 1 fully masked
    out, w = L.additive_attention(q, k, v, **p, mask=allowed, return_weights=True)
    gold_o, gold_w = _additive_loop(q, k, v, p, allowed)
    assert np.abs(out - gold_o).max() <= 1e-12 and np.abs(w - gold_w).max() <= 1e-12
    assert np.all(out[:2] == 0) and np.all(w[:2] == 0) and not np.isnan(out).any()
    # causal="bottom_right" is the mask tri(5, 7, k=2)
    a = L.additive_attention(q, k, v, **p, causal="bottom_right")
    b = L.additive_attention(q, k, v, **p, mask=np.tri(5, 7, k=2, dtype=bool))
    assert np.abs(a - b).max() <= 1e-15


def test_additive_attention_batched_float_mask_and_torch():
    q, k, v = _x((2, 4, 3), 0), _x((2, 6, 5), 1), _x((2, 6, 2), 2)
    p = L.init_additive_params(3, 5, 8, seed=3)
    km = masks.key_mask(masks.padding_mask([6, 2], 6))
    out = L.additive_attention(q, k, v, **p, mask=km)
    assert np.abs(out[1] - L.additive_attention(q[1], k[1, :2], v[1, :2], **p)).max() <= 1e-12
    assert np.abs(out - L.additive_attention(q, k, v, **p, mask=masks.to_additive(km, np.float64))).max() <= 1e-12
    t = {n: torch.tensor(x, requires_grad=True) for n, x in p.items()}
    tq, tk, tv = (torch.tensor(x) for x in (q, k, v))
    full = torch.zeros(2, 1, 6, dtype=torch.bool)  # every row fully masked
    got = L.additive_attention(tq, tk, tv, **t, mask=torch.tensor(km))
    assert np.abs(got.detach().numpy() - out).max() <= 1e-12
    zero = L.additive_attention(tq, tk, tv, **t, mask=full)
    (got.sum() + zero.sum()).backward()
    assert torch.all(zero == 0)
    assert all(torch.isfinite(x.grad).all() for x in t.values())


def test_additive_params_and_errors():
    p = L.init_additive_params(3, 5, 8, seed=0)
    assert {n: x.shape for n, x in p.items()} == {"W_q": (3, 8), "W_k": (5, 8), "w_v": (8,)}
    assert L.count_additive_params(3, 5, 8) == sum(x.size for x in p.values()) == 72
    assert np.array_equal(p["W_q"], L.init_additive_params(3, 5, 8, seed=0)["W_q"])
    assert L.init_additive_params(3, 5, 8, dtype=np.float32)["w_v"].dtype == np.float32
    q, k, v = _x((4, 3), 0), _x((6, 5), 1), _x((6, 2), 2)
    with pytest.raises(ValueError, match=r"W_q must have shape \(3, 8\)"):
        L.additive_attention(q, k, v, p["W_k"], p["W_k"], p["w_v"])
    with pytest.raises(ValueError, match=r"W_k must have shape \(5, 8\)"):
        L.additive_attention(q, k, v, p["W_q"], p["W_q"], p["w_v"])
    with pytest.raises(ValueError, match="w_v must have shape"):
        L.additive_attention(q, k, v, p["W_q"], p["W_k"], p["W_k"])
    with pytest.raises(TypeError, match="W_q has dtype float32"):
        L.additive_attention(q, k, v, p["W_q"].astype(np.float32), p["W_k"], p["w_v"])
    with pytest.raises(ValueError, match="k and v must have the same length"):
        L.additive_attention(q, k, v[:5], **p)
    with pytest.raises(ValueError, match="d_hidden must be at least 1"):
        L.init_additive_params(3, 5, 0)


def test_flops_formula():
    assert L.linear_attention_flops(10, 20, 4, 3) == 2 * 30 * 4 * 4
    assert L.linear_attention_flops(10, 10, 4, 3, batch=2, heads=3) == 6 * 2 * 20 * 4 * 4
    with pytest.raises(ValueError, match="d_phi must be at least 1"):
        L.linear_attention_flops(1, 1, 0, 1)
