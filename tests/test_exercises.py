"""attn_edu.exercises: every checker passes a correct answer and catches wrong ones.

Each chapter that adds a checker adds a correct solution to SOLUTIONS and at least one
typical wrong answer to WRONG; the first two tests make that impossible to forget.
"""
import numpy as np
import pytest

from attn_edu import exercises

# ---------------------------------------------------------------- chapter 03: softmax


def _softmax_good(x):
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)
    e = np.exp(x - m)
    s = e.sum(-1, keepdims=True)
    return e / np.where(s == 0, 1, s)


def _softmax_naive(x):  # no max subtraction: 1e4 overflows
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def _softmax_no_masked_rows(x):  # a fully -inf row gives 0/0 = NaN
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _softmax_hides_nan(x):
    return np.nan_to_num(_softmax_good(x))


def _softmax_float64(x):
    return _softmax_good(x.astype(np.float64))


def _softmax_wrong_axis(x):
    e = np.exp(x - np.max(x, axis=0, keepdims=True))
    return e / e.sum(0, keepdims=True)


# ---------------------------------------------------------------- chapter 13: decoding


def _merge_good(outs, lses):
    m = lses.max(axis=0)  # (L_q,)
    m = np.where(np.isneginf(m), 0, m)
    w = np.exp(lses - m)  # (S, L_q)
    total = w.sum(axis=0)
    return (w[..., None] * outs).sum(axis=0) / np.where(total == 0, 1, total)[:, None]


def _merge_mean(outs, lses):  # ignores how much each split weighs
    return outs.mean(axis=0)


def _merge_no_max(outs, lses):  # exp(1e4) overflows, exp(-1e4) underflows to 0/0
    w = np.exp(lses)
    return (w[..., None] * outs).sum(axis=0) / w.sum(axis=0)[:, None]


def _merge_no_empty_guard(outs, lses):  # a row no split covers: -inf - (-inf) = NaN
    w = np.exp(lses - lses.max(axis=0))
    return (w[..., None] * outs).sum(axis=0) / w.sum(axis=0)[:, None]


def _merge_unnormalised(outs, lses):  # forgets to divide by the total weight
    m = np.where(np.isneginf(lses.max(axis=0)), 0, lses.max(axis=0))
    return (np.exp(lses - m)[..., None] * outs).sum(axis=0)


def _merge_float64(outs, lses):
    return _merge_good(outs.astype(np.float64), lses.astype(np.float64))


def _slot_good(table, page_size, position):
    return table[position // page_size], position % page_size


def _slot_logical(table, page_size, position):  # forgets the block table
    return position // page_size, position % page_size


def _slot_swapped(table, page_size, position):
    return table[position % page_size % len(table)], position // page_size


def _slot_off_by_one(table, page_size, position):
    return table[(position + 1) // page_size % len(table)], (position + 1) % page_size


# ---------------------------------------------------------------- chapter 14: merging two ranks


def _ranks_good(o1, lse1, o2, lse2):
    m = np.maximum(lse1, lse2)
    m = np.where(np.isneginf(m), 0, m)  # nobody saw a key: shift by 0, no -inf - -inf
    w1, w2 = np.exp(lse1 - m), np.exp(lse2 - m)
    total = w1 + w2
    o = (w1[..., None] * o1 + w2[..., None] * o2) / np.where(total == 0, 1, total)[..., None]
    with np.errstate(divide="ignore"):
        return o, m + np.log(total)


def _ranks_naive_exp(o1, lse1, o2, lse2):  # exp(1000) overflows: inf / inf
    w1, w2 = np.exp(lse1), np.exp(lse2)
    return (w1[..., None] * o1 + w2[..., None] * o2) / (w1 + w2)[..., None], np.log(w1 + w2)


def _ranks_average(o1, lse1, o2, lse2):  # ignores how much each rank saw
    return (o1 + o2) / 2, np.logaddexp(lse1, lse2)


def _ranks_no_empty_guard(o1, lse1, o2, lse2):  # both -inf: -inf - (-inf) = NaN
    m = np.maximum(lse1, lse2)
    w1, w2 = np.exp(lse1 - m), np.exp(lse2 - m)
    return (w1[..., None] * o1 + w2[..., None] * o2) / (w1 + w2)[..., None], m + np.log(w1 + w2)


def _ranks_max_lse(o1, lse1, o2, lse2):  # the output is right, the log-sum-exp is not
    return _ranks_good(o1, lse1, o2, lse2)[0], np.maximum(lse1, lse2)


def _ranks_unnormalised(o1, lse1, o2, lse2):  # forgets to divide by the total weight
    m = np.where(np.isneginf(np.maximum(lse1, lse2)), 0, np.maximum(lse1, lse2))
    w1, w2 = np.exp(lse1 - m), np.exp(lse2 - m)
    return w1[..., None] * o1 + w2[..., None] * o2, _ranks_good(o1, lse1, o2, lse2)[1]


def _ranks_float64(o1, lse1, o2, lse2):
    return _ranks_good(*(x.astype(np.float64) for x in (o1, lse1, o2, lse2)))


SOLUTIONS = {"stable_softmax": _softmax_good, "merge_partials": _merge_good, "page_slot": _slot_good,
             "merge_ranks": _ranks_good}
WRONG = {
    "stable_softmax": [_softmax_naive, _softmax_no_masked_rows, _softmax_hides_nan,
                       _softmax_float64, _softmax_wrong_axis],
    "merge_partials": [_merge_mean, _merge_no_max, _merge_no_empty_guard, _merge_unnormalised,
                       _merge_float64],
    "page_slot": [_slot_logical, _slot_swapped, _slot_off_by_one],
    "merge_ranks": [_ranks_naive_exp, _ranks_average, _ranks_no_empty_guard, _ranks_max_lse,
                    _ranks_unnormalised, _ranks_float64],
}


# ------------------------------------------- chapters 01, 02, 04: attention, q.k moments, RoPE


def _attention_good(Q, K, V):
    S = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])  # (..., L_q, L_k)
    return _softmax_good(S) @ V                              # (..., L_q, d_v)


