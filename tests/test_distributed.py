"""attn_edu.distributed: sharding, the ring's plan, ring and Ulysses attention on real processes.

Multi-process tests spawn real ``torch.distributed`` (gloo) process groups with
``attn_edu.distributed.launch``; each launch runs many configurations at once, because
starting processes (importing torch) is what costs time. The float64 gold answer is the
NumPy reference on the unsharded tensors (outputs) and the float64 PyTorch twin's autograd
(gradients); float32 follows the tolerance rule of attn_edu.testing.
"""
from __future__ import annotations

import collections
import json
import multiprocessing
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import dist_workers  # noqa: E402
from attn_edu import distributed as D
from attn_edu import reference_torch
from attn_edu.distributed import sharding
from attn_edu.flash import flash_attention
from attn_edu.reference import scaled_dot_product_attention as gold_sdpa
from attn_edu.testing import assert_close_to_reference
from conftest import torch_qkv


def tensors(b=1, h=12, length=24, d=8, dv=6, seed=0, dtype=torch.float64):
    """q, k, v (B, H, L, d / d_v) and an output gradient ``do`` like v, on the CPU (the ranks' device)."""
    q, k, v = torch_qkv(length, length, d, dv, lead=(b, h), seed=seed, dtype=dtype, device="cpu")
    _, _, do = torch_qkv(length, length, d, dv, lead=(b, h), seed=seed + 1, dtype=dtype, device="cpu")
    return q, k, v, do


def torch_gold(q, k, v, do, causal):
    """Output and gradients of the PyTorch twin in float64 (and in q's dtype: naive_T);
    k and v may have fewer heads than q (grouped-query attention)."""
    qq, kk, vv = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = reference_torch.scaled_dot_product_attention(qq, kk, vv, causal=causal,
                                                       enable_gqa=k.shape[:-2] != q.shape[:-2])
    out.backward(do)
    return out.detach(), (qq.grad, kk.grad, vv.grad)


def gathered(results, layout):
    out = D.unshard([r["out"] for r in results], layout)
    grads = None
    if results[0]["grads"] is not None:
        grads = tuple(D.unshard([r["grads"][i] for r in results], layout) for i in range(3))
    return out, grads


def comm_bytes(method, q, k, v, world_size, backward):
    """Derived bytes per rank for q, k, v of possibly different head dims (d_k != d_v)."""
    b, h, length, _ = q.shape
    hkv, s = k.shape[1], q.element_size()
    if method == "ring":  # the ring moves K and V (H_kv heads): sum the two widths' shares
        half = lambda d: D.ring_bytes(b, hkv, length, d, world_size, s, backward) // 2  # noqa: E731
        return half(k.shape[-1]) + half(v.shape[-1])
    if hkv != h:  # grouped heads (here d_k = d_v): the formula with kv_heads, copies included
        assert k.shape[-1] == v.shape[-1] == q.shape[-1]
        return D.ulysses_bytes(b, h, length, q.shape[-1], world_size, s, backward, kv_heads=hkv)
    per = lambda d: D.ulysses_bytes(b, h, length, d, world_size, s, backward) // 4  # noqa: E731
    return 2 * per(q.shape[-1]) + 2 * per(v.shape[-1])  # (q, k in; o out; v in) / (do in ...)


