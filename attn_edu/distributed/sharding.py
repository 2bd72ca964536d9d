r"""How a sequence is split across ranks, and which blocks of work each rank does.

Sequence (context) parallelism gives each of ``P`` ranks ``L / P`` positions of the
sequence. Two layouts:

* ``"contiguous"``: rank ``r`` holds positions ``[r L/P, (r+1) L/P)``;
* ``"zigzag"``: the sequence is cut into ``2P`` equal chunks and rank ``r`` holds chunks
  ``r`` and ``2P - 1 - r`` -- one from the front and one from the back, so that under a
  causal mask every rank has the same amount of work (the layout Llama 3's context
  parallelism uses; PyTorch calls it "head-tail").

The ring (:func:`attn_edu.distributed.ring_attention`) works on **chunks**: one per rank
(contiguous) or two (zigzag), all of the same length within a layout. At step ``t`` of the
ring, rank ``r`` holds the keys and values of rank ``(r - t) mod P`` and computes every
(query chunk, key chunk) pair that causality allows: a pair is *full* when every key
precedes every query, *diagonal* when the two chunks are the same positions (a causal
block), and *skipped* when every key follows every query. :func:`ring_schedule` is that
plan, the one the ring runs; :func:`tiles_per_rank` counts its work. Chapter 14.

Importing this module needs NumPy only; :func:`shard` / :func:`unshard` take NumPy arrays
or torch tensors.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

import numpy as np

from .. import _checks


__all__ = ["LAYOUTS", "check_layout", "check_world", "chunk_ids", "chunk_count", "shard", "unshard",
           "positions", "pair_kind", "PairWork", "step_pairs", "ring_schedule", "tiles_per_rank",
           "ring_steps_in_tiles"]

#: The sequence layouts across ranks.
LAYOUTS = ("contiguous", "zigzag")


def check_layout(layout: object) -> str:
    """``"contiguous"`` or ``"zigzag"``; a ValueError naming what was seen otherwise."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be 'contiguous' or 'zigzag'; got {layout!r}")
    return layout


def check_world(rank: object, world_size: object) -> Tuple[int, int]:
    """``0 <= rank < world_size``, both integers; returns them as ints."""
    world_size = _checks.check_length("world_size", world_size, minimum=1)
    rank = _checks.check_length("rank", rank)
    if rank >= world_size:
        raise ValueError(f"rank must be in [0, world_size) = [0, {world_size}); got rank {rank}")
    return rank, world_size


def chunk_count(layout: str) -> int:
    """Chunks per rank: 1 (contiguous) or 2 (zigzag)."""
    return 1 if check_layout(layout) == "contiguous" else 2


def chunk_ids(rank: int, world_size: int, layout: str = "contiguous") -> Tuple[int, ...]:
    """Which chunks of the sequence rank ``rank`` holds, in the order it stores them.

    Contiguous: ``(rank,)`` of ``P`` chunks; zigzag: ``(rank, 2P - 1 - rank)`` of ``2P``.
    """
    rank, world_size = check_world(rank, world_size)
    if check_layout(layout) == "contiguous":
        return (rank,)
    return (rank, 2 * world_size - 1 - rank)


def _check_length(length: int, world_size: int, layout: str) -> int:
    """The chunk length; a ValueError naming L and P when the layout cannot split L."""
    parts = world_size * chunk_count(layout)
    if length % parts:
        what = "P" if layout == "contiguous" else "2P"
        raise ValueError(
            f"the {layout} layout splits the sequence into {what} = {parts} equal chunks, but the "
            f"length L = {length} is not divisible by {parts} (P = {world_size} ranks); pad the "
            f"sequence to a multiple of {parts}"
        )
    return length // parts


def _axis(x: Any, dim: object) -> int:
    ndim = x.ndim if not _checks.is_torch_tensor(x) else x.dim()
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"dim must be an integer; got {dim!r}")
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim {dim} is out of range for an input of shape {tuple(x.shape)}")
    return int(dim) % ndim


def _take(x: Any, axis: int, start: int, stop: int) -> Any:
    index = [slice(None)] * (x.dim() if _checks.is_torch_tensor(x) else x.ndim)
    index[axis] = slice(start, stop)
    return x[tuple(index)]


def _concat(parts: Sequence[Any], axis: int) -> Any:
    if _checks.is_torch_tensor(parts[0]):
        import torch

        return torch.cat(list(parts), dim=axis)
    return np.concatenate(list(parts), axis=axis)


def shard(x: Any, rank: int, world_size: int, layout: str = "contiguous", dim: int = -2) -> Any:
    """Rank ``rank``'s part of the sequence axis ``dim`` of ``x`` (length ``L``).

    Contiguous: the ``rank``-th of ``P`` equal slices, ``L/P`` positions. Zigzag: chunks
    ``rank`` and ``2P-1-rank`` of ``2P`` equal chunks, concatenated (``L/P`` positions).
    ``x`` is a NumPy array or a torch tensor, e.g. q (B, H, L, d) -> (B, H, L/P, d); the
    result is a view for a contiguous layout and a copy for zigzag. A length the layout
    cannot split evenly is a ValueError naming ``L`` and ``P``. Chapter 14.
    """
    rank, world_size = check_world(rank, world_size)
    check_layout(layout)
    axis = _axis(x, dim)
    c = _check_length(int(x.shape[axis]), world_size, layout)
    parts = [_take(x, axis, i * c, (i + 1) * c) for i in chunk_ids(rank, world_size, layout)]
    return parts[0] if len(parts) == 1 else _concat(parts, axis)


