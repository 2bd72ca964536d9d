"""Tests for attn_edu.multihead_torch: the PyTorch MultiHeadAttention (MHA/GQA/MQA), the KV cache,
and agreement with attn_edu.multihead (NumPy) and torch.nn.MultiheadAttention."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from attn_edu import masks, multihead  # noqa: E402
from attn_edu.multihead_torch import KVCache, MultiHeadAttention, decode_with_cache, torch_mha_reference  # noqa: E402
from attn_edu.testing import assert_close_to_reference  # noqa: E402

TOL = 1e-12
HEADS = [(8, 8), (8, 2), (8, 1)]  # MHA, GQA, MQA
IDS = ["MHA", "GQA", "MQA"]


def _x(shape, seed, dtype=torch.float64):
    return torch.as_tensor(np.random.default_rng(seed).standard_normal(shape)).to(dtype)


def _module(d_model, h, hkv, bias=True, seed=0, dtype=torch.float64, d_head=None):
    torch.manual_seed(seed)
    m = MultiHeadAttention(d_model, h, hkv, d_head=d_head, bias=bias, dtype=dtype)
    if bias:  # nn.Linear starts biases small; make them matter
        with torch.no_grad():
            for p in (m.q_proj.bias, m.k_proj.bias, m.v_proj.bias, m.out_proj.bias):
                p.normal_()
    return m


def _close(a, b, tol=TOL):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else a
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(a, b, rtol=0, atol=tol)


# --------------------------------------------------------------------------- structure
@pytest.mark.parametrize("h,hkv", HEADS, ids=IDS)
@pytest.mark.parametrize("bias", [False, True])
def test_layers_and_parameter_count(h, hkv, bias):
    m = MultiHeadAttention(32, h, hkv, bias=bias)
    assert m.q_proj.weight.shape == (32, 32)
    assert m.k_proj.weight.shape == m.v_proj.weight.shape == (hkv * 4, 32)
    assert m.out_proj.weight.shape == (32, 32)
    assert sum(p.numel() for p in m.parameters()) == multihead.count_mha_params(32, h, hkv, bias=bias)
    m = MultiHeadAttention(10, 4, 2, d_head=3, bias=bias)
    assert sum(p.numel() for p in m.parameters()) == multihead.count_mha_params(10, 4, 2, d_head=3, bias=bias)


def test_constructor_errors():
    with pytest.raises(ValueError, match="num_heads=8 and num_kv_heads=3"):
        MultiHeadAttention(16, 8, 3)
    with pytest.raises(ValueError, match="d_model=10 and num_heads=4"):
        MultiHeadAttention(10, 4)


# --------------------------------------------------------------------------- vs NumPy
@pytest.mark.parametrize("h,hkv", HEADS, ids=IDS)
def test_matches_numpy_with_shared_params(h, hkv):
    params = multihead.init_mha_params(16, h, hkv, bias=True, rng=h + hkv)
    m = MultiHeadAttention.from_numpy_params(params, h, hkv)
    assert m.q_proj.weight.dtype == torch.float64
    back = m.to_numpy_params()
    assert set(back) == set(params) and all(np.array_equal(back[k], params[k]) for k in params)
    x_q, x_kv = np.random.default_rng(1).standard_normal((2, 5, 16)), np.random.default_rng(2).standard_normal((2, 7, 16))
    valid = masks.padding_mask([7, 3], 7)
    km = masks.key_mask(valid, heads=True)  # (B, 1, 1, Lk)
    for xk, mask, causal in [(x_q, None, False), (x_q, None, True), (x_kv, km, False),
                             (x_kv, km, "bottom_right"), (x_kv, masks.causal_mask(5, 7, "bottom_right"), False)]:
        gold, gold_w = multihead.multi_head_attention(x_q, xk, params, h, hkv, mask=mask, causal=causal,
                                                      return_weights=True)
        tmask = None if mask is None else torch.as_tensor(np.asarray(mask))
        out, w = m(torch.as_tensor(x_q), torch.as_tensor(xk), mask=tmask, causal=causal, return_weights=True)
        assert out.shape == (2, 5, 16) and w.shape == (2, h, 5, xk.shape[1])
        _close(out, gold)
        _close(w, gold_w)
    # NumPy masks from attn_edu.masks are accepted directly (and keep the causal tag)
    _close(m(torch.as_tensor(x_q), torch.as_tensor(x_kv), mask=km), multihead.multi_head_attention(x_q, x_kv, params, h, hkv, mask=km))
    with pytest.raises(ValueError, match="given together"):
        m(torch.as_tensor(x_q), mask=masks.causal_mask(5), causal=True)


def test_float32_within_tolerance_rule():
    params = multihead.init_mha_params(32, 8, 2, bias=True, rng=0)
    x = np.random.default_rng(1).standard_normal((2, 33, 32))
    gold = multihead.multi_head_attention(x, x, params, 8, 2, causal=True)  # float64 gold
    m64 = MultiHeadAttention.from_numpy_params(params, 8, 2)
    m32 = MultiHeadAttention.from_numpy_params({k: v.astype(np.float32) for k, v in params.items()}, 8, 2)
    assert m32.q_proj.weight.dtype == torch.float32
    out32 = m32(torch.as_tensor(x, dtype=torch.float32), causal=True)
    # naive_32: the same computation as plain float32 matmul / torch.softmax / matmul
    xt = torch.as_tensor(x, dtype=torch.float32)
    p32 = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in params.items()}
    q = (xt @ p32["w_q"] + p32["b_q"]).unflatten(-1, (8, 4)).transpose(1, 2)
    k = (xt @ p32["w_k"] + p32["b_k"]).unflatten(-1, (2, 4)).transpose(1, 2).repeat_interleave(4, 1)
    v = (xt @ p32["w_v"] + p32["b_v"]).unflatten(-1, (2, 4)).transpose(1, 2).repeat_interleave(4, 1)
    s = (q @ k.transpose(-1, -2)) / 2.0
    s = s.masked_fill(~torch.ones(33, 33, dtype=torch.bool).tril(), float("-inf"))
    naive = (torch.softmax(s, -1) @ v).transpose(1, 2).flatten(-2) @ p32["w_o"] + p32["b_o"]
    assert_close_to_reference(out32, gold, naive)
    _close(m64(torch.as_tensor(x), causal=True), gold)


# --------------------------------------------------------------------------- vs torch.nn.MultiheadAttention
def _torch_mha(e=16, h=4, bias=True, batch_first=True, seed=0):
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(e, h, bias=bias, batch_first=batch_first, dtype=torch.float64).eval()
    if bias:
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    return mha


@pytest.mark.parametrize("bias", [True, False])
def test_matches_torch_multihead_attention_self_and_cross(bias):
    mha = _torch_mha(bias=bias)
    ours = MultiHeadAttention.from_torch_mha(mha)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in mha.parameters())
    x_q, x_kv = _x((3, 5, 16), 1), _x((3, 7, 16), 2)
    for xk in (None, x_kv):
        ref, ref_w = mha(x_q, x_q if xk is None else xk, x_q if xk is None else xk,
                         need_weights=True, average_attn_weights=False)
        out, w = ours(x_q, xk, return_weights=True)
        _close(out, ref)
        _close(w, ref_w)
    # batch_first=False: transposing is the caller's business
    mha_t = _torch_mha(bias=bias, batch_first=False, seed=1)
    ours_t = MultiHeadAttention.from_torch_mha(mha_t)
    ref, _ = mha_t(x_q.transpose(0, 1), x_kv.transpose(0, 1), x_kv.transpose(0, 1))
    _close(ours_t(x_q, x_kv), ref.transpose(0, 1))


def test_torch_key_padding_mask_has_the_opposite_polarity():
    mha = _torch_mha()
    ours = MultiHeadAttention.from_torch_mha(mha)
    x_q, x_kv = _x((3, 4, 16), 3), _x((3, 6, 16), 4)
    key_padding_mask = torch.as_tensor(~masks.padding_mask([6, 2, 4], 6))  # nn.MHA: True = IGNORE
    ref, ref_w = mha(x_q, x_kv, x_kv, key_padding_mask=key_padding_mask, need_weights=True,
                     average_attn_weights=False)
    ours_mask = masks.from_key_padding_mask(key_padding_mask.numpy(), heads=True)  # True = may attend
    assert ours_mask.shape == (3, 1, 1, 6)
    out, w = ours(x_q, x_kv, mask=ours_mask, return_weights=True)
    _close(out, ref)
    _close(w, ref_w)
    assert torch.all(w[1, :, :, 2:] == 0)
    # passing nn.MHA's mask unconverted gives a different answer: polarity matters
    wrong = ours(x_q, x_kv, mask=key_padding_mask[:, None, None, :])
    assert (wrong - ref).abs().max() > 1e-3
    # the helper does the conversion too
    ref2, ref2_w = torch_mha_reference(mha, x_q, x_kv, key_valid=~key_padding_mask)
    _close(ref2, ref)
    _close(ref2_w, ref_w)


def test_torch_attn_mask_bool_polarity_and_float():
    mha = _torch_mha(seed=2)
    ours = MultiHeadAttention.from_torch_mha(mha)
    x = _x((2, 5, 16), 5)
    allowed = torch.as_tensor(np.asarray(masks.causal_mask(5)))  # ours: True = may attend
    # nn.MultiheadAttention's boolean attn_mask: True = NOT allowed (checked here, torch 2.x)
    ref, ref_w = mha(x, x, x, attn_mask=~allowed, need_weights=True, average_attn_weights=False)
    assert torch.all(ref_w[..., ~allowed] == 0)  # the positions we call masked got no weight
    out, w = ours(x, mask=allowed, return_weights=True)
    _close(out, ref)
    _close(w, ref_w)
    _close(ours(x, causal=True), ref)
    # float masks are added by both
    bias = _x((5, 5), 6)
    ref_f, _ = mha(x, x, x, attn_mask=bias, need_weights=True)
    _close(ours(x, mask=bias), ref_f)
    # and our helper, given our polarity, agrees
    ref3, _ = torch_mha_reference(mha, x, attn_mask=allowed, key_valid=torch.tensor([[True] * 5, [True] * 3 + [False] * 2]))
    kv = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    _close(ours(x, mask=allowed & kv), ref3)


def test_from_torch_mha_rejects_unsupported():
    with pytest.raises(ValueError, match="kdim"):
        MultiHeadAttention.from_torch_mha(nn.MultiheadAttention(8, 2, kdim=4, vdim=4))
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch_mha(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(TypeError, match="nn.MultiheadAttention"):
        MultiHeadAttention.from_torch_mha(nn.Linear(8, 8))


# --------------------------------------------------------------------------- KV cache
@pytest.mark.parametrize("h,hkv", HEADS, ids=IDS)
def test_decode_step_by_step_equals_full_causal_pass(h, hkv):
    m = _module(32, h, hkv, seed=h * 10 + hkv)
    x = _x((2, 9, 32), 7)
    full = m(x, causal=True)
    cache = KVCache()
    steps = decode_with_cache(m, x, cache=cache)
    assert steps.shape == full.shape
    assert (steps - full).abs().max().item() <= 1e-10
    assert cache.length == 9 and cache.k.shape == (2, hkv, 9, 4)
    assert cache.nbytes == multihead.kv_cache_bytes(1, hkv, 4, 9, batch=2, bytes_per_elem=8)
    # the recipe by hand: one position at a time
    cache = KVCache()
    outs = [m(x[:, t:t + 1], kv_cache=cache, causal=True) for t in range(9)]
    assert (torch.cat(outs, 1) - full).abs().max().item() <= 1e-10
    # without causal=True the cached pass is NOT the causal one (the test can fail)
    cache = KVCache()
    prefill_no_causal = m(x[:, :5], kv_cache=cache)
    assert (prefill_no_causal - full[:, :5]).abs().max().item() > 1e-6


@pytest.mark.parametrize("h,hkv", HEADS, ids=IDS)
@pytest.mark.parametrize("prefill", [1, 4, 9])
def test_prefill_then_decode_equals_full_causal_pass(h, hkv, prefill):
    m = _module(32, h, hkv, seed=1)
    x = _x((2, 9, 32), 8)
    full, full_w = m(x, causal=True, return_weights=True)
    out, ws = decode_with_cache(m, x, prefill=prefill, return_weights=True)
    assert (out - full).abs().max().item() <= 1e-10
    # the prefill chunk's weights are the top rows of the full pass's weights
    assert ws[0].shape == (2, h, prefill, prefill)
    _close(ws[0], full_w[:, :, :prefill, :prefill], 1e-10)
    # each decode step's weight row is the full pass's row (bottom-right alignment)
    for t, w in enumerate(ws[1:], start=prefill):
        assert w.shape == (2, h, 1, t + 1)
        _close(w[:, :, 0], full_w[:, :, t, :t + 1], 1e-10)


def test_cache_with_padding_mask_and_cross_check_numpy():
    """Decoding a padded batch with a key mask equals the full masked causal pass."""
    m = _module(16, 4, 2, seed=3)
    x = _x((2, 6, 16), 9)
    valid = torch.as_tensor(masks.padding_mask([6, 4], 6))  # (B, L)
    full = m(x, mask=valid[:, None, None, :], causal=True)
    cache = KVCache()
    outs = []
    for t in range(6):
        outs.append(m(x[:, t:t + 1], kv_cache=cache, causal=True, mask=valid[:, None, None, :t + 1]))
    assert (torch.cat(outs, 1) - full).abs().max().item() <= 1e-10
    gold = multihead.multi_head_attention(x.numpy(), x.numpy(), m.to_numpy_params(), 4, 2,
                                          mask=valid.numpy()[:, None, None, :], causal=True)
    _close(full, gold)


def test_kv_cache_api():
    c = KVCache()
    assert c.length == 0 and c.nbytes == 0 and c.k is None
    k1, v1 = _x((2, 3, 4, 5), 0), _x((2, 3, 4, 5), 1)
    ka, va = c.append(k1, v1)
    assert ka is k1 and c.length == 4
    k2, v2 = _x((2, 3, 1, 5), 2), _x((2, 3, 1, 5), 3)
    ka, va = c.append(k2, v2)
    assert ka.shape == (2, 3, 5, 5) and c.length == 5
    assert torch.equal(ka[:, :, 4:], k2) and torch.equal(va[:, :, :4], v1)
    assert c.nbytes == 2 * 2 * 3 * 5 * 5 * 8
    with pytest.raises(ValueError, match="does not fit the cache"):
        c.append(_x((2, 2, 1, 5), 4), _x((2, 2, 1, 5), 5))
    with pytest.raises(TypeError, match="cache holds"):
        c.append(k2.float(), v2.float())
    with pytest.raises(ValueError, match="B, H_kv, L_new"):
        c.append(_x((2, 3, 1, 5), 4), _x((2, 3, 2, 5), 5))
    c.reset()
    assert c.length == 0 and c.nbytes == 0


def test_cache_rejects_top_left_and_wrong_types():
    m = _module(16, 4, 2)
    x = _x((1, 3, 16), 0)
    with pytest.raises(ValueError, match="top_left"):
        m(x, kv_cache=KVCache(), causal="top_left")
    with pytest.raises(TypeError, match="KVCache"):
        m(x, kv_cache=(None, None))


# --------------------------------------------------------------------------- gradients, errors
@pytest.mark.parametrize("h,hkv", HEADS, ids=IDS)
def test_backward_is_finite_with_a_fully_masked_padded_query(h, hkv):
    m = _module(16, h, hkv, seed=4)
    x = _x((2, 4, 16), 10).requires_grad_(True)
    valid = masks.padding_mask([4, 2], 4)
    mask = torch.as_tensor(masks.query_key_mask(valid, valid, heads=True))  # padded query rows all False
    out, w = m(x, mask=mask, causal=True, return_weights=True)
    assert torch.all(w[1, :, 2:] == 0)
    _close(out[1, 2:], m.out_proj.bias.detach().expand(2, 16), 0)  # zero attention output + bias
    out.sum().backward()
    for name, p in [("x", x)] + list(m.named_parameters()):
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert x.grad.abs().sum() > 0


def test_gradcheck_small():
    m = _module(8, 4, 2, seed=5)
    x = _x((1, 3, 8), 11).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: m(t, causal=True), (x,))


def test_forward_errors():
    m = _module(16, 4, 2)
    x = _x((2, 3, 16), 0)
    with pytest.raises(ValueError, match="x_q has last dimension 8"):
        m(_x((2, 3, 8), 0))
    with pytest.raises(ValueError, match="x_kv has last dimension 8"):
        m(x, _x((2, 3, 8), 0))
    with pytest.raises(TypeError, match="float32 but the module's parameters are torch.float64"):
        m(x.float())
    with pytest.raises(TypeError, match="torch.Tensor"):
        m(x.numpy())
    with pytest.raises(ValueError, match="ambiguous"):
        m(x, mask=torch.ones(2, 1, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be boolean"):
        m(x, mask=torch.ones(3, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="does not broadcast"):
        m(x, mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="prefill must be at most"):
        decode_with_cache(m, x, prefill=4)
