"""The NumPy reference against brute-force loops, on the shapes that break attention code."""
import math

import numpy as np
import pytest

import attn_edu
from attn_edu.masks import causal_mask, key_mask, padding_mask, query_key_mask
from attn_edu.reference import scaled_dot_product_attention as sdpa
from attn_edu.reference import softmax
from conftest import rand
from attn_edu.testing import assert_same_up_to_rounding


def brute_force(q, k, v, allowed=None, additive=None, scale=None):
    """Attention for a single head, one query and one key at a time, in Python floats.

    ``allowed[i][j]`` False blocks key j for query i; ``additive[i][j]`` is added to the score.
    A query with no allowed key gets a zero row (the package's rule).
    """
    lq, d = q.shape
    lk, dv = v.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = np.zeros((lq, dv))
    weights = np.zeros((lq, lk))
    for i in range(lq):
        scores = []
        for j in range(lk):
            if allowed is not None and not allowed[i][j]:
                continue
            s = sum(q[i, t] * k[j, t] for t in range(d)) * scale
            if additive is not None:
                s += additive[i][j]
            if s == -math.inf:
                continue
            scores.append((j, s))
        if not scores:
            continue
        m = max(s for _, s in scores)
        z = sum(math.exp(s - m) for _, s in scores)
        for j, s in scores:
            weights[i, j] = math.exp(s - m) / z
            out[i] += weights[i, j] * v[j]
    return out, weights


LENGTHS = [1, 3, 17, 63, 65, 127, 129]


@pytest.mark.parametrize("lq", LENGTHS)
@pytest.mark.parametrize("lk", [1, 17, 65])
def test_matches_brute_force_unmasked(lq, lk):
    rng = np.random.default_rng(lq * 1000 + lk)
    q, k, v = rand(rng, lq, 16), rand(rng, lk, 16), rand(rng, lk, 5)
    out, w = sdpa(q, k, v, return_weights=True)
    bo, bw = brute_force(q, k, v)
    assert np.max(np.abs(out - bo)) <= 1e-12
    assert np.max(np.abs(w - bw)) <= 1e-12


@pytest.mark.parametrize("d", [16, 59, 64, 111, 128])
def test_head_dims(d):
    rng = np.random.default_rng(d)
    q, k, v = rand(rng, 9, d), rand(rng, 13, d), rand(rng, 13, 7)
    assert np.max(np.abs(sdpa(q, k, v) - brute_force(q, k, v)[0])) <= 1e-12


@pytest.mark.parametrize("lq,lk", [(5, 9), (9, 5), (17, 17), (1, 65), (65, 1)])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_causal_both_alignments(lq, lk, alignment):
    rng = np.random.default_rng(lq + 7 * lk)
    q, k, v = rand(rng, lq, 8), rand(rng, lk, 8), rand(rng, lk, 3)
    allowed = np.array([[j <= i + (lk - lq if alignment == "bottom_right" else 0) for j in range(lk)]
                        for i in range(lq)])
    out, w = sdpa(q, k, v, causal=alignment, return_weights=True)
    bo, bw = brute_force(q, k, v, allowed=allowed)
    assert np.max(np.abs(out - bo)) <= 1e-12
    assert np.max(np.abs(w - bw)) <= 1e-12
    assert not np.isnan(out).any()


def test_causal_true_is_top_left():
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 4, 8), rand(rng, 6, 8), rand(rng, 6, 8)
    np.testing.assert_array_equal(sdpa(q, k, v, causal=True), sdpa(q, k, v, causal="top_left"))
    assert not np.array_equal(sdpa(q, k, v, causal=True), sdpa(q, k, v, causal="bottom_right"))


def test_bottom_right_with_more_queries_than_keys_zeroes_leading_rows():
    rng = np.random.default_rng(2)
    q, k, v = rand(rng, 6, 4), rand(rng, 3, 4), rand(rng, 3, 2)
    out, w = sdpa(q, k, v, causal="bottom_right", return_weights=True)
    # query i may see keys j <= i - 3: rows 0..2 see nothing
    assert np.all(out[:3] == 0) and np.all(w[:3] == 0)
    assert np.allclose(w[3:].sum(-1), 1.0)


