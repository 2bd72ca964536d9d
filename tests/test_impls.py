"""attn_edu.impls: the one switch, impl=, from the package's front door to the kernels.

What ``impl="auto"`` picks is checked on the CPU for CPU tensors, for fake GPUs of compute
capability 7.5, 8.0 and 9.0 (conftest's ``OnCuda`` tensors and a monkeypatched
``torch.cuda.get_device_capability``, as the kernel tests do) and for a missing triton
(``sys.modules["triton"] = None``, as chapter 13's no-triton test does). Every
implementation runs ``MultiHeadAttention`` against the float64 reference with the tolerance
rule; the Triton kernel under its interpreter (conftest sets ``TRITON_INTERPRET=1``).
"""
from __future__ import annotations

import copy
import importlib.util
import sys

import pytest

torch = pytest.importorskip("torch")

from attn_edu import impls, reference_torch  # noqa: E402
from attn_edu.multihead_torch import MultiHeadAttention, decode_with_cache  # noqa: E402
from attn_edu.testing import assert_close_to_reference, reference_pair  # noqa: E402
from conftest import CUDA, DEVICE, OnCuda, raises_with, torch_qkv  # noqa: E402

HAS_TRITON = importlib.util.find_spec("triton") is not None
RUNNABLE = [i for i in impls.IMPLS if i != "triton" or HAS_TRITON]


