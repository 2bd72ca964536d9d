"""What a mask costs and what it reaches: allowed pairs, FLOPs, receptive fields.

* :func:`allowed_pairs` -- closed-form ``mask.sum()`` of every pattern (dense, causal in
  both alignments and with L_q != L_k, sliding window, strided, fixed, global): the one
  home of pair counting;
* :func:`mask_flops` -- forward FLOPs of attention restricted to a mask (``2*(d + d_v)``
  per allowed pair), and :func:`block_flops` -- what tiled execution spends, partial tiles
  computed in full;
* :func:`receptive_field`, :func:`reaches_all_earlier`, :func:`layers_to_reach_all` --
  which inputs each output can depend on after stacking layers of a pattern.

Every mask is boolean, True = may attend. Chapter 11 (sparse attention) explains it;
chapter 08 uses the counts.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._checks import check_causal, check_length, check_positive_int
from .build import causal_offset

__all__ = [
    "allowed_pairs",
    "mask_flops",
    "block_flops",
    "receptive_field",
    "reaches_all_earlier",
    "layers_to_reach_all",
]


# --------------------------------------------------------------------------- pairs and FLOPs

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
    d = check_positive_int("d", d)
    dv = d if dv is None else check_positive_int("dv", dv)
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
    block_q = check_positive_int("block_q", block_q)
    block_k = check_positive_int("block_k", block_k)
    d = check_positive_int("d", d)
    dv = d if dv is None else check_positive_int("dv", dv)

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


def allowed_pairs(pattern: str, n: int, **params: Any) -> int:
    """Closed-form number of allowed (query, key) pairs of a pattern, i.e. ``mask.sum()``.

    The one home of pair counting (FLOP counts, benchmarks and chapters call it). The
    patterns (defaults as in their masks) and their parameters:

    * ``"dense"``: ``n^2``;
    * ``"causal"``: ``n*(n + 1)/2``; with ``lk=`` (keys, default ``n``; then ``n`` is the
      number of queries) and ``alignment=`` (``"top_left"`` default, or
      ``"bottom_right"``): ``sum_i clip(i + 1 + offset, 0, lk)`` with the
      :func:`~attn_edu.masks.causal_offset`;
    * ``"sliding_window"`` (``window=w``; ``causal=True`` default): ``n*w - w*(w - 1)/2``
      for ``w <= n``, ``O(n*w)``; with ``causal=False`` (Longformer, ``h = window // 2``
      keys each side, ``h <= n - 1``): ``n*(2h + 1) - h*(h + 1)``;
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
    n = check_positive_int("n", n)

    def need(name: str) -> int:
        if name not in params:
            raise ValueError(f"pattern {pattern!r} needs the parameter {name}=...; got {sorted(params)}")
        return check_positive_int(name, params[name])

    if pattern == "dense":
        return n * n
    if pattern == "causal":
        lk = check_length("lk", params.get("lk", n))
        offset = causal_offset(n, lk, params.get("alignment", "top_left"))
        return int(np.clip(np.arange(1, n + 1, dtype=np.int64) + offset, 0, lk).sum())
    if pattern == "sliding_window":
        if check_causal(params.get("causal", True)) is None:
            h = min(need("window") // 2, n - 1)
            return n * (2 * h + 1) - h * (h + 1)
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
        c = check_positive_int("summary", params.get("summary", 1))
        i = np.arange(n, dtype=np.int64)
        return int((i % block + 1 + c * (i // block)).sum())
    if pattern == "global":
        g = check_length("n_global", params.get("n_global", 0))
        if g > n:
            raise ValueError(f"n_global must be at most n={n}; got {g}")
        return 2 * g * n - g * g
    raise ValueError(f"pattern must be one of {', '.join(map(repr, _PATTERNS))}; got {pattern!r}")


# --------------------------------------------------------------------------- receptive field

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
    layers = check_positive_int("layers", len(ms) if layers is None else layers)
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
    max_layers = check_positive_int("max_layers", max_layers)
    for layer, reach in enumerate(_reach_per_layer(ms, max_layers, residual), start=1):
        if reaches_all_earlier(reach):
            return layer
    return None
