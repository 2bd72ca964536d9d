r"""Communication for sequence parallelism: the wrappers that move tensors, and counting them.

Every byte that :func:`attn_edu.distributed.ring_attention` and
:func:`attn_edu.distributed.ulysses_attention` send goes through two functions here,
:func:`exchange` (point-to-point: send to one rank, receive from another) and
:func:`all_to_all`, which tally what they move into every active :func:`record`. The
derived volumes are :func:`ring_bytes` and :func:`ulysses_bytes`; chapter 14 checks one
against the other.

Both wrappers are device-agnostic: with the NCCL backend the tensors live on the GPU and
the transfers run on NCCL's own stream, overlapping with the attention kernels; with gloo
they run on CPU threads. :func:`exchange` uses ``torch.distributed.batch_isend_irecv``,
which both backends support, and which NCCL needs to pair a ring's sends and receives
without deadlock.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

from .. import _checks

__all__ = ["Record", "record", "active_records", "exchange", "Transfer", "all_to_all", "ring_bytes",
           "ulysses_bytes", "compute_timer"]


@dataclass
class Record:
    """What one rank's communication and computation did inside :func:`record`.

    Attributes:
        sent: bytes handed to ``torch.distributed`` to send to *other* ranks (an
            all-to-all's own chunk stays local and is not counted).
        received: bytes that arrived from other ranks: a point-to-point receive counts
            when its transfer completes, not when it is posted. On the CPU (gloo) that is
            ``Transfer.wait()``, which blocks; with CUDA tensors (NCCL) ``wait()`` only makes
            the compute stream wait, so GPU receives (and all-to-alls) are counted when the
            record closes, after a device synchronisation: when they have truly arrived.
        sent_blocks, received_blocks: one ``(op, peer rank, bytes, fingerprint)`` per block
            sent to / received from another rank, in the order the transfers were started;
            the fingerprint is a hash of the block's bytes (None for GPU tensors, which are not
            copied to the host while recording, and for a receive that never completed).
            Rank ``b``'s received blocks from ``a`` must equal rank ``a``'s sent blocks to ``b``.
        calls: number of calls per operation (``"p2p"``, ``"all_to_all"``).
        bytes_by_op: bytes sent per operation.
        compute_s: seconds spent computing attention blocks, one entry per ring step (or
            per local attention of Ulysses); measured only while recording. On the CPU wall
            seconds; on a GPU CUDA events recorded on the compute stream around the block,
            read when the record closes (nothing is synchronised in between, so transfers
            on NCCL's stream still overlap).
        compute_cpu_s: the CPU seconds of the calling thread over the same blocks (with one
            torch thread per rank, the work itself, even when processes share cores).
        pairs: the (step, query chunk, key chunk, kind) blocks the ring computed.
    """

    sent: int = 0
    received: int = 0
    sent_blocks: List[tuple] = field(default_factory=list)
    received_blocks: List[tuple] = field(default_factory=list)
    calls: Dict[str, int] = field(default_factory=collections.Counter)
    bytes_by_op: Dict[str, int] = field(default_factory=collections.Counter)
    compute_s: List[float] = field(default_factory=list)
    compute_cpu_s: List[float] = field(default_factory=list)
    pairs: List[tuple] = field(default_factory=list)
    # GPU entries completed when the record closes: (arriving blocks, slot) and (index, events)
    _deferred: List[tuple] = field(default_factory=list, repr=False)
    _events: List[tuple] = field(default_factory=list, repr=False)


def _close(rec: Record) -> None:
    """Complete the GPU entries of ``rec``: one device synchronisation, then the receives'
    bytes and the compute times from their CUDA events."""
    if not (rec._deferred or rec._events):
        return
    import torch

    torch.cuda.synchronize()
    for arriving, slot in rec._deferred:
        _tally_arrived(arriving[0], arriving[1], [rec], None if slot is None else [slot])
    for index, start, end in rec._events:
        rec.compute_s[index] = start.elapsed_time(end) / 1e3
    rec._deferred.clear()
    rec._events.clear()


_ACTIVE: List[Record] = []


@contextlib.contextmanager
def record() -> Iterator[Record]:
    """Count the bytes this rank sends and receives, and time its attention blocks.

    ::

        with record() as rec:
            out = ring_attention(q, k, v, causal=True)
        rec.sent, rec.received, rec.compute_s

    Records nest (each active one sees everything). While recording, compute times are
    measured: on a GPU with CUDA events on the compute stream, without synchronising
    (the device is synchronised once, when the record closes); outside a record nothing is
    timed or synchronised.
    """
    rec = Record()
    _ACTIVE.append(rec)
    try:
        yield rec
    finally:
        _ACTIVE.remove(rec)
        _close(rec)


def active_records() -> List[Record]:
    """The records now open (for code that adds its own entries)."""
    return list(_ACTIVE)


def _fingerprint(t: Any) -> Optional[str]:
    """A short hash of a CPU tensor's bytes (None for a GPU tensor: no copy to the host)."""
    import torch

    if t.device.type != "cpu":
        return None
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8)  # any dtype, bfloat16 included
    return hashlib.blake2b(raw.numpy().tobytes(), digest_size=8).hexdigest()