def unshard(shards: Sequence[Any], layout: str = "contiguous", dim: int = -2) -> Any:
    """The inverse of :func:`shard`: the full sequence from every rank's shard, in rank order.

    ``shards[r]`` is rank ``r``'s part (all of the same shape; NumPy arrays or torch tensors),
    e.g. P outputs (B, H, L/P, d) -> (B, H, L, d). Chapter 14.
    """
    check_layout(layout)
    if isinstance(shards, (str, bytes)) or not isinstance(shards, Sequence) or not shards:
        raise TypeError(f"shards must be a non-empty list of every rank's shard; got {type(shards).__name__}")
    world_size = len(shards)
    axis = _axis(shards[0], dim)
    shapes = {tuple(s.shape) for s in shards}
    if len(shapes) != 1:
        raise ValueError(f"every rank's shard must have the same shape; got {sorted(shapes)}")
    n = int(shards[0].shape[axis])
    per = chunk_count(layout)
    if n % per:
        raise ValueError(f"a zigzag shard holds two equal chunks, so its length must be even; got {n}")
    c = n // per
    chunks: List[Any] = [None] * (world_size * per)
    for r, s in enumerate(shards):
        for local, global_id in enumerate(chunk_ids(r, world_size, layout)):
            chunks[global_id] = _take(s, axis, local * c, (local + 1) * c)
    return _concat(chunks, axis)


def positions(length: int, rank: int, world_size: int, layout: str = "contiguous") -> np.ndarray:
    """The global positions (indices into the full sequence) of rank ``rank``'s rows, shape (L/P,)."""
    length = _checks.check_length("length", length)
    rank, world_size = check_world(rank, world_size)
    c = _check_length(length, world_size, check_layout(layout))
    return np.concatenate([np.arange(i * c, (i + 1) * c) for i in chunk_ids(rank, world_size, layout)])


# ----------------------------------------------------------------------------- the work plan
def pair_kind(q_chunk: int, k_chunk: int, causal: bool) -> str:
    """``"full"``, ``"diagonal"`` or ``"skip"`` for one (query chunk, key chunk) pair.

    Chunks of one layout have equal lengths, so under a causal mask a key chunk before the
    query chunk is fully visible, the same chunk is a causal (lower-triangular) block, and
    a later chunk is invisible. Without a mask every pair is full.
    """
    if not causal or k_chunk < q_chunk:
        return "full"
    return "diagonal" if k_chunk == q_chunk else "skip"


@dataclass(frozen=True)
class PairWork:
    """One block of work in the ring: local query chunk ``q_local`` of the rank against key
    chunk ``k_local`` of the block it holds (global chunk ids ``q_chunk``, ``k_chunk``)."""

    q_local: int
    k_local: int
    q_chunk: int
    k_chunk: int
    kind: str  # "full" or "diagonal" ("skip" pairs are left out)


def step_pairs(rank: int, source: int, world_size: int, layout: str, causal: bool) -> List[PairWork]:
    """The pairs rank ``rank`` computes while it holds the keys/values of rank ``source``."""
    qs = chunk_ids(rank, world_size, layout)
    ks = chunk_ids(source, world_size, layout)
    out = []
    for i, qc in enumerate(qs):
        for j, kc in enumerate(ks):
            kind = pair_kind(qc, kc, causal)
            if kind != "skip":
                out.append(PairWork(i, j, qc, kc, kind))
    return out


def ring_schedule(world_size: int, layout: str = "contiguous", causal: bool = True) -> List[List[List[PairWork]]]:
    """The whole plan: ``plan[t][r]`` is the list of pairs rank ``r`` computes at step ``t``.

    At step ``t`` rank ``r`` holds the keys and values that started on rank ``(r - t) mod P``
    (they move one rank forward per step). Every allowed (query chunk, key chunk) pair of
    the sequence appears exactly once in the plan. Chapter 14 draws it.
    """
    _, world_size = check_world(0, world_size)
    check_layout(layout)
    return [[step_pairs(r, (r - t) % world_size, world_size, layout, causal) for r in range(world_size)]
            for t in range(world_size)]


def _tiles(pair: PairWork, layout: str) -> int:
    """A pair's work in tiles of (L/2P) x (L/2P) scores, the zigzag chunk: a contiguous
    chunk is two tiles long, so a full contiguous pair is 4 tiles and its causal diagonal
    3 (the tile above the diagonal is skipped); a zigzag pair is 1 tile."""
    if layout == "zigzag":
        return 1
    return 4 if pair.kind == "full" else 3


def tiles_per_rank(world_size: int, layout: str = "contiguous", causal: bool = True) -> np.ndarray:
    """Work per rank over the whole ring, in tiles of (L/2P) x (L/2P) scores, shape (P,).

    Causal, contiguous: rank ``r`` computes ``4r + 3`` tiles (the last rank ``4P - 1``, the
    first 3); zigzag: every rank ``2P + 1``. Both total ``2P^2 + P``. Without a mask every
    rank computes ``4P``. Chapter 14's table.
    """
    plan = ring_schedule(world_size, layout, causal)
    return np.array([sum(_tiles(p, layout) for step in plan for p in step[r]) for r in range(world_size)])


def ring_steps_in_tiles(world_size: int, layout: str = "contiguous", causal: bool = True) -> np.ndarray:
    """The work of every rank at every step, in tiles, shape (P steps, P ranks).

    The ring waits for its slowest rank at every step, so its time is about
    ``sum over steps of max over ranks`` of this (``4P - 1`` tiles contiguous, ``2P + 1``
    zigzag, with a causal mask).
    """
    plan = ring_schedule(world_size, layout, causal)
    return np.array([[sum(_tiles(p, layout) for p in plan[t][r]) for r in range(world_size)]
                     for t in range(world_size)])