# --------------------------------------------------------------------------- sharding (no processes)
@pytest.mark.parametrize("layout", D.LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_shard_unshard_round_trip_numpy_and_torch(layout, world_size):
    x = np.arange(2 * 24 * 3).reshape(2, 24, 3)
    for arr in (x, torch.as_tensor(x)):
        parts = [D.shard(arr, r, world_size, layout, dim=1) for r in range(world_size)]
        assert all(p.shape == (2, 24 // world_size, 3) for p in parts)
        back = D.unshard(parts, layout, dim=1)
        assert (np.asarray(back) == x).all()
        for r, p in enumerate(parts):  # the rows are the rank's global positions
            assert (np.asarray(p)[0, :, 0] // 3 == D.positions(24, r, world_size, layout)).all()


def test_zigzag_gives_rank_r_chunks_r_and_2P_minus_1_minus_r():
    x = np.arange(16)
    assert D.shard(x, 0, 4, "zigzag", dim=0).tolist() == [0, 1, 14, 15]
    assert D.shard(x, 3, 4, "zigzag", dim=0).tolist() == [6, 7, 8, 9]
    assert D.shard(x, 1, 4, "contiguous", dim=0).tolist() == [4, 5, 6, 7]
    assert D.chunk_ids(1, 4, "zigzag") == (1, 6)


def test_lengths_that_do_not_split_are_refused_naming_L_and_P():
    x = np.zeros((1, 10, 4))
    with pytest.raises(ValueError, match=r"L = 10 is not divisible by 3 \(P = 3"):
        D.shard(x, 0, 3)
    with pytest.raises(ValueError, match=r"2P = 8 .*L = 10 .*P = 4"):
        D.shard(x, 0, 4, "zigzag")
    with pytest.raises(ValueError, match="rank must be in"):
        D.shard(x, 2, 2)
    with pytest.raises(ValueError, match="layout must be"):
        D.shard(x, 0, 2, "striped")
    with pytest.raises(ValueError, match="same shape"):
        D.unshard([x[:, :4], x[:, :6]])
    with pytest.raises(TypeError, match="list of every rank"):
        D.unshard(x)


@pytest.mark.parametrize("layout", D.LAYOUTS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5, 8])
def test_the_ring_plan_computes_every_allowed_pair_exactly_once(layout, world_size):
    for causal in (False, True):
        plan = D.ring_schedule(world_size, layout, causal)
        seen = collections.Counter((p.q_chunk, p.k_chunk) for step in plan for rank in step for p in rank)
        chunks = world_size * sharding.chunk_count(layout)
        allowed = {(i, j) for i in range(chunks) for j in range(chunks) if not causal or j <= i}
        assert set(seen) == allowed and set(seen.values()) == {1}
        for t, step in enumerate(plan):  # rank r holds the keys of rank r - t
            for r, pairs in enumerate(step):
                owner = D.chunk_ids((r - t) % world_size, world_size, layout)
                assert all(p.k_chunk in owner and p.q_chunk in D.chunk_ids(r, world_size, layout) for p in pairs)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8, 16])
def test_tiles_per_rank_contiguous_is_unbalanced_zigzag_is_not(world_size):
    p = world_size
    contiguous = D.tiles_per_rank(p, "contiguous", causal=True)
    zigzag = D.tiles_per_rank(p, "zigzag", causal=True)
    assert contiguous.tolist() == [4 * r + 3 for r in range(p)]
    assert zigzag.tolist() == [2 * p + 1] * p
    assert contiguous.sum() == zigzag.sum() == 2 * p * p + p
    assert D.tiles_per_rank(p, "contiguous", causal=False).tolist() == [4 * p] * p
    steps_c = D.ring_steps_in_tiles(p, "contiguous")
    steps_z = D.ring_steps_in_tiles(p, "zigzag")
    assert steps_c.max(axis=1).sum() == 4 * p - 1  # the slowest rank sets each step's pace
    assert steps_z.max(axis=1).sum() == 2 * p + 1
    assert (steps_z[1:] == 2).all()  # after the first step every rank does the same


def test_derived_bytes():
    # ring: P - 1 hops of K and V, each B H (L/P) d numbers
    assert D.ring_bytes(1, 1, 8, 2, 4, itemsize=2) == 3 * 2 * 2 * 2 * 2
    assert D.ring_bytes(1, 1, 8, 2, 1) == 0
    # backward: K, V again (P - 1 hops, in the input dtype) + dK, dV (P hops, float32)
    assert D.ring_bytes(1, 1, 8, 2, 4, itemsize=2, backward=True) == 48 + 48 + 4 * 8 * 4
    # Ulysses: 4 all-to-alls of B H (L/P) d numbers, (P - 1) / P of each leaves the rank
    assert D.ulysses_bytes(1, 4, 8, 2, 4, itemsize=2) == 4 * (4 * 2 * 2 * 2) * 3 // 4
    assert D.ulysses_bytes(1, 4, 8, 2, 4, itemsize=2, backward=True) == 2 * 96
    # for large P the ring sends the whole K and V, Ulysses 4/P of Q, K, V, O
    big = D.ring_bytes(1, 8, 2**20, 128, 1024, itemsize=2)
    assert abs(big / (2 * 8 * 2**20 * 128 * 2) - 1) < 1e-3
    # grouped-query attention: Q and O with H heads, K and V with H_kv
    assert D.ulysses_bytes(1, 4, 8, 2, 4, itemsize=2, kv_heads=4) == D.ulysses_bytes(1, 4, 8, 2, 4, itemsize=2)
    assert D.ulysses_bytes(1, 4, 8, 2, 2, itemsize=2, kv_heads=2) == (2 * 4 + 2 * 2) * 4 * 2 * 2 // 2
    assert (D.ulysses_bytes(1, 4, 8, 2, 2, itemsize=2, kv_heads=2, backward=True)
            == 2 * D.ulysses_bytes(1, 4, 8, 2, 2, itemsize=2, kv_heads=2))
    # P > H_kv: each K/V head is copied P / H_kv times, so K and V travel with P heads
    assert D.ulysses_bytes(1, 4, 8, 2, 4, itemsize=2, kv_heads=2) == D.ulysses_bytes(1, 4, 8, 2, 4, itemsize=2)
    assert D.ulysses_bytes(1, 8, 8, 2, 4, itemsize=2, kv_heads=1) == (2 * 8 + 2 * 4) * 2 * 2 * 2 * 3 // 4
    with pytest.raises(ValueError, match="kv_heads"):
        D.ulysses_bytes(1, 4, 8, 2, 4, kv_heads=0)
    with pytest.raises(ValueError, match="not divisible"):
        D.ring_bytes(1, 1, 10, 2, 4)
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        D.ulysses_bytes(1, 1, 10, 2, 0)


@pytest.mark.parametrize("heads,kv_heads", [(64, 64), (64, 8), (32, 8), (8, 1)])
def test_the_ring_sends_fewer_bytes_than_ulysses_exactly_while_P_is_below_1_plus_H_over_Hkv(heads, kv_heads):
    # ring / Ulysses = P H_kv / (H + max(H_kv, P)) (chapter 14; K/V heads copied when P > H_kv):
    # equal at P = 1 + H / H_kv while that is <= H_kv, else at P = H / (H_kv - 1), never for H_kv = 1
    L = 45 * 2**20
    for p in (2, 3, 4, 8, 9, 10, 16, 32, 64):
        ring = D.ring_bytes(1, kv_heads, L, 128, p)
        uly = D.ulysses_bytes(1, heads, L, 128, p, kv_heads=kv_heads)
        assert abs(ring / uly - p * kv_heads / (heads + max(kv_heads, p))) < 1e-9
        if 1 + heads / kv_heads <= kv_heads:
            cross = 1 + heads / kv_heads
        else:
            cross = heads / (kv_heads - 1) if kv_heads > 1 else float("inf")
        assert (ring < uly) == (p < cross)


# --------------------------------------------------------------------------- one block's backward
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_q", [1, 5, 64])
def test_block_backward_is_the_gradient_of_attention(causal, block_q):
    q, k, v, do = tensors(b=2, h=3, length=13, d=5, dv=4)
    out, grads = torch_gold(q, k, v, do, causal)
    _, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
    delta = (do * out).sum(-1)
    got = D.block_backward(q, k, v, do, lse, delta, 1 / 5**0.5, causal=causal, block_q=block_q)
    for g, want in zip(got, grads):
        assert (g - want).abs().max() <= 1e-12


def test_block_backward_rows_without_keys_get_zero_gradients():
    q, k, v, do = tensors(b=1, h=1, length=4, d=3, dv=3)
    lse = torch.full((1, 1, 4), float("-inf"), dtype=torch.float64)
    got = D.block_backward(q, k, v, do, lse, torch.zeros(1, 1, 4, dtype=torch.float64), 0.5)
    assert all((g == 0).all() for g in got)


# --------------------------------------------------------------------------- arguments, in process
@pytest.fixture(scope="module")
def world_of_one():
    """A gloo process group of one rank in this process, for argument checks."""
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_outside_a_process_group_the_error_says_what_to_do():
    if dist.is_initialized():
        pytest.skip("a process group is active in this process")
    q = torch.zeros(1, 1, 4, 2)
    with pytest.raises(RuntimeError, match="runs inside a process group.*launch"):
        D.ring_attention(q, q, q)
    with pytest.raises(RuntimeError, match="runs inside a process group"):
        D.ulysses_attention(q, q, q)


def test_bad_arguments_read_like_everywhere_else(world_of_one):
    q = torch.zeros(1, 2, 4, 8)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        D.ring_attention(np.zeros((4, 8)), q, q)
    with pytest.raises(TypeError, match="same dtype"):
        D.ring_attention(q, q.float(), q.double())
    with pytest.raises(ValueError, match="same last dimension d_k"):
        D.ulysses_attention(q, torch.zeros(1, 2, 4, 7), q)
    with pytest.raises(ValueError, match="causal must be"):
        D.ring_attention(q, q, q, causal="diagonal")
    with pytest.raises(ValueError, match="layout must be"):
        D.ring_attention(q, q, q, layout="striped")
    with pytest.raises(ValueError, match="zigzag shard .* even"):
        D.ring_attention(q[..., :3, :], q[..., :3, :], q[..., :3, :], layout="zigzag")
    with pytest.raises(ValueError, match="causal ring_attention needs query and key shards of the same length"):
        D.ring_attention(q, torch.zeros(1, 2, 6, 8), torch.zeros(1, 2, 6, 8), causal=True)
    with pytest.raises(ValueError, match="same leading"):
        D.ring_attention(q, torch.zeros(2, 2, 4, 8), torch.zeros(2, 2, 4, 8))
    with pytest.raises(ValueError, match="block_q must be at least 1"):
        D.ring_attention(q, q, q, block_q=0)
    with pytest.raises(ValueError, match="needs a head axis"):
        D.ulysses_attention(q[0, 0], q[0, 0], q[0, 0])


def test_one_rank_is_plain_attention_and_cross_attention_works(world_of_one):
    q, k, v, do = tensors(b=1, h=2, length=10, d=4, dv=3)
    kk, vv = k[..., :6, :], v[..., :6, :]
    out = D.ring_attention(q, kk, vv)  # L_q != L_k, no mask
    assert (out - reference_torch.scaled_dot_product_attention(q, kk, vv)).abs().max() <= 1e-12
    out, lse = D.ring_attention(q, k, v, causal=True, layout="zigzag", return_lse=True)
    assert (out - reference_torch.scaled_dot_product_attention(q, k, v, causal=True)).abs().max() <= 1e-12
    assert (lse - torch.logsumexp((q @ k.transpose(-1, -2) / 2).masked_fill(
        torch.ones(10, 10, dtype=torch.bool).triu(1), float("-inf")), -1)).abs().max() <= 1e-12
    with D.record() as rec:
        D.ulysses_attention(q, k, v, causal=True)
    assert rec.sent == 0 and rec.calls["all_to_all"] == 4 and len(rec.compute_s) == 1


# --------------------------------------------------------------------------- launch: arguments
def test_launch_refuses_what_fresh_processes_cannot_import(monkeypatch):
    with pytest.raises(TypeError, match="lambda or a nested function"):
        D.launch(lambda r, w: r, 2)

    def nested(rank, world_size):
        return rank

    with pytest.raises(TypeError, match="nested function"):
        D.launch(nested, 2)
    main = sys.modules["__main__"]
    monkeypatch.delattr(main, "__file__", raising=False)  # as in a Jupyter kernel
    fake = type(lambda: 0)(dist_workers.raise_on.__code__, {}, "cell_function")
    fake.__module__, fake.__qualname__ = "__main__", "cell_function"
    with pytest.raises(TypeError, match=r"defined in this notebook .*%%writefile"):
        D.launch(fake, 2)


def test_launch_argument_errors():
    with pytest.raises(ValueError, match="world_size must be a positive integer"):
        D.launch(dist_workers.raise_on, 0, 1)
    with pytest.raises(ValueError, match="backend must be one of"):
        D.launch(dist_workers.raise_on, 2, 1, backend="mpi")
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        D.launch(dist_workers.raise_on, 2, 1, timeout=0)
    with pytest.raises(TypeError, match="could not be pickled"):
        D.launch(dist_workers.raise_on, 2, lambda: 0)
    if torch.cuda.device_count() < 2:
        with pytest.raises(ValueError, match="needs one CUDA GPU per rank"):
            D.launch(dist_workers.raise_on, 2, 1, backend="nccl")


# --------------------------------------------------------------------------- real processes
def check_run(results, q, k, v, do, world_size, method, layout, causal):
    """Outputs and gradients against the gold answers; bytes against the derivation."""
    out, grads = gathered(results, layout)
    gold = gold_sdpa(q.double().numpy(), k.double().numpy(), v.double().numpy(), causal=causal,
                     enable_gqa=k.shape[:-2] != q.shape[:-2])
    gold_out, gold_grads = torch_gold(q.double(), k.double(), v.double(), do.double(), causal)
    assert np.abs(gold_out.numpy() - gold).max() <= 1e-12
    what = f"{method} {layout} causal={causal} P={world_size} {q.dtype}"
    if q.dtype == torch.float64:
        assert np.abs(out.numpy() - gold).max() <= 1e-10, what
        for g, want in zip(grads, gold_grads):
            assert (g - want).abs().max() <= 1e-10, what
    else:
        naive_out, naive_grads = torch_gold(q, k, v, do, causal)
        assert_close_to_reference(out, gold, naive_out, what=what)
        for g, want, naive in zip(grads, gold_grads, naive_grads):
            assert_close_to_reference(g, want, naive, factor=3.0, what=what + " gradient")
    want = comm_bytes(method, q, k, v, world_size, backward=True)
    assert [r["sent"] for r in results] == [want] * world_size, what
    assert [r["received"] for r in results] == [want] * world_size, what
    assert_blocks_arrived_as_sent(results, what)
    if method == "ring":  # forward and backward each compute every allowed pair once
        pairs = collections.Counter((i, j) for r in results for _, i, j, _ in r["pairs"])
        assert set(pairs.values()) == {2}
        assert all(j <= i for i, j in pairs) if causal else len(pairs) == (
            world_size * sharding.chunk_count(layout)) ** 2


def assert_blocks_arrived_as_sent(results, what=""):
    """What rank b received from rank a is, block for block and byte for byte, what a sent b."""
    for a, ra in enumerate(results):
        for b, rb in enumerate(results):
            sent = [(op, n, h) for op, peer, n, h in ra["sent_blocks"] if peer == b]
            got = [(op, n, h) for op, peer, n, h in rb["received_blocks"] if peer == a]
            assert sent == got, f"{what}: rank {a} -> rank {b}"
            assert all(h is not None for _, _, h in got), what  # CPU tensors: fingerprinted
    assert [r["received"] for r in results] == [sum(b[2] for b in r["received_blocks"]) for r in results]


def correctness_jobs():
    q, k, v, do = tensors()
    # float32: big enough that "max error" is a statistic over many entries, not a few
    q32, k32, v32, do32 = tensors(length=96, d=16, dv=16, seed=1, dtype=torch.float32)
    jobs = [(q, k, v, do, dict(method=m, layout=lay, causal=c))
            for m in D.METHODS for lay in D.LAYOUTS for c in (False, True)]
    jobs += [(q32, k32, v32, do32, dict(method="ring", layout="zigzag", causal=True)),
             (q32, k32, v32, do32, dict(method="ring", layout="contiguous", causal=False)),
             (q32, k32, v32, do32, dict(method="ulysses", layout="contiguous", causal=True)),
             (q, k, v, do, dict(method="ring", layout="zigzag", causal=True, overlap=False, block_q=5, block_k=3))]
    return jobs


def launched_jobs(world_size, jobs, timeout=180):
    """Every ``(q, k, v, dout, options)`` of ``jobs`` run in one launch of ``world_size``
    ranks (dist_workers.run_jobs): ``[(every rank's result, q, k, v, dout, options)]`` a job."""
    runs = D.launch(dist_workers.run_jobs, world_size, jobs, timeout=timeout)
    return [([runs[r][j] for r in range(world_size)], *job) for j, job in enumerate(jobs)]


def run_correctness(world_size, jobs):
    done = launched_jobs(world_size, jobs)
    for results, q, k, v, do, options in done:
        check_run(results, q, k, v, do, world_size, options["method"], options["layout"], options["causal"])
    return done


@pytest.mark.slow  # starts two processes
def test_received_counts_what_arrived_not_the_buffers_posted():
    before, after, blocks = zip(*D.launch(dist_workers.exchange_counted, 2))
    assert before == (0, 0)  # a receive posted but not waited for has not arrived
    assert after == (64, 64)  # 16 float32 numbers each way, once the wait returns
    sent_by_0 = [(op, n, h) for op, peer, n, h in blocks[0][0] if peer == 1]
    received_by_1 = [(op, n, h) for op, peer, n, h in blocks[1][1] if peer == 0]
    assert sent_by_0 == received_by_1 and len(sent_by_0) == 1 and sent_by_0[0][2] is not None


@pytest.mark.slow  # starts two processes (about 10 s)
def test_ring_on_two_processes_equals_the_reference():
    """The fast loop's one multi-process check: P = 2, zigzag, causal, forward and backward."""
    q, k, v, do = tensors(h=2, length=12)
    run_correctness(2, [(q, k, v, do, dict(method="ring", layout="zigzag", causal=True))])


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_ring_and_ulysses_equal_the_reference_outputs_gradients_and_bytes(world_size):
    jobs = correctness_jobs()
    done = run_correctness(world_size, jobs)
    # no overlap and other tile sizes: the same numbers (same merges in the same order)
    zig = [j for j, (*_, o) in enumerate(jobs) if o == dict(method="ring", layout="zigzag", causal=True)
           and jobs[j][0].dtype == torch.float64]
    assert len(zig) == 1
    plain, no_overlap = done[zig[0]][0][0], done[-1][0][0]   # rank 0's result of each
    assert (plain["out"] - no_overlap["out"]).abs().max() <= 1e-14


@pytest.mark.slow
def test_ulysses_needs_heads_divisible_by_ranks():
    messages = D.launch(dist_workers.ulysses_bad_heads, 2, timeout=120)
    assert all(m is not None and "H = 3 heads" in m and "P = 2" in m for m in messages)


@pytest.mark.slow
def test_launch_returns_results_in_rank_order_on_the_cpu():
    results = D.launch(dist_workers.all_reduce_sum, 3, 10, scale=2, timeout=120)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["sum"].tolist() == [66.0, 66.0] and r["nested"][0].device.type == "cpu" for r in results)
    assert len({r["pid"] for r in results} | {os.getpid()}) == 4
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_no_rank_leaves_the_group_before_every_rank_has_reported():
    """A rank that is done waits for the others before it closes its connections: one that
    left at once made a slower rank's joining fail on a loaded machine (gloo's
    connectFullMesh: "Connection closed by peer"). Here ranks 0 and 1 are done at once and
    rank 2 looks at them 2 s later."""
    results = D.launch(dist_workers.peers_alive_after, 3, 2.0, timeout=120)
    assert results[:2] == [None, None]
    assert results[2] == [True, True, True], f"ranks that had finished first were gone: {results[2]}"
    assert not multiprocessing.active_children()


