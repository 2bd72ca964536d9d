r"""Attention across devices: sequence (context) parallelism on ``torch.distributed``.

When a sequence is too long for one device, each of ``P`` ranks keeps ``L/P`` of its
positions, and attention -- where every query needs every key -- is computed by moving
data between ranks:

* :func:`ring_attention`: K/V blocks travel round a ring of ranks while each rank attends
  to them, and the partial results are merged exactly with the online softmax of chapter
  09 (:func:`attn_edu.precision.merge_softmax_stats`); the backward pass is a second ring.
  ``layout="zigzag"`` balances the work of a causal mask.
* :func:`ulysses_attention`: all-to-all from sequence shards to head shards, ordinary
  attention per head, and back (needs H divisible by P). Both take grouped-query K/V
  (H_kv < H heads) and send them as they are; Ulysses copies K/V heads when P > H_kv.
* :func:`shard` / :func:`unshard`: how a sequence is split (``"contiguous"`` or ``"zigzag"``).
* :func:`launch`: runs a function on P processes joined in a process group (gloo on CPUs,
  NCCL on GPUs), for notebooks and tests; :func:`run_attention` is what chapter 14 runs.
* :func:`record` counts the bytes the wrappers send; :func:`ring_bytes` and
  :func:`ulysses_bytes` derive them.
* ``python -m attn_edu.distributed.run`` is the entry point ``torchrun`` starts on a
  cluster (each rank draws its own shard, :func:`seeded_shard`); ``python -m
  attn_edu.distributed.overlap`` times a ring step's compute/transfer overlap on one GPU
  (:func:`measure_overlap`; :func:`hidden_fraction` says how much jitter could move its share).

The code is written for the gloo backend on CPU processes and NCCL on CUDA GPUs; only gloo
is tested here.
Importing this package imports torch (``import attn_edu`` does not). Chapter 14.
"""
from __future__ import annotations

import torch  # noqa: F401  (the whole package runs on torch.distributed; a clear error without it)

from .comm import (Record, Transfer, active_records, all_to_all, compute_timer, exchange, record, ring_bytes,
                   ulysses_bytes)
from .processes import BACKENDS, LaunchError, launch, local_device
from .ring import accumulation_dtype, block_backward, check_shards, group_info, ring_attention
from .sharding import (LAYOUTS, PairWork, check_layout, check_world, chunk_count, chunk_ids, pair_kind, positions,
                       ring_schedule, ring_steps_in_tiles, shard, step_pairs, tiles_per_rank, unshard)
from .ulysses import heads_to_seq, seq_to_heads, ulysses_attention
from .workers import METHODS, run_attention, torch_context_parallel

__all__ = [
    "ring_attention", "ulysses_attention", "block_backward", "seq_to_heads", "heads_to_seq",
    "shard", "unshard", "positions", "chunk_ids", "LAYOUTS", "pair_kind", "ring_schedule",
    "tiles_per_rank", "ring_steps_in_tiles", "step_pairs", "PairWork", "chunk_count", "check_layout",
    "check_world", "check_shards", "group_info", "accumulation_dtype",
    "launch", "LaunchError", "local_device", "BACKENDS",
    "record", "Record", "exchange", "Transfer", "all_to_all", "ring_bytes", "ulysses_bytes",
    "active_records", "compute_timer",
    "run_attention", "torch_context_parallel", "METHODS",
    "seeded_shard", "seeded_full", "measure_overlap", "hidden_fraction",
]

_LAZY = {"seeded_shard": "run", "seeded_full": "run", "measure_overlap": "overlap", "hidden_fraction": "overlap"}


def __getattr__(name):  # the entry-point modules load on first use, so that ``python -m`` runs
    if name in _LAZY:   # them fresh (imported here first, runpy would warn)
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():  # the lazy names too, as dir() and the API page's autodoc list a module's members
    return sorted(set(globals()) | set(_LAZY))


# Re-bound here with a doc comment: autodoc documents a module's data only where it is assigned.
#: The sequence layouts across ranks.
LAYOUTS = LAYOUTS
#: The process-group backends :func:`launch` sets up.
BACKENDS = BACKENDS
#: The sequence-parallel attentions :func:`run_attention` runs.
METHODS = METHODS
