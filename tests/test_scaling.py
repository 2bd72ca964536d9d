"""attn_edu.scaling: the variance formula, Monte Carlo tolerance, entropy, Jacobian, explorer."""
import math

import numpy as np
import pytest

from attn_edu import scaling
from attn_edu.reference import softmax



# --------------------------------------------------------------------------- formulas
def test_variance_formula_values():
    assert scaling.expected_dot_product_variance(64) == 64
    assert scaling.expected_dot_product_variance(64, 2, 2) == 64 * 16
    # non-zero means: d (σq²σk² + μq²σk² + μk²σq²)
    assert math.isclose(scaling.expected_dot_product_variance(10, 1.5, 0.5, 2.0, -1.0),
                        10 * (2.25 * 0.25 + 4 * 0.25 + 1 * 2.25))
    assert scaling.expected_dot_product_mean(10, 2.0, -1.0) == -20


def test_general_moments_reduce_to_isotropic_formula():
    d = 7
    mean, var = scaling.dot_product_moments(np.full(d, 0.3), 4 * np.eye(d), np.full(d, -2.0), 0.25 * np.eye(d))
    assert math.isclose(mean, scaling.expected_dot_product_mean(d, 0.3, -2.0))
    assert math.isclose(var, scaling.expected_dot_product_variance(d, 2.0, 0.5, 0.3, -2.0))


def _rel_se(n, d_k):
    return scaling.variance_relative_se(n, scaling.dot_product_kurtosis(d_k))


@pytest.mark.parametrize("d_k", [1, 3, 64, 128])
@pytest.mark.parametrize("sig", [(1.0, 1.0), (2.0, 0.5)])
def test_monte_carlo_matches_formula_within_5_standard_errors(d_k, sig):
    # relative SE of a sample variance is sqrt((kappa - 1) / N) with kappa = 3 + 6/d_k;
    # 5 SE: a correct formula fails with probability ~6e-7 per case; seeded, so reproducible.
    n = 20_000
    st = scaling.dot_product_stats(d_k, n, *sig, rng=d_k)
    expected = scaling.expected_dot_product_variance(d_k, *sig)
    assert abs(st.var / expected - 1) <= 5 * _rel_se(n, d_k)
    assert abs(st.mean) <= 5 * math.sqrt(expected / n)


def test_monte_carlo_with_means_matches_formula():
    n, d_k = 40_000, 16
    st = scaling.dot_product_stats(d_k, n, 1.0, 2.0, 0.5, -1.0, rng=1)
    var = scaling.expected_dot_product_variance(d_k, 1.0, 2.0, 0.5, -1.0)
    mean = scaling.expected_dot_product_mean(d_k, 0.5, -1.0)
    assert abs(st.mean - mean) <= 5 * math.sqrt(var / n)
    assert abs(st.var / var - 1) <= 5 * scaling.variance_relative_se(n, st.kurtosis)


def test_tolerance_rejects_a_wrong_formula():
    # the check can fail: a 10% error at large d_k is ~9 standard errors
    n, d_k = 20_000, 128
    st = scaling.dot_product_stats(d_k, n, rng=0)
    assert abs(st.var / (1.1 * d_k) - 1) > 5 * _rel_se(n, d_k)


def test_general_formula_correlated_components_monte_carlo():
    rng = np.random.default_rng(3)
    d, n, rho = 16, 40_000, 0.4
    cov = (1 - rho) * np.eye(d) + rho * np.ones((d, d))
    L = np.linalg.cholesky(cov)
    q = rng.standard_normal((n, d)) @ L.T
    k = rng.standard_normal((n, d)) @ L.T
    x = (q * k).sum(1)
    mean, var = scaling.dot_product_moments(np.zeros(d), cov, np.zeros(d), cov)
    assert math.isclose(var, d + d * (d - 1) * rho**2)
    c = x - x.mean()
    kurt = np.mean(c**4) / np.mean(c**2) ** 2
    assert abs(x.var() / var - 1) <= 5 * scaling.variance_relative_se(n, kurt)


def test_kurtosis_formula_by_monte_carlo():
    for d_k in (1, 8):
        st = scaling.dot_product_stats(d_k, 400_000, rng=11)
        assert abs(st.kurtosis - scaling.dot_product_kurtosis(d_k)) < 0.1 * scaling.dot_product_kurtosis(d_k)


def test_sampling_is_seeded_and_chunk_independent():
    a = scaling.sample_dot_products(32, 1000, rng=5)
    b = scaling.sample_dot_products(32, 1000, rng=5)
    assert np.array_equal(a, b) and a.shape == (1000,)
    # chunking changes the draw order but not the distribution; sizes add up
    c = scaling.sample_dot_products(32, 1000, rng=5, chunk_elements=100)
    assert c.shape == (1000,)


# --------------------------------------------------------------------------- entropy / Jacobian
def test_entropy_uniform_one_hot_zero_rows():
    n = 17
    assert math.isclose(scaling.softmax_entropy(np.full(n, 1 / n)), math.log(n))
    h = scaling.softmax_entropy(np.eye(n))
    assert np.array_equal(h, np.zeros(n)) and not np.signbit(h).any()
    assert scaling.softmax_entropy(np.zeros((2, 5))).tolist() == [0.0, 0.0]
    p = softmax(np.random.default_rng(0).standard_normal((3, 4, 6)), axis=1)
    h1 = scaling.softmax_entropy(p, axis=1)
    assert h1.shape == (3, 6)
    assert np.allclose(h1, -(p * np.log(p)).sum(axis=1))


