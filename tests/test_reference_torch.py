"""Tests for attn_edu.reference_torch: the PyTorch twin of the NumPy reference.

The float64 NumPy reference (attn_edu.reference) is the gold answer. float64 must agree
to 1e-12; float32 / float16 / bfloat16 are held to the book's tolerance rule
(attn_edu.testing.assert_close_to_reference) against a plain matmul-softmax-matmul
written here in the same dtype (``_naive_torch``), which uses ``torch.softmax`` and so
shares no code with the twin.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import attn_edu  # noqa: E402
from attn_edu import _checks, masks, reference, reference_torch  # noqa: E402
from attn_edu.testing import (assert_close_to_reference, assert_same_up_to_rounding, reference_pair,  # noqa: E402
                              to_numpy)
from conftest import rand, torch_qkv  # noqa: E402

def CUDA(test):
    """A CUDA-only test: in ``pytest -m cuda`` (``gpu-bench.sh --check``), skipped without a GPU."""
    return pytest.mark.cuda(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(test))
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
NEG_INF = float("-inf")


# --------------------------------------------------------------------------- helpers
def _rand(shape, seed):
    return rand(np.random.default_rng(seed), *shape)


def _t(x, dtype=torch.float64, device="cpu", requires_grad=False):
    t = torch.as_tensor(np.asarray(x)).to(device=device, dtype=dtype)
    return t.requires_grad_(requires_grad)


def _naive_torch(q, k, v, allowed=None, additive=None, scale=None, group=1):
    """Plain matmul -> torch.softmax -> matmul in the dtype of q (naive_T of the rule).

    ``allowed`` / ``additive`` are the already-combined mask (bool, True = attend) and
    float mask; rows with no allowed key get zeros (the package's rule).
    """
    if group > 1:
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)
    s = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ k.transpose(-1, -2) * s
    if additive is not None:
        scores = scores + additive.to(q.dtype)
    if allowed is None:
        return torch.softmax(scores, dim=-1) @ v
    allowed = allowed.broadcast_to(scores.shape)
    has_key = allowed.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~allowed, NEG_INF).masked_fill(~has_key, 0.0)
    w = torch.softmax(scores, dim=-1).masked_fill(~has_key, 0.0)
    return w @ v


# Shapes that break tiled code, masks of every kind, GQA and batch broadcasting.
# (q shape, k shape, Dv, mask kind, causal, enable_gqa)
CASES = {
    "L1": ((1, 16), (1, 16), 16, None, False, False),
    "Lq3_Lk17_Dv8": ((2, 3, 16), (2, 17, 16), 8, None, False, False),
    "Lq17_Lk3_D59_br": ((1, 2, 17, 59), (1, 2, 3, 59), 59, None, "bottom_right", False),
    "Lq63_Lk65_D64_causal": ((2, 63, 64), (2, 65, 64), 64, None, True, False),
    "Lq65_Lk63_D111_Dv16_br": ((1, 65, 111), (1, 63, 111), 16, None, "bottom_right", False),
    "Lq127_Lk129_bool": ((2, 2, 127, 16), (2, 2, 129, 16), 16, "bool", False, False),
    "Lq129_Lk127_D128_float": ((1, 129, 128), (1, 127, 128), 128, "float", False, False),
    "Lq129_Lk1_topleft": ((1, 129, 16), (1, 1, 16), 16, None, "top_left", False),
    "Lq1_Lk129_br_decode": ((2, 1, 64), (2, 129, 64), 64, None, "bottom_right", False),
    "gqa_br": ((2, 4, 17, 16), (2, 2, 33, 16), 24, None, "bottom_right", True),
    "mqa_bool": ((1, 6, 9, 16), (1, 1, 9, 16), 16, "bool", False, True),
    "broadcast_batch": ((3, 1, 17, 32), (1, 2, 19, 32), 32, None, False, False),
    "key_padding": ((3, 17, 16), (3, 17, 16), 16, "key_padding", False, False),
    "query_key_padding_causal": ((2, 2, 9, 16), (2, 2, 11, 16), 16, "query_key", "bottom_right", False),
    "fully_masked_rows_bool": ((2, 5, 16), (2, 7, 16), 16, "bool_dead_rows", False, False),
    "fully_masked_rows_float": ((2, 5, 16), (2, 7, 16), 16, "float_dead_rows", True, False),
}


def _make_mask(kind, q_shape, k_shape, seed):
    """A NumPy mask of the given kind (float masks in float64)."""
    lq, lk = q_shape[-2], k_shape[-2]
    rng = np.random.default_rng(seed)
    if kind is None:
        return None
    if kind == "bool":
        return rng.random((lq, lk)) < 0.7
    if kind == "float":  # finite biases plus some -inf (blocked) entries
        m = rng.standard_normal((lq, lk))
        m[rng.random((lq, lk)) < 0.3] = NEG_INF
        return m
    if kind == "key_padding":  # lengths 5, 17 and 0: batch 2 is fully masked
        return masks.key_mask(masks.padding_mask([5, 17, 0], lk))  # (B, 1, Lk)
    if kind == "query_key":
        qv = masks.padding_mask([4, 9], lq)
        kv = masks.padding_mask([11, 6], lk)
        return masks.query_key_mask(qv, kv, heads=True)  # (B, 1, Lq, Lk)
    if kind == "bool_dead_rows":
        m = rng.random((2, lq, lk)) < 0.6
        m[0, 1] = False
        m[1, [0, 4]] = False
        m[:, 2] = True
        return m
    if kind == "float_dead_rows":  # with causal=True; row 3 blocked by the float mask
        m = rng.standard_normal((lq, lk))
        m[3] = NEG_INF
        m[0, 0] = NEG_INF  # row 0 (causal: only key 0) becomes fully masked too
        return m
    raise AssertionError(kind)


def _case_inputs(name, dtype, seed=0, device="cpu"):
    q_shape, k_shape, dv, mask_kind, causal, gqa = CASES[name]
    v_shape = k_shape[:-1] + (dv,)
    # Round the inputs to dtype first, so gold and impl see the same numbers.
    q = _t(_rand(q_shape, seed), dtype, device)
    k = _t(_rand(k_shape, seed + 1), dtype, device)
    v = _t(_rand(v_shape, seed + 2), dtype, device)
    m = _make_mask(mask_kind, q_shape, k_shape, seed + 3)
    mask = None
    if m is not None:
        mask = _t(m, torch.bool if m.dtype == bool else dtype, device)
    return q, k, v, mask, dict(causal=causal, enable_gqa=gqa)


def _gold(q, k, v, mask=None, **kw):
    """float64 NumPy reference on the (already rounded) inputs."""
    m = None if mask is None else (to_numpy(mask) if mask.dtype != torch.bool else mask.cpu().numpy())
    return reference.scaled_dot_product_attention(
        to_numpy(q), to_numpy(k), to_numpy(v), mask=m, return_weights=True, **kw)


def _naive_for(q, k, v, mask, causal, enable_gqa, scale=None):
    """naive_T with the package's mask semantics (combined by reference.prepare_mask)."""
    group = q.shape[-3] // k.shape[-3] if enable_gqa else 1
    batch, _ = _checks.check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), enable_gqa)
    scores_shape = tuple(batch) + (q.shape[-2], k.shape[-2])
    m = None if mask is None else (mask.cpu().numpy() if mask.dtype == torch.bool else to_numpy(mask))
    allowed, additive = reference.prepare_mask(m, scores_shape, _checks.check_causal(causal))
    allowed = None if allowed is None else torch.as_tensor(np.asarray(allowed), device=q.device)
    additive = None if additive is None else torch.as_tensor(additive, device=q.device).to(q.dtype)
    return _naive_torch(q, k, v, allowed, additive, scale=scale, group=group)


