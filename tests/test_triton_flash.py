"""attn_edu.kernels.flash_triton: the Triton FlashAttention kernels.

On a machine without a GPU the kernels run in Triton's CPU interpreter: conftest.py sets
TRITON_INTERPRET=1 before anything imports triton (Triton 3.9 reads it when
``@triton.jit`` decorates a function). What happens when it is set too late is tested in
a subprocess at the end.

Shapes are small on the CPU (the interpreter runs each block through NumPy) and
larger on a GPU.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from attn_edu import kernels, masks, reference_torch  # noqa: E402
from attn_edu.kernels import _autotuned, _targets  # noqa: E402
from attn_edu.kernels import block_sparse_triton as bst  # noqa: E402
from attn_edu.kernels import decode_triton as dt  # noqa: E402
from attn_edu.kernels import flash_triton as ft  # noqa: E402
from attn_edu.kernels.flash_triton import kernels as fk, launch as fl  # noqa: E402
from attn_edu.kernels._shared import launch_grid  # noqa: E402
from attn_edu.testing import assert_close_to_reference, assert_same_up_to_rounding, reference_pair  # noqa: E402
from conftest import CUDA, DEVICE, GarbageTorch, OnCuda, kernel_precision, lse_pair, raises_with, torch_qkv  # noqa: E402
from venvs import compiled_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# dtypes: bfloat16 only on a GPU of compute capability >= 8.0 (the interpreter's tl.dot
# mishandles it, see the module; older GPUs such as a T4 have no bfloat16 tensor cores)
BF16_OK = CUDA and torch.cuda.get_device_capability() >= (8, 0)
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if BF16_OK else [])
CAUSALS = [False, True, "bottom_right"]
# (B, H, Lq, Lk, Dk, Dv): length 1, ragged last blocks, Lq != Lk both ways, head dims
# 16/64/128 and non powers of two (48, 80)
if CUDA:
    SHAPES = [(1, 1, 1, 1, 16, 16), (2, 3, 127, 127, 64, 64), (1, 2, 1025, 1023, 128, 128),
              (2, 2, 65, 300, 48, 80), (1, 2, 300, 65, 80, 48), (1, 1, 129, 129, 59, 111)]
else:
    SHAPES = [(1, 1, 1, 1, 16, 16), (2, 2, 17, 17, 64, 64), (1, 2, 65, 129, 128, 128),
              (1, 1, 129, 64, 48, 80)]


def _inputs(shape, dtype, seed=0, grad=False):
    B, H, LQ, LK, DK, DV = shape  # q (B, H, Lq, Dk), k (B, H, Lk, Dk), v (B, H, Lk, Dv)
    return torch_qkv(LQ, LK, DK, DV, lead=(B, H), seed=seed, dtype=dtype, requires_grad=grad)


def _naive_dtype(dtype):
    """The dtype whose naive attention sets the tolerance: the input dtype, except float32
    on TF32 tensor cores (the default from compute capability 8.0), which is held to the
    float16 rule (``attn_edu.kernels._targets.input_precision``)."""
    cap = torch.cuda.get_device_capability() if CUDA else None
    if dtype == torch.float32 and _targets.input_precision("float32", cap) == "tf32":
        return torch.float16
    return dtype


def _reference(q, k, v, causal, dtype=torch.float64):
    """reference_torch (naive) in ``dtype`` on the same device: float64 = the gold answer."""
    xs = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
    return xs, reference_torch.scaled_dot_product_attention(*xs, causal=causal)


def _lse(q, k, causal, dtype):
    """log-sum-exp of the (masked) scores, computed in ``dtype``; -inf for empty rows."""
    q, k = q.detach().to(dtype), k.detach().to(dtype)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)  # (B, H, Lq, Lk)
    align = {False: None, True: "top_left"}.get(causal, causal)
    if align is not None:
        allowed = masks.causal_mask(q.shape[-2], k.shape[-2], align, device=q.device)
        s = s.masked_fill(~allowed, float("-inf"))
    return torch.logsumexp(s.float() if dtype == torch.bfloat16 else s, dim=-1)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", CAUSALS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_and_lse_match_reference(shape, causal, dtype):
    q, k, v = _inputs(shape, dtype)
    out, lse = ft.triton_attention_forward(q, k, v, causal=causal)
    assert out.dtype == dtype and out.shape == shape[:3] + (shape[5],)
    assert lse.dtype == torch.float32 and lse.shape == shape[:3]
    gold, naive = reference_pair(q, k, v, causal=causal, precision=kernel_precision(dtype))
    assert_close_to_reference(out, gold, naive)
    assert not torch.isnan(out).any()
    gold_lse, naive_lse = _lse(q, k, causal, torch.float64), _lse(q, k, causal, _naive_dtype(dtype))
    empty = torch.isneginf(gold_lse)  # rows with no visible key (bottom-right, Lq > Lk)
    assert torch.equal(torch.isneginf(lse), empty)
    assert_close_to_reference(lse[~empty], gold_lse[~empty], naive_lse[~empty], what="lse")


@pytest.mark.parametrize("shape", SHAPES[1:], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", CAUSALS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_matches_float64_autograd(shape, causal, dtype):
    q, k, v = _inputs(shape, dtype, seed=1, grad=True)
    do = torch.randn(shape[:3] + (shape[5],), generator=torch.Generator().manual_seed(2))
    do = do.to(DEVICE, dtype)
    ft.triton_attention(q, k, v, causal=causal).backward(do)
    gold_in, gold = _reference(q, k, v, causal)
    gold.backward(do.double())
    naive_in, naive = _reference(q, k, v, causal, _naive_dtype(dtype))
    naive.backward(do.to(naive.dtype))
    for name, x, g, n in zip("qkv", (q, k, v), gold_in, naive_in):
        assert x.grad.dtype == dtype and x.grad.shape == x.shape
        assert_close_to_reference(x.grad, g.grad, n.grad, factor=3.0, what=f"d{name}")


@pytest.mark.parametrize("mode", ft.BACKWARDS)
@pytest.mark.parametrize("scale", [-0.3, 0.5], ids=str)
def test_the_backward_takes_the_forwards_scale_negative_too(scale, mode):
    # the gradients of softmax(scale * q k^T) v, scale given (a negative one flips the scores)
    dtype = torch.float16
    shape = SHAPES[1]
    q, k, v = _inputs(shape, dtype, seed=7, grad=True)
    do = torch.randn(shape[:3] + (shape[5],), generator=torch.Generator().manual_seed(8)).to(DEVICE, dtype)
    ft.triton_attention(q, k, v, causal=True, scale=scale, backward=mode).backward(do)
    refs = {}
    for ref_dtype in (torch.float64, _naive_dtype(dtype)):  # gold, then naive
        xs = [x.detach().to(ref_dtype).requires_grad_() for x in (q, k, v)]
        reference_torch.scaled_dot_product_attention(*xs, causal=True, scale=scale).backward(do.to(ref_dtype))
        refs[ref_dtype] = [x.grad for x in xs]
    for name, x, g, n in zip("qkv", (q, k, v), refs[torch.float64], refs[_naive_dtype(dtype)]):
        assert_close_to_reference(x.grad, g, n, factor=3.0, what=f"d{name} (scale {scale}, {mode})")


def test_the_public_backward_runs_the_schedule_asked_for_and_float32_exactly(monkeypatch):
    # backward="atomic_dq" reaches the launcher: no dQ kernel, dK/dV's with ATOMIC_DQ
    launched = []

    class Spy:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            return lambda *a, **kw: launched.append((self.name, kw.get("ATOMIC_DQ"))) or self.kernel[grid](*a, **kw)

    for name in ("attn_bwd_dkdv", "attn_bwd_dq"):
        monkeypatch.setattr(fk, name, Spy(name, getattr(fk, name)))
    q, k, v = _inputs((1, 1, 20, 20, 16, 16), torch.float16, seed=9, grad=True)
    for mode, want in (("atomic_dq", [("attn_bwd_dkdv", True)]),
                       ("two_kernels", [("attn_bwd_dkdv", False), ("attn_bwd_dq", None)])):
        launched.clear()
        ft.triton_attention(q, k, v, causal=True, backward=mode).sum().backward()
        assert CUDA or launched == want, (mode, launched)  # on a GPU its autotuner holds the kernels
    # float32's gradients multiply exactly (BACKWARD_FLOAT32) whatever the forward's precision
    shape = (1, 2, 64, 64)
    for cap in ((8, 0), (9, 0)):
        meta = fl._backward_plan(cap, torch.float32, shape, shape, shape, None, "two_kernels", "tf32")[2]
        assert meta["INPUT_PRECISION"] == fl.BACKWARD_FLOAT32 == "ieee"
    assert fl._backward_plan((8, 0), torch.bfloat16, shape, shape, shape, None, "two_kernels", None)[2][
        "INPUT_PRECISION"] != "ieee"


@pytest.mark.parametrize("shape", SHAPES[1:3], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", CAUSALS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_atomic_dq_backward_matches_float64_autograd(shape, causal, dtype):
    # FlashAttention-2's Algorithm 2: one kernel, dQ added with float32 atomics
    q, k, v = _inputs(shape, dtype, seed=5, grad=True)
    do = torch.randn(shape[:3] + (shape[5],), generator=torch.Generator().manual_seed(6)).to(DEVICE, dtype)
    ft.triton_attention(q, k, v, causal=causal, backward="atomic_dq").backward(do)
    gold_in, gold = _reference(q, k, v, causal)
    gold.backward(do.double())
    naive_in, naive = _reference(q, k, v, causal, _naive_dtype(dtype))
    naive.backward(do.to(naive.dtype))
    grads = [x.grad for x in (q, k, v)]
    for name, x, g, n in zip("qkv", grads, gold_in, naive_in):
        assert x.dtype == dtype
        assert_close_to_reference(x, g.grad, n.grad, factor=3.0, what=f"d{name} (atomic_dq)")
    # dK and dV come from the same kernel code as the two-kernel backward, but on a GPU the
    # two schedules may launch it with different tiles (64 x 64 with 8 warps against 32 x 64
    # on Hopper), which sum the query blocks in another order and split the matmuls
    # differently: equal up to rounding, not necessarily bit for bit (the interpreter, with
    # one tile for both, happens to give equal bits)
    for x in (q, k, v):
        x.grad = None
    ft.triton_attention(q, k, v, causal=causal).backward(do)
    ulps = 64 if dtype == torch.float32 else 8  # float32: a few float32 ulps of a long sum
    for name, atomic, two in (("dk", grads[1], k.grad), ("dv", grads[2], v.grad)):
        assert_same_up_to_rounding(atomic, two, ulps=ulps, what=f"{name}: atomic_dq vs two_kernels")


@pytest.mark.parametrize("mode", ft.BACKWARDS)
@pytest.mark.parametrize("shape, causal", [((1, 2, 33, 80, 64, 64), True), ((1, 1, 80, 33, 48, 80), "bottom_right"),
                                           ((2, 1, 17, 17, 16, 16), False)], ids=str)
def test_the_kernels_write_every_element_of_out_lse_and_the_gradients(monkeypatch, shape, causal, mode):
    # the launchers allocate out, lse, dQ, dK and dV with torch.empty (no memset): the kernels
    # must store every element, zeros where a key is seen by no query (causal, L_k > L_q)
    # or a query sees no key (bottom_right, L_q > L_k). Every buffer starts as NaN here.
    monkeypatch.setattr(fl, "torch", GarbageTorch())
    dtype = torch.float16
    q, k, v = _inputs(shape, dtype, seed=3, grad=True)
    do = torch.randn(shape[:3] + (shape[5],), generator=torch.Generator().manual_seed(4)).to(DEVICE, dtype)
    out = ft.triton_attention(q, k, v, causal=causal, backward=mode)
    out.backward(do)
    gold_in, gold = _reference(q, k, v, causal)
    gold.backward(do.double())
    naive_in, naive = _reference(q, k, v, causal, _naive_dtype(dtype))
    naive.backward(do.to(naive.dtype))
    assert_close_to_reference(out, gold, naive, what="out")
    for name, x, g, n in zip("qkv", (q, k, v), gold_in, naive_in):
        assert torch.isfinite(x.grad).all(), f"d{name} holds elements no kernel wrote"
        assert_close_to_reference(x.grad, g.grad, n.grad, factor=3.0, what=f"d{name} ({mode})")
    if causal == "bottom_right":  # the first L_q - L_k queries see no key: zeros, exactly
        blind = shape[2] - shape[3]
        assert not out[..., :blind, :].any() and not q.grad[..., :blind, :].any()
    if causal is True:  # top-left: keys past L_q are seen by no query
        assert not k.grad[..., shape[2]:, :].any() and not v.grad[..., shape[2]:, :].any()


def test_backward_mode_is_checked():
    q = torch.randn(1, 1, 4, 16, requires_grad=True)
    raises_with(ValueError, ["backward must be one of 'two_kernels', 'atomic_dq'", "got 'atomic'"],
                ft.triton_attention, q, q, q, backward="atomic")


def test_noncontiguous_inputs_and_explicit_scale():
    B, H, L, D = 2, 2, 33, 32
    g = torch.Generator().manual_seed(3)
    # (B, L, H, D) storage viewed as (B, H, L, D): strides, not a copy
    q, k, v = (torch.randn(B, L, H, D, generator=g).to(DEVICE).transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    # a negative scale: the kernel takes the max of the raw scores, so the launcher
    # passes -q and -scale (the same product, exactly)
    out, lse = ft.triton_attention_forward(q, k, v, causal=True, scale=-0.3)
    gold, naive = reference_pair(q, k, v, causal=True, scale=-0.3, precision=kernel_precision(q.dtype))
    assert_close_to_reference(out, gold, naive)
    allowed = masks.causal_mask(L, L, "top_left", device=q.device)
    gold_lse, naive_lse = lse_pair(q, k, allowed, -0.3, kernel_precision(q.dtype))
    assert_close_to_reference(lse, gold_lse, naive_lse, what="lse")


# ---------------------------------------------------------------- the TMA path (Hopper)
# (B, H, Lq, Lk, Dk, Dv): ragged blocks in both lengths, a padded head dim (48 -> 64, 80 ->
# 128), Lq != Lk: the descriptors' zero fill must stand in for every load mask
TMA_SHAPES = [(1, 2, 65, 70, 48, 64), (2, 1, 33, 129, 64, 32), (1, 1, 40, 17, 16, 80)]


@pytest.mark.skipif(CUDA and torch.cuda.get_device_capability() < ft.TMA_MIN_CAPABILITY,
                    reason="TMA descriptors need compute capability 9.0")
@pytest.mark.parametrize("shape", TMA_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", CAUSALS, ids=str)
def test_tma_descriptor_path_matches_reference_and_pointer_path(shape, causal):
    # the forward with USE_TMA (what an H100 runs): Q/K/V tiles through tensor descriptors
    dtype = torch.float16
    q, k, v = _inputs(shape, dtype, seed=4)
    assert ft.tma_compatible(q, k, v)
    align, scale = ft.check_triton_inputs(q, k, v, causal, None)
    out, lse = fl.forward(q, k, v, align, scale, use_tma=True)
    ptr_out, ptr_lse = fl.forward(q, k, v, align, scale, use_tma=False)
    gold, naive = reference_pair(q, k, v, causal=causal, precision=kernel_precision(dtype))
    assert_close_to_reference(out, gold, naive)
    empty = torch.isneginf(ptr_lse)
    assert torch.equal(torch.isneginf(lse), empty)
    # the same arithmetic; on a GPU the two paths are tuned apart and may take other tiles,
    # so each is held to the rule, and to the other up to rounding
    assert_close_to_reference(ptr_out, gold, naive, what="pointer loads")
    assert_same_up_to_rounding(out, ptr_out, what="TMA vs pointer loads")
    gold_lse, naive_lse = _lse(q, k, causal, torch.float64), _lse(q, k, causal, _naive_dtype(dtype))
    for what, x in (("lse (TMA)", lse), ("lse (pointer loads)", ptr_lse)):
        assert_close_to_reference(x[~empty], gold_lse[~empty], naive_lse[~empty], what=what)


def test_tma_compatible_follows_the_descriptor_rules():
    def t(*shape, dtype=torch.float16):
        return torch.empty(shape, dtype=dtype)

    assert ft.tma_compatible(t(2, 3, 17, 64), t(2, 3, 5, 8))  # rows of 128 and 16 bytes
    assert ft.tma_compatible(t(1, 1, 9, 4, dtype=torch.float32))  # 16-byte rows in float32
    assert not ft.tma_compatible(t(1, 1, 9, 20))  # a row of 40 bytes
    assert not ft.tma_compatible(t(2, 2, 16, 64).transpose(2, 3))  # D is not the unit stride
    # (B, L, H, D) storage seen as (B, H, L, D): row stride H * D, fine when 16-byte aligned
    assert ft.tma_compatible(t(2, 7, 3, 64).transpose(1, 2))
    assert not ft.tma_compatible(t(2, 7, 3, 12).transpose(1, 2))  # head stride of 24 bytes
    assert not ft.tma_compatible(t(1, 1, 4, 64).view(-1)[1:].view(1, 1, 1, 255)[..., :64])
    # a batch or head stride that is never used (that dimension has one entry) does not count
    base = t(3 * 8 * 16 + 8)
    assert ft.tma_compatible(base[:3 * 8 * 16].view(1, 3, 8, 16))
    assert ft.tma_compatible(base[:8 * 16 + 4].as_strided((1, 1, 8, 16), (1, 3, 16, 1)))
    assert not ft.tma_compatible(base[:8 * 16 + 4].as_strided((1, 2, 8, 16), (1, 3, 16, 1)))


def test_launcher_picks_tma_only_on_hopper_for_compatible_tensors(monkeypatch):
    q = torch.empty(1, 2, 16, 64, dtype=torch.float16).as_subclass(OnCuda)
    odd = torch.empty(1, 2, 16, 20, dtype=torch.float16).as_subclass(OnCuda)
    monkeypatch.setattr(fk, "BUILT_INTERPRETED", False)
    for cap, expect in (((8, 0), False), ((8, 9), False), ((9, 0), True), ((10, 0), True)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, cap=cap: cap)
        assert fl.uses_tma(q, q, q) is expect, cap
        assert fl.uses_tma(odd, odd, odd) is False
    monkeypatch.setattr(fk, "BUILT_INTERPRETED", True)  # the interpreter: pointer loads by default
    assert fl.uses_tma(q, q, q) is False


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # the interpreter's max
def test_causal_skips_blocks_above_the_diagonal():
    """Keys in blocks above the diagonal are never loaded, so NaN there cannot leak.

    Masking alone would not do: a masked NaN value still gives 0 * NaN = NaN in P V.
    With L = 2 * half and half a multiple of every BLOCK_M, rows < half only ever
    load keys < half.
    """
    half = 256 if CUDA else 32
    q, k, v = _inputs((1, 2, 2 * half, 2 * half, 64, 64), torch.float32)
    k, v = k.clone(), v.clone()
    k[:, :, half:] = float("nan")
    v[:, :, half:] = float("nan")
    out, lse = ft.triton_attention_forward(q, k, v, causal=True)
    assert torch.isfinite(out[:, :, :half]).all() and torch.isfinite(lse[:, :, :half]).all()
    assert torch.isnan(out[:, :, half:]).all()  # NaN in visible inputs propagates
    gold, naive = reference_pair(q[:, :, :half], k[:, :, :half], v[:, :, :half], causal=True,
                                 precision=kernel_precision(torch.float32))
    assert_close_to_reference(out[:, :, :half], gold, naive)


def test_rows_without_keys_give_zeros_and_finite_gradients():
    # bottom-right alignment with Lq > Lk: query i sees keys j <= i - (Lq - Lk)
    q, k, v = _inputs((1, 1, 40, 8, 16, 16), torch.float32, grad=True)
    out = ft.triton_attention(q, k, v, causal="bottom_right")
    _, lse = ft.triton_attention_forward(q, k, v, causal="bottom_right")
    assert torch.equal(out[0, 0, :32], torch.zeros_like(out[0, 0, :32]))
    assert torch.isneginf(lse[0, 0, :32]).all() and torch.isfinite(lse[0, 0, 32:]).all()
    out.sum().backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()
    assert torch.equal(q.grad[0, 0, :32], torch.zeros_like(q.grad[0, 0, :32]))


def test_bad_inputs_get_clear_errors():
    q, k, v = _inputs((1, 1, 8, 8, 16, 16), torch.float32)
    big = torch.zeros(1, 1, 8, 200, device=DEVICE)
    raises_with(ValueError, ["d_k", "200", "1 to 128"], ft.triton_attention_forward, big, big, v[..., :1])
    raises_with(ValueError, ["d_v", "200", "1 to 128"], ft.triton_attention, q, k, big)
    raises_with(TypeError, ["int64", "floating"], ft.triton_attention_forward,
            q.long(), k.long(), v.long())
    raises_with(TypeError, ["same dtype", "float16"], ft.triton_attention, q, k.half(), v)
    raises_with(TypeError, ["float64", "float16, bfloat16, float32"], ft.triton_attention,
            q.double(), k.double(), v.double())
    raises_with(ValueError, ["4-D", "q"], ft.triton_attention, q[0], k[0], v[0])
    raises_with(ValueError, ["same batch and head"], ft.triton_attention,
            q.expand(2, 3, 8, 16), k, v)
    raises_with(TypeError, ["torch.Tensor"], ft.triton_attention, q.cpu().numpy(), k, v)
    raises_with(ValueError, ["causal"], ft.triton_attention, q, k, v, causal="top")
    raises_with(ValueError, ["scale", "non-zero"], ft.triton_attention, q, k, v, scale=0.0)
    # the same mistake gets the same message as the reference
    msg = raises_with(ValueError, ["d_k"], ft.triton_attention, q, k[..., :8], v)
    with pytest.raises(ValueError) as ref:
        reference_torch.scaled_dot_product_attention(q, k[..., :8], v)
    assert msg == str(ref.value)
    if not CUDA:
        raises_with(TypeError, ["bfloat16", "interpreter", "11584"], ft.triton_attention,
                q.bfloat16(), k.bfloat16(), v.bfloat16())
    elif not BF16_OK:
        raises_with(TypeError, ["bfloat16", "compute capability", "float16"], ft.triton_attention,
                q.bfloat16(), k.bfloat16(), v.bfloat16())


def _mask_for(q, k):
    return torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)


#: The three kernels' launchers, each with its module (whose LIMITS it is held to).
LAUNCHERS = {
    "flash": (lambda q, k, v: ft.triton_attention(q, k, v), ft),
    "decode": (lambda q, k, v: dt.split_kv_decode(q, k, v), dt),
    "block_sparse": (lambda q, k, v: bst.block_sparse_attention(q, k, v, _mask_for(q, k)), bst),
}
#: Inputs every kernel refuses, from good (1, 2, 8, 8, 16, 16) float32 ones.
REFUSED = {
    "float64": lambda q, k, v: (q.double(), k.double(), v.double()),
    "d_k=200": lambda q, k, v: (q.new_zeros(1, 2, 8, 200), k.new_zeros(1, 2, 8, 200), v),
    "d_v=129": lambda q, k, v: (q, k, v.new_zeros(1, 2, 8, 129)),
    "3-D": lambda q, k, v: (q[0], k[0], v[0]),
    "cpu": lambda q, k, v: (q.cpu(), k.cpu(), v.cpu()),
}


@pytest.mark.parametrize("refused", REFUSED)
@pytest.mark.parametrize("kernel", LAUNCHERS)
def test_the_three_kernels_share_one_input_check(kernel, refused, monkeypatch):
    """Each launcher refuses through _targets.check_kernel_inputs with its own LIMITS, in one
    wording: the flash kernel's message with the kernel's name and way out swapped in."""
    launch, module = LAUNCHERS[kernel]
    assert isinstance(module.LIMITS, _targets.KernelLimits)
    if refused == "cpu":  # a CPU tensor without Triton's interpreter
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    seen = []
    check = _targets.check_kernel_inputs
    monkeypatch.setattr(_targets, "check_kernel_inputs", lambda limits, *a: seen.append(limits) or check(limits, *a))
    q, k, v = REFUSED[refused](*_inputs((1, 2, 8, 8, 16, 16), torch.float32))
    with pytest.raises((TypeError, ValueError)) as err:
        launch(q, k, v)
    assert seen == [module.LIMITS]
    with pytest.raises(err.type) as flash:
        check(ft.LIMITS, q, k, v, True)
    said = str(flash.value).replace(ft.LIMITS.name, module.LIMITS.name)
    assert str(err.value) == said.replace(ft.LIMITS.instead, module.LIMITS.instead)


def test_the_kernels_limits_differ_only_where_the_kernels_do():
    assert ft.LIMITS.dtypes == dt.LIMITS.dtypes == bst.LIMITS.dtypes == ("float16", "bfloat16", "float32")
    assert ft.LIMITS.head_dims == dt.LIMITS.head_dims == bst.LIMITS.head_dims == (1, 128)
    assert (ft.LIMITS.gqa, dt.LIMITS.gqa, bst.LIMITS.gqa) == (False, True, False)
    assert (ft.LIMITS.broadcast, dt.LIMITS.broadcast, bst.LIMITS.broadcast) == (False, False, True)
    assert bst.LIMITS.interpreter_bfloat16 and not ft.LIMITS.interpreter_bfloat16
    # one K/V head for two query heads: broadcast by block-sparse, grouped-query attention
    # for decoding when asked (enable_gqa=True), refused by the flash kernel, in one wording
    q, k, v = _inputs((1, 2, 8, 8, 16, 16), torch.float32)
    k, v = k[:, :1], v[:, :1]
    assert bst.block_sparse_attention(q, k, v, _mask_for(q, k)).shape == (1, 2, 8, 16)
    assert dt.split_kv_decode(q, k, v, enable_gqa=True).shape == (1, 2, 8, 16)
    for f, limits, words in ((ft.triton_attention, ft.LIMITS, "no grouped-query heads"),
                             (dt.split_kv_decode, dt.LIMITS, "H_q may be a multiple of H_kv with enable_gqa=True")):
        raises_with(ValueError, [f"{limits.name} needs q, k and v with the same batch and head axes", words],
                    f, q, k, v)


def test_bfloat16_needs_compute_capability_8():
    # a T4 (7.5) gets a message naming the capability and the way out; Ampere+ passes
    msg = _targets.cuda_dtype_problem("bfloat16", (7, 5))
    assert msg is not None and "7.5" in msg and "8.0" in msg and "float16" in msg
    assert _targets.cuda_dtype_problem("bfloat16", (8, 0)) is None
    assert _targets.cuda_dtype_problem("bfloat16", (9, 0)) is None
    for dt in ("float16", "float32"):
        assert _targets.cuda_dtype_problem(dt, (7, 5)) is None


def test_available_and_lazy_package_import():
    assert kernels.available()
    code = ("import sys, attn_edu, attn_edu.kernels as K\n"
            "assert 'triton' not in sys.modules and 'torch' not in sys.modules\n"
            "assert callable(K.triton_attention) and callable(K.available)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT, timeout=120)


@pytest.mark.skipif(CUDA, reason="the CPU-interpreter switch is what is tested here")
def test_cpu_without_interpreter_or_too_late_gets_a_clear_error():
    """No TRITON_INTERPRET: ValueError; set after triton was imported: RuntimeError."""
    code = textwrap.dedent("""
        import os
        os.environ.pop("TRITON_INTERPRET", None)
        import torch
        from attn_edu.kernels import triton_attention_forward
        q = torch.randn(1, 1, 5, 16)
        for env, exc, words in ((None, ValueError, ("TRITON_INTERPRET=1", "GPU")),
                                ("1", RuntimeError, ("after triton", "before"))):
            if env:
                os.environ["TRITON_INTERPRET"] = env
            try:
                triton_attention_forward(q, q, q)
            except exc as e:
                assert all(w in str(e) for w in words), e
            else:
                raise AssertionError("no error")
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=compiled_env(), cwd=ROOT, timeout=300)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]


