"""Functions to :func:`attn_edu.distributed.launch`: what each rank of chapter 14's runs does.

They live in a module (not in a notebook cell) because launched processes import them by
name. Each takes ``(rank, world_size, ...)`` and the *full* tensors, takes its own shard,
runs, and returns a dict of plain numbers and CPU tensors.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Optional

import torch

from ..profiling import peak_memory
from . import comm
from .processes import local_device
from .ring import ring_attention
from .sharding import positions, shard
from .ulysses import ulysses_attention

__all__ = ["run_attention", "torch_context_parallel", "METHODS"]

#: The sequence-parallel attentions :func:`run_attention` runs.
METHODS = ("ring", "ulysses")


def run_attention(rank: int, world_size: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                  method: str = "ring", causal: bool = False, layout: str = "contiguous",
                  dout: Optional[torch.Tensor] = None, scale: Optional[float] = None,
                  block_q: Optional[int] = None, block_k: Optional[int] = None, overlap: bool = True,
                  warmup: int = 0, measure_memory: bool = False) -> Dict[str, Any]:
    """One rank of a sequence-parallel attention layer: shard, attend, (backward), report.

    ``q``, ``k``, ``v`` are the full (B, H, L, d) tensors (every rank gets them all and keeps
    its :func:`.shard`; k and v may have H_kv < H heads; on a cluster, where no rank should
    hold the full tensors, use ``python -m attn_edu.distributed.run`` under torchrun); with ``dout`` (the gradient of the full output) the backward pass
    runs too. Returns a dict: ``out`` (this rank's output shard), ``grads`` (dq, dk, dv
    shards, or None), ``positions`` (the global positions of the rows), ``sent`` /
    ``received`` (bytes handed over to send / bytes that arrived, counted by the
    communication wrappers), ``sent_blocks`` / ``received_blocks`` (one ``(op, peer, bytes,
    fingerprint)`` per block, :class:`attn_edu.distributed.Record`), ``calls``, ``compute_s``
    (wall seconds computing attention, per ring step), ``compute_cpu_s`` (the same in CPU
    seconds of this rank), ``wall_s`` (the whole layer), ``pairs`` (the blocks computed) and,
    with ``measure_memory``, ``peak_bytes`` (the peak extra memory of the run, measured by
    :func:`attn_edu.profiling.peak_memory`, whose profiler then slows ``wall_s``).
    ``warmup`` untimed runs come first. Chapter 14 launches it.
    """
    if method not in METHODS:
        raise ValueError(f"method must be 'ring' or 'ulysses'; got {method!r}")
    dev = local_device()
    grad = dout is not None
    qs, ks, vs = (shard(x, rank, world_size, layout).to(dev).contiguous().requires_grad_(grad)
                  for x in (q, k, v))
    do = shard(dout, rank, world_size, layout).to(dev).contiguous() if grad else None
    extra = {"overlap": overlap} if method == "ring" else {}
    attend = ring_attention if method == "ring" else ulysses_attention

    def layer():
        out = attend(qs, ks, vs, causal=causal, layout=layout, scale=scale, block_q=block_q,
                     block_k=block_k, **extra)
        if grad:
            out.backward(do)
        return out

    for _ in range(warmup):
        layer()
        for t in (qs, ks, vs):
            t.grad = None
    with comm.record() as rec:
        start = time.perf_counter()
        if measure_memory:  # the allocator's peak during this very run
            out, peak = peak_memory(layer, device="cuda" if dev.type == "cuda" else "torch_cpu")
        else:
            out = layer()
        if dev.type == "cuda":  # the kernels and NCCL's transfers were only queued
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    result = {
        "rank": rank, "out": out.detach(), "positions": positions(q.shape[-2], rank, world_size, layout),
        "grads": (qs.grad, ks.grad, vs.grad) if grad else None,
        "sent": rec.sent, "received": rec.received, "calls": dict(rec.calls),
        "sent_blocks": list(rec.sent_blocks), "received_blocks": list(rec.received_blocks),
        "compute_s": list(rec.compute_s), "compute_cpu_s": list(rec.compute_cpu_s), "wall_s": wall, "pairs": list(rec.pairs),
    }
    if measure_memory:
        result["peak_bytes"] = peak
    return result


def torch_context_parallel(rank: int, world_size: int, q: torch.Tensor, k: torch.Tensor,
                           v: torch.Tensor, causal: bool = True) -> Dict[str, Any]:
    """Try PyTorch's own context parallelism (``torch.distributed.tensor.experimental``) here.

    Three things, each reported rather than raised (the API is a prototype and changes):

    * ``public``: ``context_parallel(mesh, buffers=[q, k, v])`` around
      ``F.scaled_dot_product_attention`` -- "ok" and its output shard, or the error it gave;
    * ``same_zigzag``: whether its load balancer ("head-tail") gives rank ``r`` the same
      positions as :func:`.shard` with ``layout="zigzag"``;
    * ``ring``: its ring loop (the private ``_templated_ring_attention``) driven by the CPU
      attention kernel ``aten._scaled_dot_product_flash_attention_for_cpu``, on this
      rank's zigzag shards (causal) or contiguous shards: the output shard, or the error.
    """
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh

    dev = local_device()
    q, k, v = (x.to(dev) for x in (q, k, v))
    mesh = init_device_mesh(dev.type, (world_size,))
    result: Dict[str, Any] = {"rank": rank}
    try:
        from torch.distributed.tensor.experimental import context_parallel

        bq, bk, bv = (x.clone() for x in (q, k, v))
        with context_parallel(mesh, buffers=[bq, bk, bv], buffer_seq_dims=[2, 2, 2]):
            out = F.scaled_dot_product_attention(bq, bk, bv, is_causal=causal)
        result["public"], result["public_out"] = "ok", out.detach()
    except Exception as err:  # noqa: BLE001 - what the API does here is the finding
        result["public"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
    layout = "zigzag" if causal else "contiguous"
    try:
        from torch.distributed.tensor.experimental import _attention as cp

        balancer = cp._HeadTailLoadBalancer(q.shape[2], world_size, dev)
        index = balancer._generate_indices(restore=False)[0].cpu().numpy()  # (L,): new order
        per = q.shape[2] // world_size
        mine = positions(q.shape[2], rank, world_size, "zigzag")
        result["same_zigzag"] = bool((index[rank * per:(rank + 1) * per] == mine).all())
        old = cp._cp_options.enable_load_balance
        cp._cp_options.enable_load_balance = causal
        try:
            qs, ks, vs = (shard(x, rank, world_size, layout).contiguous() for x in (q, k, v))
            start = time.perf_counter()
            out, *_ = cp._templated_ring_attention(
                mesh.get_group(), 2, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
                qs, ks, vs, is_causal=causal)
            result["ring_s"] = time.perf_counter() - start
        finally:
            cp._cp_options.enable_load_balance = old
        result["ring"], result["ring_out"] = "ok", out.detach()
    except Exception as err:  # noqa: BLE001
        result.setdefault("same_zigzag", None)
        result["ring"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
    result["layout"] = layout
    return result