# ------------------------------------------------------------- against the reference
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("name", list(CASES))
def test_matches_reference(name, dtype):
    q, k, v, mask, kw = _case_inputs(name, dtype)
    out, w = reference_torch.scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True, **kw)
    gold, gold_w = _gold(q, k, v, mask, **kw)
    assert out.dtype == dtype and w.dtype == dtype
    assert out.shape == gold.shape and w.shape == gold_w.shape
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    if dtype == torch.float64:
        assert np.abs(to_numpy(out) - gold).max() <= 1e-12
        assert np.abs(to_numpy(w) - gold_w).max() <= 1e-12
    else:
        naive = _naive_for(q, k, v, mask, **kw)
        assert_close_to_reference(out, gold, naive)
    # fully masked rows are exactly zero, in every dtype
    dead = gold_w.sum(-1) == 0
    if name.startswith(("fully_masked", "key_padding", "query_key", "Lq17_Lk3", "Lq65_Lk63")):
        assert dead.any(), "this case is meant to contain fully masked rows"
    assert (to_numpy(out)[dead] == 0).all() and (to_numpy(w)[dead] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_low_precision_is_not_worse_than_float32_by_much(dtype):
    """For fp16/bf16 the twin *is* a naive_T, so the rule alone is close to a tautology;
    also bound its error absolutely: a few units of the dtype's epsilon."""
    q, k, v, mask, kw = _case_inputs("Lq127_Lk129_bool", dtype, seed=5)
    out = reference_torch.scaled_dot_product_attention(q, k, v, mask=mask, **kw)
    gold, _ = _gold(q, k, v, mask, **kw)
    eps = torch.finfo(dtype).eps
    err = np.abs(to_numpy(out) - gold).max()
    assert err <= 8 * eps * max(1.0, np.abs(gold).max())
    # and it is not the same computation as float32 rounded (sanity: the test sees fp16 math)
    out32 = reference_torch.scaled_dot_product_attention(q.float(), k.float(), v.float(), mask=mask, **kw)
    assert err > np.abs(to_numpy(out32) - gold).max()


def test_scale_argument_negative_and_custom():
    q, k, v, mask, kw = _case_inputs("Lq3_Lk17_Dv8", torch.float64)
    for scale in (-0.3, 2.5, 1e-3):
        out = reference_torch.scaled_dot_product_attention(q, k, v, scale=scale)
        gold, _ = _gold(q, k, v, scale=scale)
        assert np.abs(to_numpy(out) - gold).max() <= 1e-12
    # the default really is 1/sqrt(d_k)
    d = q.shape[-1]
    assert_same_up_to_rounding(reference_torch.scaled_dot_product_attention(q, k, v),
                               reference_torch.scaled_dot_product_attention(q, k, v, scale=1 / d**0.5))


def test_float_mask_in_another_float_dtype_is_cast():
    q, k, v, _, _ = _case_inputs("Lq3_Lk17_Dv8", torch.float32)
    m64 = _t(_make_mask("float", q.shape, k.shape, 9), torch.float64)
    a = reference_torch.scaled_dot_product_attention(q, k, v, mask=m64)
    b = reference_torch.scaled_dot_product_attention(q, k, v, mask=m64.float())
    assert a.dtype == torch.float32
    assert_same_up_to_rounding(a, b)  # cast inside or outside: the same float32 mask


# ------------------------------------------------------------------ against F.sdpa
def _qkv(bq, bk, lq, lk, d, dv, dtype=torch.float64, seed=0, requires_grad=False):
    return torch_qkv(lq, lk, d, dv, lead=bq, lead_k=bk, seed=seed, dtype=dtype, device="cpu",
                     requires_grad=requires_grad)


def _close(a, b, tol):
    assert a.shape == b.shape
    assert (a - b).abs().max().item() <= tol, (a - b).abs().max().item()




@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("lq,lk", [(17, 17), (5, 19), (19, 5)])
def test_sdpa_no_mask_and_is_causal_top_left(dtype, lq, lk):
    q, k, v = _qkv((2, 3), (2, 3), lq, lk, 16, 8, dtype)

    def agree(ours, theirs, **kw):
        """float64: 1e-12; float32: each within the tolerance rule of the other's error."""
        if dtype == torch.float64:
            return _close(ours, theirs, 1e-12)
        gold = reference_pair(q, k, v, **kw)[0]
        assert_close_to_reference(ours, gold, theirs)
        assert_close_to_reference(theirs, gold, ours)

    agree(reference_torch.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # PyTorch: top-left
    for causal in (True, "top_left"):
        agree(reference_torch.scaled_dot_product_attention(q, k, v, causal=causal), theirs, causal=True)
    agree(reference_torch.scaled_dot_product_attention(q, k, v, scale=-0.7),
          F.scaled_dot_product_attention(q, k, v, scale=-0.7), scale=-0.7)
    if lq != lk:  # the two alignments really differ here
        ours_br = reference_torch.scaled_dot_product_attention(q, k, v, causal="bottom_right")
        assert (ours_br - theirs).abs().max() > 1e-3


@pytest.mark.parametrize("lq,lk", [(5, 19), (19, 5), (7, 7)])
def test_sdpa_bottom_right_equals_explicit_tril(lq, lk):
    q, k, v = _qkv((2, 3), (2, 3), lq, lk, 16, 8)
    tril = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=tril)
    ours = reference_torch.scaled_dot_product_attention(q, k, v, causal="bottom_right")
    _close(ours, theirs, 1e-12)
    assert torch.isfinite(ours).all()


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_attn_mask_same_polarity(kind):
    q, k, v = _qkv((2, 3), (2, 3), 13, 21, 16, 8)
    rng = np.random.default_rng(7)
    if kind == "bool":
        m = _t(rng.random((2, 1, 13, 21)) < 0.6, torch.bool)
        m[..., 0] = True  # every row keeps a key (fully masked rows: see the test below)
    else:
        mm = rng.standard_normal((2, 1, 13, 21))
        mm[rng.random(mm.shape) < 0.3] = NEG_INF
        mm[..., 0] = 0.0
        m = _t(mm)
    _close(reference_torch.scaled_dot_product_attention(q, k, v, mask=m),
           F.scaled_dot_product_attention(q, k, v, attn_mask=m), 1e-12)


def test_sdpa_enable_gqa():
    q, k, v = _qkv((2, 6), (2, 2), 9, 11, 16, 8)
    theirs = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    _close(reference_torch.scaled_dot_product_attention(q, k, v, enable_gqa=True), theirs, 1e-12)
    _close(reference_torch.scaled_dot_product_attention(q, k, v, enable_gqa=True, causal=True),
           F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True), 1e-12)
    # consecutive query heads share a k/v head (repeat_interleave, not tile)
    _close(theirs, F.scaled_dot_product_attention(q, k.repeat_interleave(3, -3), v.repeat_interleave(3, -3)), 1e-12)