@pytest.mark.parametrize("lq,lk", [(1, 1), (64, 64), (65, 129), (129, 65), (100, 37)])
@pytest.mark.parametrize("causal", CAUSALS, ids=str)
def test_block_schedule_computes_exactly_the_nonempty_tiles(lq, lk, causal, monkeypatch):
    """The kernel's loop bounds visit every tile with a visible pair and no other;
    tiles without a mask are wholly visible and inside the key range."""
    import numpy as np

    plan = ft.block_schedule(lq, lk, 32, 16, causal)
    sched = plan.schedule
    assert isinstance(plan, masks.TilePlan) and (plan.block_q, plan.block_k) == (32, 16)
    assert np.array_equal(plan.computed, masks.plan_tiles(None, 32, 16, causal, lq=lq, lk=lk).computed)
    if not CUDA:  # what the kernel's two loops visit, recorded at its calls of attn_fwd_inner
        inner = fk.attn_fwd_inner  # (interpreted): [lo, hi) unmasked, then [lo, hi) masked
        at = {name: i for i, name in enumerate(inner.arg_names)}
        ran = np.zeros_like(sched)

        def record(*a):
            i = int(a[at["offs_m"]].handle.data[0]) // 32
            for start_n in range(int(a[at["lo"]]), int(a[at["hi"]]), 16):
                assert ran[i, start_n // 16] == 0, "a tile visited twice"
                ran[i, start_n // 16] = 1 if a[at["MASKED"]] else 2
            return inner(*a)

        monkeypatch.setattr(fk, "attn_fwd_inner", record)
        q, k, v = torch_qkv(lq, lk, 16, lead=(1, 1))
        ft.triton_attention_forward(q, k, v, causal=causal, config=(32, 16, 4, 1))
        assert np.array_equal(sched, ran), (sched, ran)
    allowed = np.ones((lq, lk), bool)
    if causal:
        allowed = masks.causal_mask(lq, lk, True if causal is True else causal, device="cpu").numpy()
    for i, j in zip(*np.nonzero(sched == 2)):
        tile = allowed[i * 32:(i + 1) * 32, j * 16:(j + 1) * 16]
        assert tile.all() and (j + 1) * 16 <= lk


# ---------------------------------------------------------------- float32: TF32 or exact
def _tf32(x):
    """x (float32) rounded to TF32, 10 mantissa bits (round to nearest, ties away from zero,
    as ``cvt.rna.tf32.f32`` does): what a tensor core multiplies."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def _tf32_attention(q, k, v):
    """Attention as a TF32 kernel computes it: operands of both matmuls rounded to TF32,
    exact products summed in float32, the softmax in float32."""
    s = _tf32(q) @ _tf32(k).transpose(-1, -2) * q.shape[-1] ** -0.5
    p = torch.softmax(s, dim=-1)
    return _tf32(p) @ _tf32(v)


def test_tf32_meets_the_float16_rule_that_its_docstring_states():
    # the interpreter computes exactly whatever precision it is told, so the stated TF32
    # tolerance is checked on an emulation of TF32 arithmetic: it passes the float16 rule
    # (10 mantissa bits, like float16) and would fail the float32 rule
    q, k, v = torch_qkv(128, 128, 64, lead=(2, 2), seed=7, device="cpu")
    gold, naive16 = reference_pair(q, k, v, precision="tf32")  # naive in float16
    naive32 = reference_pair(q, k, v, precision="ieee")[1]
    out = _tf32_attention(q, k, v)
    assert_close_to_reference(out, gold, naive16, what="TF32 emulation")
    with pytest.raises(AssertionError, match="exceeds the tolerance"):
        assert_close_to_reference(out, gold, naive32)
    assert "float16 rule" in _targets.input_precision.__doc__ and "TF32" in ft.triton_attention_forward.__doc__


def test_float32_precision_policy_is_one_rule():
    ip = _targets.input_precision
    assert [ip("float32", cap) for cap in ((7, 5), (8, 0), (8, 9), (9, 0), None)] == \
        ["ieee", "tf32", "tf32", "tf32", "ieee"]  # no TF32 on a T4; the interpreter is exact
    assert ip("float32", (9, 0), "ieee") == "ieee" and ip("float32", None, "tf32") == "tf32"
    assert {ip(dt, cap, p) for dt in ("float16", "bfloat16") for cap in ((7, 5), (9, 0))
            for p in (None, "ieee")} == {"tf32"}  # half types: tl.dot ignores it
    raises_with(ValueError, ["precision='tf32'", "7.5", "ieee"], ip, "float32", (7, 5), "tf32")
    raises_with(ValueError, ["precision must be", "'tf32', 'ieee'", "'fp32'"], ip, "float32", (8, 0), "fp32")
    q = torch.zeros(1, 1, 4, 16, device=DEVICE)
    raises_with(ValueError, ["precision must be"], ft.triton_attention_forward, q, q, q, precision="high")
    # exact float32 launches one fixed small configuration, never the autotuner's list
    for cap in ((7, 5), (8, 0), (9, 0)):
        for d in (64, 128):
            assert ft.forward_configs(cap, d, dtype_bytes=4, precision="ieee") == [ft.IEEE_FORWARD_CONFIG]
            assert ft.backward_configs(cap, d, "ieee") == [ft.IEEE_BACKWARD_CONFIG]
            assert ft.atomic_backward_configs(cap, d, "ieee") == [fl.IEEE_ATOMIC_BACKWARD_CONFIG]
    assert fl.fixed_forward_config("ieee", None) == (
        ((ft.INTERPRET_BLOCK_M, ft.INTERPRET_BLOCK_N, None, None), "interpreter") if not CUDA
        else (ft.IEEE_FORWARD_CONFIG, "ieee"))


def test_the_launcher_picks_tf32_on_ampere_and_exact_float32_before(monkeypatch):
    q = torch.zeros(1, 2, 16, 64).as_subclass(OnCuda)
    monkeypatch.setattr(fk, "BUILT_INTERPRETED", False)
    expect = {(7, 5): ("ieee", (ft.IEEE_FORWARD_CONFIG, "ieee")), (8, 0): ("tf32", None),
              (9, 0): ("tf32", None)}
    for cap, (prec, fixed) in expect.items():
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, cap=cap: cap)
        assert fl.dot_precision(q, None) == prec and fl.fixed_forward_config(prec, None) == fixed
        assert fl.dot_precision(q.half(), None) == "tf32"
        assert fl.dot_precision(q, "ieee") == "ieee"
        assert fl.fixed_forward_config("ieee", None) == (ft.IEEE_FORWARD_CONFIG, "ieee")
        assert fl.fixed_forward_config(prec, (64, 32, 4, 2)) == ((64, 32, 4, 2), "config")


# ---------------------------------------------------------------- configurations
def test_a_fixed_config_is_used_reported_and_reproducible():
    q, k, v = _inputs((1, 2, 40, 40, 16, 16), torch.float32, seed=8)
    cfg = (16, 16, 4, 2)
    out1, lse1 = ft.triton_attention_forward(q, k, v, causal=True, config=cfg)
    got = ft.chosen_forward_config(q, k, v, causal=True, config=cfg)
    assert (got["block_m"], got["block_n"]) == (16, 16) and got["how"] in ("config", "interpreter")
    out2, lse2 = ft.triton_attention_forward(q, k, v, causal=True, config=got)  # the dict, as JSON gives it
    assert torch.equal(out1, out2) and torch.equal(lse1, lse2)  # same code, same tiles: same bits
    gold, naive = reference_pair(q, k, v, causal=True, precision=kernel_precision(torch.float32))
    assert_close_to_reference(out1, gold, naive)
    raises_with(ValueError, ["config must be", "(BLOCK_M, BLOCK_N, num_warps, num_stages)"],
                ft.triton_attention_forward, q, k, v, config=(16, 16))
    raises_with(ValueError, ["powers of two", "(24, 16, 4, 1)"], ft.triton_attention, q, k, v, config=(24, 16, 4, 1))
    for bad in ((16, 16, 3, 1), (16, 16, 32, 1), (16, 16, 4, 0)):  # warps a power of two to 16, stages >= 1
        raises_with(ValueError, ["num_warps a power of two from 1 to 16 and num_stages >= 1", str(bad)],
                    ft.triton_attention_forward, q, k, v, config=bad)
    raises_with(ValueError, ["four ints"], ft.triton_attention_forward, q, k, v, config=(16, 16, 4, True))
    raises_with(ValueError, ["block_m"], ft.triton_attention_forward, q, k, v, config={"block_n": 16})


def test_the_autotuner_keys_on_a_batch_heads_bucket_and_its_choice_is_recorded(monkeypatch):
    assert "BH_BUCKET" in ft.FWD_AUTOTUNE_KEY
    q = torch.zeros(2, 4, 100, 64).as_subclass(OnCuda)
    key = fl.launch_key(q, q, q, True, "tf32", False)
    assert key[2:5] == (128, 128, 8)  # L_q, L_k and B * H buckets
    assert fl.launch_key(torch.zeros(8, 8, 100, 64), q, q, True, "tf32", False)[4] == 64
    monkeypatch.setattr(fk, "BUILT_INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(_autotuned, "CHOSEN", {})
    assert ft.chosen_forward_config(q, q, q, causal=True) is None  # nothing tuned yet
    # what launch_autotuned files on a key's first call: the autotuner's triton.Config
    _autotuned.CHOSEN[(fl._attn_fwd, fl.launch_key(q, q, q, True, "tf32", False))] = triton.Config(
        {"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3)
    assert ft.chosen_forward_config(q, q, q, causal=True) == dict(
        block_m=128, block_n=64, num_warps=8, num_stages=3, precision="tf32", how="autotuned")
    assert ft.chosen_forward_config(q, q, q, causal=True, precision="ieee")["how"] == "ieee"


# ---------------------------------------------------------------- launch limits
class _Grids:
    """Stands in for a kernel: records each launch's grid, runs nothing."""

    def __init__(self):
        self.grids = []

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.grids.append(grid(dict(kw, BLOCK_M=64)) if callable(grid) else grid)
        return launch


def _launchable(grid):
    x, y, z = (*grid, 1, 1)[:3]
    return x <= 2**31 - 1 and y <= 65535 and z <= 65535


@pytest.mark.skipif(CUDA, reason="stand-in launches on CPU tensors")
def test_grids_launch_for_more_than_65535_batch_heads(monkeypatch):
    # B * H = 70,000 (y stops at 65,535 on CUDA): every launch puts it on the x axis
    q = torch.zeros(1, 70_000, 3, 16)
    stand_ins = {name: _Grids() for name in ("attn_fwd", "attn_bwd_preprocess", "attn_bwd_dkdv",
                                             "attn_bwd_dq")}
    for name, s in stand_ins.items():
        monkeypatch.setattr(fk, name, s)
    ft.triton_attention_forward(q, q, q)
    lse = torch.zeros(1, 70_000, 3)
    for mode in ft.BACKWARDS:
        fl.backward(q, q, q, q, q, lse, None, 0.25, mode)
    grids = [g for s in stand_ins.values() for g in s.grids]
    assert len(grids) == 1 + 2 + 3 and all(_launchable(g) for g in grids), grids
    assert all(g[0] >= 70_000 for g in grids)
    assert launch_grid(70_000, 3, 32) == (70_000,) and launch_grid(3, 100, 32) == (12,)
    raises_with(ValueError, ["2147483647"], launch_grid, 2**30, 129, 64)
