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
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import _checks
from ._checks import is_torch_tensor
from .precision import FLOAT_LIMITS

__all__ = ["to_numpy", "ulp_tiny", "reference_tolerance", "assert_close_to_reference",
           "assert_same_up_to_rounding"]


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

