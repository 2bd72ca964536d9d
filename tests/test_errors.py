"""Bad input gets a clear ValueError/TypeError naming the argument and what was seen.

One case per class of mistake in the design rules (the NumPy side; the PyTorch
twin has the same checks and its own test of devices in tests/test_reference_torch.py).
"""
import numpy as np
import pytest

from attn_edu import masks
from attn_edu._checks import check_positive_int
from attn_edu.reference import scaled_dot_product_attention as sdpa
from attn_edu.reference import softmax
from attn_edu.testing import assert_same_up_to_rounding

rng = np.random.default_rng(0)
Q = rng.standard_normal((2, 4, 5, 8))
K = rng.standard_normal((2, 4, 7, 8))
V = rng.standard_normal((2, 4, 7, 3))


def call(**over):
    args = dict(q=Q, k=K, v=V)
    args.update(over)
    return sdpa(**args)


CASES = [
    # (id, kwargs, exception, fragments that must appear in the message)
    ("rank<2", dict(q=Q[0, 0, 0]), ValueError, ["q", "at least 2 dimensions", "(8,)"]),
    ("rank<2 k", dict(k=np.ones(8)), ValueError, ["k", "at least 2 dimensions"]),
    ("head dim mismatch", dict(k=K[..., :6], v=V), ValueError, ["d_k", "q (2, 4, 5, 8)", "k (2, 4, 7, 6)"]),
    ("k/v length mismatch", dict(v=V[..., :6, :]), ValueError, ["L_k", "k (2, 4, 7, 8)", "v (2, 4, 6, 3)"]),
    ("batch mismatch", dict(k=K[:1].repeat(3, 0), v=V[:1].repeat(3, 0)), ValueError, ["batch", "q (2, 4, 5, 8)", "k (3, 4, 7, 8)"]),
    ("heads mismatch hints gqa", dict(k=K[:, :2], v=V[:, :2]), ValueError, ["enable_gqa=True"]),
    ("gqa not a multiple", dict(k=K[:, :3], v=V[:, :3], enable_gqa=True), ValueError, ["multiple", "Hq=4", "Hkv=3"]),
    ("mask not broadcastable", dict(mask=np.ones((5, 6), bool)), ValueError, ["mask", "(5, 6)", "(2, 4, 5, 7)"]),
    ("mask enlarges batch", dict(mask=np.ones((3, 2, 4, 5, 7), bool)), ValueError, ["mask", "(3, 2, 4, 5, 7)"]),
    ("mask int dtype", dict(mask=np.ones((5, 7), dtype=np.int64)), TypeError, ["mask", "int64", "astype(bool)"]),
    ("mask uint8 dtype", dict(mask=np.ones((5, 7), dtype=np.uint8)), TypeError, ["mask", "uint8"]),
    ("float mask NaN", dict(mask=np.full((5, 7), np.nan)), ValueError, ["float mask", "NaN"]),
    ("mixed dtypes", dict(k=K.astype(np.float32)), TypeError, ["same dtype", "k float32", "q float64"]),
    ("integer input", dict(q=np.ones((5, 8), np.int64), k=np.ones((7, 8), np.int64), v=np.ones((7, 3), np.int64)), TypeError, ["q", "int64", "floating"]),
    ("complex input", dict(q=Q.astype(np.complex128)), TypeError, ["q", "complex128"]),
    ("scale NaN", dict(scale=float("nan")), ValueError, ["scale", "finite", "nan"]),
    ("scale inf", dict(scale=float("inf")), ValueError, ["scale", "finite"]),
    ("scale zero", dict(scale=0.0), ValueError, ["scale", "non-zero"]),
    ("scale string", dict(scale="0.1"), TypeError, ["scale", "'0.1'"]),
    ("scale bool", dict(scale=True), TypeError, ["scale"]),
    ("causal unknown string", dict(causal="lower"), ValueError, ["causal", "'lower'", "bottom_right"]),
    ("causal wrong type", dict(causal=1), TypeError, ["causal", "int"]),
    ("causal given twice", dict(mask=masks.causal_mask(5, 7), causal=True), ValueError, ["already a causal mask"]),
    ("causal twice other alignment", dict(mask=masks.causal_mask(5, 7, "bottom_right"), causal="top_left"), ValueError, ["already a causal mask"]),
    ("gqa without head axis", dict(q=Q[0, 0], k=K[0, 0], v=V[0, 0], enable_gqa=True), ValueError, ["head axis"]),
    ("mixed numpy and torch", "torch-mix", TypeError, ["all NumPy arrays or all torch tensors"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_clear_error(case):
    _, kwargs, exc, fragments = case
    if kwargs == "torch-mix":
        torch = pytest.importorskip("torch")
        kwargs = dict(q=torch.from_numpy(Q))
    with pytest.raises(exc) as info:
        call(**kwargs)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in message: {msg}"


def test_error_classes_cover_the_architecture_list():
    """At least 12 distinct classes of mistake are covered above (the issue's floor)."""
    classes = {c[0].split(" ")[0] for c in CASES}
    assert len(CASES) >= 12 and len(classes) >= 10


def test_a_padding_plus_causal_mask_is_not_mistaken_for_causal_twice():
    # this padding removes only keys the causal mask removes anyway: the combined mask
    # equals a causal mask, yet it is a legitimate mask to combine with causal=True
    allowed = masks.combine_masks(masks.causal_mask(5, 7), np.array([True] * 6 + [False]))
    np.testing.assert_array_equal(allowed, masks.causal_mask(5, 7))
    out = call(mask=allowed, causal=True)
    assert_same_up_to_rounding(out, call(causal=True))
    # a plain array equal to a causal mask is just a mask too
    assert_same_up_to_rounding(call(mask=np.tri(5, 7, dtype=bool), causal=True), call(causal=True))


@pytest.mark.parametrize("bad,exc", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_block_size_checks(bad, exc):
    with pytest.raises(exc, match="block_q"):
        check_positive_int("block_q", bad)


def test_softmax_bad_inputs():
    with pytest.raises(TypeError, match="x .*int64"):
        softmax(np.arange(3))
    with pytest.raises(TypeError, match="boolean"):
        softmax(np.ones(3), mask=np.ones(3))
    with pytest.raises(ValueError, match=r"does not broadcast"):
        softmax(np.ones((2, 3)), mask=np.ones((3, 2), bool))
    with pytest.raises(ValueError, match="0-d"):
        softmax(np.float64(1.0))


@pytest.mark.parametrize(
    "fn,kwargs,exc,frag",
    [
        (masks.causal_mask, dict(lq=-1), ValueError, "lq"),
        (masks.causal_mask, dict(lq=3.0), TypeError, "lq"),
        (masks.causal_mask, dict(lq=3, alignment="diagonal"), ValueError, "'diagonal'"),
        (masks.causal_mask, dict(lq=3, alignment=False), ValueError, "alignment"),
        (masks.padding_mask, dict(lengths=[3, 5], max_len=4), ValueError, "max_len=4"),
        (masks.padding_mask, dict(lengths=[3, -1]), ValueError, "non-negative"),
        (masks.padding_mask, dict(lengths=[1.5, 2.0]), TypeError, "integers"),
        (masks.padding_mask, dict(lengths=[[1, 2]]), ValueError, "1-D"),
        (masks.key_mask, dict(valid=np.ones((2, 3))), TypeError, "boolean"),
        (masks.query_key_mask, dict(q_valid=np.ones((2, 3), bool), k_valid=np.ones((3, 3), bool)), ValueError, "batch size"),
        (masks.combine_masks, dict(op="xor"), ValueError, "'xor'"),
        (masks.to_additive, dict(mask=np.ones(3)), TypeError, "boolean"),
    ],
)
def test_mask_helper_errors(fn, kwargs, exc, frag):
    with pytest.raises(exc, match=None) as info:
        fn(**kwargs)
    assert frag in str(info.value)


def test_combine_masks_shape_and_dtype_errors():
    with pytest.raises(ValueError, match="do not broadcast"):
        masks.combine_masks(np.ones((2, 3), bool), np.ones((4, 3), bool))
    with pytest.raises(TypeError, match="mask #1"):
        masks.combine_masks(np.ones(3, bool), np.ones(3))
