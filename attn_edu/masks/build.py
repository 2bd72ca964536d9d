"""Building masks: causal (both alignments), padding, combinations and the sparse patterns.

Every mask is boolean with **True meaning "may attend"** (see :mod:`attn_edu.masks`).
This module is also the one home of the causal rule: key ``j`` is visible to query ``i``
when ``j <= i + causal_offset(L_q, L_k, alignment)`` (:func:`causal_offset`,
:func:`causal_block`); every other module, NumPy, PyTorch or Triton launcher, asks here.

Chapter 01 uses causal and padding masks; chapter 05 explains both alignments; chapter 11
adds the sparse patterns (sliding window, strided, dilated, fixed, global, random blocks).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np

from .._checks import broadcast_shapes, check_causal, check_length, check_positive_int, check_seed

__all__ = [
    "CausalMask",
    "causal_offset",
    "causal_offset_or_none",
    "causal_block",
    "causal_mask",
    "padding_mask",
    "key_mask",
    "query_key_mask",
    "combine_masks",
    "to_additive",
    "from_key_padding_mask",
    "sliding_window_mask",
    "strided_mask",
    "local_strided_mask",
    "dilated_mask",
    "fixed_mask",
    "global_mask",
    "random_block_mask",
    "bigbird_mask",
]


class CausalMask(np.ndarray):
    """A boolean causal mask that remembers its alignment (``.causal_alignment``).

    It behaves as a plain boolean array; the tag only lets attention functions catch the
    mistake of passing a causal mask *and* ``causal=...`` (the two may disagree on the
    alignment). Anything computed from it (``m & pad``, ``~m``) is a plain array again.

    Why a subclass of ``np.ndarray`` rather than a plain array: the chapters pass
    ``causal_mask(...)`` wherever a mask goes (``combine_masks``, ``plt.imshow``,
    ``mask.astype(int)``, the attention functions), so it has to *be* an array; and a
    NumPy array has no room for an attribute of its own. The subclass is the smallest
    carrier for the tag: ``__array_finalize__`` keeps it on views and slices (a slice of a
    causal mask is still that mask), and ``__array_wrap__`` drops it from anything
    computed (``m & pad`` is no longer "the causal mask", so it must not be refused).
    The attention functions read the tag once, when they check the mask, and work on a
    plain view from then on. A torch tensor takes the same tag as a plain attribute.
    """

    causal_alignment: Optional[str]

    def __array_finalize__(self, obj) -> None:
        self.causal_alignment = getattr(obj, "causal_alignment", None)

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        arr = np.asarray(arr)
        return arr[()] if return_scalar else arr

    def __repr__(self) -> str:
        return f"CausalMask({self.causal_alignment!r}, {np.asarray(self)!r})"


def causal_offset(lq: int, lk: int, alignment: Union[bool, str] = "top_left") -> int:
    """The diagonal of a causal mask: key ``j`` is visible to query ``i`` when ``j <= i + offset``.

    ``0`` for ``"top_left"`` (or True; PyTorch's ``is_causal``) and ``lk - lq`` for
    ``"bottom_right"``, where the ``lq`` queries are the *last* ``lq`` of ``lk`` positions
    (a decoder with a KV cache). The one place the package writes ``L_k - L_q``: masks,
    tiled loops, tile layouts, linear attention and the Triton launchers all ask here.
    Explained in chapter 05.

    >>> causal_offset(2, 5, "bottom_right")
    3
    """
    align = check_causal(alignment)
    if align is None:
        raise ValueError(f"alignment must be 'top_left', 'bottom_right' or True; got {alignment!r}")
    return causal_offset_or_none(check_length("lq", lq), check_length("lk", lk), align)


def causal_offset_or_none(lq: int, lk: int, alignment: Optional[str]) -> Optional[int]:
    """:func:`causal_offset` for checked arguments, ``None`` when not causal; checks nothing.

    ``alignment`` as the check of ``causal`` returns it (None, "top_left"
    or "bottom_right") and lengths already checked: what an attention call holds once its
    front door has checked it (``attn_edu._call.AttentionCall.offset``). The tiled loops and
    the tile plan read ``None`` as "no causal diagonal"; the Triton launchers pass
    ``causal_offset_or_none(...) or 0`` (the kernel ignores it when not causal).
    """
    if alignment is None:
        return None
    return 0 if alignment == "top_left" else lk - lq


def causal_block(r0: int, r1: int, c0: int, c1: int, offset: int, device: Any = None):
    """The causal rule on queries ``r0..r1-1`` and keys ``c0..c1-1``: ``j <= i + offset``.

    Boolean, shape ``(r1 - r0, c1 - c0)``, True = may attend; ``offset`` from
    :func:`causal_offset`. A tiled loop calls it for one tile; :func:`causal_mask` for the
    whole (L_q, L_k). ``device=None`` gives a NumPy array, a torch device (``"cpu"``,
    ``"cuda"``, ...) a tensor built there.
    """
    if device is None:
        return np.arange(c0, c1)[None, :] <= np.arange(r0, r1)[:, None] + offset  # (rows, cols)
    import torch

    cols = torch.arange(c0, c1, device=device)
    rows = torch.arange(r0, r1, device=device)
    return cols[None, :] <= rows[:, None] + offset  # (rows, cols)


def causal_mask(lq: int, lk: Optional[int] = None, alignment: Union[bool, str] = "top_left",
                device: Any = None):
    """Boolean causal mask of shape (lq, lk); True where query i may attend to key j.

    * ``"top_left"`` (PyTorch's ``is_causal``): ``j <= i``, i.e. ``tril(ones(lq, lk))``.
    * ``"bottom_right"``: ``j <= i + (lk - lq)``, i.e. ``tril(ones(lq, lk), k=lk-lq)``: the
      last query sees every key. This is what a decoder with a KV cache needs, where the
      ``lq`` new queries are the *last* ``lq`` positions of a sequence of length ``lk``.

    The two agree when ``lq == lk``. With ``lq > lk`` bottom-right alignment leaves the
    first ``lq - lk`` rows fully masked (they get zero output by the package's rule).

    The result remembers its alignment (attribute ``causal_alignment``), so passing it
    *and* ``causal=...`` to an attention function is caught: a :class:`CausalMask` (a
    boolean NumPy array), or with ``device=`` (``"cpu"``, ``"cuda"``, a ``torch.device``)
    a boolean torch tensor built on that device and tagged the same way. Anything
    computed from it (``m & pad``, ``m.to(other)``, ``torch.as_tensor(m)``) is a plain
    array or tensor again.

    >>> causal_mask(2, 4).view(np.ndarray).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0]])
    >>> causal_mask(2, 4, "bottom_right").view(np.ndarray).astype(int)
    array([[1, 1, 1, 0],
           [1, 1, 1, 1]])

    Explained in chapter 05.
    """
    lq = check_length("lq", lq)
    lk = lq if lk is None else check_length("lk", lk)
    align = check_causal(alignment)
    if align is None:
        raise ValueError("alignment must be 'top_left', 'bottom_right' or True; got False")
    out = causal_block(0, lq, 0, lk, causal_offset_or_none(lq, lk, align), device)  # (Lq, Lk)
    if device is None:
        out = out.view(CausalMask)
    out.causal_alignment = align  # on a tensor: a plain Python attribute of this object
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
    n = check_positive_int("n", n)
    window = check_positive_int("window", window)
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
    n = check_positive_int("n", n)
    stride = check_positive_int("stride", stride)
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
    n = check_positive_int("n", n)
    window = check_positive_int("window", window)
    dilation = check_positive_int("dilation", dilation)
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
    n = check_positive_int("n", n)
    block = check_positive_int("block", block)
    summary = check_positive_int("summary", summary)
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
    n = check_positive_int("n", n)
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
    n = check_positive_int("n", n)
    block = check_positive_int("block", block)
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
    n = check_positive_int("n", n)
    block = check_positive_int("block", block)
    n_random = check_length("n_random", n_random)
    window_blocks = check_positive_int("window_blocks", window_blocks)
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