def assert_all_gone(err):
    assert not multiprocessing.active_children()
    for pid in err.pids:
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


@pytest.mark.slow
def test_a_rank_that_raises_ends_the_run_naming_it():
    with pytest.raises(D.LaunchError, match=r"rank 1 raised ValueError: bad input on rank 1") as info:
        D.launch(dist_workers.raise_on, 3, 1, timeout=120)
    err = info.value
    assert err.kind == "raised" and err.ranks[0] == 1
    assert "traceback of rank 1" in str(err) and "dist_workers.py" in str(err)
    assert_all_gone(err)


@pytest.mark.slow
def test_a_rank_that_hangs_ends_the_run_within_the_timeout_naming_it():
    import time

    start = time.monotonic()
    with pytest.raises(D.LaunchError, match=r"did not finish within timeout=20 s") as info:
        D.launch(dist_workers.hang_on, 2, 1, timeout=20)
    assert time.monotonic() - start < 20 + 10
    err = info.value
    assert err.kind == "timeout" and set(err.ranks) == {0, 1}
    text = str(err)
    assert "rank 1: in hang_on (dist_workers.py" in text
    assert "rank 0: in all_reduce" in text and "rank 1 not inside torch.distributed" in text
    assert_all_gone(err)


@pytest.mark.slow
def test_a_rank_that_dies_or_returns_garbage_is_reported():
    with pytest.raises(D.LaunchError, match=r"rank 1 exited with code 3") as info:
        D.launch(dist_workers.die_on, 2, 1, timeout=120)
    assert info.value.kind == "died" and info.value.ranks[0] == 1
    assert_all_gone(info.value)
    with pytest.raises(D.LaunchError, match=r"rank 0 raised (PicklingError|AttributeError)"):
        D.launch(dist_workers.unpicklable_result, 1, timeout=120)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "zombie" in fh.read().lower()
    except OSError:
        return True


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_no_rank_outlives_a_killed_launcher(tmp_path):
    """The launcher is killed (SIGKILL: no clean-up runs) while its ranks wait: they end by
    themselves within seconds, whichever start method the platform gave them."""
    import subprocess
    import time

    here = os.path.dirname(os.path.abspath(__file__))
    script = ("import attn_edu.distributed as D, dist_workers\n"
              f"D.launch(dist_workers.write_pid_and_hang, 2, {str(tmp_path)!r}, timeout=300)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.path.dirname(here)]))
    launcher = subprocess.Popen([sys.executable, "-c", script], env=env)
    files = [tmp_path / f"rank{r}.pid" for r in range(2)]
    try:
        deadline = time.monotonic() + 120
        while not all(f.is_file() and f.read_text() for f in files):
            assert launcher.poll() is None, "the launcher ended before its ranks started"
            assert time.monotonic() < deadline, "the ranks did not start within 120 s"
            time.sleep(0.1)
    finally:
        launcher.kill()
        launcher.wait()
    pids = [int(f.read_text()) for f in files]
    deadline = time.monotonic() + 15
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [pid for pid in pids if not _gone(pid)]
    assert not alive, f"ranks {alive} still run 15 s after their launcher was killed"


@pytest.mark.slow
def test_memory_per_rank_falls_like_one_over_P():
    g = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn(1, 2, 1024, 32, generator=g) for _ in range(4))
    peaks = {}
    for p in (1, 2, 4):
        res = D.launch(D.run_attention, p, q, k, v, method="ring", layout="zigzag", causal=True, dout=do,
                       block_q=64, block_k=64, measure_memory=True, timeout=180)
        peaks[p] = max(r["peak_bytes"] for r in res)
    assert peaks[1] > peaks[2] > peaks[4]
    assert peaks[4] <= 0.5 * peaks[1]
    assert all(peaks[p] * p <= 1.6 * peaks[1] for p in peaks)  # O(L/P), plus tiles of fixed size