def test_sdpa_fully_masked_rows_documented():
    """Where ours and F.sdpa used to DISAGREE: a query row with no allowed key.

    Ours: zeros (output and weights) and zero gradients, by the package's rule.
    F.sdpa (CPU, math backend): before torch 2.5 it gave NaN (softmax of an all -inf row).
    In torch 2.13 on the CPU it uses a "safe softmax" and returns zeros with finite
    gradients too, for bool and float (-inf) masks, so here they AGREE. This test pins
    what the installed torch does; if it fails, PyTorch changed its behaviour.
    (Fused CUDA backends are not covered by this CPU test.)
    """
    q, k, v = _qkv((1, 2), (1, 2), 4, 6, 8, 8, requires_grad=True)
    m = torch.ones(4, 6, dtype=torch.bool)
    m[2] = False
    mf = torch.zeros(4, 6, dtype=torch.float64).masked_fill(~m, NEG_INF)
    for mask in (m, mf):
        ours = reference_torch.scaled_dot_product_attention(q, k, v, mask=mask)
        theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert (ours[..., 2, :] == 0).all()
        assert (theirs[..., 2, :] == 0).all()  # torch 2.13: zeros, not NaN
        _close(ours, theirs, 1e-12)
        gq, = torch.autograd.grad(theirs.sum(), q)
        assert torch.isfinite(gq).all() and (gq[..., 2, :] == 0).all()