def _tally_sent(op: str, blocks: List[tuple]) -> None:
    """``blocks``: ``(peer, tensor)`` handed over to send."""
    if not _ACTIVE:
        return
    entries = [(op, peer, _nbytes(t), _fingerprint(t)) for peer, t in blocks]
    for rec in _ACTIVE:
        rec.calls[op] += 1
        for e in entries:
            rec.sent += e[2]
            rec.bytes_by_op[op] += e[2]
            rec.sent_blocks.append(e)


def _tally_arrived(op: str, blocks: List[tuple], records: List[Record], slots: Optional[List[int]] = None) -> None:
    """``blocks``: ``(peer, tensor)`` that arrived; ``slots``: their reserved places in each
    record's ``received_blocks`` (None: append)."""
    entries = [(op, peer, _nbytes(t), _fingerprint(t)) for peer, t in blocks]
    for n, rec in enumerate(records):
        for i, e in enumerate(entries):
            rec.received += e[2]
            if slots is None:
                rec.received_blocks.append(e)
            else:
                rec.received_blocks[slots[n] + i] = e


@contextlib.contextmanager
def compute_timer(step_pairs: Optional[List[tuple]] = None) -> Iterator[None]:
    """Time the enclosed block of attention into every active record (no-op otherwise).

    On a GPU (CUDA initialised) two CUDA events on the current stream bracket the block and
    the time is read when the record closes: nothing waits here, so a transfer running on
    NCCL's stream keeps overlapping. On the CPU, wall seconds. ``step_pairs`` are appended
    to each record's ``pairs``.
    """
    if not _ACTIVE:
        yield
        return
    import torch

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    if cuda:
        events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        events[0].record()
    start, cpu = time.perf_counter(), time.thread_time()
    yield
    elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu
    if cuda:
        events[1].record()
    for rec in _ACTIVE:
        if cuda:
            rec._events.append((len(rec.compute_s), *events))
        rec.compute_s.append(elapsed)
        rec.compute_cpu_s.append(cpu)
        rec.pairs.extend(step_pairs or [])


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size()


class Transfer:
    """The requests of one :func:`exchange`; ``wait()`` blocks until they are done.

    Waiting twice is harmless (a gloo request must not be waited on twice: its second
    wait blocks for a transfer that never comes).
    """

    def __init__(self, works: List[Any], arriving: Optional[List[tuple]] = None):
        self._works: Optional[List[Any]] = list(works)
        # (peer, receive buffer) to count on arrival, for the records open at the start
        self._arriving = list(arriving or [])
        self._records = list(_ACTIVE)
        self._slots = []
        for rec in self._records:  # keep the start order, whatever order the waits come in
            self._slots.append(len(rec.received_blocks))
            rec.received_blocks.extend(("p2p", peer, 0, None) for peer, _ in self._arriving)

    @property
    def done(self) -> bool:
        return self._works is None

    def wait(self) -> None:
        if self._works is not None:
            for w in self._works:
                w.wait()  # gloo: blocks until done; NCCL: the current stream waits for the transfer
            self._works = None
            if any(t.device.type == "cuda" for _, t in self._arriving):  # arrived only once the
                for rec, slot in zip(self._records, self._slots):  # stream gets there: at the close
                    rec._deferred.append((("p2p", self._arriving), slot))
            else:
                _tally_arrived("p2p", self._arriving, self._records, self._slots)


def exchange(send: Any, dst: int, recv: Any, src: int, group: Any = None, tag: int = 0) -> Transfer:
    """Start sending ``send`` to rank ``dst`` and receiving ``recv`` (filled in place) from
    rank ``src``; returns a :class:`Transfer` to ``wait()`` on.

    ``dst`` and ``src`` are ranks *within* ``group`` (None: the default group). Both
    transfers run in the background while the caller computes; ``send`` must not be
    modified and ``recv`` not read before the wait (on a GPU the wait makes the current
    stream wait). Counted in :func:`record`: ``send`` when it is handed over, ``recv`` when
    the wait finds it arrived.
    """
    import torch.distributed as dist

    if group is not None:
        dst, src = dist.get_global_rank(group, dst), dist.get_global_rank(group, src)
    ops = [dist.P2POp(dist.isend, send, dst, group, tag), dist.P2POp(dist.irecv, recv, src, group, tag)]
    works = dist.batch_isend_irecv(ops)
    _tally_sent("p2p", [(dst, send)])
    return Transfer(works, [(src, recv)])


