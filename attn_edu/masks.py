"""Attention masks, all boolean with **True meaning "may attend"**.

That is the polarity of PyTorch's ``attn_mask`` in ``scaled_dot_product_attention``.
(``key_padding_mask`` in ``torch.nn.MultiheadAttention`` is the opposite: True there
means "ignore"; :func:`from_key_padding_mask` converts.)

A mask's last two axes are (L_q, L_k): row i says which keys query i may look at.
Masks broadcast against the scores of shape (..., L_q, L_k), so a (L_q, L_k) causal
mask serves a whole batch, and a (B, 1, L_k) padding mask serves every query.

Chapter 01 uses causal and padding masks; chapter 05 explains both alignments. Chapter 11
adds the sparse patterns (sliding window, strided, dilated, fixed, global, random blocks),
their cost in allowed pairs and FLOPs, and the receptive field of stacked layers.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from ._checks import broadcast_shapes, check_block_size, check_causal, check_length, check_seed

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
    "sliding_window_mask",
    "strided_mask",
    "local_strided_mask",
    "dilated_mask",
    "fixed_mask",
    "global_mask",
    "random_block_mask",
    "bigbird_mask",
    "mask_flops",
    "block_flops",
    "allowed_pairs",
    "receptive_field",
    "reaches_all_earlier",
    "layers_to_reach_all",
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


# --- sparse attention patterns (chapter 11) ------------------------------------------------
#
# Every pattern is a boolean (n, n) mask, True = may attend, for self-attention over one
# sequence of n positions (row i is query i, column j is key j). Patterns combine with
# combine_masks (op="or" for unions such as window + global, op="and" for intersections
# with causal_mask or a padding mask) and execute with the tiled
# attn_edu.flash.flash_attention, which skips the tiles block_layout marks empty. Costs
# are counted in allowed (query, key) pairs; each costs 2*d FLOPs for the score and
# 2*d_v for the weighted value (mask_flops).


def _check_causal_flag(causal: object) -> bool:
    """``causal`` of a square pattern: True/False (both alignments agree when lq = lk)."""
    return check_causal(causal) is not None


def _band(n: int, lo: int, hi: int) -> np.ndarray:
    """The (n, n) boolean band ``lo <= i - j <= hi``, built without an integer matrix
    (``np.tri`` compares aranges), so n = 16384 costs 256 MiB of booleans, no more."""
    return np.tri(n, k=-lo, dtype=bool) & ~np.tri(n, k=-hi - 1, dtype=bool)


def _same_residue(n: int, m: int) -> np.ndarray:
    """The (n, n) boolean matrix ``(i - j) % m == 0``, i.e. ``i % m == j % m``."""
    r = np.arange(n) % m
    return r[:, None] == r[None, :]


def sliding_window_mask(n: int, window: int, causal: bool = True) -> np.ndarray:
    """Local (sliding-window, banded) attention, shape (n, n).

    * ``causal=True`` (the default, as in decoder language models): query i sees the
      ``window`` keys ``i - window + 1 .. i``, itself included:
      ``M[i, j] = (0 <= i - j < window)``. The first ``window - 1`` rows see fewer keys.
    * ``causal=False``: Longformer's convention (Beltagy et al., 2020), ``window // 2``
      keys on each side: ``M[i, j] = (|i - j| <= window // 2)``; an interior row sees
      ``2 * (window // 2) + 1`` keys, which is ``window`` when ``window`` is odd.

    Cost: ``n*w - w*(w - 1)/2`` allowed pairs when causal (:func:`allowed_pairs`), so
    ``O(n*w)`` work instead of ``O(n^2)``. One layer reaches ``window - 1`` positions back;
    ``L`` stacked layers reach ``L*(window - 1)`` (:func:`receptive_field`).
    ``window >= n`` gives the causal (or, symmetric, the full) mask. Chapter 11.

    >>> sliding_window_mask(4, 2).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0],
           [0, 1, 1, 0],
           [0, 0, 1, 1]])
    """
    n = check_length("n", n, minimum=1)
    window = check_block_size("window", window)
    if _check_causal_flag(causal):
        return _band(n, 0, window - 1)  # 0 <= i - j <= window - 1
    return _band(n, -(window // 2), window // 2)


def strided_mask(n: int, stride: int, causal: bool = True) -> np.ndarray:
    """Strided attention, shape (n, n): the second head of the "strided" pattern of
    Child et al. (2019).

    Query i sees every key j with ``(i - j) % stride == 0``: itself, ``i - stride``,
    ``i - 2*stride``, ... (and, with ``causal=False``, ``i + stride``, ... too).

    Cost (causal): ``sum_i (i // stride + 1)``, about ``n^2 / (2*stride)`` pairs;
    ``O(n*sqrt(n))`` with ``stride ~ sqrt(n)``. On its own it never mixes positions of
    different residues mod ``stride``; with a sliding window of ``stride`` keys
    (:func:`local_strided_mask`) two layers reach every earlier position. Its block layout
    is nearly dense when ``stride`` is smaller than the tile, so tiled execution saves
    little. Chapter 11.
    """
    n = check_length("n", n, minimum=1)
    stride = check_block_size("stride", stride)
    out = _same_residue(n, stride)  # (n, n): (i - j) % stride == 0
    if _check_causal_flag(causal):
        out &= np.tri(n, dtype=bool)  # j <= i
    return out


def local_strided_mask(n: int, stride: int, causal: bool = True) -> np.ndarray:
    """The "strided" pattern of Child et al. (2019): a sliding window of ``stride`` keys
    together with :func:`strided_mask` of the same ``stride``, shape (n, n).

    ``M = sliding_window_mask(n, stride, causal) | strided_mask(n, stride, causal)``.
    With ``stride ~ sqrt(n)`` a query sees about ``2*sqrt(n)`` keys (``O(n*sqrt(n))`` in
    all), and two stacked layers reach every earlier position: from i a strided step lands
    on ``k = i - stride*((i - j) // stride)``, within ``stride - 1`` of j, and a local step
    from k reaches j. Chapter 11.
    """
    return sliding_window_mask(n, stride, causal) | strided_mask(n, stride, causal)


def dilated_mask(n: int, window: int, dilation: int, causal: bool = True) -> np.ndarray:
    """Dilated sliding window (Longformer, Beltagy et al., 2020), shape (n, n).

    A sliding window of ``window`` keys with gaps of ``dilation - 1`` between them:

    * causal: query i sees ``i, i - dilation, ..., i - (window - 1)*dilation``:
      ``M[i, j] = ((i - j) % dilation == 0 and 0 <= i - j < window*dilation)``;
    * ``causal=False``: ``(i - j) % dilation == 0 and |i - j| <= (window // 2)*dilation``.

    ``dilation = 1`` is :func:`sliding_window_mask`. Same cost, ``O(n*w)`` pairs, but one
    layer reaches ``(window - 1)*dilation`` positions back. Chapter 11.
    """
    n = check_length("n", n, minimum=1)
    window = check_block_size("window", window)
    dilation = check_block_size("dilation", dilation)
    on_grid = _same_residue(n, dilation)  # (n, n): (i - j) % dilation == 0
    if _check_causal_flag(causal):
        return on_grid & _band(n, 0, window * dilation - 1)
    reach = (window // 2) * dilation
    return on_grid & _band(n, -reach, reach)


def fixed_mask(n: int, block: int, summary: int = 1, causal: bool = True) -> np.ndarray:
    """The "fixed" pattern of Child et al. (2019), shape (n, n).

    Positions are cut into blocks of ``block`` (the paper's l); the last ``summary``
    positions of every block (the paper's c) are *summary positions*. Query i sees

    * every key of its own block, ``j // block == i // block`` (the paper's A(1)), and
    * every summary position, ``j % block >= block - summary`` (A(2)),

    intersected with ``j <= i`` when ``causal=True`` (the default: the paper trains
    autoregressive models). Information from an earlier block reaches later ones only
    through its summary positions.

    Cost (causal): ``sum_i (i % block + 1 + summary*(i // block))`` pairs, about
    ``n*block/2 + summary*n^2/(2*block)``; ``O(n*sqrt(n))`` with ``block ~ sqrt(n)``
    (:func:`allowed_pairs`). Chapter 11.
    """
    n = check_length("n", n, minimum=1)
    block = check_block_size("block", block)
    summary = check_block_size("summary", summary)
    if summary > block:
        raise ValueError(f"summary must be between 1 and block={block}; got summary={summary}")
    pos = np.arange(n)
    same_block = (pos[:, None] // block) == (pos[None, :] // block)  # (n, n)
    is_summary = (pos % block) >= block - summary  # (n,), over keys
    out = same_block | is_summary[None, :]
    if _check_causal_flag(causal):
        out &= np.tri(n, dtype=bool)  # j <= i
    return out


def _check_positions(name: str, positions: object, n: int) -> np.ndarray:
    """A 1-D list of integer positions in [0, n)."""
    arr = np.asarray(positions)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D list of positions; got shape {arr.shape}")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must hold integer positions; got dtype {arr.dtype}")
    bad = arr[(arr < 0) | (arr >= n)]
    if bad.size:
        raise ValueError(f"{name} must be positions in [0, n) = [0, {n}); got {bad.tolist()} "
                         f"out of range in {arr.tolist()}")
    return arr.astype(np.int64)


def global_mask(n: int, global_tokens: Sequence[int]) -> np.ndarray:
    """Global tokens (Longformer, Beltagy et al., 2020), shape (n, n).

    ``global_tokens`` lists positions (e.g. ``[0]`` for a [CLS] token). A global token
    attends to every position and every position attends to it:
    ``M[i, j] = (i in G or j in G)``. Symmetric by definition; intersect with
    :func:`causal_mask` for a decoder (a global token then sees its past and is seen by
    every later query), and take the union with :func:`sliding_window_mask` for
    Longformer's pattern.

    Cost: ``2*g*n - g^2`` pairs for g distinct global tokens, ``O(g*n)``. Chapter 11.
    """
    n = check_length("n", n, minimum=1)
    idx = _check_positions("global_tokens", global_tokens, n)
    is_global = np.zeros(n, dtype=bool)
    is_global[idx] = True
    return is_global[:, None] | is_global[None, :]


def _expand_blocks(layout: np.ndarray, block: int, n: int) -> np.ndarray:
    """A (nb, nb) block layout -> the (n, n) element mask with whole tiles set."""
    return np.repeat(np.repeat(layout, block, axis=0), block, axis=1)[:n, :n]


def _pick_random_blocks(candidates: np.ndarray, n_random: int, rng: np.random.Generator) -> np.ndarray:
    """Per row of a (nb, nb) candidate layout, ``n_random`` of its True entries drawn
    without replacement (all of them when the row has fewer)."""
    chosen = np.zeros_like(candidates)
    for r in range(candidates.shape[0]):
        cols = np.flatnonzero(candidates[r])
        if cols.size and n_random:
            chosen[r, rng.choice(cols, size=min(n_random, cols.size), replace=False)] = True
    return chosen


def random_block_mask(n: int, block: int, n_random: int, seed: object = 0,
                      causal: bool = False) -> np.ndarray:
    """Random blocks (BigBird, Zaheer et al., 2020), shape (n, n).

    The positions are cut into ``nb = ceil(n / block)`` blocks, and every query block
    attends to ``n_random`` key blocks drawn uniformly without replacement (all of them
    when fewer exist), whole tiles at a time. ``seed`` (an int or a
    ``numpy.random.Generator``) makes the draw reproducible.

    With ``causal=True`` the key blocks are drawn among those ``<=`` the query block and
    the result is intersected with the causal mask (BigBird itself is bidirectional).

    Cost: at most ``n*n_random*block`` pairs, ``O(n*r*b)``; the block layout has
    ``min(n_random, candidates)`` tiles in every block row. Chapter 11.
    """
    n = check_length("n", n, minimum=1)
    block = check_block_size("block", block)
    n_random = check_length("n_random", n_random)
    causal = _check_causal_flag(causal)
    rng = check_seed(seed)
    nb = -(-n // block)
    candidates = np.tri(nb, dtype=bool) if causal else np.ones((nb, nb), dtype=bool)
    out = _expand_blocks(_pick_random_blocks(candidates, n_random, rng), block, n)
    if causal:
        out &= np.tri(n, dtype=bool)
    return out


def bigbird_mask(n: int, block: int, n_random: int = 1, window_blocks: int = 3,
                 global_blocks: int = 1, seed: object = 0) -> np.ndarray:
    """BigBird's block pattern (Zaheer et al., 2020, the ITC variant), shape (n, n).

    With blocks of ``block`` positions (``nb = ceil(n / block)``):

    * window: query block b sees key blocks ``b - window_blocks//2 .. b + window_blocks//2``;
    * global: the first ``global_blocks`` blocks attend everywhere and are seen by all;
    * random: every other query block sees ``n_random`` more key blocks, drawn (seeded)
      among those the window and global parts do not already cover.

    Bidirectional, as in BigBird; intersect with :func:`causal_mask` for a decoder.
    Cost: about ``(window_blocks + global_blocks + n_random)*block*n`` pairs plus the
    global rows, ``O(n)`` for fixed block counts. Chapter 11.
    """
    n = check_length("n", n, minimum=1)
    block = check_block_size("block", block)
    n_random = check_length("n_random", n_random)
    window_blocks = check_block_size("window_blocks", window_blocks)
    global_blocks = check_length("global_blocks", global_blocks)
    nb = -(-n // block)
    if global_blocks > nb:
        raise ValueError(f"global_blocks must be at most the number of blocks ceil(n/block)={nb}; "
                         f"got {global_blocks}")
    b = np.arange(nb)
    layout = np.abs(b[:, None] - b[None, :]) <= window_blocks // 2  # (nb, nb): window
    is_global = b < global_blocks
    layout |= is_global[:, None] | is_global[None, :]
    candidates = ~layout
    candidates[is_global] = False  # global rows are full already
    layout |= _pick_random_blocks(candidates, n_random, check_seed(seed))
    return _expand_blocks(layout, block, n)


# --- cost: allowed pairs and FLOPs ---------------------------------------------------------

def mask_flops(mask: np.ndarray, d: int, dv: Optional[int] = None) -> int:
    """Forward FLOPs of attention restricted to ``mask``: ``2*(d + dv)`` per allowed pair.

    An allowed (query, key) pair costs ``2*d`` FLOPs for its score (d multiplies and d
    adds) and ``2*dv`` for adding its weighted value; the softmax is not counted, as in
    ``attn_edu.profiling.attention_flops`` (``4*n^2*d`` for a dense (n, n) mask with
    ``dv = d``; the exact causal count is ``n*(n + 1)/2`` pairs, which that function rounds
    to half of ``n^2``). A batched mask (..., L_q, L_k) counts every entry. Chapter 11.
    """
    mask = np.asarray(mask)
    if mask.dtype != bool:
        raise TypeError(f"mask must be boolean (True = may attend); got dtype {mask.dtype}")
    d = check_block_size("d", d)
    dv = d if dv is None else check_block_size("dv", dv)
    return int(np.count_nonzero(mask)) * 2 * (d + dv)


def block_flops(layout: np.ndarray, block_q: int, block_k: int, d: int, dv: Optional[int] = None,
                lq: Optional[int] = None, lk: Optional[int] = None) -> int:
    """Forward FLOPs that tiled execution spends: every non-empty tile computed in full.

    ``2*(d + dv)`` per (query, key) pair of every True tile of ``layout`` (from
    :func:`block_layout`), masked entries inside a computed tile included: the price of
    working in tiles. Give ``lq`` and ``lk`` to count the smaller last row and column of
    tiles exactly when the blocks do not divide the lengths; without them every tile
    counts ``block_q*block_k`` pairs. ``block_flops >= mask_flops`` for the same mask, and
    their ratio is what partial tiles waste. Chapter 11.
    """
    layout = np.asarray(layout)
    if layout.dtype != bool:
        raise TypeError(f"layout must be boolean; got dtype {layout.dtype}")
    if layout.ndim < 2:
        raise ValueError("layout must have at least 2 dimensions (..., n_q_blocks, n_k_blocks); "
                         f"got shape {layout.shape}")
    block_q = check_block_size("block_q", block_q)
    block_k = check_block_size("block_k", block_k)
    d = check_block_size("d", d)
    dv = d if dv is None else check_block_size("dv", dv)

    def tile_sizes(name: str, length: Optional[int], block: int, count: int) -> np.ndarray:
        if length is None:
            return np.full(count, block, dtype=np.int64)
        length = check_length(name, length)
        if -(-length // block) != count:
            raise ValueError(f"{name}={length} in blocks of {block} gives {-(-length // block)} tiles, "
                             f"but layout has {count} along that axis (shape {layout.shape})")
        return np.minimum(block, length - np.arange(count, dtype=np.int64) * block)

    rows = tile_sizes("lq", lq, block_q, layout.shape[-2])  # (nq,)
    cols = tile_sizes("lk", lk, block_k, layout.shape[-1])  # (nk,)
    pairs = int((layout * (rows[:, None] * cols[None, :])).sum())
    return pairs * 2 * (d + dv)


_PATTERNS = ("dense", "causal", "sliding_window", "strided", "local_strided", "fixed", "global")


def allowed_pairs(pattern: str, n: int, **params: int) -> int:
    """Closed-form number of allowed (query, key) pairs of a pattern, i.e. ``mask.sum()``.

    The causal patterns (their masks' defaults) and their parameters:

    * ``"dense"``: ``n^2``; ``"causal"``: ``n*(n + 1)/2``;
    * ``"sliding_window"`` (``window=w``): ``n*w - w*(w - 1)/2`` for ``w <= n``, ``O(n*w)``;
    * ``"strided"`` (``stride=s``, ``n = q*s + r``): ``n + s*q*(q - 1)/2 + r*q``, about
      ``n^2/(2*s)``;
    * ``"local_strided"`` (``stride=s``): window plus strided minus the n shared diagonal
      pairs, ``O(n*sqrt(n))`` with ``s ~ sqrt(n)``;
    * ``"fixed"`` (``block=l``, ``summary=c``, default 1):
      ``sum_i (i % l + 1 + c*(i // l))``, ``O(n*sqrt(n))`` with ``l ~ sqrt(n)``;
    * ``"global"`` (``n_global=g`` distinct tokens; symmetric): ``2*g*n - g^2``.

    None of these is ``O(n log n)``: the patterns of Child et al. (2019) and Longformer
    cost ``O(n*w)`` for a fixed window or ``O(n*sqrt(n))`` when the window, stride or block
    grows like ``sqrt(n)``. Chapter 11.
    """
    n = check_length("n", n, minimum=1)

    def need(name: str) -> int:
        if name not in params:
            raise ValueError(f"pattern {pattern!r} needs the parameter {name}=...; got {sorted(params)}")
        return check_block_size(name, params[name])

    if pattern == "dense":
        return n * n
    if pattern == "causal":
        return n * (n + 1) // 2
    if pattern == "sliding_window":
        w = min(need("window"), n)
        return n * w - w * (w - 1) // 2
    if pattern == "strided":
        s = need("stride")
        q, r = divmod(n, s)
        return n + s * q * (q - 1) // 2 + r * q
    if pattern == "local_strided":
        s = need("stride")
        return allowed_pairs("sliding_window", n, window=s) + allowed_pairs("strided", n, stride=s) - n
    if pattern == "fixed":
        block = need("block")
        c = check_block_size("summary", params.get("summary", 1))
        i = np.arange(n, dtype=np.int64)
        return int((i % block + 1 + c * (i // block)).sum())
    if pattern == "global":
        g = check_length("n_global", params.get("n_global", 0))
        if g > n:
            raise ValueError(f"n_global must be at most n={n}; got {g}")
        return 2 * g * n - g * g
    raise ValueError(f"pattern must be one of {', '.join(map(repr, _PATTERNS))}; got {pattern!r}")


# --- receptive field across stacked layers -------------------------------------------------

def _as_square_masks(masks: object) -> list:
    """One (n, n) boolean mask or a non-empty list of them, all of the same n."""
    if isinstance(masks, (list, tuple)):
        if not masks:
            raise ValueError("masks must hold at least one (n, n) mask; got an empty list")
        items = list(masks)
    else:
        items = [masks]
    out: list = []
    for i, m in enumerate(items):
        m = np.asarray(m)
        if m.dtype != bool:
            raise TypeError(f"masks[{i}] must be boolean (True = may attend); got dtype {m.dtype}")
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"masks[{i}] must be a square (n, n) self-attention mask; got shape {m.shape}")
        if out and m.shape != out[0].shape:
            raise ValueError(f"all masks must have the same length n; masks[0] has shape {out[0].shape} "
                             f"but masks[{i}] has {m.shape}")
        out.append(m)
    return out


def _reach_per_layer(masks: list, layers: int, residual: bool):
    """Yield the reachability matrix after 1, 2, ..., ``layers`` layers."""
    n = masks[0].shape[0]
    eye = np.eye(n, dtype=bool)
    reach = eye.astype(np.float32)
    for layer in range(layers):
        m = masks[layer % len(masks)]
        if residual:
            m = m | eye
        # float32 counts paths exactly up to 2**24 (> n here); only "> 0" matters
        reach = ((m.astype(np.float32) @ reach) > 0).astype(np.float32)  # (n, n)
        yield reach.astype(bool)


def receptive_field(masks: object, layers: Optional[int] = None, residual: bool = True) -> np.ndarray:
    """Which inputs each output can depend on after stacking attention layers, (n, n) bool.

    ``masks`` is one (n, n) mask used by every layer, or a list used in turn (layer l uses
    ``masks[l % len(masks)]``, e.g. Child et al.'s alternation of a local and a strided
    head). ``layers`` defaults to ``len(masks)`` (1 for a single mask).

    Returns the boolean matrix product ``R = M_L @ ... @ M_2 @ M_1`` (an entry is True when
    the integer product is non-zero): ``R[i, j]`` is True when input j can influence output
    i through a chain ``i -> k -> ... -> j`` of allowed pairs, one per layer. With
    ``residual=True`` (the default, as in a Transformer block) every layer also keeps its
    own position, ``M_l | I``. Chapter 11.
    """
    ms = _as_square_masks(masks)
    layers = check_block_size("layers", len(ms) if layers is None else layers)
    *_, last = _reach_per_layer(ms, layers, residual)
    return last


def reaches_all_earlier(reach: np.ndarray) -> bool:
    """True when every output i depends on every input ``j <= i`` (a full causal receptive
    field); ``reach`` is an (n, n) matrix from :func:`receptive_field`."""
    reach = np.asarray(reach)
    if reach.dtype != bool or reach.ndim != 2 or reach.shape[0] != reach.shape[1]:
        raise ValueError("reach must be a square boolean (n, n) matrix; "
                         f"got {reach.dtype} of shape {reach.shape}")
    return bool(reach[np.tri(reach.shape[0], dtype=bool)].all())


def layers_to_reach_all(masks: object, max_layers: int = 64, residual: bool = True) -> Optional[int]:
    """The fewest stacked layers after which every output sees every earlier input.

    Layers use ``masks`` in turn as in :func:`receptive_field`. Returns None when
    ``max_layers`` layers are not enough (a strided mask alone, for instance, never mixes
    residues). A causal window of w keys needs ``ceil((n - 1)/(w - 1))`` layers. Chapter 11.
    """
    ms = _as_square_masks(masks)
    max_layers = check_block_size("max_layers", max_layers)
    for layer, reach in enumerate(_reach_per_layer(ms, max_layers, residual), start=1):
        if reaches_all_earlier(reach):
            return layer
    return None
