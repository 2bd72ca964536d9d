"""One public attention call runs each argument check once and copies the mask at most once.

Every check of ``attn_edu._checks`` is wrapped with a counter, in every attn_edu module that
holds it (``_checks.check_causal`` and ``from .._checks import check_causal`` alike), and a
public call is run: each check must be counted exactly once (a check that takes the
argument's name, ``check_positive_int("block_q", ...)``, counts once per name). Checks that
a check runs itself (``check_mask`` -> ``check_mask_dtype``) are part of the outer one.

"Copies the mask" counts the array and tensor conversions called *on the mask* (or a view of
it) that return new memory: ``np.array``, ``np.copy``, ``np.ascontiguousarray``,
``torch.as_tensor``, ``torch.tensor``, ``Tensor.clone/cpu/to/contiguous``. Values derived
from the mask (``~isneginf(mask)``, the additive part) are arithmetic, not copies.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import sys

import numpy as np
import pytest

from attn_edu import _checks, flash, reference

#: The checks (helpers such as ``dtype_name`` or ``is_torch_tensor`` are not checks).
CHECKS = ("uses_torch", "check_mask_kind", "check_seed", "check_rank", "check_float_dtypes",
          "check_qkv_shapes", "check_scale", "check_real", "check_causal",
          "check_causal_given_once", "check_float_mask_values", "check_mask", "check_mask_dtype",
          "check_mask_shape", "check_positive_int", "check_length", "same_devices")
#: Checks called with the argument's name first: counted per name.
NAMED = ("check_positive_int", "check_length", "check_real", "check_rank")


def _key(fn_name: str, args: tuple, kwargs: dict) -> str:
    if fn_name in NAMED and args:
        return f"{fn_name}({args[0]})"
    if fn_name == "same_devices":  # (q, k, v) and (q, mask) are two different checks
        return f"same_devices({','.join(kwargs)})"
    return fn_name


@contextlib.contextmanager
def counted_checks(monkeypatch):
    """Wrap every check in every attn_edu module that holds it; yields the Counter."""
    counts: collections.Counter = collections.Counter()
    depth = [0]
    for fn_name in CHECKS:
        original = getattr(_checks, fn_name)

        @functools.wraps(original)
        def wrapper(*args, __original=original, __name=fn_name, **kwargs):
            if depth[0] == 0:
                counts[_key(__name, args, kwargs)] += 1
            depth[0] += 1
            try:
                return __original(*args, **kwargs)
            finally:
                depth[0] -= 1

        for name, module in list(sys.modules.items()):
            if (name == "attn_edu" or name.startswith("attn_edu.")) and module is not None \
                    and getattr(module, fn_name, None) is original:
                monkeypatch.setattr(module, fn_name, wrapper)
    yield counts


try:
    from numpy.lib.array_utils import byte_bounds as _byte_bounds  # NumPy >= 2
except ImportError:  # NumPy 1.x
    _byte_bounds = np.byte_bounds


def _bounds(x):
    """(first byte, last byte + 1) of the memory an array or a tensor reads, or None."""
    if isinstance(x, np.ndarray):
        return _byte_bounds(x) if x.size else None
    if hasattr(x, "untyped_storage") and hasattr(x, "device") and x.device.type == "cpu":
        storage = x.untyped_storage()
        return (storage.data_ptr(), storage.data_ptr() + storage.nbytes()) if storage.nbytes() else None
    return None


def _shares(a, b) -> bool:
    """True when ``a`` and ``b`` (NumPy arrays or CPU tensors, in any mix) overlap in memory."""
    x, y = _bounds(a), _bounds(b)
    return x is not None and y is not None and x[0] < y[1] and y[0] < x[1]


@contextlib.contextmanager
def counted_mask_copies(monkeypatch, mask):
    """Count conversions called on ``mask`` (or a view of it) that return new memory."""
    copies = []

    def wrap(owner, attr):
        original = getattr(owner, attr)

        @functools.wraps(original)
        def wrapper(x, *args, **kwargs):
            out = original(x, *args, **kwargs)
            if _shares(x, mask) and not _shares(out, mask):
                copies.append(f"{getattr(owner, '__name__', owner)}.{attr}")
            return out

        monkeypatch.setattr(owner, attr, wrapper)

    for attr in ("array", "copy", "ascontiguousarray"):
        wrap(np, attr)
    if "torch" in sys.modules:
        import torch

        for attr in ("as_tensor", "tensor"):
            wrap(torch, attr)
        for attr in ("clone", "cpu", "to", "contiguous"):
            wrap(torch.Tensor, attr)
    yield copies


def _inputs(torch_like: bool, dtype=np.float64):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 70, 8)).astype(dtype) for _ in range(3))
    mask = rng.random((2, 1, 70, 70)) < 0.7
    if torch_like:
        import torch

        q, k, v, mask = (torch.as_tensor(x) for x in (q, k, v, mask))
    return q, k, v, mask


def _calls():
    """The public calls of the issue: (id, needs torch, function(q, k, v, mask))."""
    def ref_np(q, k, v, mask):
        return reference.scaled_dot_product_attention(q, k, v, mask=mask, causal=True)

    def flash_np_causal(q, k, v, mask):
        return flash.flash_attention(q, k, v, causal=True, block_q=32)

    def flash_np_mask(q, k, v, mask):
        return flash.flash_attention(q, k, v, mask=mask, causal=True, block_q=32)

    def ref_torch(q, k, v, mask):
        from attn_edu import reference_torch

        return reference_torch.scaled_dot_product_attention(q, k, v, mask=mask, causal=True)

    def ref_torch_front_door(q, k, v, mask):  # the NumPy front door hands tensors over
        return reference.scaled_dot_product_attention(q, k, v, mask=mask)

    def flash_torch_mask(q, k, v, mask):
        from attn_edu import flash_torch

        return flash_torch.flash_attention(q, k, v, mask=mask, causal=True, block_q=32)

    def flash_front_door_mask(q, k, v, mask):
        return flash.flash_attention(q, k, v, mask=mask.float().log(), block_q=32)

    def mha_torch_causal(q, k, v, mask):  # the module reads causal first, then calls down
        import torch

        from attn_edu.multihead_torch import MultiHeadAttention

        torch.manual_seed(0)
        x = q.transpose(-3, -2).flatten(-2)  # (2, 70, 24): d_model = 3 heads x 8
        return MultiHeadAttention(24, 3, dtype=torch.float64)(x, causal=True)  # (2, 70, 24)

    return [
        pytest.param(ref_np, False, id="numpy-reference"),
        pytest.param(flash_np_causal, False, id="numpy-flash-causal-block_q32"),
        pytest.param(flash_np_mask, False, id="numpy-flash-mask-causal-block_q32"),
        pytest.param(ref_torch, True, id="torch-reference"),
        pytest.param(ref_torch_front_door, True, id="torch-reference-via-numpy-front-door"),
        pytest.param(flash_torch_mask, True, id="torch-flash-mask-causal"),
        pytest.param(flash_front_door_mask, True, id="torch-flash-float-mask-via-front-door"),
        pytest.param(mha_torch_causal, True, id="torch-MultiHeadAttention-causal"),
    ]


@pytest.mark.parametrize("call, torch_like", _calls())
def test_one_public_call_runs_each_check_once_and_copies_the_mask_at_most_once(monkeypatch, call,
                                                                               torch_like):
    if torch_like:
        pytest.importorskip("torch")
    q, k, v, mask = _inputs(torch_like)
    with counted_checks(monkeypatch) as counts, counted_mask_copies(monkeypatch, mask) as copies:
        out = call(q, k, v, mask)
    assert tuple(out.shape)[:2] == (2, 3 if out.ndim == 4 else 70)
    assert counts, "no check was counted: the instrument is broken"
    repeated = {name: n for name, n in counts.items() if n != 1}
    assert not repeated, f"checks run more than once in one call: {repeated} (all: {dict(counts)})"
    for expected in ("check_float_dtypes", "check_qkv_shapes", "check_causal", "check_scale"):
        assert counts[expected] == 1, (expected, dict(counts))
    assert len(copies) <= 1, f"the mask was copied {len(copies)} times: {copies}"


@pytest.mark.parametrize("torch_like", [False, True], ids=["numpy", "torch"])
def test_split_kv_checks_its_attention_arguments_once(monkeypatch, torch_like):
    """Four chunks through the tiled loop, one check of the arguments. The merge of the
    partials (``precision.merge_softmax_stats``, a public function of its own) still asks
    "NumPy or torch?" of each pair of partials it merges: 1 + (4 - 1) ``uses_torch``."""
    if torch_like:
        pytest.importorskip("torch")
    from attn_edu.decoding import split_kv_attention

    q, k, v, mask = _inputs(torch_like)
    mask = mask.float().log() if torch_like else mask  # a float mask on the torch side
    with counted_checks(monkeypatch) as counts, counted_mask_copies(monkeypatch, mask) as copies:
        split_kv_attention(q, k, v, 4, mask=mask, causal="bottom_right")
    assert counts.pop("uses_torch") == 1 + 3
    repeated = {name: n for name, n in counts.items() if n != 1}
    assert not repeated, f"checks run more than once in one call: {repeated} (all: {dict(counts)})"
    assert counts["check_mask"] == counts["check_causal"] == counts["check_length(num_splits)"] == 1
    assert len(copies) <= 1, copies


def test_the_instrument_sees_a_repeated_check(monkeypatch):
    """The counter can fail: a second check inside the call is seen."""
    q, k, v, _ = _inputs(False)

    def twice(q, k, v):
        _checks.check_causal(True)  # one check more than the call runs
        return flash.flash_attention(q, k, v, causal=True, block_q=32)

    with counted_checks(monkeypatch) as counts:
        twice(q, k, v)
    assert counts["check_causal"] == 2


def test_the_instrument_sees_a_mask_copy(monkeypatch):
    """The copy counter can fail: an explicit copy of the mask is seen, a view is not."""
    _, _, _, mask = _inputs(False)
    with counted_mask_copies(monkeypatch, mask) as copies:
        np.asarray(mask[0])  # a view
        np.array(mask, copy=True)  # a copy
    assert copies == ["numpy.array"]