def _attention_K_dot_T(Q, K, V):  # K.T reverses every axis: wrong with (B, H, L, D)
    return _softmax_good(Q @ K.T / np.sqrt(Q.shape[-1])) @ V


def _attention_unscaled(Q, K, V):
    return _softmax_good(Q @ np.swapaxes(K, -1, -2)) @ V


def _attention_divides_by_d_k(Q, K, V):
    return _softmax_good(Q @ np.swapaxes(K, -1, -2) / Q.shape[-1]) @ V


def _attention_softmax_over_queries(Q, K, V):
    S = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    return _softmax_good(np.swapaxes(S, -1, -2)).swapaxes(-1, -2) @ V


def _attention_unstable(Q, K, V):
    return _softmax_naive(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])) @ V


def _moments_good(mq, cq, mk, ck):
    return mq @ mk, np.trace(cq @ ck) + mq @ ck @ mq + mk @ cq @ mk


def _moments_textbook(mq, cq, mk, ck):  # d_k sigma_q^2 sigma_k^2: ignores means and correlations
    return 0.0, len(mq) * np.mean(np.diag(cq)) * np.mean(np.diag(ck))


def _moments_no_mean_terms(mq, cq, mk, ck):
    return mq @ mk, np.trace(cq @ ck)


def _moments_product_of_traces(mq, cq, mk, ck):
    return mq @ mk, np.trace(cq) * np.trace(ck) + mq @ ck @ mq + mk @ cq @ mk


def _moments_mean_terms_swapped(mq, cq, mk, ck):  # each mean with its own covariance
    return mq @ mk, np.trace(cq @ ck) + mq @ cq @ mq + mk @ ck @ mk


def _rotary_good(x, positions):
    d = x.shape[-1]
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)            # (d/2,)
    ang = np.asarray(positions, dtype=float)[:, None] * omega  # (L, d/2)
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


def _rotary_clockwise(x, positions):
    return _rotary_good(x, -np.asarray(positions, dtype=float))


def _rotary_one_based(x, positions):
    return _rotary_good(x, np.asarray(positions, dtype=float) + 1)


def _rotary_halves(x, positions):  # pairs (i, i + d/2): the GPT-NeoX layout, not the one asked for
    d = x.shape[-1]
    perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])   # interleaved -> halves
    inv = np.argsort(perm)
    return _rotary_good(x[..., inv], positions)[..., perm]