# --------------------------------------------------------------------------- gradients
def _gc(fn, *inputs):
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_gradcheck_plain_and_scale():
    q, k, v = _qkv((2,), (2,), 3, 5, 4, 3, requires_grad=True)
    _gc(lambda q, k, v: reference_torch.scaled_dot_product_attention(q, k, v), q, k, v)
    _gc(lambda q, k, v: reference_torch.scaled_dot_product_attention(q, k, v, scale=-1.3), q, k, v)


@pytest.mark.parametrize("causal", [True, "bottom_right"])
@pytest.mark.parametrize("lq,lk", [(5, 3), (3, 5)])
def test_gradcheck_causal(causal, lq, lk):
    q, k, v = _qkv((1, 2), (1, 2), lq, lk, 4, 3, requires_grad=True)
    _gc(lambda q, k, v: reference_torch.scaled_dot_product_attention(q, k, v, causal=causal), q, k, v)


def test_gradcheck_float_mask_including_mask_gradient():
    q, k, v = _qkv((2,), (2,), 3, 5, 4, 3, requires_grad=True)
    m = _t(_rand((3, 5), 11), requires_grad=True)  # finite: d/dmask is defined
    _gc(lambda q, k, v, m: reference_torch.scaled_dot_product_attention(q, k, v, mask=m), q, k, v, m)
    blocked = m.detach().clone()
    blocked[1, 2] = NEG_INF
    _gc(lambda q, k, v: reference_torch.scaled_dot_product_attention(q, k, v, mask=blocked), q, k, v)


def test_gradcheck_bool_mask_with_fully_masked_row():
    q, k, v = _qkv((2,), (2,), 4, 5, 4, 3, requires_grad=True)
    m = torch.ones(2, 4, 5, dtype=torch.bool)
    m[0, 1] = False
    m[1, :, 3] = False
    fn = lambda q, k, v: reference_torch.scaled_dot_product_attention(q, k, v, mask=m)  # noqa: E731
    _gc(fn, q, k, v)
    assert torch.autograd.gradgradcheck(fn, (q, k, v), eps=1e-6, atol=1e-7)
    out = fn(q, k, v)
    gq, gk, gv = torch.autograd.grad((out * _t(_rand(out.shape, 3))).sum(), (q, k, v))
    assert torch.isfinite(gq).all() and torch.isfinite(gk).all() and torch.isfinite(gv).all()
    assert (gq[0, 1] == 0).all() and gq[0, 0].abs().sum() > 0
    assert (gk[1, 3] == 0).all()  # a key nobody attends to gets no gradient


def test_gradcheck_gqa():
    q, k, v = _qkv((1, 4), (1, 2), 3, 5, 4, 3, requires_grad=True)
    _gc(lambda q, k, v: reference_torch.scaled_dot_product_attention(q, k, v, enable_gqa=True, causal="bottom_right"),
        q, k, v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["float32", "float16", "bfloat16"])
def test_fully_masked_rows_have_finite_zero_grads(dtype):
    q, k, v, mask, kw = _case_inputs("fully_masked_rows_float", dtype)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out, w = reference_torch.scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True, **kw)
    (out.sum() + (w * w).sum()).backward()
    for g in (q.grad, k.grad, v.grad):
        assert g.dtype == dtype and torch.isfinite(g).all()
    dead = w.detach().sum(-1) == 0  # (B, Lq)
    assert dead.sum() == 4  # rows 0 and 3 of both batch elements
    assert (q.grad[dead] == 0).all()
    assert (q.grad[~dead].abs().sum(-1) > 0).all()


def test_gradients_match_float64_reference_rule_float32():
    """float32 gradients within 3x the naive float32 gradient error (the rule for gradients)."""
    q, k, v, mask, kw = _case_inputs("Lq63_Lk65_D64_causal", torch.float32, seed=21)
    do = _t(_rand(q.shape[:-1] + (v.shape[-1],), 4), torch.float32)

    def grads(fn, dtype):
        xs = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
        return torch.autograd.grad((fn(*xs) * do.to(dtype)).sum(), xs)

    ours = grads(lambda a, b, c: reference_torch.scaled_dot_product_attention(a, b, c, mask=mask, **kw), torch.float32)
    gold = grads(lambda a, b, c: reference_torch.scaled_dot_product_attention(a, b, c, mask=mask, **kw), torch.float64)
    naive = grads(lambda a, b, c: _naive_for(a, b, c, mask, **kw), torch.float32)
    # the float64 twin's gradient is checked by gradcheck above; use it as gold here
    for o, g, n, what in zip(ours, gold, naive, ("dq", "dk", "dv")):
        assert_close_to_reference(o, g, n, factor=3.0, what=what)


