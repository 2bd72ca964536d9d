"""The few array operations NumPy and torch spell differently, behind one small interface.

For functions whose body is the same for NumPy arrays and torch tensors (linear attention,
the softmax statistics of :mod:`attn_edu.precision`): ``ops = Ops(torch_like)`` and then
``ops.exp(x)``, ``ops.amax(x, axis)``, ... run NumPy or torch. Everything else in those
bodies (``@``, ``+``, ``*``, ``.sum(-1)``, ``.swapaxes``, slicing) is spelled alike, so it
stays plain. Functions that need torch-only machinery have a twin module instead (see
the twin convention in :mod:`attn_edu`). torch is imported only for ``torch_like=True``.

A package-internal module (the leading underscore): not part of the chapters' API.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

Array = Any  # a NumPy array or a torch tensor


class Ops:
    """NumPy (``torch_like=False``) or torch (``True``) versions of a handful of operations."""

    def __init__(self, torch_like: bool) -> None:
        self.torch = bool(torch_like)
        if self.torch:
            import torch

            self.t = torch

    def exp(self, x: Array) -> Array:
        return self.t.exp(x) if self.torch else np.exp(x)

    def log(self, x: Array) -> Array:
        return self.t.log(x) if self.torch else np.log(x)

    def amax(self, x: Array, axis, keepdims: bool = True) -> Array:
        return x.amax(dim=axis, keepdim=keepdims) if self.torch else np.max(x, axis=axis, keepdims=keepdims)

    def sum(self, x: Array, axis, keepdims: bool) -> Array:
        return x.sum(dim=axis, keepdim=keepdims) if self.torch else np.sum(x, axis=axis, keepdims=keepdims)

    def where(self, c: Array, a: Any, b: Any) -> Array:
        """``a`` where ``c`` else ``b``; a Python number takes the dtype (and device) of the other."""
        if self.torch:
            ref = a if isinstance(a, self.t.Tensor) else b
            a = a if isinstance(a, self.t.Tensor) else self.t.tensor(a, dtype=ref.dtype, device=ref.device)
            b = b if isinstance(b, self.t.Tensor) else self.t.tensor(b, dtype=ref.dtype, device=ref.device)
            return self.t.where(c, a, b)
        out = np.where(c, a, b)
        ref = a if isinstance(a, np.ndarray) else b
        return out.astype(ref.dtype, copy=False)

    def where0(self, c: Array, x: Array) -> Array:
        """``x`` where ``c``, else exactly 0 (dtype and device of ``x``)."""
        return self.where(c, x, 0.0)

    def zeros_like(self, x: Array) -> Array:
        return self.t.zeros_like(x) if self.torch else np.zeros_like(x)

    def isneginf(self, x: Array) -> Array:
        return self.t.isneginf(x) if self.torch else np.isneginf(x)

    def isinf(self, x: Array) -> Array:
        return self.t.isinf(x) if self.torch else np.isinf(x)

    def maximum(self, a: Array, b: Array) -> Array:
        return self.t.maximum(a, b) if self.torch else np.maximum(a, b)

    def stack(self, xs: Sequence[Array], axis: int) -> Array:
        return self.t.stack(list(xs), dim=axis) if self.torch else np.stack(xs, axis=axis)

    def as_index(self, x: np.ndarray, like: Array) -> Array:
        """A NumPy index array as the same kind as ``like`` (a tensor on its device for torch)."""
        return self.t.as_tensor(x, device=like.device) if self.torch else x

    def fill_masked(self, x: Array, keep: Array, value: float) -> Array:
        """x where keep, else value (cast to x's dtype by the library's own rules)."""
        if self.torch:
            return x.masked_fill(~keep, value)  # torch refuses a value out of range
        out = np.array(x, copy=True)
        out[~np.broadcast_to(keep, x.shape)] = value  # NumPy: out of range -> +-inf
        return out