def test_bool_and_float_masks_agree_and_match_brute_force():
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, 7, 8), rand(rng, 11, 8), rand(rng, 11, 4)
    allowed = rng.random((7, 11)) < 0.5
    allowed[2] = False  # a fully masked row
    additive = np.where(allowed, 0.0, -np.inf)
    ob, wb = sdpa(q, k, v, mask=allowed, return_weights=True)
    of, wf = sdpa(q, k, v, mask=additive, return_weights=True)
    bo, bw = brute_force(q, k, v, allowed=allowed)
    for o, w in [(ob, wb), (of, wf)]:
        assert np.max(np.abs(o - bo)) <= 1e-12
        assert np.max(np.abs(w - bw)) <= 1e-12
    assert np.all(ob[2] == 0) and np.all(wb[2] == 0)


def test_float_mask_with_finite_biases_is_added():
    rng = np.random.default_rng(4)
    q, k, v = rand(rng, 5, 8), rand(rng, 6, 8), rand(rng, 6, 2)
    bias = rng.standard_normal((5, 6))
    bo, _ = brute_force(q, k, v, additive=bias)
    assert np.max(np.abs(sdpa(q, k, v, mask=bias) - bo)) <= 1e-12


def test_padding_masks_batch():
    rng = np.random.default_rng(5)
    lengths = [5, 2, 0]
    b, L = len(lengths), 5
    q, k, v = rand(rng, b, L, 8), rand(rng, b, L, 8), rand(rng, b, L, 3)
    valid = padding_mask(lengths, L)
    out_k = sdpa(q, k, v, mask=key_mask(valid))
    out_qk = sdpa(q, k, v, mask=query_key_mask(valid, valid), causal=True)
    for i, n in enumerate(lengths):
        allowed = np.zeros((L, L), bool)
        allowed[:, :n] = True
        assert np.max(np.abs(out_k[i] - brute_force(q[i], k[i], v[i], allowed=allowed)[0])) <= 1e-12
        allowed_qk = allowed & valid[i][:, None] & causal_mask(L)
        assert np.max(np.abs(out_qk[i] - brute_force(q[i], k[i], v[i], allowed=allowed_qk)[0])) <= 1e-12
        assert np.all(out_qk[i, n:] == 0)  # padded queries give zeros
    assert np.all(out_k[2] == 0)  # a sequence of length 0: every row fully masked


def test_batched_and_broadcast_leading_axes():
    rng = np.random.default_rng(6)
    q = rand(rng, 2, 3, 4, 8)  # (B, H, Lq, D)
    k = rand(rng, 1, 3, 6, 8)  # broadcasts over B
    v = rand(rng, 1, 3, 6, 5)
    out = sdpa(q, k, v)
    assert out.shape == (2, 3, 4, 5)
    for b in range(2):
        for h in range(3):
            assert np.max(np.abs(out[b, h] - brute_force(q[b, h], k[0, h], v[0, h])[0])) <= 1e-12


