"""Tests for attn_edu.multihead (NumPy multi-head / GQA / MQA attention and its arithmetic).

The gold answer for multi_head_attention is a per-head loop written here: explicit column
slices of W_Q, W_K, W_V per head, the reference SDPA per head (on plain (L, d) matrices,
no head axis, no enable_gqa), concatenation and W_O.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from attn_edu import masks, reference
from attn_edu.multihead import (
    count_mha_params,
    init_mha_params,
    kv_cache_bytes,
    merge_heads,
    mha_flops,
    multi_head_attention,
    split_heads,
)

TOL = 1e-12


def _x(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _loop_mha(x_q, x_kv, p, h, hkv, mask=None, causal=False):
    """Per-head loop: the most literal multi-head attention there is. x (B, L, d_model);
    ``mask`` broadcastable to (B, H, Lq, Lk). Returns out (B, Lq, d_model), weights (B, H, Lq, Lk)."""
    b_n, lq, _ = x_q.shape
    lk = x_kv.shape[1]
    dh = p["w_q"].shape[1] // h
    group = h // hkv
    bias = "b_q" in p
    full_mask = None if mask is None else np.broadcast_to(np.asarray(mask), (b_n, h, lq, lk))
    out = np.zeros((b_n, lq, p["w_o"].shape[1]))
    weights = np.zeros((b_n, h, lq, lk))
    for b in range(b_n):
        heads = []
        for i in range(h):
            g = i // group  # the key/value head query head i shares
            cq, ckv = slice(i * dh, (i + 1) * dh), slice(g * dh, (g + 1) * dh)
            q = x_q[b] @ p["w_q"][:, cq] + (p["b_q"][cq] if bias else 0)  # (Lq, dh)
            k = x_kv[b] @ p["w_k"][:, ckv] + (p["b_k"][ckv] if bias else 0)  # (Lk, dh)
            v = x_kv[b] @ p["w_v"][:, ckv] + (p["b_v"][ckv] if bias else 0)  # (Lk, dh)
            m = None if full_mask is None else full_mask[b, i]
            o, w = reference.scaled_dot_product_attention(q, k, v, mask=m, causal=causal, return_weights=True)
            heads.append(o)
            weights[b, i] = w
        out[b] = np.concatenate(heads, axis=-1) @ p["w_o"] + (p["b_o"] if bias else 0)
    return out, weights


# --------------------------------------------------------------------------- split / merge
def test_split_merge_round_trip_and_layout():
    x = _x((2, 5, 12), 0)
    s = split_heads(x, 3)
    assert s.shape == (2, 3, 5, 4)
    np.testing.assert_array_equal(s[:, 1], x[..., 4:8])  # head 1 = features 4..7
    np.testing.assert_array_equal(merge_heads(s), x)
    y = _x((4, 2, 7, 3), 1)  # (B, H, L, d)
    np.testing.assert_array_equal(split_heads(merge_heads(y), 2), y)
    assert split_heads(_x((5, 6), 2), 2).shape == (2, 5, 3)  # no batch axis


def test_split_heads_errors():
    with pytest.raises(ValueError, match="not divisible by num_heads=5"):
        split_heads(_x((2, 3, 12), 0), 5)
    with pytest.raises(ValueError, match="num_heads must be at least 1"):
        split_heads(_x((2, 3, 12), 0), 0)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        split_heads(np.ones(4), 2)
    with pytest.raises(ValueError, match="at least 3 dimensions"):
        merge_heads(np.ones((4, 2)))


# --------------------------------------------------------------------------- params
def test_init_mha_params_shapes_seed_and_std():
    p = init_mha_params(16, 8, 2, bias=True, rng=3)
    assert {k: v.shape for k, v in p.items()} == {
        "w_q": (16, 16), "w_k": (16, 4), "w_v": (16, 4), "w_o": (16, 16),
        "b_q": (16,), "b_k": (4,), "b_v": (4,), "b_o": (16,),
    }
    assert all(v.dtype == np.float64 for v in p.values())
    q = init_mha_params(16, 8, 2, bias=True, rng=np.random.default_rng(3))
    assert all(np.array_equal(p[k], q[k]) for k in p)  # int seed == Generator with that seed
    assert not np.array_equal(p["w_q"], init_mha_params(16, 8, 2, rng=4)["w_q"])
    assert set(init_mha_params(16, 8)) == {"w_q", "w_k", "w_v", "w_o"}
    big = init_mha_params(256, 4, rng=0)["w_q"]
    assert abs(big.std() - 1 / 16) < 0.002  # std 1/sqrt(d_model)
    p = init_mha_params(10, 4, d_head=3, dtype=np.float32, rng=0)
    assert p["w_q"].shape == (10, 12) and p["w_o"].shape == (12, 10) and p["w_q"].dtype == np.float32


def test_init_mha_params_errors():
    with pytest.raises(ValueError, match="num_heads=8 and num_kv_heads=3"):
        init_mha_params(16, 8, 3)
    with pytest.raises(ValueError, match="d_model=10 and num_heads=4"):
        init_mha_params(10, 4)
    with pytest.raises(TypeError, match="rng"):
        init_mha_params(8, 2, rng="seed")
    with pytest.raises(TypeError, match="floating"):
        init_mha_params(8, 2, dtype=np.int32)


# --------------------------------------------------------------------------- attention
@pytest.mark.parametrize("h,hkv", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("bias", [False, True])
def test_mha_equals_per_head_loop(h, hkv, bias):
    p = init_mha_params(12, h, hkv, bias=bias, rng=10 * h + hkv)
    x = _x((2, 5, 12), 1)
    out, w = multi_head_attention(x, x, p, h, hkv, return_weights=True)
    gold, gold_w = _loop_mha(x, x, p, h, hkv)
    assert out.shape == (2, 5, 12) and w.shape == (2, h, 5, 5)
    np.testing.assert_allclose(out, gold, rtol=0, atol=TOL)
    np.testing.assert_allclose(w, gold_w, rtol=0, atol=TOL)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=0, atol=TOL)


@pytest.mark.parametrize("hkv", [2, 1])
def test_gqa_equals_mha_with_repeated_kv_heads(hkv):
    h, dh = 6, 3
    p = init_mha_params(9, h, hkv, d_head=dh, bias=True, rng=5)
    group = h // hkv
    rep = dict(p)  # an MHA with every K/V head copied for its group of query heads
    for key in ("w_k", "w_v"):
        blocks = np.split(p[key], hkv, axis=1)  # Hkv x (d_model, dh)
        rep[key] = np.concatenate([b for b in blocks for _ in range(group)], axis=1)  # (d_model, H*dh)
    for key in ("b_k", "b_v"):
        blocks = np.split(p[key], hkv)
        rep[key] = np.concatenate([b for b in blocks for _ in range(group)])
    x_q, x_kv = _x((3, 4, 9), 2), _x((3, 7, 9), 3)
    out, w = multi_head_attention(x_q, x_kv, p, h, hkv, return_weights=True)
    out_rep, w_rep = multi_head_attention(x_q, x_kv, rep, h, h, return_weights=True)
    np.testing.assert_allclose(out, out_rep, rtol=0, atol=TOL)
    np.testing.assert_allclose(w, w_rep, rtol=0, atol=TOL)
    # and the query heads of one group really differ (the test is not trivially true)
    assert not np.allclose(w[:, 0], w[:, 1])


@pytest.mark.parametrize("h,hkv", [(4, 4), (4, 2), (4, 1)])
def test_masks_padding_causal_and_cross(h, hkv):
    p = init_mha_params(8, h, hkv, bias=True, rng=7)
    x_q, x_kv = _x((3, 4, 8), 8), _x((3, 6, 8), 9)
    valid = masks.padding_mask([6, 2, 4], 6)
    km = masks.key_mask(valid, heads=True)  # (B, 1, 1, Lk)
    assert km.shape == (3, 1, 1, 6)
    cases = [
        (km, False),  # cross-attention with padded keys, Lq < Lk
        (None, "top_left"),
        (None, "bottom_right"),
        (km, "bottom_right"),  # combined by intersection
        (masks.causal_mask(4, 6, "bottom_right"), False),  # the same as a mask
    ]
    for m, causal in cases:
        out, w = multi_head_attention(x_q, x_kv, p, h, hkv, mask=m, causal=causal, return_weights=True)
        gold, gold_w = _loop_mha(x_q, x_kv, p, h, hkv, mask=m, causal=causal)
        np.testing.assert_allclose(out, gold, rtol=0, atol=TOL)
        np.testing.assert_allclose(w, gold_w, rtol=0, atol=TOL)
    # padded keys get zero weight; the top-left causal mask hides keys j > i
    _, w = multi_head_attention(x_q, x_kv, p, h, hkv, mask=km, causal=True, return_weights=True)
    assert np.all(w[1, :, :, 2:] == 0) and np.all(w[0][:, np.triu_indices(4, 1, 6)[0], np.triu_indices(4, 1, 6)[1]] == 0)
    # Lq > Lk the other way round
    out = multi_head_attention(x_kv, x_q, p, h, hkv, causal="bottom_right")
    gold, _ = _loop_mha(x_kv, x_q, p, h, hkv, causal="bottom_right")
    np.testing.assert_allclose(out, gold, rtol=0, atol=TOL)


def test_fully_masked_query_row_gives_bias_only_and_zero_weights():
    p = init_mha_params(8, 2, bias=True, rng=0)
    x = _x((2, 4, 8), 1)
    valid = masks.padding_mask([4, 2], 4)
    m = masks.query_key_mask(valid, valid, heads=True)  # (B, 1, L, L); padded query rows all False
    out, w = multi_head_attention(x, x, p, 2, mask=m, return_weights=True)
    assert np.isfinite(out).all()
    assert np.all(w[1, :, 2:] == 0)
    np.testing.assert_allclose(out[1, 2:], np.broadcast_to(p["b_o"], (2, 8)), rtol=0, atol=0)
    np.testing.assert_allclose(w[0].sum(-1), 1.0, rtol=0, atol=TOL)


def test_unbatched_and_float32():
    p = init_mha_params(8, 4, 2, rng=1)
    x = _x((5, 8), 2)
    out = multi_head_attention(x, x, p, 4, 2, causal=True)
    gold, _ = _loop_mha(x[None], x[None], p, 4, 2, causal=True)
    np.testing.assert_allclose(out, gold[0], rtol=0, atol=TOL)
    p32 = {k: v.astype(np.float32) for k, v in p.items()}
    out32 = multi_head_attention(x.astype(np.float32), x.astype(np.float32), p32, 4, 2, causal=True)
    assert out32.dtype == np.float32
    assert np.max(np.abs(out32 - out)) < 1e-5


def test_multi_head_attention_errors():
    p = init_mha_params(8, 4, 2, bias=True, rng=0)
    x = _x((2, 3, 8), 0)
    with pytest.raises(ValueError, match=r"x_q has last dimension 7 .* d_model=8"):
        multi_head_attention(_x((2, 3, 7), 0), x, p, 4, 2)
    with pytest.raises(ValueError, match=r"x_kv has last dimension 6"):
        multi_head_attention(x, _x((2, 3, 6), 0), p, 4, 2)
    with pytest.raises(ValueError, match=r"missing \['w_o'\]"):
        multi_head_attention(x, x, {k: v for k, v in p.items() if k != "w_o"}, 4, 2)
    with pytest.raises(ValueError, match=r"unknown keys \['W_q'\]"):
        multi_head_attention(x, x, {**p, "W_q": p["w_q"]}, 4, 2)
    with pytest.raises(ValueError, match=r"params\['w_k'\] has shape \(8, 4\) but \(8, 8\)"):
        multi_head_attention(x, x, p, 4, 4)  # weights made for Hkv=2 used as MHA
    with pytest.raises(ValueError, match=r"params\['b_o'\] has shape \(3,\)"):
        multi_head_attention(x, x, {**p, "b_o": np.zeros(3)}, 4, 2)
    with pytest.raises(ValueError, match="all of"):
        multi_head_attention(x, x, {k: v for k, v in p.items() if k != "b_v"}, 4, 2)
    with pytest.raises(ValueError, match="num_heads=4 and num_kv_heads=3"):
        multi_head_attention(x, x, p, 4, 3)
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        multi_head_attention(x, x, p, 3, 1)
    with pytest.raises(TypeError, match="params must be a dict"):
        multi_head_attention(x, x, [p["w_q"]], 4, 2)
    with pytest.raises(TypeError, match="x_q has dtype float32 but params have dtype float64"):
        multi_head_attention(x.astype(np.float32), x, p, 4, 2)
    with pytest.raises(TypeError, match="x_q"):
        multi_head_attention(x.astype(np.int64), x, p, 4, 2)
    with pytest.raises(TypeError, match="same dtype"):
        multi_head_attention(x, x, {**p, "w_o": p["w_o"].astype(np.float32)}, 4, 2)
    # a (B, 1, Lk) single-head padding mask would meet the head axis: refused, not misread
    with pytest.raises(ValueError, match="ambiguous"):
        multi_head_attention(x, x, p, 4, 2, mask=masks.key_mask(masks.padding_mask([3, 2], 3)))
    with pytest.raises(ValueError, match="does not broadcast"):
        multi_head_attention(x, x, p, 4, 2, mask=np.ones((2, 1, 1, 5), dtype=bool))
    with pytest.raises(ValueError, match="given together"):
        multi_head_attention(x, x, p, 4, 2, mask=masks.causal_mask(3), causal=True)


# --------------------------------------------------------------------------- arithmetic
def test_count_mha_params_formula():
    assert count_mha_params(16, 4) == 4 * 16 * 16
    assert count_mha_params(16, 4, bias=True) == 4 * 16 * 16 + 4 * 16
    assert count_mha_params(16, 4, 1) == 2 * 16 * 16 + 2 * 16 * 4
    assert count_mha_params(16, 4, 2, bias=True) == sum(v.size for v in init_mha_params(16, 4, 2, bias=True, rng=0).values())
    assert count_mha_params(10, 4, 2, d_head=3) == sum(v.size for v in init_mha_params(10, 4, 2, d_head=3, rng=0).values())
    # Llama-2-70B-like layer: d_model 8192, 64 heads, 8 KV heads, d_head 128
    assert count_mha_params(8192, 64, 8) == 8192 * 8192 * 2 + 2 * 8192 * 1024


def test_mha_flops_formula_and_matmul_count():
    f = mha_flops(2, 3, 5, 16, 4, 2)
    b, lq, lk, d, h, hkv, dh = 2, 3, 5, 16, 4, 2, 4
    assert f["projections"] == 2 * b * lq * d * h * dh + 2 * 2 * b * lk * d * hkv * dh
    assert f["scores"] == f["weighted_sum"] == 2 * b * h * lq * lk * dh
    assert f["output_projection"] == 2 * b * lq * h * dh * d
    assert f["total"] == f["projections"] + f["scores"] + f["weighted_sum"] + f["output_projection"]
    # MQA saves only on the K/V projections
    f1 = mha_flops(2, 3, 5, 16, 4, 1)
    assert f1["scores"] == f["scores"] and f1["projections"] < f["projections"]


def test_kv_cache_bytes_formula():
    # Llama-2-7B-like: 32 layers, 32 KV heads of 128, 4096 tokens, fp16: 2 GiB
    assert kv_cache_bytes(32, 32, 128, 4096) == 2 * 32 * 32 * 128 * 4096 * 2 == 2 * 2**30
    assert kv_cache_bytes(32, 8, 128, 4096, batch=4, bytes_per_elem=4) == 2 * 32 * 4 * 8 * 4096 * 128 * 4
    assert kv_cache_bytes(1, 1, 64, 0) == 0
    with pytest.raises(ValueError, match="num_kv_heads must be at least 1"):
        kv_cache_bytes(1, 0, 64, 10)


def test_multihead_imports_numpy_only():
    code = ("import sys, attn_edu, attn_edu.multihead; "
            "print([m for m in ('torch', 'matplotlib', 'attn_edu.multihead_torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
