"""Tile layouts: which (block_q x block_k) tiles of a mask hold work, and the one tile-plan type.

Tiled attention cuts the (L_q, L_k) scores into tiles of ``block_q`` queries by ``block_k``
keys (row block ``i``, key block ``j``). A mask (and/or causality) makes every tile one of

* **empty** -- no allowed entry: it would add ``exp(-inf) = 0`` to every sum, so it is
  skipped, never computed;
* **full** -- every entry allowed: computed with no element mask at all;
* **partial** -- some entries allowed: computed, with the element mask applied.

:class:`TilePlan` records that once, for every consumer: the NumPy and PyTorch tiled
loops (:func:`attn_edu.flash.flash_attention` takes a plan where a mask goes), the
Triton forward kernel's schedule (:func:`attn_edu.kernels.flash_triton.block_schedule`),
the block-sparse Triton kernel (which walks :meth:`TilePlan.tile_lists`) and the
benchmarks. :func:`plan_tiles` builds one; :func:`block_layout`, :func:`full_blocks` and
:func:`causal_block_layout` are the layouts on their own.

The tiled loops of :func:`attn_edu.flash.flash_attention` take their default tiles from
:func:`default_tiles`, per backend (large tiles on a CPU, where every tile costs Python
and NumPy calls); everything else that takes tiles (:func:`plan_tiles`, the block-sparse
Triton kernel) defaults to ``DEFAULT_BLOCK_Q x DEFAULT_BLOCK_K`` = 64 x 64. A benchmark
or a goal that wants other tiles says so. Drawn in chapter 09, used in chapters 10 and 11.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Optional, Tuple, Union

import numpy as np

from .._checks import check_causal, check_length, check_mask, check_positive_int, is_torch_tensor
from .build import causal_block, causal_offset, causal_offset_or_none

__all__ = [
    "DEFAULT_BLOCK_Q",
    "DEFAULT_BLOCK_K",
    "DEFAULT_TILES",
    "default_tiles",
    "TilePlan",
    "plan_tiles",
    "block_layout",
    "full_blocks",
    "causal_block_layout",
    "block_density",
]

#: The default tile, 64 queries by 64 keys, of :func:`plan_tiles` and the block-sparse
#: Triton kernel (the tiled loops take theirs from :func:`default_tiles`).
DEFAULT_BLOCK_Q = 64
DEFAULT_BLOCK_K = 64

#: The default ``(block_q, block_k)`` of the tiled loops, by backend. On a CPU every tile
#: costs a dozen NumPy (or torch) calls, so tiles are large: 256 queries by 512 keys keep
#: NumPy's time in the matrix products and ``exp`` (64 x 64 tiles made NumPy flash 5x
#: slower, and slower than the naive NumPy attention; a 256 x 512 float32 tile is 512 KiB
#: per batch element). The PyTorch loop launches a dozen kernels per tile, on a CPU and
#: on a GPU alike, so it too takes large tiles. The Triton kernels pick their own tiles
#: (autotuned, chapter 10).
DEFAULT_TILES = {
    "numpy": (256, 512),
    "torch_cpu": (256, 256),
    "torch_gpu": (256, 256),
}


def default_tiles(framework: str, device: Any = "cpu") -> Tuple[int, int]:
    """The ``(block_q, block_k)`` a tiled loop uses when the call gives none (``DEFAULT_TILES``).

    ``framework`` is ``"numpy"`` or ``"torch"``; for torch, ``device`` is the tensors' device
    (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``): any device but the CPU gets
    the GPU's tiles. ``python -m attn_edu.bench`` uses the same defaults and prints them.
    """
    if framework == "numpy":
        return DEFAULT_TILES["numpy"]
    if framework != "torch":
        raise ValueError(f"framework must be 'numpy' or 'torch'; got {framework!r}")
    kind = str(getattr(device, "type", device)).split(":")[0]
    return DEFAULT_TILES["torch_cpu" if kind == "cpu" else "torch_gpu"]


def _count(length: int, block: int) -> int:
    """Number of tiles along an axis: ceil(length / block)."""
    return -(-length // block)


def tile_bounds(length: int, block: int) -> list:
    """The half-open ``(start, stop)`` of every tile along an axis; the last may be shorter."""
    return [(t * block, min((t + 1) * block, length)) for t in range(_count(length, block))]


def mask_tile(mask: Any, lq: int, lk: int, r0: int, r1: int, c0: int, c1: int) -> Any:
    """The entries of ``mask`` (NumPy or torch, (..., L_q or 1, L_k or 1)) for queries
    ``r0..r1-1`` and keys ``c0..c1-1``; an axis of size 1 broadcasts and is kept whole."""
    rows = slice(None) if mask.shape[-2] == 1 and lq != 1 else slice(r0, r1)
    cols = slice(None) if mask.shape[-1] == 1 and lk != 1 else slice(c0, c1)
    return mask[..., rows, cols]


def _bool_view(mask: np.ndarray) -> np.ndarray:
    """A NumPy mask as booleans: itself if boolean, ``mask != -inf`` if float (additive)."""
    return mask if mask.dtype == bool else ~np.isneginf(mask)


# ----------------------------------------------------------------------------- layouts
def row_block_tiles(mask: np.ndarray, i: int, lq: int, lk: int, block_q: int, block_k: int,
                    offset: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(non-empty, full) key tiles of row block ``i``: boolean arrays of shape (..., n_k).

    ``mask`` is a NumPy boolean (True = may attend) or additive float (``-inf`` blocks)
    array with at least 2 axes, broadcastable to (..., lq, lk); its leading axes are kept
    (size 1 where it broadcasts). ``offset`` (from
    :func:`~attn_edu.masks.causal_offset`), when given, intersects causality within the
    strip, so only O(block_q * lk) booleans ever exist. The last tile of a row counts the
    keys past ``lk`` as allowed for "full" and as absent for "non-empty", so a ragged tile
    can be full. A tiled loop calls this inside each row block, on every core.
    """
    nk = _count(lk, block_k)
    r0, r1 = i * block_q, min((i + 1) * block_q, lq)
    strip = _bool_view(mask_tile(mask, lq, lk, r0, r1, 0, lk))  # (..., bq or 1, Lk or 1)
    if offset is not None:
        strip = strip & causal_block(r0, r1, 0, lk, offset)  # (..., bq, Lk)
    lead = strip.shape[:-2]
    # Reduce the strip's rows first (contiguous, cheap), then the keys of each tile; only a
    # non-empty tile can be full, so "full" is checked on those alone: planning reads the
    # mask about once, which matters for sparse patterns.
    col_any = np.logical_or.reduce(strip, axis=-2)  # (..., Lk or 1)
    if col_any.shape[-1] != lk or lk == 1:  # the mask broadcasts over keys
        full = np.logical_and.reduce(strip, axis=-2)
        return (np.broadcast_to(col_any, lead + (nk,)).copy(),
                np.broadcast_to(full, lead + (nk,)).copy())
    pad = nk * block_k - lk  # past the end "any" sees False
    if pad:
        col_any = np.concatenate([col_any, np.zeros(lead + (pad,), bool)], axis=-1)
    layout = col_any.reshape(lead + (nk, block_k)).any(axis=-1)  # (..., nk)
    full = np.zeros(lead + (nk,), dtype=bool)
    for j in np.flatnonzero(layout.reshape(-1, nk).any(axis=0)):
        full[..., j] = strip[..., j * block_k:(j + 1) * block_k].all(axis=(-2, -1))
    return layout, full & layout