def all_to_all(out: Any, inp: Any, group: Any = None) -> Any:
    """``torch.distributed.all_to_all_single(out, inp)``: chunk ``g`` of ``inp``'s first axis
    goes to rank ``g``, and chunk ``s`` of ``out`` arrives from rank ``s``; returns ``out``.

    Counted in :func:`record`, chunk by chunk: ``(P - 1) / P`` of the bytes go to other
    ranks (the own chunk is a local copy).
    """
    import torch.distributed as dist

    p, me = dist.get_world_size(group), dist.get_rank(group)
    glob = (lambda g: g) if group is None else (lambda g: dist.get_global_rank(group, g))
    dist.all_to_all_single(out, inp, group=group)
    if _ACTIVE:
        _tally_sent("all_to_all", [(glob(g), c) for g, c in enumerate(inp.chunk(p)) if g != me])
        arrived = [(glob(g), c) for g, c in enumerate(out.chunk(p)) if g != me]
        if out.device.type == "cuda":  # NCCL: enqueued, not arrived; counted when the record closes
            for rec in _ACTIVE:
                rec._deferred.append((("all_to_all", arrived), None))
        else:
            _tally_arrived("all_to_all", arrived, list(_ACTIVE))
    return out


# ----------------------------------------------------------------------------- derived volumes
def _dims(batch: int, heads: int, length: int, head_dim: int, world_size: int, itemsize: int):
    batch = _checks.check_length("batch", batch, minimum=1)
    heads = _checks.check_length("heads", heads, minimum=1)
    length = _checks.check_length("length", length, minimum=1)
    head_dim = _checks.check_length("head_dim", head_dim, minimum=1)
    world_size = _checks.check_length("world_size", world_size, minimum=1)
    itemsize = _checks.check_length("itemsize", itemsize, minimum=1)
    return batch, heads, length, head_dim, world_size, itemsize


def ring_bytes(batch: int, heads: int, length: int, head_dim: int, world_size: int,
               itemsize: int = 2, backward: bool = False, grad_itemsize: Optional[int] = None) -> int:
    r"""Bytes one rank sends in one ring-attention layer (K and V of every rank pass by).

    Forward: the ring makes :math:`P - 1` hops, each sending this rank's current K and V
    block, :math:`2 \cdot B H \tfrac{L}{P} d` numbers:

    .. math:: \text{forward} = (P-1) \cdot 2 B H \frac{L}{P} d \cdot s

    Backward: K and V go round again (:math:`P - 1` hops) and the accumulated
    :math:`dK, dV` travel with them and one hop further, back to their owner (:math:`P`
    hops, in ``grad_itemsize`` bytes each: float32 for 16-bit inputs, so that adding up P
    partial gradients loses no precision). For large P the forward tends to
    :math:`2 B H L d s`: a rank sends as much as the whole K and V, whatever P is. The
    bytes it *receives* are the same. Chapter 14.
    """
    b, h, L, d, p, s = _dims(batch, heads, length, head_dim, world_size, itemsize)
    if L % p:
        raise ValueError(f"length L = {L} is not divisible by world_size P = {p}")
    block = 2 * b * h * (L // p) * d  # K and V numbers per rank
    total = (p - 1) * block * s
    if backward:
        gs = max(s, 4) if grad_itemsize is None else _checks.check_length("grad_itemsize", grad_itemsize, minimum=1)
        total += (p - 1) * block * s + (p if p > 1 else 0) * block * gs
    return total


def ulysses_bytes(batch: int, heads: int, length: int, head_dim: int, world_size: int,
                  itemsize: int = 2, backward: bool = False, kv_heads: Optional[int] = None) -> int:
    r"""Bytes one rank sends in one Ulysses layer (four all-to-alls forward, four backward).

    Each all-to-all re-shards one (B, heads, L/P, d) block from sequence to heads or back and
    sends all but its own :math:`1/P`. Q and the output have ``heads`` heads, K and V
    ``kv_heads`` (default ``heads``; fewer with grouped-query attention):

    .. math:: \text{forward} = \frac{P-1}{P} \cdot (2 H + 2 H_{kv})\, B \frac{L}{P} d \cdot s

    (Q, K and V in, the output back). The backward moves dO in and dQ, dK, dV back: the
    same again. Unlike the ring's, this shrinks as :math:`1/P`. With ``kv_heads`` < P the
    key/value heads cannot be split over the ranks: each is copied P / H_kv times, so K
    and V travel with :math:`\max(H_{kv}, P)` heads, as
    :func:`attn_edu.distributed.ulysses_attention` sends them. Chapter 14.
    """
    b, h, L, d, p, s = _dims(batch, heads, length, head_dim, world_size, itemsize)
    hkv = h if kv_heads is None else _checks.check_length("kv_heads", kv_heads, minimum=1)
    if L % p:
        raise ValueError(f"length L = {L} is not divisible by world_size P = {p}")
    one = lambda heads_: b * heads_ * (L // p) * d * s * (p - 1) // p  # noqa: E731  one all-to-all
    return (2 if backward else 1) * (2 * one(h) + 2 * one(max(hkv, p)))  # K/V copied when H_kv < P