def _fake_gpu(monkeypatch, capability, dtype=torch.float16, d=64, heads=2):
    """q, k, v that say they live on a GPU of ``capability`` (never launched)."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    return [torch.zeros(1, heads, 8, d, dtype=dtype).as_subclass(OnCuda) for _ in range(3)]


# ------------------------------------------------------------------------- what "auto" picks
def test_auto_picks_sdpa_for_cpu_tensors_and_says_why():
    q, k, v = torch_qkv(5, 7, 16, lead=(2, 3), device="cpu")
    name, reason = impls.choose_impl(q, k, v, causal=True)
    assert name == "sdpa" and "cpu" in reason and "interpreter" in reason
    name, reason = impls.choose_impl(q, k, v, need_weights=True)
    assert name == "naive" and "weights" in reason
    for impl in ("naive", "tiled", "sdpa", "triton"):
        assert impls.choose_impl(q, k, v, impl=impl) == (impl, "asked for")


@pytest.mark.skipif(not HAS_TRITON, reason="the Triton choice needs triton installed")
@pytest.mark.parametrize("capability, dtype, expect, why", [
    ((7, 5), torch.float16, "sdpa", "compute capability 7.5"),  # a T4: FMA code in Triton 3.9
    ((8, 0), torch.float16, "triton", "compute capability 8.0"),  # an A100
    ((8, 0), torch.bfloat16, "triton", "bfloat16"),
    ((9, 0), torch.float16, "triton", "compute capability 9.0"),  # an H100
    ((9, 0), torch.float32, "sdpa", "TF32"),  # float32 stays float32
    ((9, 0), torch.float64, "sdpa", "float64"),  # not a kernel dtype (LIMITS)
])
def test_auto_on_fake_gpus(monkeypatch, capability, dtype, expect, why):
    q, k, v = _fake_gpu(monkeypatch, capability, dtype)
    name, reason = impls.choose_impl(q, k, v, causal=True)
    assert (name, why in reason) == (expect, True), reason


@pytest.mark.skipif(not HAS_TRITON, reason="the Triton choice needs triton installed")
def test_auto_on_a_gpu_leaves_the_kernel_for_a_mask_weights_or_a_large_head(monkeypatch):
    q, k, v = _fake_gpu(monkeypatch, (9, 0))
    assert impls.choose_impl(q, k, v)[0] == "triton"
    mask = torch.ones(8, 8, dtype=torch.bool).as_subclass(OnCuda)
    name, reason = impls.choose_impl(q, k, v, mask=mask)
    assert name == "sdpa" and "causal masks only" in reason
    assert impls.choose_impl(q, k, v, need_weights=True)[0] == "naive"
    big = _fake_gpu(monkeypatch, (9, 0), d=192)
    name, reason = impls.choose_impl(*big)
    assert name == "sdpa" and "head dimensions from 1 to 128" in reason and "192" in reason


def test_auto_without_triton_picks_sdpa(monkeypatch):
    q, k, v = _fake_gpu(monkeypatch, (9, 0))
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` fails, find_spec says None
    name, reason = impls.choose_impl(q, k, v, causal=True)
    assert name == "sdpa" and "triton is not installed" in reason


def test_a_named_impl_that_cannot_take_the_call_says_why():
    q, k, v = torch_qkv(5, 5, 16, lead=(1, 2), device="cpu")
    raises_with(ValueError, ["impl must be one of", "'auto'", "'fast'"], impls.attention, q, k, v, impl="fast")
    raises_with(ValueError, ["impl must be one of"], MultiHeadAttention, 16, 2, impl=None)
    raises_with(ValueError, ["impl='sdpa' returns no attention weights", "'naive'"],
                impls.choose_impl, q, k, v, need_weights=True, impl="sdpa")
    mask = torch.ones(5, 5, dtype=torch.bool)
    raises_with(ValueError, ["impl='triton' takes no mask", "causal"], impls.attention, q, k, v, mask=mask,
                impl="triton")
    mha = MultiHeadAttention(16, 2, impl="tiled")
    raises_with(ValueError, ["impl='tiled' returns no attention weights"], mha, torch.zeros(1, 3, 16),
                return_weights=True)


# ------------------------------------------------------------------------- every impl, one rule
def _module_in(base: MultiHeadAttention, dtype, impl="naive") -> MultiHeadAttention:
    m = copy.deepcopy(base).to(dtype)
    m.impl = impl
    return m


CASES = {  # (causal, mask kind): a padding mask leaves query row 2 with no key at all
    "plain": (False, None),
    "causal": (True, None),
    "bottom_right": ("bottom_right", None),
    "bool_mask": (False, "bool"),
    "float_mask": (True, "float"),
}


def _mask(kind, lq, lk):
    if kind is None:
        return None
    allowed = torch.rand(lq, lk, generator=torch.Generator().manual_seed(3)) < 0.7
    allowed[2] = False  # a fully masked query row: zeros, never NaN
    if kind == "bool":
        return allowed.to(DEVICE)
    bias = torch.randn(lq, lk, generator=torch.Generator().manual_seed(4))
    return torch.where(allowed, bias, torch.tensor(float("-inf"))).to(DEVICE)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("impl", RUNNABLE)
def test_multihead_attention_through_each_impl_matches_the_float64_reference(impl, case):
    causal, kind = CASES[case]
    if impl == "triton" and kind is not None:
        pytest.skip("the Triton kernel takes causal masks only (refused above)")
    torch.manual_seed(0)
    base = MultiHeadAttention(32, 4, num_kv_heads=2, dtype=torch.float64, device=DEVICE)  # GQA, d_head 8
    dtype = torch.float16 if CUDA else torch.float32  # the interpreter on the CPU: float32
    x = torch.randn(2, 17, 32, dtype=torch.float64, device=DEVICE).to(dtype).requires_grad_()
    mask = _mask(kind, 17, 17)
    if mask is not None and mask.dtype.is_floating_point:
        mask = mask.to(dtype)
    module = _module_in(base, dtype, impl)
    out = module(x, mask=mask, causal=causal)
    name, _ = module.last_impl
    assert name == impl or impl == "auto"

    def run_naive(xq, _xk, _xv, **kw):  # the same module, plain path, in the inputs' dtype
        xq = xq.detach().requires_grad_()
        y = _module_in(base, xq.dtype)(xq, **kw)
        y.backward(torch.ones_like(y))
        return y.detach(), xq.grad

    # gold: the float64 module on the same (rounded) inputs; naive: the plain path in dtype
    (gold, gold_dx), (naive, naive_dx) = reference_pair(x, x, x, attention=run_naive, mask=mask, causal=causal)
    assert_close_to_reference(out, gold, naive)
    assert not torch.isnan(out).any()
    out.backward(torch.ones_like(out))
    assert torch.isfinite(x.grad).all()
    assert_close_to_reference(x.grad, gold_dx, naive_dx, factor=3, what="d x")


@pytest.mark.parametrize("impl", RUNNABLE)
def test_decoding_with_a_kv_cache_through_each_impl(impl):
    # the cache's bottom-right causality (L_q new queries, L_k cached keys) by every impl
    torch.manual_seed(0)
    base = MultiHeadAttention(16, 2, num_kv_heads=1, dtype=torch.float64, device=DEVICE)
    dtype = torch.float16 if CUDA else torch.float32
    x = torch.randn(2, 7, 16, dtype=torch.float64, device=DEVICE)
    got = decode_with_cache(_module_in(base, dtype, impl), x.to(dtype), prefill=3)
    gold = base(x, causal=True)
    naive = _module_in(base, dtype)(x.to(dtype), causal=True)
    assert_close_to_reference(got, gold, naive)


@pytest.mark.skipif(not HAS_TRITON, reason="needs triton (interpreted on the CPU)")
def test_triton_folds_leading_axes_and_broadcasts_them():
    # (H, L, D) with no batch axis, and k, v shared by every head: the kernel wants (B, H, L, D)
    dtype = torch.float16 if CUDA else torch.float32
    q, _, _ = torch_qkv(9, 9, 16, lead=(3,), dtype=dtype)
    _, k, v = torch_qkv(9, 12, 16, lead=(1,), dtype=dtype, seed=1)
    out = impls.attention(q, k, v, causal="bottom_right", impl="triton")
    gold, naive = reference_pair(q, k, v, causal="bottom_right")
    assert out.shape == (3, 9, 16)
    assert_close_to_reference(out, gold, naive)


def test_attention_is_the_reference_semantics_with_every_cpu_impl():
    q, k, v = torch_qkv(6, 9, 8, lead=(2, 2), device="cpu", dtype=torch.float64)
    gold = reference_torch.scaled_dot_product_attention(q, k, v, causal="bottom_right", scale=-0.7)
    for impl in ("naive", "tiled", "sdpa", "auto"):
        out = impls.attention(q, k, v, causal="bottom_right", scale=-0.7, impl=impl)
        assert (out - gold).abs().max().item() <= 1e-10, impl  # float64: tiled vs naive bound


# ------------------------------------------------------------------------- the models take it
def test_tiny_transformers_take_the_switch_and_default_to_the_plain_path():
    from attn_edu import tiny_transformer as tt

    torch.manual_seed(0)
    model = tt.TinyTransformer(vocab=8, seq_len=6, d_model=16, num_heads=2).double()
    assert all(b.attn.impl == "naive" for b in model.blocks)
    lm = tt.AttentionOnlyLM(vocab=8, max_len=6, d_model=16, num_heads=2)
    assert all(b.attn.impl == "naive" for b in lm.blocks)
    x = torch.randint(8, (4, 6), generator=torch.Generator().manual_seed(1))
    plain = model(x)
    fast = copy.deepcopy(model)
    for block in fast.blocks:
        block.attn.impl = "auto"
    assert (fast(x) - plain).abs().max().item() <= 1e-10  # float64, SDPA on the CPU
    assert fast.blocks[0].attn.last_impl[0] == "sdpa"
    logits, weights = fast(x, return_attention=True)  # weights asked for: the plain path
    assert fast.blocks[0].attn.last_impl[0] == "naive" and len(weights) == 2
    sdpa = tt.TinyTransformer(vocab=8, seq_len=6, d_model=16, num_heads=2, impl="sdpa")
    raises_with(ValueError, ["returns no attention weights"], sdpa, x, return_attention=True)
    lm_auto = tt.AttentionOnlyLM(vocab=8, max_len=6, d_model=16, num_heads=2, impl="auto")
    lm_auto.load_state_dict(lm.state_dict())
    assert (lm_auto(x) - lm(x)).abs().max().item() < 1e-5
    assert lm_auto.blocks[1].attn.last_impl[0] == "sdpa"