# ----------------------------------------------------------------------------- NaN
def test_nan_in_unmasked_input_propagates():
    q, k, v = _qkv((2,), (2,), 4, 6, 8, 5)
    q[0, 2, 3] = float("nan")
    out = reference_torch.scaled_dot_product_attention(q, k, v)
    assert torch.isnan(out[0, 2]).all()
    assert torch.isfinite(out[0, [0, 1, 3]]).all() and torch.isfinite(out[1]).all()
    # NaN in an allowed key poisons every row that may see it
    q, k, v = _qkv((1,), (1,), 4, 6, 8, 5)
    k[0, 4, 0] = float("nan")
    out = reference_torch.scaled_dot_product_attention(q, k, v, causal=True)  # rows 0..3 see keys <= i
    assert torch.isfinite(out[0, :4]).all()  # key 4 is hidden from rows 0..3
    out = reference_torch.scaled_dot_product_attention(q, k, v, causal="bottom_right")  # rows 2, 3 see key 4
    assert torch.isfinite(out[0, :2]).all() and torch.isnan(out[0, 2:]).all()
    gold, _ = _gold(q, k, v, causal="bottom_right")
    assert_close_to_reference(out, gold, out)  # NaN in exactly the reference's places


def test_masked_out_keys_do_not_matter():
    q, k, v = _qkv((2,), (2,), 5, 7, 8, 4)
    m = torch.ones(2, 5, 7, dtype=torch.bool)
    m[:, :, 2] = False
    m[1, 3, 5] = False
    base = reference_torch.scaled_dot_product_attention(q, k, v, mask=m)
    for fill in (1e4, float("nan"), float("inf")):
        k2 = k.clone()
        k2[:, 2] = fill  # masked for every query
        assert_same_up_to_rounding(reference_torch.scaled_dot_product_attention(q, k2, v, mask=m), base)
    v2 = v.clone()
    v2[:, 2] = 123.0  # a finite change to a masked value changes nothing either
    assert_same_up_to_rounding(reference_torch.scaled_dot_product_attention(q, k, v2, mask=m), base)


def test_nan_in_masked_value_follows_reference():
    """weights @ v with a 0 weight on a NaN value is NaN (0 * NaN) in the NumPy reference;
    the twin does the same matmul and must put NaN in exactly the same places."""
    q, k, v = _qkv((1,), (1,), 3, 4, 8, 4)
    v[0, 1, 0] = float("nan")
    m = torch.ones(3, 4, dtype=torch.bool)
    m[:, 1] = False
    out = reference_torch.scaled_dot_product_attention(q, k, v, mask=m)
    gold, _ = _gold(q, k, v, mask=m)
    assert_close_to_reference(out, gold, out)


# ---------------------------------------------------------------------------- errors
def _np(x):
    """The NumPy twin of a test argument (a tagged causal mask becomes masks.causal_mask)."""
    if isinstance(x, torch.Tensor) and getattr(x, "causal_alignment", None):
        return masks.causal_mask(*x.shape, x.causal_alignment)
    return x.numpy() if isinstance(x, torch.Tensor) else x


def _f(*shape, dtype=torch.float32):
    return torch.zeros(shape, dtype=dtype)