def test_grouped_query_attention_repeats_kv_heads():
    rng = np.random.default_rng(7)
    q, k, v = rand(rng, 2, 6, 5, 8), rand(rng, 2, 2, 7, 8), rand(rng, 2, 2, 7, 3)
    out = sdpa(q, k, v, enable_gqa=True, causal="bottom_right")
    for h in range(6):
        expect = sdpa(q[:, h], k[:, h // 3], v[:, h // 3], causal="bottom_right")
        assert_same_up_to_rounding(out[:, h], expect)


@pytest.mark.parametrize("scale", [0.01, 1.0, 3.7, -2.0])
def test_custom_scale_including_negative(scale):
    rng = np.random.default_rng(8)
    q, k, v = rand(rng, 6, 8), rand(rng, 6, 8), rand(rng, 6, 4)
    assert np.max(np.abs(sdpa(q, k, v, scale=scale) - brute_force(q, k, v, scale=scale)[0])) <= 1e-12


def plain_causal_attention(q, k, v):
    """naive_T written out (matmul, softmax, matmul in the inputs' dtype, top-left causal),
    independent of the reference under test."""
    s = (q @ np.swapaxes(k, -1, -2)) * q.dtype.type(1 / math.sqrt(q.shape[-1]))
    s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def reference_in_dtype_meets_the_rule(out, q, k, v):
    """``out``, the reference run in T on q, k, v (in T), against the float64 gold answer on
    the same inputs with the tolerance set by :func:`plain_causal_attention` in T: the
    reference in T may be as inexact as a plain naive_T, with the rule's slack, no more.
    (Not the reference in T as its own naive_T: ``|e| <= 2|e| + tiny`` cannot fail.)"""
    from attn_edu.testing import assert_close_to_reference, reference_pair

    gold = reference_pair(q, k, v, causal=True)[0]
    return assert_close_to_reference(out, gold, plain_causal_attention(q, k, v))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_dtype_in_is_dtype_out_and_close_to_gold(dtype):
    from attn_edu.testing import reference_pair

    rng = np.random.default_rng(9)
    q, k, v = (x.astype(dtype) for x in (rand(rng, 2, 33, 16), rand(rng, 2, 40, 16), rand(rng, 2, 40, 16)))
    out = sdpa(q, k, v, causal=True)
    assert out.dtype == dtype
    reference_in_dtype_meets_the_rule(out, q, k, v)
    gold = reference_pair(q, k, v, causal=True)[0]
    rel = {np.float16: 5e-3, np.float32: 1e-6, np.float64: 1e-14}[dtype]
    assert np.max(np.abs(out.astype(np.float64) - gold)) <= rel


def test_nan_in_unmasked_input_propagates_and_masked_nan_does_not():
    rng = np.random.default_rng(10)
    q, k, v = rand(rng, 4, 8), rand(rng, 5, 8), rand(rng, 5, 3)
    kn = k.copy()
    kn[4, 0] = np.nan
    out = sdpa(q, kn, v)
    assert np.isnan(out).all()  # every query sees key 4
    # key 4 blocked for every query: its NaN score is masked, so nothing is NaN
    allowed = np.ones((4, 5), bool)
    allowed[:, 4] = False
    out_masked = sdpa(q, kn, v, mask=allowed)
    assert_same_up_to_rounding(out_masked, sdpa(q, k, v, mask=allowed))
    qn = q.copy()
    qn[1, 3] = np.nan
    out_q = sdpa(qn, k, v)
    assert np.isnan(out_q[1]).all() and not np.isnan(np.delete(out_q, 1, axis=0)).any()


def test_empty_key_axis_gives_zeros():
    q, k, v = np.ones((3, 4)), np.ones((0, 4)), np.ones((0, 2))
    out, w = sdpa(q, k, v, return_weights=True)
    assert out.shape == (3, 2) and np.all(out == 0) and w.shape == (3, 0)


# ---------------------------------------------------------------------------- softmax


def test_softmax_stable_for_huge_logits():
    x = np.array([1000.0, 1001.0, 1002.0])
    expect = np.exp([-2.0, -1.0, 0.0]) / np.exp([-2.0, -1.0, 0.0]).sum()
    np.testing.assert_allclose(softmax(x), expect, rtol=1e-15)
    x32 = np.array([100.0, 0.0], dtype=np.float32)  # exp(100) overflows float32
    assert np.isfinite(softmax(x32)).all() and softmax(x32).dtype == np.float32


def test_softmax_mask_and_minus_inf_and_fully_masked():
    x = np.array([[1.0, 2.0, 3.0], [1.0, -np.inf, 3.0], [-np.inf, -np.inf, -np.inf]])
    p = softmax(x)
    np.testing.assert_allclose(p[1], softmax(np.array([1.0, 3.0]))[[0, 0, 1]] * [1, 0, 1])
    assert np.all(p[2] == 0)
    pm = softmax(x[0], mask=np.array([True, False, True]))
    assert_same_up_to_rounding(pm, p[1])
    assert np.all(softmax(x[0], mask=np.zeros(3, bool)) == 0)


def test_softmax_axis_and_nan():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4))
    np.testing.assert_allclose(softmax(x, axis=0).sum(0), 1.0)
    np.testing.assert_allclose(softmax(x, axis=0), softmax(x.T).T)
    x[1, 2] = np.nan
    assert np.isnan(softmax(x)[1]).all() and not np.isnan(softmax(x)[[0, 2]]).any()