def _mask_tiles(mask: np.ndarray, lq: int, lk: int, block_q: int, block_k: int,
                offset: Optional[int]) -> Tuple[np.ndarray, np.ndarray]:
    """(non-empty, full) tiles of a whole mask, shape (..., n_q, n_k), one row block at a time."""
    lead = mask.shape[:-2]
    nq, nk = _count(lq, block_q), _count(lk, block_k)
    computed = np.zeros(lead + (nq, nk), dtype=bool)
    full = np.zeros(lead + (nq, nk), dtype=bool)
    for i in range(nq):
        computed[..., i, :], full[..., i, :] = row_block_tiles(mask, i, lq, lk, block_q, block_k, offset)
    return computed, full


def _checked_bool_mask(mask: object) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.dtype != bool:
        raise TypeError(f"mask must be boolean (True = may attend); got dtype {mask.dtype}")
    if mask.ndim < 2:
        raise ValueError(f"mask must have at least 2 dimensions (..., L_q, L_k); got shape {mask.shape}")
    return mask


def block_layout(mask: np.ndarray, block_q: int, block_k: int) -> np.ndarray:
    """Which (block_q x block_k) tiles of ``mask`` hold at least one allowed entry.

    Returns a boolean array of shape (..., ceil(L_q/block_q), ceil(L_k/block_k)). Tiled
    attention (:func:`attn_edu.flash.flash_attention`) computes only the True tiles; the
    others would contribute exp(-inf) = 0 to every sum, so skipping them is exact.
    Chapter 09.
    """
    mask = _checked_bool_mask(mask)
    lq, lk = mask.shape[-2:]
    return _mask_tiles(mask, lq, lk, check_positive_int("block_q", block_q),
                       check_positive_int("block_k", block_k), None)[0]