ERRORS = {
    # name: (q, k, v, kwargs, error, fragment, also in NumPy)
    "rank<2": (_f(4), _f(5, 4), _f(5, 4), {}, ValueError, "q must have at least 2 dimensions", True),
    "dk_mismatch": (_f(3, 4), _f(5, 6), _f(5, 6), {}, ValueError, "same last dimension d_k", True),
    "kv_length": (_f(3, 4), _f(5, 4), _f(6, 4), {}, ValueError, "k and v must have the same length", True),
    "batch_mismatch": (_f(2, 3, 4), _f(3, 5, 4), _f(3, 5, 4), {}, ValueError, "(2, 3, 4)", True),
    "heads_hint": (_f(1, 4, 3, 4), _f(1, 2, 5, 4), _f(1, 2, 5, 4), {}, ValueError, "enable_gqa=True", True),
    "gqa_not_multiple": (_f(1, 3, 3, 4), _f(1, 2, 5, 4), _f(1, 2, 5, 4), dict(enable_gqa=True),
                         ValueError, "Hq=3", True),
    "mask_not_broadcastable": (_f(3, 4), _f(5, 4), _f(5, 4), dict(mask=torch.ones(4, 5, dtype=torch.bool)),
                               ValueError, "mask of shape (4, 5)", True),
    "mask_enlarges": (_f(3, 4), _f(5, 4), _f(5, 4), dict(mask=torch.ones(2, 3, 5, dtype=torch.bool)),
                      ValueError, "does not broadcast", True),
    "mask_int": (_f(3, 4), _f(5, 4), _f(5, 4), dict(mask=torch.ones(3, 5, dtype=torch.int64)),
                 TypeError, "got dtype int64", True),
    "mask_float_nan": (_f(3, 4), _f(5, 4), _f(5, 4), dict(mask=torch.full((3, 5), float("nan"))),
                       ValueError, "NaN or +inf", True),
    "mask_float_posinf": (_f(3, 4), _f(5, 4), _f(5, 4), dict(mask=torch.full((3, 5), float("inf"))),
                          ValueError, "NaN or +inf", True),
    "mixed_dtypes": (_f(3, 4), _f(5, 4, dtype=torch.float64), _f(5, 4), {}, TypeError,
                     "k float64", True),
    "integer_inputs": (_f(3, 4, dtype=torch.int32), _f(5, 4, dtype=torch.int32), _f(5, 4, dtype=torch.int32),
                       {}, TypeError, "got dtype int32", True),
    "scale_nan": (_f(3, 4), _f(5, 4), _f(5, 4), dict(scale=float("nan")), ValueError, "scale must be finite", True),
    "scale_inf": (_f(3, 4), _f(5, 4), _f(5, 4), dict(scale=float("inf")), ValueError, "scale must be finite", True),
    "scale_zero": (_f(3, 4), _f(5, 4), _f(5, 4), dict(scale=0.0), ValueError, "scale must be non-zero", True),
    "scale_str": (_f(3, 4), _f(5, 4), _f(5, 4), dict(scale="0.5"), TypeError, "scale must be a real number", True),
    "causal_bad_str": (_f(3, 4), _f(5, 4), _f(5, 4), dict(causal="bottom"), ValueError, "'bottom'", True),
    "causal_bad_type": (_f(3, 4), _f(5, 4), _f(5, 4), dict(causal=1.5), TypeError, "of type float", True),
    "causal_twice_top_left": (_f(3, 4), _f(5, 4), _f(5, 4),
                              dict(mask=masks.causal_mask(3, 5, device="cpu"), causal=True),
                              ValueError, "already a causal mask (alignment 'top_left')", True),
    "causal_twice_bottom_right": (_f(2, 3, 4), _f(2, 5, 4), _f(2, 5, 4),
                                  dict(mask=masks.causal_mask(3, 5, "bottom_right", device="cpu"), causal="top_left"),
                                  ValueError, "causal='top_left' was given", True),
    # torch only
    "numpy_mask": (_f(3, 4), _f(5, 4), _f(5, 4), dict(mask=np.ones((3, 5), dtype=bool)),
                   TypeError, "torch.as_tensor", False),
    "numpy_k": (_f(3, 4), np.zeros((5, 4), np.float32), _f(5, 4), {}, TypeError, "k must be a torch.Tensor", False),
    "devices": (_f(3, 4), torch.zeros(5, 4, device="meta"), _f(5, 4), {}, ValueError,
                "q on cpu, k on meta, v on cpu", False),
    "mask_device": (_f(3, 4), _f(5, 4), _f(5, 4), dict(mask=torch.ones(3, 5, dtype=torch.bool, device="meta")),
                    ValueError, "mask on meta", False),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors(name):
    q, k, v, kw, exc, fragment, numpy_too = ERRORS[name]
    with pytest.raises(exc) as info:
        reference_torch.scaled_dot_product_attention(q, k, v, **kw)
    assert fragment in str(info.value)
    if numpy_too:  # same mistake, same type, same words in the NumPy reference
        np_kw = {key: _np(val) for key, val in kw.items()}
        with pytest.raises(exc) as np_info:
            reference.scaled_dot_product_attention(_np(q), _np(k), _np(v), **np_kw)
        assert str(np_info.value) == str(info.value)


def test_untagged_causal_pattern_is_just_a_mask():
    """Only a mask made by causal_mask (tagged) counts as 'causal given twice' -- as in the
    reference: a plain tensor equal to a causal mask, a causal mask combined with padding,
    or its additive form are ordinary masks that may be combined with causal=..."""
    q, k, v = _qkv((2,), (2,), 5, 7, 8, 8)
    plain = torch.ones(5, 7, dtype=torch.bool).tril()
    combined = masks.causal_mask(5, 7, device="cpu") & torch.tensor([True] * 6 + [False])
    assert torch.equal(combined, plain) and getattr(combined, "causal_alignment", None) is None
    additive = torch.zeros(5, 7, dtype=torch.float64).masked_fill(~masks.causal_mask(5, 7, device="cpu"), NEG_INF)
    base = reference_torch.scaled_dot_product_attention(q, k, v, causal=True)
    for m in (plain, combined, additive, torch.as_tensor(masks.causal_mask(5, 7))):
        assert_same_up_to_rounding(reference_torch.scaled_dot_product_attention(q, k, v, mask=m, causal=True), base)
        gold, _ = _gold(q, k, v, mask=m, causal=True)
        assert np.abs(to_numpy(base) - gold).max() <= 1e-12
    # a tagged mask alone (no causal=) is what causal=... does
    assert_same_up_to_rounding(
        reference_torch.scaled_dot_product_attention(q, k, v, mask=masks.causal_mask(5, 7, device="cpu")), base)


@pytest.mark.parametrize("lq,lk", [(1, 1), (3, 5), (5, 3), (4, 4), (0, 3)])
@pytest.mark.parametrize("alignment", [True, "top_left", "bottom_right"])
def test_causal_mask_matches_numpy(lq, lk, alignment):
    t = masks.causal_mask(lq, lk, alignment, device="cpu")
    n = masks.causal_mask(lq, lk, alignment)
    assert t.dtype == torch.bool and np.array_equal(t.numpy(), np.asarray(n))
    assert t.causal_alignment == n.causal_alignment
    assert masks.causal_mask(2, alignment=alignment, device="cpu").shape == (2, 2)
    assert masks.causal_mask(lq, lk, alignment, device="meta").device.type == "meta"


@pytest.mark.parametrize("kw,exc,fragment", [
    (dict(lq=-1), ValueError, "lq"), (dict(lq=3.0), TypeError, "lq"),
    (dict(lq=3, alignment="diagonal"), ValueError, "'diagonal'"),
    (dict(lq=3, alignment=False), ValueError, "alignment"),
])
def test_causal_mask_errors(kw, exc, fragment):
    with pytest.raises(exc, match=fragment):
        masks.causal_mask(**kw, device="cpu")


# ------------------------------------------------------- dtype, device, weights, dispatch
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_dtype_device_and_weights(dtype):
    q, k, v, mask, kw = _case_inputs("fully_masked_rows_bool", dtype)
    out, w = reference_torch.scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True, **kw)
    assert out.dtype == w.dtype == dtype and out.device == w.device == q.device
    sums = w.double().sum(-1)
    has_key = mask.any(-1)
    assert (~has_key).sum() == 3
    assert (sums[~has_key] == 0).all()
    assert ((sums[has_key] - 1).abs() <= 4 * torch.finfo(dtype).eps * mask.shape[-1]).all()
    assert (w[~mask] == 0).all()  # blocked keys get exactly zero weight