def _rotary_exponent_i_over_d(x, positions):  # omega_i = 10000^(-i/d)
    d = x.shape[-1]
    omega = 10000.0 ** (-np.arange(d // 2) / d)
    ang = np.asarray(positions, dtype=float)[:, None] * omega
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


SOLUTIONS.update(attention=_attention_good, dot_product_moments=_moments_good,
                 rotary=_rotary_good)
WRONG.update(
    attention=[_attention_K_dot_T, _attention_unscaled, _attention_divides_by_d_k,
               _attention_softmax_over_queries, _attention_unstable],
    dot_product_moments=[_moments_textbook, _moments_no_mean_terms, _moments_product_of_traces,
                         _moments_mean_terms_swapped],
    rotary=[_rotary_clockwise, _rotary_one_based, _rotary_halves, _rotary_exponent_i_over_d],
)
# ---------------------------------------------------------------- chapter 05: bottom-right causal mask


def _br_mask_good(lq, lk):
    return np.tril(np.ones((lq, lk), dtype=bool), k=lk - lq)


def _br_mask_top_left(lq, lk):  # PyTorch's is_causal alignment: wrong with a cache
    return np.tril(np.ones((lq, lk), dtype=bool))


def _br_mask_wrong_offset(lq, lk):  # the offset with the wrong sign
    return np.tril(np.ones((lq, lk), dtype=bool), k=lq - lk)


def _br_mask_polarity(lq, lk):  # True = masked, nn.MultiheadAttention's polarity
    return ~_br_mask_good(lq, lk)


def _br_mask_ints(lq, lk):  # right pattern, but 0/1 integers instead of booleans
    return _br_mask_good(lq, lk).astype(int)


def _br_mask_strict(lq, lk):  # forgets that a query may attend to its own key
    return np.tril(np.ones((lq, lk), dtype=bool), k=lk - lq - 1)


SOLUTIONS["bottom_right_mask"] = _br_mask_good
WRONG["bottom_right_mask"] = [_br_mask_top_left, _br_mask_wrong_offset, _br_mask_polarity,
                              _br_mask_ints, _br_mask_strict]


# ---------------------------------------------------------------- chapter 08: attention FLOPs


def _flops_good(n_q, n_k, d):
    projections = 2 * n_q * d * d + 2 * 2 * n_k * d * d + 2 * n_q * d * d   # W_Q; W_K, W_V; W_O
    return projections + 2 * n_q * n_k * d + 2 * n_q * n_k * d              # QK^T and PV


def _flops_no_output_projection(n_q, n_k, d):  # the source note's count: no W_O
    return 2 * n_q * d * d + 4 * n_k * d * d + 4 * n_q * n_k * d


def _flops_multiply_adds(n_q, n_k, d):  # counts multiply-adds, not FLOPs
    return _flops_good(n_q, n_k, d) // 2


def _flops_all_projections_on_queries(n_q, n_k, d):  # projects K, V from n_q rows
    return 8 * n_q * d * d + 4 * n_q * n_k * d


def _flops_square(n_q, n_k, d):  # assumes n_q == n_k
    return 8 * n_q * d * d + 4 * n_q * n_q * d


SOLUTIONS["attention_flops"] = _flops_good
WRONG["attention_flops"] = [_flops_no_output_projection, _flops_multiply_adds,
                            _flops_all_projections_on_queries, _flops_square]


# ---------------------------------------------------------------- chapter 06: split_heads


def _split_good(x, H):
    B, L, Hd = x.shape
    return x.reshape(B, L, H, Hd // H).transpose(0, 2, 1, 3)


def _split_no_swap(x, H):  # right shape, wrong contents: the classic bug
    B, L, Hd = x.shape
    return x.reshape(B, H, L, Hd // H)


def _split_strided(x, H):  # head h takes every H-th column instead of a block
    B, L, Hd = x.shape
    return x.reshape(B, L, Hd // H, H).transpose(0, 3, 1, 2)


def _split_forgets_swap_shape(x, H):  # stops at (B, L, H, d)
    B, L, Hd = x.shape
    return x.reshape(B, L, H, Hd // H)


SOLUTIONS["split_heads"] = _split_good
WRONG["split_heads"] = [_split_no_swap, _split_strided, _split_forgets_swap_shape]


# ---------------------------------------------------------------- chapter 07: attention rollout


def _mixed(A, alpha):  # (H, L, L) -> (L, L): heads averaged, residual mixed in
    A_t = (1 - alpha) * A.mean(axis=0) + alpha * np.eye(A.shape[-1])
    return A_t / A_t.sum(-1, keepdims=True)


def _rollout_good(layers, alpha):
    R = np.eye(layers[0].shape[-1])
    for A in layers:
        R = _mixed(A, alpha) @ R              # later layers on the left
    return R


def _rollout_wrong_order(layers, alpha):  # first layer on the left
    R = np.eye(layers[0].shape[-1])
    for A in layers:
        R = R @ _mixed(A, alpha)
    return R


def _rollout_no_residual(layers, alpha):  # ignores alpha
    return _rollout_good(layers, 0.0)


def _rollout_first_head(layers, alpha):  # takes head 0 instead of the mean
    return _rollout_good([A[:1] for A in layers], alpha)


def _rollout_last_layer_only(layers, alpha):
    return _mixed(layers[-1], alpha)


SOLUTIONS["rollout"] = _rollout_good
WRONG["rollout"] = [_rollout_wrong_order, _rollout_no_residual, _rollout_first_head,
                    _rollout_last_layer_only]
# ---------------------------------------------------------------- chapters 09-12 (i13c)


def _online_good(m, ell, A, s, v):
    m_new = max(m, s.max())
    c = 0.0 if m_new == -np.inf else m_new
    alpha, p = np.exp(m - c), np.exp(s - c)
    return m_new, alpha * ell + p.sum(), alpha * A + p @ v


def _online_no_guard(m, ell, A, s, v):  # -inf - (-inf) = NaN on a fully blocked start
    m_new = max(m, s.max())
    alpha, p = np.exp(m - m_new), np.exp(s - m_new)
    return m_new, alpha * ell + p.sum(), alpha * A + p @ v


def _online_forgets_A(m, ell, A, s, v):  # rescales the sum but not the accumulator
    m_new, ell_new, _ = _online_good(m, ell, A, s, v)
    c = 0.0 if m_new == -np.inf else m_new
    return m_new, ell_new, A + np.exp(s - c) @ v


def _online_no_shift(m, ell, A, s, v):  # sums of exp(s) without the max: 1e4 overflows
    p = np.exp(s)
    return max(m, s.max()), ell + p.sum(), A + p @ v


SOLUTIONS["online_softmax_update"] = _online_good
WRONG["online_softmax_update"] = [_online_no_guard, _online_forgets_A, _online_no_shift]


def _decay_good(a):
    L = len(a)
    D = np.zeros((L, L))
    for t in range(L):
        D[t, t] = 1.0
        for s in range(t - 1, -1, -1):
            D[t, s] = D[t, s + 1] * a[s + 1]
    return D


def _decay_cumlog(a):  # exp of differences of cumulative logs: log 0 = -inf gives NaN
    c = np.cumsum(np.log(a))
    return np.tril(np.exp(c[:, None] - c[None, :]))


def _decay_off_by_one(a):  # includes the gate at s itself
    return _decay_good(a) * a[None, :] * np.tri(len(a))


def _decay_not_causal(a):  # forgets to zero the upper triangle
    D = _decay_good(a)
    return D + D.T - np.eye(len(a))


SOLUTIONS["decay_mask"] = _decay_good
WRONG["decay_mask"] = [_decay_cumlog, _decay_off_by_one, _decay_not_causal]


def _window_good(lq, lk, window):
    p = np.arange(lq)[:, None] + lk - lq
    d = p - np.arange(lk)[None, :]
    return (d >= 0) & (d < window)


def _window_top_left(lq, lk, window):  # forgets the cache: query i sits at position i
    d = np.arange(lq)[:, None] - np.arange(lk)[None, :]
    return (d >= 0) & (d < window)


def _window_off_by_one(lq, lk, window):  # window + 1 keys
    p = np.arange(lq)[:, None] + lk - lq
    d = p - np.arange(lk)[None, :]
    return (d >= 0) & (d <= window)


def _window_symmetric(lq, lk, window):  # |p - j| < window: sees the future
    p = np.arange(lq)[:, None] + lk - lq
    return np.abs(p - np.arange(lk)[None, :]) < window


def _window_float(lq, lk, window):  # 0/1 floats instead of a boolean mask
    return _window_good(lq, lk, window).astype(float)


SOLUTIONS["sliding_window_mask"] = _window_good
WRONG["sliding_window_mask"] = [_window_top_left, _window_off_by_one, _window_symmetric, _window_float]


def _dS_good(S, lse, V, dO):
    P = np.exp(S - np.where(np.isneginf(lse), np.inf, lse)[:, None])
    delta = (dO * (P @ V)).sum(-1, keepdims=True)
    return P * (dO @ V.T - delta)


def _dS_no_guard(S, lse, V, dO):  # exp(-inf - (-inf)) = NaN on a fully masked row
    P = np.exp(S - lse[:, None])
    delta = (dO * (P @ V)).sum(-1, keepdims=True)
    return P * (dO @ V.T - delta)


def _dS_from_exp(S, lse, V, dO):  # ignores lse: exp(S) overflows at 1e4
    E = np.exp(S)
    P = E / np.where(E.sum(-1, keepdims=True) == 0, 1, E.sum(-1, keepdims=True))
    delta = (dO * (P @ V)).sum(-1, keepdims=True)
    return P * (dO @ V.T - delta)


def _dS_no_delta(S, lse, V, dO):  # forgets the softmax Jacobian's row term
    P = np.exp(S - np.where(np.isneginf(lse), np.inf, lse)[:, None])
    return P * (dO @ V.T)


SOLUTIONS["scores_gradient"] = _dS_good
WRONG["scores_gradient"] = [_dS_no_guard, _dS_from_exp, _dS_no_delta]


def test_every_checker_has_a_solution_and_wrong_answers():
    assert set(exercises.CHECKERS) == set(SOLUTIONS)
    assert set(exercises.CHECKERS) == set(WRONG)
    assert all(len(w) >= 1 for w in WRONG.values())


def test_every_checker_is_exported_as_check_name():
    for name, check in exercises.CHECKERS.items():
        assert getattr(exercises, f"check_{name}") is check
        assert f"check_{name}" in exercises.__all__
        assert 1 <= check.chapter <= 14


#: Checkers whose gold answer comes from torch code (a NumPy-only install skips them).
NEEDS_TORCH = {"rollout"}


def _needs(name: str) -> None:
    if name in NEEDS_TORCH:
        pytest.importorskip("torch")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_correct_solution_passes(name):
    _needs(name)
    result = exercises.CHECKERS[name](SOLUTIONS[name])
    assert result.passed, result.message
    assert result and result.message.startswith("✓")
    assert result.cases_run == result.cases_total >= 3


@pytest.mark.parametrize("name,wrong", [(n, w) for n, ws in WRONG.items() for w in ws],
                         ids=lambda x: getattr(x, "__name__", x))
def test_wrong_answer_is_caught_with_its_case_and_input(name, wrong):
    _needs(name)
    result = exercises.CHECKERS[name](wrong)
    assert not result.passed
    assert result.failed_case and result.failed_case in result.message
    assert "input:" in result.message
    with pytest.raises(AssertionError, match=name):
        result.raise_if_failed()


def test_an_unfinished_stub_is_reported_not_raised():
    def my_softmax(x):
        raise NotImplementedError

    result = exercises.check_stable_softmax(my_softmax)
    assert not result.passed and "not written yet" in result.message and "my_softmax" in result.message


def test_a_crash_names_the_case_the_error_and_the_line():
    def my_softmax(x):
        return x.nonexistent_method()

    result = exercises.check_stable_softmax(my_softmax)
    assert not result.passed
    assert "AttributeError" in result.message and "nonexistent_method" in result.message


def test_returning_none_is_explained():
    result = exercises.check_stable_softmax(lambda x: None)
    assert not result.passed and "returned None" in result.message


def test_a_checker_needs_a_function():
    with pytest.raises(TypeError, match="check_stable_softmax needs your function"):
        exercises.check_stable_softmax(np.ones(3))


def test_compare_arrays_says_what_differs():
    cmp = exercises.compare_arrays
    assert cmp(np.ones(3), np.ones(3)) is None
    assert "shape" in cmp(np.ones(3), np.ones(4))
    assert "NaN" in cmp(np.array([np.nan]), np.array([0.0]))
    assert "index (1,)" in cmp(np.array([0.0, 1.0]), np.array([0.0, 2.0]))
    assert "expected inf" in cmp(np.array([1.0]), np.array([np.inf]))


def test_scores_gradient_solution_is_autograd():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    S = rng.standard_normal((5, 7))
    S[0, 3:] = -np.inf
    V, dO = rng.standard_normal((7, 3)), rng.standard_normal((5, 3))
    St = torch.tensor(S, requires_grad=True)
    (torch.softmax(St, -1) @ torch.tensor(V)).backward(torch.tensor(dO))
    lse = np.log(np.exp(S).sum(-1))
    np.testing.assert_allclose(_dS_good(S, lse, V, dO), St.grad.numpy(), atol=1e-12)