def test_top_level_exports():
    assert attn_edu.scaled_dot_product_attention is sdpa
    assert attn_edu.softmax is softmax


# ------------------------------------------------------- attn_edu.testing.reference_pair
def test_reference_pair_is_the_call_in_float64_and_in_the_inputs_dtype():
    from attn_edu.testing import reference_pair

    rng = np.random.default_rng(11)
    q, k, v = (rand(rng, 2, n, 8).astype(np.float32) for n in (5, 7, 7))
    m = rng.random((5, 7)) < 0.7
    gold, naive = reference_pair(q, k, v, mask=m, causal="bottom_right")
    assert gold.dtype == np.float64 and naive.dtype == np.float32
    exact = [x.astype(np.float64) for x in (q, k, v)]  # what reference_pair does, by hand
    np.testing.assert_array_equal(gold, sdpa(*exact, mask=m, causal="bottom_right"))
    np.testing.assert_array_equal(naive, sdpa(q, k, v, mask=m, causal="bottom_right"))
    # TF32 holds float32 to the float16 rule; other dtypes ignore the precision
    assert reference_pair(q, k, v, precision="tf32")[1].dtype == np.float16
    assert reference_pair(q, k, v, precision="ieee")[1].dtype == np.float32
    assert reference_pair(*(x.astype(np.float16) for x in (q, k, v)), precision="tf32")[1].dtype == np.float16
    # seqlens: each sequence alone over its first keys, causal counted from them
    gold, naive = reference_pair(q, k, v, seqlens=[3, 7], causal="bottom_right")
    np.testing.assert_array_equal(gold[:1], sdpa(*(x[:1, :n].astype(np.float64) for x, n in
                                                   ((q, 5), (k, 3), (v, 3))), causal="bottom_right"))
    assert naive.shape == (2, 5, 8) and naive.dtype == np.float32
    # another attention function
    gold, naive = reference_pair(q, k, v, attention=lambda a, b, c: a @ np.swapaxes(b, -1, -2))
    assert gold.shape == (2, 5, 7) and naive.dtype == np.float32
    with pytest.raises(ValueError, match="precision must be None, 'ieee' or 'tf32'; got 'fp8'"):
        reference_pair(q, k, v, precision="fp8")
    with pytest.raises(ValueError, match="seqlens or mask, not both"):
        reference_pair(q, k, v, seqlens=[3, 7], mask=m)
    with pytest.raises(ValueError, match="one length per sequence.*got 1"):
        reference_pair(q, k, v, seqlens=[3])


def test_reference_pair_with_tensors_stays_on_their_device():
    torch = pytest.importorskip("torch")
    from attn_edu.testing import reference_pair

    q = torch.randn(1, 2, 5, 4, requires_grad=True)
    m = np.tril(np.ones((5, 5), dtype=bool))  # a NumPy mask becomes a tensor
    gold, naive = reference_pair(q, q, q, mask=m)
    assert gold.dtype == torch.float64 and naive.dtype == torch.float32 and not naive.requires_grad
    assert torch.equal(naive, attn_edu.scaled_dot_product_attention(*(q.detach(),) * 3, mask=torch.from_numpy(m)))
    gold, naive = reference_pair(q, q, q, seqlens=torch.tensor([2]), causal=True, precision="tf32")
    assert isinstance(gold, torch.Tensor) and naive.dtype == torch.float16 and gold.shape == (1, 2, 5, 4)
