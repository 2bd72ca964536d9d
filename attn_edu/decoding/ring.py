r"""A ring-buffer KV cache for sliding-window attention (Mistral's rolling buffer).

With a sliding window of ``W`` keys (chapter 11: query ``i`` sees keys
``i - W + 1 .. i``), a decoder never needs a key more than ``W - 1`` positions old. So
the cache holds exactly ``W`` slots and position ``p`` is written to slot ``p mod W``,
overwriting position ``p - W``, which no later query can see {cite}`jiang2023mistral`.
Memory is constant in the sequence length, and the newest query's attention over the
slots equals full attention with the sliding-window mask: the softmax does not care in
which order the keys sit in memory (keys carry their positions already, e.g. through
RoPE applied before caching). Explained in chapter 13.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import _checks
from .._checks import is_torch_tensor
from ..reference import scaled_dot_product_attention

__all__ = ["RingKVCache"]


class RingKVCache:
    r"""``window`` slots of keys (H_kv, window, d) and values (H_kv, window, d_v) in a ring.

    * :meth:`append` ``(k, v)``: ``k`` (H_kv, t, d), ``v`` (H_kv, t, d_v), the next ``t``
      positions (only the last ``window`` of them are kept);
    * :meth:`attention` ``(q)``: ``q`` (H_q, 1, d) for the newest position -> (H_q, 1, d_v),
      equal to attention over the last ``min(window, length)`` keys, i.e. the last row of
      full attention with :func:`attn_edu.masks.sliding_window_mask`;
    * ``length`` (positions seen), ``nbytes`` (constant: the ring's size).

    NumPy arrays; H_q a multiple of H_kv (grouped heads). Explained in chapter 13.
    """

    def __init__(self, window: int, num_kv_heads: int, head_dim: int, dtype=np.float32,
                 head_dim_v: Optional[int] = None) -> None:
        self.window = _checks.check_length("window", window, minimum=1)
        hkv = _checks.check_length("num_kv_heads", num_kv_heads, minimum=1)
        d = _checks.check_length("head_dim", head_dim, minimum=1)
        dv = d if head_dim_v is None else _checks.check_length("head_dim_v", head_dim_v, minimum=1)
        self.dtype = np.dtype(dtype)
        _checks.check_float_dtypes(dtype=self.dtype.name)
        self.k = np.zeros((hkv, self.window, d), self.dtype)  # (H_kv, W, d)
        self.v = np.zeros((hkv, self.window, dv), self.dtype)  # (H_kv, W, d_v)
        self.length = 0

    @property
    def nbytes(self) -> int:
        """The bytes the ring holds, the same after 10 tokens or 10 million."""
        return self.k.nbytes + self.v.nbytes

    def append(self, k: np.ndarray, v: np.ndarray) -> None:
        """Write the next ``t`` positions: position ``p`` goes to slot ``p % window``."""
        for name, x, like in (("k", k, self.k), ("v", v, self.v)):
            if is_torch_tensor(x):
                raise TypeError(f"{name} is a torch tensor; RingKVCache holds NumPy arrays")
            x = np.asarray(x)
            if x.dtype != self.dtype:
                raise TypeError(f"{name} has dtype {x.dtype.name} but the cache holds {self.dtype.name}")
            if x.ndim != 3 or x.shape[0] != like.shape[0] or x.shape[2] != like.shape[2]:
                raise ValueError(f"{name} must have shape (H_kv, t, {like.shape[2]}) with H_kv = "
                                 f"{like.shape[0]}; got {x.shape}")
        k, v = np.asarray(k), np.asarray(v)
        if k.shape[1] != v.shape[1]:
            raise ValueError(f"k and v must hold the same number of tokens t; got k {k.shape} and v {v.shape}")
        t = k.shape[1]
        keep = min(t, self.window)  # older ones would be overwritten within this call
        pos = np.arange(self.length + t - keep, self.length + t)
        self.k[:, pos % self.window] = k[:, t - keep:]
        self.v[:, pos % self.window] = v[:, t - keep:]
        self.length += t

    def attention(self, q: np.ndarray, scale: Optional[float] = None) -> np.ndarray:
        """Attention of the newest position's query ``q`` (H_q, 1, d) over the window's keys."""
        q = np.asarray(q)
        if q.ndim != 3 or q.shape[1] != 1:
            raise ValueError(
                f"q must have shape (H_q, 1, d): the ring keeps only the keys the newest query can "
                f"see (an earlier query would need keys already overwritten); got {q.shape}")
        if self.length == 0:
            raise ValueError("the cache is empty: append the newest token's key and value first")
        n = min(self.length, self.window)  # slots in use; order is irrelevant to the softmax
        return scaled_dot_product_attention(q, self.k[:, :n], self.v[:, :n], scale=scale, enable_gqa=True)