@pytest.mark.slow
def test_pytorch_context_parallel_on_cpu():
    """What torch.distributed.tensor.experimental does here (chapter 14 reports it)."""
    q, k, v, _ = tensors(h=2, length=16, dv=8)  # the CPU kernel needs d_v = d_k
    res = D.launch(D.torch_context_parallel, 2, q, k, v, True, timeout=120)
    assert all(r["same_zigzag"] is True for r in res)  # its head-tail balancer is our zigzag
    assert all(r["public"] != "ok" for r in res)  # the public API does not run on CPU tensors
    assert all(r["ring"] == "ok" for r in res), res[0]["ring"]
    out = D.unshard([r["ring_out"] for r in res], "zigzag")
    gold = gold_sdpa(q.numpy(), k.numpy(), v.numpy(), causal=True)
    err = np.abs(out.numpy() - gold).max()
    assert 1e-10 < err < 1e-5  # its merge runs in float32 even for float64 inputs


# --------------------------------------------------------------------------- 16-bit inputs: float32 statistics
def sdpa_in_dtype(q, k, v, do, causal):
    """torch's own SDPA in q's dtype (its CPU kernel keeps the statistics in float32)."""
    qq, kk, vv = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal,
                                                           enable_gqa=k.shape[1] != q.shape[1])
    out.backward(do)
    return out.detach(), (qq.grad, kk.grad, vv.grad)