def test_runs_on_the_tensors_device_meta():
    """Device-agnostic code: on the 'meta' device (shapes only, no data) nothing may be
    created on the CPU behind our back, e.g. the causal mask."""
    q = torch.empty(2, 3, 5, 8, device="meta")
    k = torch.empty(2, 3, 7, 8, device="meta")
    v = torch.empty(2, 3, 7, 4, device="meta")
    for causal in (False, True, "bottom_right"):
        out, w = reference_torch.scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
        assert out.device.type == "meta" and out.shape == (2, 3, 5, 4) and w.shape == (2, 3, 5, 7)


def test_top_level_dispatch():
    q, k, v, mask, kw = _case_inputs("query_key_padding_causal", torch.float32)
    ours, w = reference_torch.scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True, **kw)
    top, top_w = attn_edu.scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True, **kw)
    assert isinstance(top, torch.Tensor) and torch.equal(top, ours) and torch.equal(top_w, w)
    with pytest.raises(TypeError, match="mix"):
        attn_edu.scaled_dot_product_attention(q, k.numpy(), v)


def test_repeated_runs_are_bitwise_equal():
    q, k, v, mask, kw = _case_inputs("Lq127_Lk129_bool", torch.float32)
    a = reference_torch.scaled_dot_product_attention(q, k, v, mask=mask, **kw)
    b = reference_torch.scaled_dot_product_attention(q, k, v, mask=mask, **kw)
    assert torch.equal(a, b)


def test_invariants_permutations_and_zero_q():
    q, k, v = _qkv((2,), (2,), 6, 9, 8, 5)
    base = reference_torch.scaled_dot_product_attention(q, k, v)
    pk, pq = torch.randperm(9, generator=torch.Generator().manual_seed(0)), torch.tensor([3, 1, 5, 0, 2, 4])
    _close(reference_torch.scaled_dot_product_attention(q, k[:, pk], v[:, pk]), base, 1e-12)
    _close(reference_torch.scaled_dot_product_attention(q[:, pq], k, v), base[:, pq], 1e-12)
    z = torch.zeros_like(q)
    _close(reference_torch.scaled_dot_product_attention(z, torch.zeros_like(k), v), v.mean(-2, keepdim=True).expand(2, 6, 5),
           1e-12)


@pytest.mark.parametrize("lq,lk", [(0, 3), (3, 0), (0, 0)])
def test_empty_lengths_follow_reference(lq, lk):
    """L_q = 0 or L_k = 0: empty weights, and (for L_k = 0) an all-zero output, as in NumPy."""
    q, k, v = _qkv((2,), (2,), lq, lk, 4, 5, requires_grad=True)
    out, w = reference_torch.scaled_dot_product_attention(q, k, v, causal="bottom_right", return_weights=True)
    gold, gold_w = _gold(q, k, v, causal="bottom_right")
    assert out.shape == gold.shape and w.shape == gold_w.shape
    assert np.array_equal(to_numpy(out), gold)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_module_wrapper():
    q, k, v = _qkv((2, 2), (2, 2), 5, 7, 8, 4)
    mod = reference_torch.ScaledDotProductAttention(causal="bottom_right", scale=0.3)
    assert not list(mod.parameters()) and "bottom_right" in repr(mod)
    assert torch.equal(mod(q, k, v), reference_torch.scaled_dot_product_attention(q, k, v, causal="bottom_right", scale=0.3))
    out, w = mod(q, k, v, return_weights=True)
    assert w.shape == (2, 2, 5, 7)
    with pytest.raises(ValueError, match="causal"):
        reference_torch.ScaledDotProductAttention(causal="diagonal")


