r"""The cluster entry point: one sequence-parallel attention layer per rank, under ``torchrun``.

::

    torchrun --nproc-per-node 8 -m attn_edu.distributed.run --method ring --layout zigzag \
        --causal --heads 32 --kv-heads 8 --length 131072 --head-dim 128 --dtype bfloat16 --backward

    # many nodes: the same command on every node, joined by torchrun's rendezvous
    torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \
        -m attn_edu.distributed.run ...

What each rank does, and why (what NCCL needs):

* joins the process group with ``env://`` rendezvous (``RANK``, ``WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``, set by ``torchrun``), backend ``nccl`` when CUDA is
  available, else ``gloo``;
* uses the GPU ``cuda:LOCAL_RANK`` (the rank *on its node*, not the global rank);
* creates only its own shard: Q, K, V (and dO) are drawn in blocks of 64 positions, each
  from a generator seeded by ``(seed, tensor, block)`` (:func:`seeded_shard`), so a rank
  draws just its ``L/P`` positions and no rank ever holds, receives or unpickles the full
  tensors (a real model's rank reads its own slice of the tokens the same way);
* hands contiguous buffers to ``torch.distributed``; the ring and Ulysses post their
  collectives in the same order on every rank; and no CPU-side wait is relied on for
  anything but gloo (on NCCL ``Transfer.wait()`` only makes the compute stream wait, and
  ``received`` is counted after a device synchronisation, :func:`.record`).

Each rank prints nothing but rank 0 a summary line; with ``--out DIR`` every rank writes
``DIR/rank<r>.pt`` (its output shard, gradients, positions, bytes sent and received) for
checking against the unsharded reference. Only gloo on one machine is tested here (the
tests start it with ``torchrun --nproc-per-node 2`` on the CPU); NCCL on many GPUs was not
run. Chapter 14 ("On your cluster").
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from . import comm
from .ring import ring_attention
from .sharding import LAYOUTS, check_layout, positions
from .ulysses import ulysses_attention

__all__ = ["seeded_shard", "seeded_full"]

#: The tensors :func:`seeded_shard` draws, in the order of their seed offsets.
TENSORS = ("q", "k", "v", "dout")
#: Positions per seeded block (:func:`seeded_shard`).
BLOCK = 64
_DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
           "float16": torch.float16}


def seeded_shard(name: str, lead: Sequence[int], head_dim: int, rows: Sequence[int], seed: int = 0,
                 dtype: torch.dtype = torch.float32, device: Any = "cpu") -> torch.Tensor:
    """Rows ``rows`` (global positions) of the seeded tensor ``name``, of shape
    ``(*lead, len(rows), d)``.

    Positions come in blocks of ``BLOCK`` (this module's); block ``b`` of tensor ``name`` is standard
    normal numbers from NumPy's generator seeded with ``(seed, name, b)``, whoever draws
    it. A rank draws only the blocks its positions fall in (its shard's chunks are
    contiguous runs), and the full tensor (:func:`seeded_full`) is the same numbers.
    Drawn in float64 on the CPU, then cast to ``dtype`` and moved to ``device``.
    """
    if name not in TENSORS:
        raise ValueError(f"name must be one of {', '.join(TENSORS)}; got {name!r}")
    rows = np.asarray(list(rows), dtype=np.int64)
    out = np.empty((len(rows), *lead, head_dim))
    for b in np.unique(rows // BLOCK):
        block = np.random.default_rng([int(seed), TENSORS.index(name), int(b)]).standard_normal(
            (BLOCK, *lead, head_dim))
        here = rows // BLOCK == b
        out[here] = block[rows[here] % BLOCK]
    return torch.from_numpy(out).movedim(0, -2).to(dtype).to(device).contiguous()  # (*lead, rows, d)


def seeded_full(name: str, lead: Sequence[int], head_dim: int, length: int, seed: int = 0,
                dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The whole seeded tensor, of shape ``(*lead, length, d)``, on the CPU: what the shards come from."""
    return seeded_shard(name, lead, head_dim, range(length), seed, dtype)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m attn_edu.distributed.run",
                                description="One sequence-parallel attention layer per rank (start it "
                                            "with torchrun --nproc-per-node N).")
    p.add_argument("--method", choices=("ring", "ulysses"), default="ring")
    p.add_argument("--layout", choices=LAYOUTS, default="contiguous")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=None, help="grouped-query K/V heads (default: --heads)")
    p.add_argument("--length", type=int, default=4096, help="the whole sequence L (split over the ranks)")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", choices=tuple(_DTYPES), default="float32")
    p.add_argument("--backward", action="store_true", help="also run the backward pass")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                   help="default: nccl when CUDA is available, else gloo")
    p.add_argument("--block-q", type=int, default=None)
    p.add_argument("--block-k", type=int, default=None)
    p.add_argument("--warmup", type=int, default=0, help="untimed runs first")
    p.add_argument("--out", default=None, help="a folder: every rank writes rank<r>.pt there")
    return p


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    """Run one layer on this rank (inside ``torchrun``); returns this rank's summary."""
    a = _parser().parse_args(argv)
    for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise SystemExit(f"{name} is not set: start this with torchrun --nproc-per-node N -m "
                             "attn_edu.distributed.run ... (env:// rendezvous)")
    backend = a.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)  # the GPU of this rank on its node
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    bind = {"device_id": device} if backend == "nccl" else {}  # NCCL: this rank's GPU, from the start
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(minutes=10), **bind)
    try:
        rank, p = dist.get_rank(), dist.get_world_size()
        layout = check_layout(a.layout)
        dtype = _DTYPES[a.dtype]
        hkv = a.heads if a.kv_heads is None else a.kv_heads
        rows = positions(a.length, rank, p, layout)  # this rank's global positions
        q = seeded_shard("q", (a.batch, a.heads), a.head_dim, rows, a.seed, dtype, device)
        k = seeded_shard("k", (a.batch, hkv), a.head_dim, rows, a.seed, dtype, device)
        v = seeded_shard("v", (a.batch, hkv), a.head_dim, rows, a.seed, dtype, device)
        do = seeded_shard("dout", (a.batch, a.heads), a.head_dim, rows, a.seed, dtype, device) if a.backward else None
        for t in (q, k, v):
            t.requires_grad_(a.backward)
        extra = dict(block_q=a.block_q, block_k=a.block_k)
        attend = ((lambda: ring_attention(q, k, v, a.causal, layout, **extra)) if a.method == "ring"
                  else (lambda: ulysses_attention(q, k, v, a.causal, layout=layout, **extra)))

        def layer():
            out = attend()
            if do is not None:
                out.backward(do)
            return out

        for _ in range(a.warmup):
            layer()
            for t in (q, k, v):
                t.grad = None
        with comm.record() as rec:
            start = time.perf_counter()
            out = layer()
            if device.type == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - start
        summary = {"rank": rank, "world_size": p, "backend": backend, "device": str(device),
                   "sent": rec.sent, "received": rec.received, "wall_s": wall,
                   "compute_s": sum(rec.compute_s)}
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            grads = tuple(t.grad.detach().cpu() for t in (q, k, v)) if a.backward else None
            torch.save({**summary, "out": out.detach().cpu(), "grads": grads, "positions": rows,
                        "args": vars(a)}, os.path.join(a.out, f"rank{rank}.pt"))
        if rank == 0:
            print(json.dumps({**summary, "args": vars(a)}), flush=True)
        dist.barrier()
        return summary
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # pragma: no cover - started by torchrun
    main(sys.argv[1:])