def full_blocks(mask: np.ndarray, block_q: int, block_k: int) -> np.ndarray:
    """Which tiles are *entirely* allowed (keys past the end count as allowed).

    Same shape as :func:`block_layout`. A full tile needs no element mask at all, so a
    block-sparse kernel only applies the mask on the partial tiles (layout & ~full).
    """
    mask = _checked_bool_mask(mask)
    lq, lk = mask.shape[-2:]
    return _mask_tiles(mask, lq, lk, check_positive_int("block_q", block_q),
                       check_positive_int("block_k", block_k), None)[1]


def _causal_tiles(lq: int, lk: int, block_q: int, block_k: int, offset: int
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """(non-empty, full) tiles of a causal mask, computed without the mask, shape (n_q, n_k).

    Tile (i, j) is non-empty when its first key is visible to its last query,
    ``j*block_k <= min((i+1)*block_q, lq) - 1 + offset``, and full when its last key is
    visible to its first query, ``min((j+1)*block_k, lk) - 1 <= i*block_q + offset``.
    """
    nq, nk = _count(lq, block_q), _count(lk, block_k)
    first_query = np.arange(nq) * block_q  # (nq,)
    last_query = np.minimum(first_query + block_q, lq) - 1  # (nq,)
    first_key = np.arange(nk) * block_k  # (nk,)
    last_key = np.minimum(first_key + block_k, lk) - 1  # (nk,)
    computed = first_key[None, :] <= (last_query + offset)[:, None]  # (nq, nk)
    full = last_key[None, :] <= (first_query + offset)[:, None]  # (nq, nk)
    return computed, full & computed


def causal_block_layout(lq: int, lk: int, block_q: int, block_k: int,
                        alignment: Union[bool, str] = "top_left") -> np.ndarray:
    """:func:`block_layout` of ``causal_mask(lq, lk, alignment)``, computed without the mask.

    Tile (i, j) is non-empty when its first key ``j*block_k`` is visible to its last query
    ``min((i+1)*block_q, lq) - 1``: ``j*block_k <= last_query + offset`` with the
    :func:`~attn_edu.masks.causal_offset`. About half the tiles are skipped when lq = lk,
    which is where causal attention's 2x saving comes from. Chapter 09.
    """
    lq, lk = check_length("lq", lq), check_length("lk", lk)
    block_q = check_positive_int("block_q", block_q)
    block_k = check_positive_int("block_k", block_k)
    return _causal_tiles(lq, lk, block_q, block_k, causal_offset(lq, lk, alignment))[0]


def block_density(layout: np.ndarray) -> float:
    """Fraction of tiles that are computed: ``layout.mean()`` (1.0 = dense)."""
    layout = np.asarray(layout)
    if layout.dtype != bool:
        raise TypeError(f"layout must be boolean; got dtype {layout.dtype}")
    return float(layout.mean()) if layout.size else 0.0


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class TilePlan:
    """Which tiles a tiled attention computes, and which of those need the element mask.

    Built by :func:`plan_tiles` (from a mask and/or causality), or by a kernel that
    describes its own schedule (:func:`attn_edu.kernels.flash_triton.block_schedule`).

    Its fields:

    * ``block_q``, ``block_k`` -- the tile (queries x keys);
    * ``lq``, ``lk`` -- the lengths; there are ``n_q = ceil(lq / block_q)`` row blocks and
      ``n_k = ceil(lk / block_k)`` key blocks;
    * ``causal`` -- None, "top_left" or "bottom_right" (intersected with the mask);
    * ``computed`` -- boolean (..., n_q, n_k), read-only; False for an empty tile
      (skipped). The leading axes are the mask's (1 where it broadcasts; none without one);
    * ``partial`` -- boolean (..., n_q, n_k), read-only; computed, and only partly
      allowed, so the element mask is applied (``computed & ~partial`` are the full tiles);
    * ``mask`` -- the plan's private copy of the mask (read-only NumPy array, or a cloned
      torch tensor), or None. A plan passed where a mask goes
      (``flash_attention(q, k, v, mask=plan)``) brings its mask along, so the mask and its
      layout cannot drift apart.

    A plan that carries leading axes is per batch element and head (what the
    block-sparse kernel walks); a loop vectorised over the batch uses :meth:`merged`.
    """

    block_q: int
    block_k: int
    lq: int
    lk: int
    causal: Optional[str]
    computed: np.ndarray
    partial: np.ndarray
    mask: Any = None
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def full(self) -> np.ndarray:
        """Computed tiles that need no element mask, (..., n_q, n_k)."""
        return self.computed & ~self.partial

    @property
    def density(self) -> float:
        """The fraction of tiles computed (1.0 = dense); :func:`block_density`."""
        return block_density(self.computed)

    @property
    def schedule(self) -> np.ndarray:
        """One int per tile, shape (..., n_q, n_k), with 0 = skipped, 1 = partial (masked), 2 = full.

        What a kernel does with each tile, for pictures such as chapter 10's schedule.
        """
        return np.where(self.computed, np.where(self.partial, 1, 2), 0)

    def merged(self) -> "TilePlan":
        """One (n_q, n_k) plan for a loop vectorised over the leading (batch, head) axes.

        A tile is computed when *any* element needs it and full only when it is full for
        *every* element; the mask stays.
        """
        if self.computed.ndim == 2:
            return self
        lead = tuple(range(self.computed.ndim - 2))
        computed = self.computed.any(axis=lead)
        return _frozen_plan(self.block_q, self.block_k, self.lq, self.lk, self.causal,
                            computed, computed & ~self.full.all(axis=lead), self.mask)

    def tile_lists(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The layout compressed row by row, like a CSR matrix: what a block-sparse kernel walks.

        Returns ``(full_num, full_idx, part_num, part_idx)``, int32: per row block the
        count (..., n_q) and the key-block indices (..., n_q, n_k) of its full tiles, then
        of its partial tiles, each list sorted by column; only the first ``num`` entries
        of an index row are meaningful. FlexAttention's ``BlockMask`` holds the same
        (``full_kv_num_blocks``/``full_kv_indices``, ``kv_num_blocks``/``kv_indices``).
        """
        out = []
        for tiles in (self.full, self.partial):
            num = tiles.sum(axis=-1).astype(np.int32)  # (..., nq)
            idx = np.argsort(~tiles, axis=-1, kind="stable").astype(np.int32)  # listed first
            out += [np.ascontiguousarray(num), np.ascontiguousarray(idx)]
        return tuple(out)

    def flops(self, d: int, dv: Optional[int] = None) -> int:
        """Forward FLOPs the computed tiles cost: :func:`attn_edu.masks.block_flops` of this plan."""
        from .cost import block_flops

        return block_flops(self.computed, self.block_q, self.block_k, d, dv, self.lq, self.lk)

    def cached(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """``build()`` once per ``key``, remembered with the plan (e.g. its tile lists on a GPU,
        or the NumPy loop's element masks of its partial tiles)."""
        if key not in self._derived:
            self._derived[key] = build()
        return self._derived[key]


def _frozen_plan(block_q, block_k, lq, lk, causal, computed, partial, mask=None) -> TilePlan:
    computed, partial = np.array(computed, dtype=bool), np.array(partial, dtype=bool)
    computed.flags.writeable = False
    partial.flags.writeable = False
    return TilePlan(block_q, block_k, lq, lk, causal, computed, partial, mask)


def ragged_keys_masked(plan: TilePlan) -> TilePlan:
    """``plan`` with its computed tiles in a ragged last key block (``lk % block_k != 0``)
    marked partial: what a kernel does that bounds-checks those keys with the element mask
    instead of counting the keys past ``lk`` as allowed (Triton's forward, whose
    :func:`attn_edu.kernels.flash_triton.block_schedule` is this of :func:`plan_tiles`)."""
    if plan.lk % plan.block_k == 0:
        return plan
    partial = plan.partial.copy()
    partial[..., -1] |= plan.computed[..., -1]
    return _frozen_plan(plan.block_q, plan.block_k, plan.lq, plan.lk, plan.causal, plan.computed,
                        partial, plan.mask)


def plan_tiles(mask: Any = None, block_q: int = DEFAULT_BLOCK_Q, block_k: int = DEFAULT_BLOCK_K,
               causal: Union[bool, str] = False, *, lq: Optional[int] = None,
               lk: Optional[int] = None) -> TilePlan:
    """Work out a :class:`TilePlan`: the tiles a mask and/or causality leave empty, full or partial.

    ``mask`` is boolean (True = may attend) or additive float (``-inf`` blocks), a NumPy
    array or a torch tensor, with the lengths on its last two axes (leading axes may
    broadcast); the plan keeps a private copy of it. Without a mask give ``lq`` and
    ``lk`` (e.g. ``plan_tiles(lq=200, lk=200, causal=True)``); with one they default to
    its last two axes, and may be given when the mask broadcasts along them (a
    (B, 1, L_k) padding mask). Causal layouts come without building the causal mask;
    with a mask too, the two are intersected one row block at a time.

    Pass the plan as ``mask=`` to :func:`attn_edu.flash.flash_attention` (or the
    block-sparse kernel) to reuse the layout across calls -- every head, layer and step
    that shares the pattern, as FlexAttention reuses its block mask: the layout then
    costs nothing per call, where working it out reads the whole mask. The block sizes
    and ``causal`` of the call must match the plan's. Drawn in chapter 09; chapter 11
    measures what reusing it saves.
    """
    block_q = check_positive_int("block_q", block_q)
    block_k = check_positive_int("block_k", block_k)
    align = check_causal(causal)
    host = None
    if mask is not None:
        if mask.ndim == 0:
            raise ValueError("mask must have at least 1 dimension (..., L_k); got a 0-d mask")
        check_mask(mask, None, align)  # dtype, float values, causal given twice
        if is_torch_tensor(mask):
            host = mask.detach().cpu().numpy()
            mask = mask.detach().clone()
        else:
            mask = np.array(mask, copy=True)  # private: the plan cannot go stale
            mask.flags.writeable = False
            host = mask
        host = host.reshape((1,) * max(0, 2 - host.ndim) + host.shape)
        lq = host.shape[-2] if lq is None else lq
        lk = host.shape[-1] if lk is None else lk
    if lq is None or lk is None:
        raise ValueError("plan_tiles needs a mask, or the lengths lq= and lk=")
    lq, lk = check_length("lq", lq), check_length("lk", lk)
    if host is not None:
        check_mask(host, host.shape[:-2] + (lq, lk))  # the mask fits the lengths
    return plan_checked(host, lq, lk, block_q, block_k, align, mask)


def plan_checked(host: Optional[np.ndarray], lq: int, lk: int, block_q: int, block_k: int,
                 align: Optional[str], mask: Any = None) -> TilePlan:
    """:func:`plan_tiles` for arguments already checked (an attention call's): checks and copies nothing.

    ``host`` is the mask's boolean or additive pattern as a NumPy array with at least two
    axes, broadcastable to (..., lq, lk), or None; ``align`` is None, "top_left" or
    "bottom_right"; ``mask`` is what the plan carries (None for a plan used inside one call).
    """
    offset = causal_offset_or_none(lq, lk, align)
    if host is not None:
        computed, full = _mask_tiles(host, lq, lk, block_q, block_k, offset)
    elif offset is not None:
        computed, full = _causal_tiles(lq, lk, block_q, block_k, offset)
    else:
        computed = full = np.ones((_count(lq, block_q), _count(lk, block_k)), dtype=bool)
    return _frozen_plan(block_q, block_k, lq, lk, align, computed, computed & ~full, mask)


def unpack_plan(mask: Any, causal: Union[bool, str], block_q: Optional[int],
                block_k: Optional[int]) -> Tuple[Any, Optional[TilePlan], int, int]:
    """For functions that take a :class:`TilePlan` where a mask goes.

    Returns ``(mask, plan, block_q, block_k)``: with a plan, its mask, the plan and its
    tiles, after checking that the call's ``block_q``, ``block_k`` (when given) and
    ``causal`` agree with the plan (a ValueError otherwise); without one, the mask as
    given, None and the tiles (``DEFAULT_BLOCK_Q`` x ``DEFAULT_BLOCK_K`` when not given).
    :func:`split_plan` and :func:`check_plan_causal` are its two halves.
    """
    mask, plan, block_q, block_k = split_plan(mask, block_q, block_k)
    if plan is not None:
        check_plan_causal(plan, causal, check_causal(causal))
    return mask, plan, block_q, block_k


def split_plan(mask: Any, block_q: Optional[int], block_k: Optional[int],
               default: Tuple[int, int] = (DEFAULT_BLOCK_Q, DEFAULT_BLOCK_K)
               ) -> Tuple[Any, Optional[TilePlan], int, int]:
    """:func:`unpack_plan` without ``causal``: the tiles checked once, against the plan's if
    any; ``default`` for those not given (a tiled loop passes its :func:`default_tiles`)."""
    if not isinstance(mask, TilePlan):
        block_q = default[0] if block_q is None else check_positive_int("block_q", block_q)
        block_k = default[1] if block_k is None else check_positive_int("block_k", block_k)
        return mask, None, block_q, block_k
    plan = mask
    for name, given, planned in (("block_q", block_q, plan.block_q), ("block_k", block_k, plan.block_k)):
        if given is not None and check_positive_int(name, given) != planned:
            raise ValueError(f"{name}={given} but the TilePlan was built with {name}={planned}")
    return plan.mask, plan, plan.block_q, plan.block_k


def check_plan_causal(plan: TilePlan, causal: object, align: Optional[str]) -> None:
    """A ValueError when a call's ``causal`` (normalised: ``align``) is not the plan's."""
    if align != plan.causal:
        raise ValueError(f"causal={causal!r} but the TilePlan was built with causal={plan.causal!r}")
