"""The correctness rule every implementation in the book is held to.

The float64 NumPy reference is the gold answer. An implementation computed in dtype T
passes when::

    max |impl - gold|  <=  factor * max |naive_T - gold|  +  tiny

where ``naive_T`` is the plain matmul-softmax-matmul computed in the same dtype T
(``factor`` = 2 for outputs, 3 for gradients): an implementation may be as inexact as
the obvious one, with some slack, but not more. This is the rule FlashAttention's own
tests use. ``tiny`` is one unit in the last place of T at the output's magnitude, so an
implementation is never asked for exactly zero error when naive_T happens to be exact;
for float64, where naive_64 *is* the gold answer, it is 1e-10, the bound for float64 tiled vs. naive.
:func:`reference_pair` computes ``gold`` and ``naive_T`` for an attention call.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from . import _checks, reference
from ._checks import is_torch_tensor
from .precision import FLOAT_LIMITS

__all__ = ["to_numpy", "ulp_tiny", "reference_tolerance", "assert_close_to_reference",
           "assert_same_up_to_rounding", "reference_pair"]


def _eps(dtype_name: str) -> float:
    """Machine epsilon of a floating dtype, from the one table (:data:`attn_edu.precision.FLOAT_LIMITS`)."""
    return FLOAT_LIMITS[dtype_name][1]


def to_numpy(x) -> np.ndarray:
    """A NumPy float64 copy of an array or (any-device, any-dtype) torch tensor."""
    if is_torch_tensor(x):
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


def ulp_tiny(dtype_name: str, magnitude: float = 1.0) -> float:
    """One unit in the last place of ``dtype_name`` at ``magnitude`` (at least 1);
    1e-10 for float64 (tiled vs. naive float64 may differ by rounding, never by more)."""
    if dtype_name == "float64":
        return 1e-10
    return _eps(dtype_name) * max(1.0, float(magnitude))


def reference_tolerance(gold, naive, factor: float = 2.0, tiny: Optional[float] = None) -> float:
    """``factor * max|naive - gold| + tiny`` (see the module docstring)."""
    g, n = to_numpy(gold), to_numpy(naive)
    if g.shape != n.shape:
        raise ValueError(f"gold and naive must have the same shape; got {g.shape} and {n.shape}")
    finite = np.isfinite(g)
    err = float(np.max(np.abs(n - g)[finite], initial=0.0))
    if tiny is None:
        tiny = ulp_tiny(_checks.dtype_name(naive), float(np.max(np.abs(g[finite]), initial=0.0)))
    return factor * err + tiny


def assert_close_to_reference(impl, gold, naive, factor: float = 2.0, tiny: Optional[float] = None,
                              what: str = "output") -> float:
    """Assert the rule above; NaN must appear in exactly the same places. Returns the error."""
    i, g = to_numpy(impl), to_numpy(gold)
    if i.shape != g.shape:
        raise AssertionError(f"{what}: shape {i.shape} differs from the reference's {g.shape}")
    nan_i, nan_g = np.isnan(i), np.isnan(g)
    if not np.array_equal(nan_i, nan_g):
        raise AssertionError(f"{what}: NaN at {int(nan_i.sum())} places, the reference has {int(nan_g.sum())}")
    ok = ~nan_g
    err = float(np.max(np.abs(i - g)[ok], initial=0.0))
    tol = reference_tolerance(gold, naive, factor=factor, tiny=tiny)
    if not err <= tol:
        raise AssertionError(f"{what}: max|impl - gold| = {err:.3e} exceeds the tolerance {tol:.3e} "
                             f"({factor} x max|naive - gold| + tiny)")
    return err


def assert_same_up_to_rounding(actual, desired, ulps: float = 8, what: str = "result") -> float:
    """Two computations of the same numbers by *different paths* agree to a few ulps.

    ``max|actual - desired| <= ulps * eps(dtype) * max(1, max|desired|)``, with ``eps`` of
    the arrays' dtype (both must have it) and NaN, +inf and -inf in exactly the same
    places. For what is the same mathematically but computed another way (one big matmul
    against tile by tile, serial against threaded, a value changed where it is masked):
    BLAS libraries and CPUs may round such paths differently by an ulp or two. The same
    code run twice is compared bit for bit instead (``np.testing.assert_array_equal``).
    Returns the largest difference.
    """
    dt_a, dt_d = _checks.dtype_name(actual), _checks.dtype_name(desired)
    if dt_a != dt_d:
        raise AssertionError(f"{what}: dtype {dt_a} differs from {dt_d}")
    a, d = to_numpy(actual), to_numpy(desired)
    if a.shape != d.shape:
        raise AssertionError(f"{what}: shape {a.shape} differs from {d.shape}")
    for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        if not np.array_equal(test(a), test(d)):
            raise AssertionError(f"{what}: {name} at {int(test(a).sum())} places, expected {int(test(d).sum())}")
    finite = np.isfinite(d)
    err = float(np.max(np.abs(a[finite] - d[finite]), initial=0.0))
    tol = ulps * _eps(dt_d) * max(1.0, float(np.max(np.abs(d[finite]), initial=0.0)))
    if not err <= tol:
        raise AssertionError(f"{what}: max difference {err:.3e} exceeds {ulps} ulps ({tol:.3e})")
    return err


def reference_pair(q, k, v, *, precision: Optional[str] = None, seqlens: Optional[Sequence[int]] = None,
                   attention: Optional[Callable] = None, **kwargs) -> Tuple[object, object]:
    """``(gold, naive)`` for :func:`assert_close_to_reference`: one attention call, twice.

    ``gold`` is ``attention(q, k, v, **kwargs)`` on the inputs made float64 (the values the
    implementation under test saw, computed exactly); ``naive`` is the same call in the
    inputs' dtype T, the plain matmul-softmax-matmul whose error sets the tolerance.
    q, k, v: NumPy arrays or torch tensors of one dtype T; tensors stay on their device.

    * ``attention``: default :func:`attn_edu.reference.scaled_dot_product_attention` (the NumPy
      reference, or its PyTorch twin for tensors); ``kwargs`` (``mask``, ``causal``,
      ``scale``, ``enable_gqa``, ...) go to both calls. A NumPy ``mask`` given with
      tensors is made a tensor on their device.
    * ``precision``: how the implementation multiplied float32, ``"ieee"`` or ``"tf32"``
      (what ``attn_edu.kernels._targets.input_precision`` chose for the launch). A TF32
      product has float16's 10-bit mantissa, so ``"tf32"`` holds float32 to the float16
      rule: ``naive`` is computed in float16 (and returned in float16). Other dtypes ignore it.
    * ``seqlens``: keys per sequence, as the kernels' padded KV cache takes them: sequence
      ``b`` is computed alone over its first ``seqlens[b]`` keys (a causal alignment counts
      from them), and the results are stacked along the batch axis (not with ``mask``).
    """
    if precision not in (None, "ieee", "tf32"):
        raise ValueError(f"precision must be None, 'ieee' or 'tf32'; got {precision!r}")
    attention = reference.scaled_dot_product_attention if attention is None else attention
    if seqlens is not None:
        if kwargs.get("mask") is not None:
            raise ValueError("reference_pair takes seqlens or mask, not both")
        lengths = [int(n) for n in seqlens]
        if len(lengths) != q.shape[0]:
            raise ValueError(f"seqlens must give one length per sequence (q.shape[0] = {q.shape[0]}); "
                             f"got {len(lengths)}")
        pairs = [reference_pair(q[b:b + 1], k[b:b + 1, ..., :n, :], v[b:b + 1, ..., :n, :],
                                precision=precision, attention=attention, **kwargs)
                 for b, n in enumerate(lengths)]
        stack = _concatenate(q)
        return stack([g for g, _ in pairs]), stack([n for _, n in pairs])
    if is_torch_tensor(q) and kwargs.get("mask") is not None and not is_torch_tensor(kwargs["mask"]):
        import torch

        kwargs["mask"] = torch.as_tensor(np.asarray(kwargs["mask"]), device=q.device)
    naive_dtype = "float16" if precision == "tf32" and _checks.dtype_name(q) == "float32" else None
    gold = attention(*(_as_dtype(x, "float64") for x in (q, k, v)), **kwargs)
    naive = attention(*(_as_dtype(x, naive_dtype) for x in (q, k, v)), **kwargs)
    return gold, naive


def _as_dtype(x, dtype_name: Optional[str]):
    """``x`` in the dtype named (None: its own), without autograd history."""
    if is_torch_tensor(x):
        import torch

        x = x.detach()
        return x if dtype_name is None else x.to(getattr(torch, dtype_name))
    return x if dtype_name is None else np.asarray(x).astype(dtype_name)


def _concatenate(like) -> Callable:
    """Concatenation along axis 0 for arrays of ``like``'s kind (NumPy or torch)."""
    if is_torch_tensor(like):
        import torch

        return torch.cat
    return np.concatenate