# --------------------------------------------------------------------------- softmax
def test_softmax_matches_reference_with_mask_and_dim():
    x = _rand((3, 4, 5), 0)
    m = np.random.default_rng(1).random((4, 5)) < 0.5
    m[2] = False
    for dim in (-1, 1, 0):
        mm = m if dim == -1 else None
        ours = reference_torch.softmax(_t(x), dim=dim, mask=None if mm is None else torch.as_tensor(mm))
        gold = reference.softmax(x, axis=dim, mask=mm)
        assert ours.dtype == torch.float64
        assert np.abs(ours.numpy() - gold).max() <= 1e-15
    ours = reference_torch.softmax(_t(x), mask=torch.as_tensor(m))
    assert (ours[:, 2] == 0).all()
    x32 = _t(x, torch.float32)
    assert (reference_torch.softmax(x32, dim=1) - torch.softmax(x32, dim=1)).abs().max() <= 1e-6


def test_softmax_all_excluded_gradients_zero_and_nan_propagates():
    x = _t(_rand((3, 4), 2), requires_grad=True)
    m = torch.tensor([[True] * 4, [False] * 4, [True, False, True, False]])
    y = reference_torch.softmax(x, mask=m)
    assert (y[1] == 0).all()
    g, = torch.autograd.grad((y * _t(_rand((3, 4), 3))).sum(), x)
    assert torch.isfinite(g).all() and (g[1] == 0).all() and (g[2, [1, 3]] == 0).all()
    assert torch.autograd.gradcheck(lambda x: reference_torch.softmax(x, mask=m), (x,))
    xn = x.detach().clone()
    xn[0, 1] = float("nan")
    xn[2, 1] = float("nan")  # excluded: must not leak
    y = reference_torch.softmax(xn, mask=m)
    assert torch.isnan(y[0]).all() and torch.isfinite(y[1:]).all()
    # -inf entries are excluded like masked ones; an all -inf row is zeros
    y = reference_torch.softmax(torch.tensor([[NEG_INF, NEG_INF], [0.0, NEG_INF]]))
    assert torch.equal(y, torch.tensor([[0.0, 0.0], [1.0, 0.0]]))


@pytest.mark.parametrize("bad,kw,exc,fragment", [
    (torch.zeros(3, dtype=torch.int64), {}, TypeError, "got dtype int64"),
    (torch.zeros(3, 4), dict(mask=torch.ones(3, 4, dtype=torch.int64)), TypeError, "must be boolean"),
    (torch.zeros(3, 4), dict(mask=torch.ones(2, 4, dtype=torch.bool)), ValueError, "(2, 4)"),
    (torch.tensor(1.0), {}, ValueError, "0-d"),
    (np.zeros(3), {}, TypeError, "x must be a torch.Tensor"),
])
def test_softmax_errors(bad, kw, exc, fragment):
    with pytest.raises(exc) as info:
        reference_torch.softmax(bad, **kw)
    assert fragment in str(info.value)


# ------------------------------------------------------------------------------ CUDA
@CUDA
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("name", ["gqa_br", "query_key_padding_causal", "fully_masked_rows_float",
                                  "Lq127_Lk129_bool"])
def test_cuda_matches_reference(name, dtype):
    q, k, v, mask, kw = _case_inputs(name, dtype, device="cuda")
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out, w = reference_torch.scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True, **kw)
    assert out.device.type == "cuda" and out.dtype == dtype
    gold, gold_w = _gold(q, k, v, mask, **kw)
    if dtype == torch.float64:
        assert np.abs(to_numpy(out) - gold).max() <= 1e-12
    else:
        assert_close_to_reference(out, gold, _naive_for(q, k, v, mask, **kw))
    dead = gold_w.sum(-1) == 0
    assert (to_numpy(out)[dead] == 0).all()
    out.sum().backward()
    assert all(torch.isfinite(g).all() for g in (q.grad, k.grad, v.grad))


@CUDA
def test_cuda_device_mismatch_and_sdpa_agreement():
    q, k, v = (x.cuda() for x in _qkv((2, 3), (2, 3), 9, 13, 16, 8, dtype=torch.float32))
    with pytest.raises(ValueError, match="q on cuda:0, k on cpu"):
        reference_torch.scaled_dot_product_attention(q, k.cpu(), v)
    with pytest.raises(ValueError, match="mask on cpu"):
        reference_torch.scaled_dot_product_attention(q, k, v, mask=torch.ones(9, 13, dtype=torch.bool))
    ours = reference_torch.scaled_dot_product_attention(q, k, v, causal=True)
    gold, _ = _gold(q, k, v, causal=True)
    assert_close_to_reference(ours, gold, _naive_for(q, k, v, None, causal=True, enable_gqa=False))
    _close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True), 1e-5)


def test_top_level_softmax_keeps_a_tensor_a_tensor_with_its_gradient():
    """attn_edu.softmax hands tensors to the twin: a CPU tensor comes back a tensor, and one
    that requires grad is differentiable (it used to become a NumPy array, or raise)."""
    x = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf")] * 3], requires_grad=True)
    p = attn_edu.softmax(x)
    assert isinstance(p, torch.Tensor) and p.requires_grad
    assert torch.equal(p[1], torch.zeros(3))  # fully excluded row: zeros
    (p[0, 0] * 2).backward()
    assert torch.isfinite(x.grad).all() and x.grad[0, 0] != 0
    with pytest.raises(TypeError, match="all NumPy arrays or all torch tensors"):
        attn_edu.softmax(x.detach(), mask=np.ones(3, bool))
