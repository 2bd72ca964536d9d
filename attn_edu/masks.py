"""Attention masks, all boolean with **True meaning "may attend"**.

That is the polarity of PyTorch's ``attn_mask`` in ``scaled_dot_product_attention``.
(``key_padding_mask`` in ``torch.nn.MultiheadAttention`` is the opposite: True there
means "ignore"; :func:`from_key_padding_mask` converts.)

A mask's last two axes are (L_q, L_k): row i says which keys query i may look at.
Masks broadcast against the scores of shape (..., L_q, L_k), so a (L_q, L_k) causal
mask serves a whole batch, and a (B, 1, L_k) padding mask serves every query.

Chapter 01 uses causal and padding masks; chapter 05 explains both alignments.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from ._checks import broadcast_shapes, check_block_size, check_causal, check_length

__all__ = [
    "CausalMask",
    "causal_mask",
    "padding_mask",
    "key_mask",
    "query_key_mask",
    "combine_masks",
    "to_additive",
    "from_key_padding_mask",
    "block_layout",
    "full_blocks",
    "causal_block_layout",
    "block_density",
]


class CausalMask(np.ndarray):
    """A boolean causal mask that remembers its alignment (``.causal_alignment``).

    It behaves as a plain boolean array; the tag only lets attention functions catch the
    mistake of passing a causal mask *and* ``causal=...`` (the two may disagree on the
    alignment). Anything computed from it (``m & pad``, ``~m``) is a plain array again.
    """

    causal_alignment: Optional[str]

    def __array_finalize__(self, obj) -> None:
        self.causal_alignment = getattr(obj, "causal_alignment", None)

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        arr = np.asarray(arr)
        return arr[()] if return_scalar else arr

    def __repr__(self) -> str:
        return f"CausalMask({self.causal_alignment!r}, {np.asarray(self)!r})"


def causal_mask(lq: int, lk: Optional[int] = None, alignment: Union[bool, str] = "top_left") -> np.ndarray:
    """Boolean causal mask of shape (lq, lk); True where query i may attend to key j.

    * ``"top_left"`` (PyTorch's ``is_causal``): ``j <= i``, i.e. ``tril(ones(lq, lk))``.
    * ``"bottom_right"``: ``j <= i + (lk - lq)``, i.e. ``tril(ones(lq, lk), k=lk-lq)``: the
      last query sees every key. This is what a decoder with a KV cache needs, where the
      ``lq`` new queries are the *last* ``lq`` positions of a sequence of length ``lk``.

    The two agree when ``lq == lk``. With ``lq > lk`` bottom-right alignment leaves the
    first ``lq - lk`` rows fully masked (they get zero output by the package's rule).

    The result is a :class:`CausalMask`: a boolean array tagged with its alignment.

    >>> causal_mask(2, 4).view(np.ndarray).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0]])
    >>> causal_mask(2, 4, "bottom_right").view(np.ndarray).astype(int)
    array([[1, 1, 1, 0],
           [1, 1, 1, 1]])
    """
    lq = check_length("lq", lq)
    lk = lq if lk is None else check_length("lk", lk)
    align = check_causal(alignment)
    if align is None:
        raise ValueError("alignment must be 'top_left', 'bottom_right' or True; got False")
    offset = 0 if align == "top_left" else lk - lq
    out = np.tri(lq, lk, k=offset, dtype=bool).view(CausalMask)
    out.causal_alignment = align
    return out


def padding_mask(lengths: Sequence[int], max_len: Optional[int] = None) -> np.ndarray:
    """Valid-position mask of shape (B, max_len): True for the first ``lengths[b]`` positions.

    ``max_len`` defaults to ``max(lengths)``. Use :func:`key_mask` to turn it into a mask
    over keys for the scores, or :func:`query_key_mask` to mask padded queries too.

    >>> padding_mask([3, 1], 4).astype(int)
    array([[1, 1, 1, 0],
           [1, 0, 0, 0]])
    """
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError(f"lengths must be a 1-D sequence of integers; got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"lengths must be integers; got dtype {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"lengths must be non-negative; got {arr.tolist()}")
    longest = int(arr.max()) if arr.size else 0
    if max_len is None:
        max_len = longest
    max_len = check_length("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"every length must be <= max_len={max_len}; got lengths {arr.tolist()}")
    return np.arange(max_len)[None, :] < arr[:, None]


def _as_bool(name: str, valid: np.ndarray) -> np.ndarray:
    valid = np.asarray(valid)
    if valid.dtype != bool:
        raise TypeError(f"{name} must be a boolean array (True = real token); got dtype {valid.dtype}")
    if valid.ndim != 2:
        raise ValueError(f"{name} must have shape (B, L); got {valid.shape}")
    return valid


def key_mask(valid: np.ndarray, heads: bool = False) -> np.ndarray:
    """Mask over keys from a (B, L_k) valid-position mask.

    Returns shape (B, 1, L_k), which broadcasts against single-head scores (B, L_q, L_k),
    or (B, 1, 1, L_k) with ``heads=True`` for multi-head scores (B, H, L_q, L_k).
    """
    valid = _as_bool("valid", valid)
    out = valid[:, None, :]  # (B, 1, Lk)
    return out[:, None] if heads else out


def query_key_mask(q_valid: np.ndarray, k_valid: np.ndarray, heads: bool = False) -> np.ndarray:
    """Mask (B, L_q, L_k) that is True where both the query and the key are real tokens.

    Padded query rows come out fully masked, so they get zero output and zero weights.
    With ``heads=True`` the shape is (B, 1, L_q, L_k).
    """
    q_valid = _as_bool("q_valid", q_valid)
    k_valid = _as_bool("k_valid", k_valid)
    if q_valid.shape[0] != k_valid.shape[0]:
        raise ValueError(
            f"q_valid and k_valid must have the same batch size; got {q_valid.shape} and {k_valid.shape}"
        )
    out = q_valid[:, :, None] & k_valid[:, None, :]  # (B, Lq, Lk)
    return out[:, None] if heads else out


def combine_masks(*masks: Optional[np.ndarray], op: str = "and") -> Optional[np.ndarray]:
    """Combine boolean masks by broadcasting: ``"and"`` (intersection) or ``"or"`` (union).

    ``None`` entries are ignored (``None`` means "no restriction"); if all are ``None`` the
    result is ``None``. Intersection is what you want for causal + padding: a key is
    allowed when *every* mask allows it. Union builds sparse patterns (chapter 11).
    """
    if op not in ("and", "or"):
        raise ValueError(f"op must be 'and' or 'or'; got {op!r}")
    present = [np.asarray(m) for m in masks if m is not None]
    if not present:
        return None
    shape: tuple = ()
    for i, m in enumerate(present):
        if m.dtype != bool:
            raise TypeError(
                f"combine_masks takes boolean masks (True = may attend); mask #{i} has dtype {m.dtype}"
            )
        b = broadcast_shapes(shape, m.shape)
        if b is None:
            raise ValueError(
                f"masks do not broadcast together: mask #{i} has shape {m.shape}, the others {shape}"
            )
        shape = b
    out = present[0]
    for m in present[1:]:
        out = (out & m) if op == "and" else (out | m)
    return np.broadcast_to(out, shape).copy()


def to_additive(mask: np.ndarray, dtype=np.float32) -> np.ndarray:
    """Boolean mask -> additive float mask: 0 where allowed, -inf where not.

    Never a finite sentinel such as -1e9: in float16 -1e9 overflows to -inf anyway, and
    in float32 it turns a fully masked row into uniform weights instead of zeros.
    """
    mask = np.asarray(mask)
    if mask.dtype != bool:
        raise TypeError(f"mask must be boolean (True = may attend); got dtype {mask.dtype}")
    out = np.zeros(mask.shape, dtype=dtype)
    out[~mask] = -np.inf
    return out


def from_key_padding_mask(key_padding_mask: np.ndarray, heads: bool = False) -> np.ndarray:
    """Convert ``torch.nn.MultiheadAttention``'s ``key_padding_mask`` (True = *ignore*, shape
    (B, L_k)) to this package's polarity: a (B, 1, L_k) mask with True = may attend
    ((B, 1, 1, L_k) with ``heads=True``)."""
    kpm = _as_bool("key_padding_mask", key_padding_mask)
    return key_mask(~kpm, heads=heads)


# --- block layouts: which tiles of a mask contain work (chapters 09-11) -------------------

def _tiles(mask: np.ndarray, block_q: int, block_k: int, fill: bool) -> np.ndarray:
    """The mask cut into tiles: shape (..., n_q_blocks, block_q, n_k_blocks, block_k).

    The last row and column of tiles are padded with ``fill`` where the blocks do not
    divide the lengths.
    """
    mask = np.asarray(mask)
    if mask.dtype != bool:
        raise TypeError(f"mask must be boolean (True = may attend); got dtype {mask.dtype}")
    if mask.ndim < 2:
        raise ValueError(f"mask must have at least 2 dimensions (..., L_q, L_k); got shape {mask.shape}")
    block_q = check_block_size("block_q", block_q)
    block_k = check_block_size("block_k", block_k)
    lq, lk = mask.shape[-2:]
    nq, nk = -(-lq // block_q), -(-lk // block_k)
    pad = [(0, 0)] * (mask.ndim - 2) + [(0, nq * block_q - lq), (0, nk * block_k - lk)]
    if any(p[1] for p in pad):
        mask = np.pad(mask, pad, constant_values=fill)
    return mask.reshape(mask.shape[:-2] + (nq, block_q, nk, block_k))


def block_layout(mask: np.ndarray, block_q: int, block_k: int) -> np.ndarray:
    """Which (block_q x block_k) tiles of ``mask`` hold at least one allowed entry.

    Returns a boolean array of shape (..., ceil(L_q/block_q), ceil(L_k/block_k)). Tiled
    attention (:func:`attn_edu.flash.flash_attention`) computes only the True tiles; the
    others would contribute exp(-inf) = 0 to every sum, so skipping them is exact.
    """
    return _tiles(mask, block_q, block_k, fill=False).any(axis=(-3, -1))


def full_blocks(mask: np.ndarray, block_q: int, block_k: int) -> np.ndarray:
    """Which tiles are *entirely* allowed (padding past the ends counts as allowed).

    Same shape as :func:`block_layout`. A full tile needs no element mask at all, so a
    block-sparse kernel only applies the mask on the partial tiles (layout & ~full).
    """
    return _tiles(mask, block_q, block_k, fill=True).all(axis=(-3, -1))


def causal_block_layout(lq: int, lk: int, block_q: int, block_k: int,
                        alignment: Union[bool, str] = "top_left") -> np.ndarray:
    """:func:`block_layout` of ``causal_mask(lq, lk, alignment)``, computed without the mask.

    Tile (i, j) is non-empty when its first key ``j*block_k`` is visible to its last query
    ``min((i+1)*block_q, lq) - 1``: ``j*block_k <= last_query + offset``, with offset 0 for
    top-left and ``lk - lq`` for bottom-right alignment. About half the tiles are skipped
    when lq = lk, which is where causal attention's 2x saving comes from.
    """
    lq, lk = check_length("lq", lq), check_length("lk", lk)
    block_q = check_block_size("block_q", block_q)
    block_k = check_block_size("block_k", block_k)
    align = check_causal(alignment)
    if align is None:
        raise ValueError(f"alignment must be 'top_left' or 'bottom_right'; got {alignment!r}")
    offset = 0 if align == "top_left" else lk - lq
    nq, nk = -(-lq // block_q), -(-lk // block_k)
    last_query = np.minimum((np.arange(nq) + 1) * block_q, lq) - 1  # (nq,)
    first_key = np.arange(nk) * block_k  # (nk,)
    return first_key[None, :] <= (last_query + offset)[:, None]  # (nq, nk)


def block_density(layout: np.ndarray) -> float:
    """Fraction of tiles that are computed: ``layout.mean()`` (1.0 = dense)."""
    layout = np.asarray(layout)
    if layout.dtype != bool:
        raise TypeError(f"layout must be boolean; got dtype {layout.dtype}")
    return float(layout.mean()) if layout.size else 0.0