def test_softmax_jacobian_against_autograd_and_finite_differences():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    s = rng.standard_normal((3, 5))
    J = scaling.softmax_jacobian(softmax(s))  # (3, 5, 5)
    assert J.shape == (3, 5, 5)
    for i in range(3):
        J_t = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), torch.tensor(s[i]))
        assert np.allclose(J[i], J_t.numpy(), atol=1e-14)
        eps = 1e-6
        fd = np.stack([(softmax(s[i] + eps * e) - softmax(s[i] - eps * e)) / (2 * eps) for e in np.eye(5)], axis=1)
        assert np.allclose(J[i], fd, atol=1e-8)
    assert np.allclose(J.sum(-1), 0, atol=1e-15)
    assert np.allclose(J, np.swapaxes(J, -1, -2))


def test_jacobian_norm_special_cases():
    assert math.isclose(scaling.jacobian_norm(np.full(8, 1 / 8)), 1 / 8)
    assert math.isclose(scaling.jacobian_norm(np.array([0.3, 0.7])), 2 * 0.3 * 0.7)
    assert abs(scaling.jacobian_norm(np.eye(4)[1])) < 1e-15
    p = softmax(np.random.default_rng(1).standard_normal((6, 9)))
    fro = scaling.jacobian_norm(p, ord="fro")
    assert np.allclose(fro, np.linalg.norm(scaling.softmax_jacobian(p), axis=(-2, -1)))
    assert (scaling.jacobian_norm(p) <= 0.5 + 1e-12).all()


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, exc", [
    (lambda: scaling.expected_dot_product_variance(0), ValueError),
    (lambda: scaling.expected_dot_product_variance(2.5), TypeError),
    (lambda: scaling.expected_dot_product_variance(True), TypeError),
    (lambda: scaling.expected_dot_product_variance(4, sigma_q=-1), ValueError),
    (lambda: scaling.expected_dot_product_variance(4, mu_q=float("nan")), ValueError),
    (lambda: scaling.expected_dot_product_variance(4, sigma_k="1"), TypeError),
    (lambda: scaling.sample_dot_products(4, 0), ValueError),
    (lambda: scaling.sample_dot_products(4, 10, rng="seed"), TypeError),
    (lambda: scaling.dot_product_stats(4, 1), ValueError),
    (lambda: scaling.variance_relative_se(100, 0.5), ValueError),
    (lambda: scaling.dot_product_moments(np.zeros(3), np.eye(3), np.zeros(4), np.eye(4)), ValueError),
    (lambda: scaling.dot_product_moments(np.zeros(2), np.array([[1, 2], [0, 1]]), np.zeros(2), np.eye(2)),
     ValueError),
    (lambda: scaling.softmax_entropy(np.array([0.5, 0.6])), ValueError),
    (lambda: scaling.softmax_entropy(np.array([1.5, -0.5])), ValueError),
    (lambda: scaling.softmax_entropy(np.array([1, 0])), TypeError),
    (lambda: scaling.softmax_entropy(np.array([np.nan, 1.0])), ValueError),
    (lambda: scaling.softmax_entropy(np.float64(1.0)), ValueError),
    (lambda: scaling.softmax_jacobian(np.array([-0.1, 1.1])), ValueError),
    (lambda: scaling.jacobian_norm(np.array([0.5, 0.5]), ord="nuc"), ValueError),
    (lambda: scaling.explorer_figure(temperatures=(0.0, 1.0)), ValueError),
    (lambda: scaling.explorer_figure(initial_d_k=3), ValueError),
])
def test_bad_input_raises(call, exc):
    with pytest.raises(exc):
        call()


# --------------------------------------------------------------------------- explorer
def test_explorer_figure_two_independent_sliders():
    pytest.importorskip("plotly")
    d_ks, temps = (1, 16, 256), (0.5, 1.0, 2.0)
    fig = scaling.explorer_figure(d_ks=d_ks, temperatures=temps, n_keys=8, n_queries=4,
                                  initial_d_k=16, initial_temperature=1.0)
    n_traces = 2 + 2 * len(temps)
    assert len(fig.data) == n_traces
    assert [f.name for f in fig.frames] == [f"d_k={d}" for d in d_ks]
    for frame in fig.frames:  # frames never carry visibility, so they keep the T slider's choice
        assert len(frame.data) == n_traces
        assert all(t.visible is None for t in frame.data)
    dk_slider, t_slider = fig.layout.sliders
    assert [list(s.args[0]) for s in dk_slider.steps] == [[f"d_k={d}"] for d in d_ks]
    assert {s.method for s in dk_slider.steps} == {"animate"}
    assert {s.method for s in t_slider.steps} == {"restyle"}
    for j, step in enumerate(t_slider.steps):
        vis = step.args[0]["visible"]
        assert vis[:2] == [True, True] and sum(vis) == 4 and vis[2 + 2 * j] and vis[3 + 2 * j]
    assert [t.visible for t in fig.data] == t_slider.steps[1].args[0]["visible"]
    # the weight bars in every frame are probability vectors
    for frame in fig.frames:
        for t in frame.data[2:]:
            assert math.isclose(sum(t.y), 1.0, rel_tol=1e-9)