def sixteen_bit_tensors(dtype, length, heads=8, d=64, seed=3):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, heads, length, d, generator=g).to(dtype) for _ in range(4))


def errors_against_gold(out, grads, gold_out, gold_grads):
    """max|x - gold| of the output and of dq, dk, dv."""
    return [float((x.double() - g).abs().max()) for x, g in zip((out, *grads), (gold_out, *gold_grads))]


_REFERENCES = {}  # (inputs, causal) -> the float64 gold, SDPA's errors and the naive answers


def assert_as_accurate_as_sdpa(out, grads, q, k, v, do, causal, what):
    """Within 1.5x of torch SDPA's error in the same dtype, output and each gradient, and
    within the project's 2x (3x) rule against the naive matmul-softmax-matmul in that dtype."""
    key = (tuple(id(x) for x in (q, k, v, do)), causal)
    if key not in _REFERENCES:  # the same inputs serve several layouts and world sizes
        gold_out, gold_grads = torch_gold(q.double(), k.double(), v.double(), do.double(), causal)
        ref = errors_against_gold(*sdpa_in_dtype(q, k, v, do, causal), gold_out, gold_grads)
        _REFERENCES[key] = (gold_out, gold_grads, ref, torch_gold(q, k, v, do, causal), (q, k, v, do))
    gold_out, gold_grads, ref, (naive_out, naive_grads), _ = _REFERENCES[key]
    got = errors_against_gold(out, grads, gold_out, gold_grads)
    for name, e, r in zip(("out", "dq", "dk", "dv"), got, ref):
        assert e <= 1.5 * r, f"{what} {name}: error {e:.4g} against SDPA's {r:.4g} in {q.dtype}"
    assert_close_to_reference(out, gold_out, naive_out, what=what)
    for g, want, naive in zip(grads, gold_grads, naive_grads):
        assert_close_to_reference(g, want, naive, factor=3.0, what=what + " gradient")
    return got, ref


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_the_torch_tile_loop_is_as_accurate_as_sdpa_in_16_bits(dtype, causal):
    from attn_edu.flash_torch import flash_attention as torch_flash

    q, k, v, do = sixteen_bit_tensors(dtype, 512)
    qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
    out, lse = torch_flash(qq, kk, vv, causal=causal, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32  # statistics in float32, output rounded
    out.backward(do)
    assert_as_accurate_as_sdpa(out.detach(), (qq.grad, kk.grad, vv.grad), q, k, v, do, causal,
                               f"tile loop causal={causal} {dtype}")


_JOBS = {}


def sixteen_bit_jobs(length=256):
    """The same tensors on every call (the references are computed once per input)."""
    if length not in _JOBS:
        _JOBS[length] = _sixteen_bit_jobs(length)
    return _JOBS[length]


def _sixteen_bit_jobs(length):
    jobs = []
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v, do = sixteen_bit_tensors(dtype, length)
        jobs += [(q, k, v, do, dict(method="ring", layout=lay, causal=c)) for lay in D.LAYOUTS for c in (False, True)]
        jobs += [(q, k, v, do, dict(method="ulysses", layout="contiguous", causal=c)) for c in (False, True)]
    return jobs


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_ring_and_ulysses_are_as_accurate_as_sdpa_in_16_bits(world_size):
    """bf16 / fp16: float32 statistics and accumulators, so within 1.5x of torch SDPA's error."""
    for results, q, k, v, do, o in launched_jobs(world_size, sixteen_bit_jobs(), timeout=300):
        out, grads = gathered(results, o["layout"])
        assert out.dtype == q.dtype and all(g.dtype == q.dtype for g in grads)
        assert_as_accurate_as_sdpa(out, grads, q, k, v, do, o["causal"],
                                   f"{o['method']} {o['layout']} causal={o['causal']} P={world_size} {q.dtype}")


# --------------------------------------------------------------------------- grouped-query attention
def gqa_jobs():
    jobs = []
    for kv_heads in (4, 2, 1):  # of H = 8; at P = 4, H_kv = 2 and 1 make Ulysses copy K/V heads
        q, _, _, do = tensors(h=8, length=16, d=6, dv=6, seed=4)
        _, k, v, _ = tensors(h=kv_heads, length=16, d=6, dv=6, seed=5)
        jobs += [(q, k, v, do, dict(method="ring", layout="zigzag", causal=True)),
                 (q, k, v, do, dict(method="ring", layout="contiguous", causal=False)),
                 (q, k, v, do, dict(method="ulysses", layout="contiguous", causal=True))]
    return jobs


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_grouped_kv_heads_are_sent_as_they_are_and_bytes_match_the_formulas(world_size):
    copies = 0
    for results, q, k, v, do, o in launched_jobs(world_size, gqa_jobs()):
        check_run(results, q, k, v, do, world_size, o["method"], o["layout"], o["causal"])
        b, h, length, d = q.shape
        hkv = k.shape[1]
        if o["method"] == "ring":  # H_kv heads travel: H / H_kv times fewer bytes than expanded K/V
            want = D.ring_bytes(b, hkv, length, d, world_size, 8, backward=True)
            assert want * h == D.ring_bytes(b, h, length, d, world_size, 8, backward=True) * hkv
        else:  # Q, O with H heads; K, V with max(H_kv, P): copies when P > H_kv
            want = D.ulysses_bytes(b, h, length, d, world_size, 8, backward=True, kv_heads=hkv)
            one = lambda heads: b * heads * (length // world_size) * d * 8 * (world_size - 1) // world_size  # noqa: E731
            assert want == 2 * (2 * one(h) + 2 * one(max(hkv, world_size)))
            copies += hkv < world_size
        assert [r["sent"] for r in results] == [want] * world_size, o
    assert copies == {2: 1, 4: 2}[world_size]  # H_kv = 1 at P = 2; H_kv = 2 and 1 at P = 4


# --------------------------------------------------------------------------- torchrun
@pytest.mark.slow  # starts torchrun with two processes
def test_the_torchrun_entry_point_on_gloo_matches_the_reference(tmp_path):
    """``torchrun --nproc-per-node 2 -m attn_edu.distributed.run`` (env:// rendezvous): each
    rank draws only its shard; outputs and gradients against the float64 gold, bytes counted."""
    import subprocess

    from attn_edu.distributed import run as entry

    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(here), os.environ.get("PYTHONPATH", "")]))
    shape = dict(heads=4, kv_heads=2, length=32, head_dim=8)
    for method, layout in (("ring", "zigzag"),):  # one start (about 10 s); Ulysses is tested above
        out_dir = tmp_path / method
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "attn_edu.distributed.run", "--backend", "gloo", "--method", method, "--layout", layout,
               "--causal", "--dtype", "float64", "--backward", "--seed", "7", "--out", str(out_dir)]
        cmd += [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        ranks = [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(2)]
        assert [r["backend"] for r in ranks] == ["gloo", "gloo"]
        q, do = (entry.seeded_full(n, (1, 4), 8, 32, seed=7) for n in ("q", "dout"))
        k, v = (entry.seeded_full(n, (1, 2), 8, 32, seed=7) for n in ("k", "v"))
        for r, res in enumerate(ranks):  # a rank's shard is the full tensor's rows at its positions
            assert (res["positions"] == D.positions(32, r, 2, layout)).all()
        out, grads = gathered(ranks, layout)
        gold_out, gold_grads = torch_gold(q, k, v, do, True)
        assert (out - gold_out).abs().max() <= 1e-10, method
        for g, want in zip(grads, gold_grads):
            assert g.shape == want.shape and (g - want).abs().max() <= 1e-10, method
        want = comm_bytes(method, q, k, v, 2, backward=True)
        assert [r["sent"] for r in ranks] == [r["received"] for r in ranks] == [want, want], method
        assert json.loads(proc.stdout.strip().splitlines()[-1])["sent"] == want


def test_the_seeded_shards_are_the_full_tensors_rows():
    from attn_edu.distributed import run as entry

    full = entry.seeded_full("k", (2, 3), 4, 300, seed=1)
    for r in range(3):  # blocks of 64 positions, shards of 50 in chunks of 50: blocks shared and split
        rows = D.positions(300, r, 3, "zigzag")
        assert torch.equal(entry.seeded_shard("k", (2, 3), 4, rows, seed=1, dtype=torch.float64),
                           full[..., rows, :])
    assert not torch.equal(full, entry.seeded_full("q", (2, 3), 4, 300, seed=1))  # tensors differ
    assert not torch.equal(full, entry.seeded_full("k", (2, 3), 4, 300, seed=2))  # and seeds
    x = full.reshape(-1)  # standard normal numbers, none repeated across blocks
    assert abs(float(x.std()) - 1) < 0.05 and len(torch.unique(x)) == x.numel()
    with pytest.raises(ValueError, match="name must be one of"):
        entry.seeded_shard("x", (1,), 4, [0])


def test_hidden_fraction_says_how_far_jitter_could_move_it():
    """The GPU's overlap share, from repeated timings: the formula on the medians, and the
    spread the timings' own jitter gives it (a short transfer makes a small difference
    divided by a small number)."""
    from attn_edu.distributed.overlap import hidden_fraction

    # compute 4 ms, copy 1 ms, both at once 4 ms: the copy is wholly hidden, no jitter
    assert hidden_fraction([4.0] * 5, [1.0] * 5, [4.0] * 5) == (1.0, 0.0)
    # nothing overlaps: both at once takes the sum
    assert hidden_fraction([4.0] * 5, [1.0] * 5, [5.0] * 5)[0] == 0.0
    # the medians, not the means: one slow outlier does not move the share
    assert hidden_fraction([4.0, 4.0, 4.0, 4.0, 40.0], [1.0] * 5, [4.5] * 5)[0] == pytest.approx(0.5)
    # jitter of 0.1 ms (quartiles 4.0 and 4.1) on two runs, 0.025 on the 0.2 ms copy: +-1.1
    c, t, o = [4.0, 4.0, 4.1, 4.1], [0.15, 0.2, 0.2, 0.25], [4.1, 4.1, 4.2, 4.2]
    hidden, spread = hidden_fraction(c, t, o)
    assert hidden == pytest.approx((4.05 + 0.2 - 4.15) / 0.2)
    assert spread == pytest.approx((0.1 + 0.025 + 0.1) / 0.2)
    # a copy ten times longer (and ten times its jitter): the spread falls fivefold
    assert hidden_fraction(c, [x * 10 for x in t], o)[1] == pytest.approx((0.1 + 0.25 + 0.1) / 2.0)
    assert hidden_fraction([4.0], [1.0], [4.5]) == (0.5, 0.0)   # one repeat: no spread to see
    with pytest.raises(TypeError, match="overlap_ms must be a non-empty sequence"):
        hidden_fraction([4.0], [1.0], [])
    with pytest.raises(TypeError, match="compute_ms must be a non-empty sequence"):
        hidden_fraction(4.0, [1.0], [4.5])
    with pytest.raises(ValueError, match=r"transfer_ms must hold positive times.*nan"):
        hidden_fraction([4.0], [float("nan")], [4.5])


def test_the_overlap_measurement_dry_run_writes_its_document(tmp_path, capsys):
    """The GPU measurement of a ring step's overlap (compute stream vs a copy engine) runs its
    pipeline on the CPU, and says there that overlap is not measured, and why."""
    from attn_edu.distributed import overlap

    path = tmp_path / "ring_overlap.json"
    assert overlap.main(["--out", str(path), "--dry-run", "--n", "32", "64", "--heads", "4", "--kv-heads", "2",
                         "--head-dim", "8"]) == 0
    doc = json.loads(path.read_text())
    assert doc["kind"] == "ring_overlap" and doc["dry_run"] is True and doc["device"]["kind"] == "cpu"
    assert [r["n"] for r in doc["rows"]] == [32, 64]
    assert all(r["bytes"] == 2 * 2 * r["n"] * 8 * 4 for r in doc["rows"])  # K and V, H_kv heads, float32
    assert all(r["compute_ms"] > 0 and r["transfer_ms"] > 0 and r["overlap_ms"] is None for r in doc["rows"])
    assert "no CUDA streams" in doc["note"]
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="needs a CUDA GPU.*dry"):
            overlap.measure_overlap(dry_run=False)
