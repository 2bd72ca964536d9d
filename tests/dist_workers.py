"""Functions that tests/test_distributed.py launches on several processes.

They live in a module of their own because launched processes import them by name.
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from attn_edu.distributed import run_attention, ulysses_attention


def run_jobs(rank, world_size, jobs):
    """Every ``(q, k, v, dout, options)`` of ``jobs`` through run_attention, in one launch."""
    return [run_attention(rank, world_size, q, k, v, dout=do, **options) for q, k, v, do, options in jobs]


def exchange_counted(rank, world_size):
    """One exchange round the ring inside a record: the bytes received before and after the
    wait, and the (sent, received) block logs."""
    from attn_edu.distributed import comm

    send = torch.arange(16, dtype=torch.float32) + 100 * rank
    recv = torch.empty_like(send)
    with comm.record() as rec:
        transfer = comm.exchange(send, (rank + 1) % world_size, recv, (rank - 1) % world_size)
        before = rec.received
        transfer.wait()
    return before, rec.received, (rec.sent_blocks, rec.received_blocks)


def ulysses_bad_heads(rank, world_size):
    q = torch.zeros(1, 3, 4, 8)  # 3 heads on 2 ranks
    try:
        ulysses_attention(q, q, q)
    except ValueError as err:
        return str(err)
    return None


def all_reduce_sum(rank, world_size, offset, scale=1):
    t = torch.full((2,), float(rank + offset))
    dist.all_reduce(t)
    return {"sum": t * scale, "rank": rank, "nested": [t.clone()], "pid": os.getpid()}


def _all_reduce_one(rank):
    t = torch.ones(1)
    dist.all_reduce(t)  # every rank must get here
    return rank


def raise_on(rank, world_size, bad):
    if rank == bad:
        raise ValueError(f"bad input on rank {rank}")
    return _all_reduce_one(rank)


def hang_on(rank, world_size, bad):
    if rank == bad:
        time.sleep(1000)
    return _all_reduce_one(rank)


def die_on(rank, world_size, bad):
    if rank == bad:
        os._exit(3)
    return _all_reduce_one(rank)


def peers_alive_after(rank, world_size, pause):
    """Every rank's process id (one all-gather, so every rank has joined), then the last rank
    waits ``pause`` seconds before it returns whether each rank's process still runs; the
    others return at once (None). A rank that finished first must still be there."""
    pids = [None] * world_size
    dist.all_gather_object(pids, os.getpid())
    if rank != world_size - 1:
        return None
    time.sleep(pause)
    return [_running(pid) for pid in pids]


def _running(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "zombie" not in fh.read().lower()
    except OSError:  # gone
        return False


def unpicklable_result(rank, world_size):
    return lambda: rank


def write_pid_and_hang(rank, world_size, folder):
    """Write this rank's process id to ``folder/rank<r>.pid``, then wait for ever: the test
    kills the launcher and expects every rank to end by itself."""
    with open(os.path.join(folder, f"rank{rank}.pid"), "w") as fh:
        fh.write(str(os.getpid()))
    while True:
        time.sleep(1)
