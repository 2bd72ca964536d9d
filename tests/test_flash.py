"""Tiled attention (attn_edu.flash) against the float64 reference, on the shapes that break tiling."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_edu import masks, precision
from attn_edu.flash import TileRecord, flash_attention
from attn_edu.reference import scaled_dot_product_attention as sdpa
from attn_edu.testing import assert_close_to_reference, assert_same_up_to_rounding, reference_pair
from conftest import qkv, rand

LENGTHS = [1, 3, 17, 63, 65, 127, 129]


def tile_layout(lq, lk, bq, bk, mask=None, causal=False):
    """(computed, partial) of the loop over the whole batch: the merged TilePlan."""
    plan = masks.plan_tiles(mask, bq, bk, causal, lq=lq, lk=lk).merged()
    return plan.computed, plan.partial


def check64(q, k, v, **kw):
    """flash vs reference in float64: <= 1e-10, and zeros (not NaN) where the reference has zeros."""
    blocks = {key: kw.pop(key) for key in ("block_q", "block_k") if key in kw}
    out = flash_attention(q, k, v, **kw, **blocks)
    gold = sdpa(q, k, v, **kw)
    assert out.shape == gold.shape and out.dtype == gold.dtype
    assert np.isfinite(out).all()
    assert np.max(np.abs(out - gold), initial=0.0) <= 1e-10
    return out


# --------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("lq", LENGTHS)
@pytest.mark.parametrize("lk", [1, 17, 65, 129])
def test_lengths_blocks_do_not_divide(lq, lk):
    q, k, v = qkv(lq, lk, seed=lq * 1000 + lk, dv=7, lead=(2,))
    check64(q, k, v, block_q=16, block_k=32)
    check64(q, k, v, block_q=7, block_k=5, causal="bottom_right")


@pytest.mark.parametrize("d", [16, 59, 64, 111, 128])
def test_head_dims_and_dv_differs(d):
    q, k, v = qkv(33, 47, d=d, dv=d // 2 + 1, seed=d, lead=(2,))
    check64(q, k, v, block_q=16, block_k=16, causal=True)


@pytest.mark.parametrize("lq,lk", [(1023, 5), (5, 1025), (1025, 1023)])
def test_long_lengths(lq, lk):
    q, k, v = qkv(lq, lk, d=16, dv=4, lead=(), seed=lq + lk)
    check64(q, k, v, block_q=128, block_k=96, causal="top_left")


@pytest.mark.parametrize("bq,bk", [(1, 1), (1, 64), (64, 1), (200, 300), (64, 64)])
def test_block_sizes_including_larger_than_lengths(bq, bk):
    q, k, v = qkv(37, 29, seed=bq + bk, dv=7, lead=(2,))
    check64(q, k, v, block_q=bq, block_k=bk)
    check64(q, k, v, block_q=bq, block_k=bk, causal="bottom_right")


def test_batch_heads_broadcast_and_gqa():
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, 2, 4, 19, 8), rand(rng, 1, 4, 23, 8), rand(rng, 1, 4, 23, 5)
    check64(q, k, v, block_q=8, block_k=8, causal=True)  # k/v broadcast over the batch
    k2, v2 = rand(rng, 2, 2, 23, 8), rand(rng, 2, 2, 23, 5)
    check64(q, k2, v2, block_q=8, block_k=6, enable_gqa=True, causal="bottom_right")
    q1 = rand(rng, 19, 8)  # single head
    check64(q1, rand(rng, 23, 8), rand(rng, 23, 3), block_q=4, block_k=4)


def test_empty_lengths():
    q, k, v = qkv(0, 5, dv=7, lead=(2,))
    assert flash_attention(q, k, v).shape == (2, 0, 7)
    q, k, v = qkv(4, 0, dv=7, lead=(2,))
    out, lse = flash_attention(q, k, v, return_lse=True)
    np.testing.assert_array_equal(out, sdpa(q, k, v))
    assert np.isneginf(lse).all()


# --------------------------------------------------------------------------- masks
@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
@pytest.mark.parametrize("lq,lk", [(17, 17), (9, 40), (40, 9), (65, 63)])
def test_masks_bool_float_padding_with_causal(causal, lq, lk):
    rng = np.random.default_rng(lq * 7 + lk)
    q, k, v = qkv(lq, lk, lead=(2, 3), seed=lq + lk, dv=7)
    bool_mask = rng.random((2, 3, lq, lk)) < 0.4  # random, with fully masked rows
    float_mask = rand(rng, lq, lk)
    float_mask[rng.random((lq, lk)) < 0.5] = -np.inf
    pad = masks.key_mask(masks.padding_mask([lk, max(lk // 3, 1)], lk), heads=True)  # (2, 1, 1, Lk)
    qk = masks.query_key_mask(masks.padding_mask([lq, lq // 2], lq),
                              masks.padding_mask([lk // 2, lk], lk), heads=True)  # (2, 1, Lq, Lk)
    for m in (bool_mask, float_mask, pad, qk, masks.to_additive(qk, np.float64), bool_mask[0, 0, 0]):
        check64(q, k, v, mask=m, causal=causal, block_q=8, block_k=16)


def test_causal_mask_given_as_mask_equals_causal_argument():
    q, k, v = qkv(9, 14, dv=7, lead=(2,))
    for align in ("top_left", "bottom_right"):
        a = flash_attention(q, k, v, mask=masks.causal_mask(9, 14, align), block_q=4, block_k=4)
        b = flash_attention(q, k, v, causal=align, block_q=4, block_k=4)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)


def test_fully_masked_rows_give_zeros_and_lse_minus_inf():
    q, k, v = qkv(6, 8, seed=1, dv=7, lead=(2,))
    m = np.ones((2, 6, 8), bool)
    m[0, 1] = False
    m[1, 4] = False
    out, lse = flash_attention(q, k, v, mask=m, block_q=4, block_k=3, return_lse=True)
    assert np.isfinite(out).all() and (out[0, 1] == 0).all() and (out[1, 4] == 0).all()
    assert np.isneginf(lse[0, 1]) and np.isneginf(lse[1, 4]) and np.isfinite(lse[0, 0])
    # causal bottom-right with Lq > Lk: the first Lq - Lk rows see nothing
    q, k, v = qkv(10, 4, seed=2, dv=7, lead=(2,))
    out, lse = flash_attention(q, k, v, causal="bottom_right", block_q=3, block_k=3, return_lse=True)
    assert (out[:, :6] == 0).all() and np.isneginf(lse[:, :6]).all() and np.isfinite(lse[:, 6:]).all()
    check64(q, k, v, causal="bottom_right", block_q=3, block_k=3)
    # a float mask that is all -inf
    out = flash_attention(q, k, v, mask=np.full((10, 4), -np.inf))
    assert (out == 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("causal", [False, "bottom_right"])
def test_low_precision_tolerance_rule(dtype, causal):
    q, k, v = qkv(70, 90, d=32, dv=16, seed=5, lead=(2,))
    m = np.random.default_rng(1).random((70, 90)) < 0.7
    lo = [x.astype(dtype) for x in (q, k, v)]
    gold, naive = reference_pair(*lo, mask=m, causal=causal)
    out, lse = flash_attention(*lo, mask=m, causal=causal, block_q=32, block_k=16, return_lse=True)
    assert out.dtype == dtype and lse.dtype == dtype  # computed in the input dtype
    assert_close_to_reference(out, gold, naive)


def test_float_mask_of_another_dtype_is_cast_like_reference():
    q, k, v = qkv(12, 13, dtype=np.float32, dv=7, lead=(2,))
    m = rand(np.random.default_rng(0), 12, 13)  # float64 mask, float32 inputs
    out = flash_attention(q, k, v, mask=m, block_q=5, block_k=5)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, sdpa(q, k, v, mask=m), rtol=0, atol=5e-6)


# --------------------------------------------------------------------------- invariants
@st.composite
def problems(draw):
    lq, lk = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    dk, dv = draw(st.integers(1, 6)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mag = draw(st.sampled_from([0.1, 1.0, 8.0]))
    q, k, v = rand(rng, lq, dk) * mag, rand(rng, lk, dk) * mag, rand(rng, lk, dv)
    mask = rng.random((lq, lk)) < draw(st.sampled_from([0.2, 0.6, 1.0])) if draw(st.booleans()) else None
    causal = draw(st.sampled_from([False, "top_left", "bottom_right"]))
    bq, bk = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    return q, k, v, mask, causal, bq, bk, rng


@settings(max_examples=40, deadline=None)
@given(problems())
def test_property_matches_reference_and_masked_kv_do_not_matter(p):
    q, k, v, mask, causal, bq, bk, rng = p
    out = check64(q, k, v, mask=mask, causal=causal, block_q=bq, block_k=bk)
    allowed = np.ones((len(q), len(k)), bool) if mask is None else mask.copy()
    if causal:
        allowed &= np.tri(len(q), len(k), k=0 if causal == "top_left" else len(k) - len(q), dtype=bool)
    hidden = ~allowed.any(axis=0)  # keys no query may see
    k2, v2 = k.copy(), v.copy()
    k2[hidden] = 100 * rand(rng, int(hidden.sum()), k.shape[1])
    v2[hidden] = 100 * rand(rng, int(hidden.sum()), v.shape[1])
    changed = flash_attention(q, k2, v2, mask=mask, causal=causal, block_q=bq, block_k=bk)
    assert_same_up_to_rounding(changed, out)  # other inputs: the same numbers, up to rounding
    again = flash_attention(q, k, v, mask=mask, causal=causal, block_q=bq, block_k=bk)
    np.testing.assert_array_equal(again, out)  # the same call again: bitwise equal


@settings(max_examples=40, deadline=None)
@given(problems())
def test_property_permutations(p):
    q, k, v, mask, _, bq, bk, rng = p  # no causal: permutations do not commute with it
    pk, pq = rng.permutation(len(k)), rng.permutation(len(q))
    out = flash_attention(q, k, v, mask=mask, block_q=bq, block_k=bk)
    mk = None if mask is None else mask[:, pk]
    permuted_kv = flash_attention(q, k[pk], v[pk], mask=mk, block_q=bq, block_k=bk)
    np.testing.assert_allclose(permuted_kv, out, rtol=0, atol=1e-12)
    mq = None if mask is None else mask[pq]
    np.testing.assert_allclose(flash_attention(q[pq], k, v, mask=mq, block_q=bq, block_k=bk),
                               out[pq], rtol=0, atol=1e-12)
    zero = flash_attention(np.zeros_like(q), np.zeros_like(k), v, block_q=bq, block_k=bk)
    np.testing.assert_allclose(zero, np.broadcast_to(v.mean(0), zero.shape), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- lse and trace
def test_lse_matches_logsumexp_of_the_scores():
    q, k, v = qkv(21, 30, seed=9, dv=7, lead=(2,))
    m = rand(np.random.default_rng(2), 21, 30)
    m[3] = -np.inf  # a fully masked row
    for causal in (False, "bottom_right"):
        _, lse = flash_attention(q, k, v, mask=m, causal=causal, block_q=8, block_k=7, return_lse=True)
        scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(16) + m  # (2, 21, 30)
        keep = np.ones((21, 30), bool) if not causal else np.tri(21, 30, k=9, dtype=bool)
        gold = precision.logsumexp(scores, axis=-1, mask=keep)
        assert np.isneginf(lse[:, 3]).all()
        np.testing.assert_allclose(lse, gold, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
def test_trace_is_consistent_with_output_and_layout(causal):
    q, k, v = qkv(23, 31, seed=4, dv=7, lead=(2,))
    m = np.random.default_rng(3).random((23, 31)) < 0.8
    m[:, 8:16] = False  # a column of empty tiles (block_k = 8)
    bq, bk = 6, 8
    out, lse, trace = flash_attention(q, k, v, mask=m, causal=causal, block_q=bq, block_k=bk,
                                      return_lse=True, return_trace=True)
    computed, partial = tile_layout(23, 31, bq, bk, mask=m, causal=causal)
    nq, nk = computed.shape
    assert all(isinstance(r, TileRecord) for r in trace)
    assert [(r.q_block, r.k_block) for r in trace] == [(i, j) for i in range(nq) for j in range(nk)]
    skipped = np.array([r.skipped for r in trace]).reshape(nq, nk)
    np.testing.assert_array_equal(skipped, ~computed)
    assert skipped.sum() >= nq  # the masked-out column at least
    np.testing.assert_array_equal(np.array([r.masked for r in trace]).reshape(nq, nk), partial)
    for i in range(nq):
        last = trace[i * nk + nk - 1]
        r0, r1 = last.q_rows
        np.testing.assert_allclose(last.o, out[..., r0:r1, :], rtol=0, atol=1e-14)
        with np.errstate(divide="ignore"):
            np.testing.assert_allclose(last.m + np.log(last.l), lse[..., r0:r1], rtol=0, atol=1e-14)


def test_trace_equals_merging_softmax_stats_tile_by_tile():
    """The inline update is precision.softmax_partial + merge_softmax_stats, one tile at a time."""
    q, k, v = qkv(10, 17, seed=8, dv=7, lead=(2,))
    bq, bk = 5, 4
    _, trace = flash_attention(q, k, v, causal=True, block_q=bq, block_k=bk, return_trace=True)
    scores = q @ np.swapaxes(k, -1, -2) / 4.0  # (2, 10, 17); d = 16
    allowed = np.tri(10, 17, dtype=bool)
    state = {}
    for r in trace:
        (r0, r1), (c0, c1) = r.q_rows, r.k_cols
        if r.q_block not in state:
            state[r.q_block] = (np.full((2, r1 - r0), -np.inf), np.zeros((2, r1 - r0)),
                                np.zeros((2, r1 - r0, v.shape[-1])))
        if not r.skipped:
            s, keep = scores[:, r0:r1, c0:c1], allowed[r0:r1, c0:c1]
            m2, l2 = precision.softmax_partial(s, mask=keep)
            w = np.exp(np.where(keep, s, -np.inf) - np.where(np.isneginf(m2), 0, m2)[..., None])
            o2 = (w @ v[:, c0:c1]) / np.where(l2 == 0, 1, l2)[..., None]
            state[r.q_block] = precision.merge_softmax_stats(*state[r.q_block], m2, l2, o2)
        m, l, o = state[r.q_block]
        # one big score matmul against one per tile: BLAS may round them an ulp apart
        assert_same_up_to_rounding(r.m, m)
        np.testing.assert_allclose(l, r.l, rtol=1e-13, atol=0)
        np.testing.assert_allclose(o, r.o, rtol=0, atol=1e-13)


def test_row_that_sees_its_first_allowed_key_late():
    """Cases (a)/(b) of chapter 09's proof inside *computed* tiles: a row whose first key
    tiles are all blocked keeps m = -inf, l = 0 (no NaN from -inf - -inf), then starts
    normally; a fully blocked tile in the middle leaves the state unchanged."""
    q, k, v = qkv(4, 12, lead=(), seed=3, dv=7)
    allowed = np.ones((4, 12), bool)
    allowed[0, :8] = False  # row 0: key tiles 0 and 1 (of 4 keys each) fully blocked
    allowed[1, 4:8] = False  # row 1: the middle key tile fully blocked
    out, trace = flash_attention(q, k, v, mask=allowed, block_q=4, block_k=4, return_trace=True)
    check64(q, k, v, mask=allowed, block_q=4, block_k=4)
    assert [r.skipped for r in trace] == [False, False, False]  # other rows need every tile
    assert np.isneginf(trace[0].m[0]) and np.isneginf(trace[1].m[0])
    assert trace[0].l[0] == 0 and trace[1].l[0] == 0 and (trace[1].o[0] == 0).all()
    assert np.isfinite(trace[2].m[0]) and trace[2].l[0] >= 1
    assert trace[1].m[1] == trace[0].m[1] and trace[1].l[1] == trace[0].l[1]
    np.testing.assert_array_equal(trace[1].o[1], trace[0].o[1])


@pytest.mark.parametrize("causal", [False, "top_left", "bottom_right"])
@pytest.mark.parametrize("lq,lk,bq,bk", [(100, 100, 24, 16), (37, 90, 16, 32), (90, 37, 7, 5)])
def test_kv_bytes_read_match_the_traffic_model(monkeypatch, causal, lq, lk, bq, bk):
    """profiling.tiled_hbm_bytes (chapter 09's traffic formula) counts exactly what the loop
    reads: the second operand of every matmul is a K tile or a V tile; add Q once, O once."""
    from attn_edu import profiling

    q, k, v = qkv(lq, lk, d=8, dv=5, lead=(), dtype=np.float32)
    seen = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda a, b, **kw: seen.append(b.nbytes) or real(a, b, **kw))
    out = flash_attention(q, k, v, causal=causal, block_q=bq, block_k=bk)
    monkeypatch.undo()
    measured = q.nbytes + sum(seen) + out.nbytes
    assert measured == profiling.tiled_hbm_bytes(lq, 8, bq, bk, itemsize=4, causal=causal,
                                                 lk=lk, dv=5)


# --------------------------------------------------------------------------- skipping and memory
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize("lq,lk,b", [(64, 64, 8), (50, 70, 16), (70, 50, 16)])
def test_causal_tiles_are_skipped_not_computed(monkeypatch, align, lq, lk, b):
    q, k, v = qkv(lq, lk, dv=7, lead=(2,))
    calls = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    flash_attention(q, k, v, causal=align, block_q=b, block_k=b)
    monkeypatch.undo()
    layout = masks.causal_block_layout(lq, lk, b, b, align)
    assert len(calls) == 2 * layout.sum()  # QK^T and PV, once per computed tile
    assert layout.sum() < layout.size
    computed, partial = tile_layout(lq, lk, b, b, causal=align)
    np.testing.assert_array_equal(computed, layout)
    # a partial tile contains both allowed and blocked entries; a full one only allowed
    cm = masks.causal_mask(lq, lk, align)
    np.testing.assert_array_equal(partial, masks.block_layout(cm, b, b) & ~masks.full_blocks(cm, b, b))


def test_block_mask_tiles_are_skipped(monkeypatch):
    q, k, v = qkv(32, 48, dv=7, lead=(2,))
    layout = np.random.default_rng(0).random((4, 6)) < 0.4
    m = np.kron(layout, np.ones((8, 8), bool)).astype(bool)  # block-sparse mask
    calls = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    flash_attention(q, k, v, mask=m, block_q=8, block_k=8)
    monkeypatch.undo()
    assert len(calls) == 2 * layout.sum()
    computed, partial = tile_layout(32, 48, 8, 8, mask=m)
    np.testing.assert_array_equal(computed, layout)
    assert not partial.any()  # every computed tile is fully allowed: no element mask
    check64(q, k, v, mask=m, block_q=8, block_k=8)


def test_tile_layout_matches_brute_force_on_a_float_batch_mask():
    rng = np.random.default_rng(5)
    m = np.where(rng.random((2, 1, 13, 19)) < 0.3, 0.0, -np.inf)
    m[:, :, :, 5:12] = -np.inf
    computed, partial = tile_layout(13, 19, 4, 6, mask=m, causal="bottom_right")
    allowed = (~np.isneginf(m)) & masks.causal_mask(13, 19, "bottom_right").view(np.ndarray)
    for i in range(computed.shape[0]):
        for j in range(computed.shape[1]):
            tile = allowed[..., 4 * i:4 * i + 4, 6 * j:6 * j + 6]
            assert computed[i, j] == tile.any()
            assert partial[i, j] == (tile.any() and not tile.all())


def _peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def tile_buffer_bytes(bq, bk, d, itemsize):
    """One worker's buffers, counted from the loop: the scaled Q block, A, the product P V and
    the final A / l (bq x d each) and the tile of scores S = P (bq x bk)."""
    return (4 * bq * d + bq * bk) * itemsize


#: tracemalloc also sees the loop's Python bookkeeping (the BLAS limiter, the thread pool,
#: the row and column bounds, per-row vectors): under 64 KiB measured, allowed twice that.
BOOKKEEPING = 128 * 1024


@pytest.mark.parametrize("cores", [1, 16, 64])
def test_peak_memory_is_the_output_plus_one_set_of_tiles_per_worker(monkeypatch, cores):
    """The extra memory of the NumPy loop is O(n d) (the output) plus W sets of tile buffers,
    W = numpy_workers = min(cores, row blocks): it does not grow with n once W stops growing,
    and stays under a quarter of one (n, n) matrix for any core count (chapter 09 asserts the
    bound)."""
    pytest.importorskip("threadpoolctl")  # without it the loop runs on one thread
    import attn_edu.flash as flash

    monkeypatch.setattr(flash, "_cpu_count", lambda: cores)
    d, b = 64, 128
    for n in (2048, 4096):
        q, k, v = qkv(n, n, d=d, dv=d, lead=(), dtype=np.float32, seed=n)
        workers = flash.numpy_workers(n, b)
        assert workers == min(cores, n // b)
        out = flash_attention(q, k, v, block_q=b, block_k=b)  # the pool of this size exists
        tiled = _peak(lambda: flash_attention(q, k, v, block_q=b, block_k=b))
        bound = out.nbytes + workers * tile_buffer_bytes(b, b, d, 4) + BOOKKEEPING
        assert out.nbytes < tiled <= bound, (n, cores, tiled, bound)
        # W stops at n / b row blocks, so even 64 cores keep it under a quarter of one (n, n)
        # float32 matrix (the bound is 23% of it at n = 2048 with 16 workers, 11% at 4096)
        assert bound < n * n * 4 / 4 and tiled < n * n * 4 / 4
    naive = _peak(lambda: sdpa(q, k, v))
    assert naive >= n * n * 4  # the (n, n) float32 scores exist


def test_numpy_workers_follows_the_cores_and_the_row_blocks(monkeypatch):
    import attn_edu.flash as flash

    monkeypatch.setattr(flash, "_cpu_count", lambda: 16)
    monkeypatch.setattr(flash, "_BLAS_CONTROLLER", object())  # as if threadpoolctl were installed
    assert [flash.numpy_workers(n, 128) for n in (100, 128, 129, 1024, 2048, 8192)] == [1, 1, 2, 8, 16, 16]
    monkeypatch.setattr(flash, "_BLAS_CONTROLLER", False)  # without threadpoolctl: one thread
    assert flash.numpy_workers(8192, 128) == 1
    with pytest.raises(ValueError, match="block_q"):
        flash.numpy_workers(100, 0)


# --------------------------------------------------------------------------- errors
Q, K, V = qkv(5, 7, d=8, dv=3, lead=(2, 4))
ERROR_CASES = [
    dict(q=Q[0, 0, 0]),
    dict(k=K[..., :6]),
    dict(v=V[..., :6, :]),
    dict(k=K[:1].repeat(3, 0), v=V[:1].repeat(3, 0)),
    dict(k=K[:, :2], v=V[:, :2]),
    dict(k=K[:, :3], v=V[:, :3], enable_gqa=True),
    dict(mask=np.ones((5, 6), bool)),
    dict(mask=np.ones((3, 2, 4, 5, 7), bool)),
    dict(mask=np.ones((5, 7), dtype=np.int64)),
    dict(mask=np.full((5, 7), np.nan)),
    dict(mask=np.full((5, 7), np.inf)),
    dict(k=K.astype(np.float32)),
    dict(q=np.ones((5, 8), np.int64), k=np.ones((7, 8), np.int64), v=np.ones((7, 3), np.int64)),
    dict(scale=float("nan")),
    dict(scale=0.0),
    dict(scale="0.1"),
    dict(causal="lower"),
    dict(causal=1),
    dict(mask=masks.causal_mask(5, 7), causal=True),
    dict(mask=masks.causal_mask(5, 7, "bottom_right"), causal="top_left"),
    dict(q=Q[0, 0], k=K[0, 0], v=V[0, 0], enable_gqa=True),
]


@pytest.mark.parametrize("over", ERROR_CASES, ids=range(len(ERROR_CASES)))
def test_errors_are_the_references(over):
    args = dict(q=Q, k=K, v=V)
    args.update(over)
    with pytest.raises((ValueError, TypeError)) as ref:
        sdpa(**args)
    with pytest.raises(ref.type) as ours:
        flash_attention(**args, block_q=2, block_k=3)
    assert str(ours.value) == str(ref.value)


@pytest.mark.parametrize("name", ["block_q", "block_k"])
@pytest.mark.parametrize("bad,exc", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_block_size_errors(name, bad, exc):
    with pytest.raises(exc, match=f"{name} must be"):
        flash_attention(Q, K, V, **{name: bad})
    with pytest.raises(exc, match=f"{name} must be"):
        masks.plan_tiles(lq=5, lk=7, **{name: bad})


def test_mixed_numpy_and_torch_is_an_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="all NumPy arrays or all torch tensors"):
        flash_attention(Q, torch.as_tensor(K), V)
    with pytest.raises(TypeError, match="mask is a torch tensor"):
        flash_attention(Q, K, V, mask=torch.ones(5, 7, dtype=torch.bool))


# --------------------------------------------------------------------------- PyTorch twin
def _torch():
    return pytest.importorskip("torch")


def _tt(x, requires_grad=False, device="cpu"):
    torch = _torch()
    return torch.tensor(x, device=device, requires_grad=requires_grad)


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
@pytest.mark.parametrize("lq,lk", [(17, 17), (9, 40), (40, 9)])
def test_torch_twin_matches_reference(causal, lq, lk):
    torch = _torch()
    q, k, v = qkv(lq, lk, lead=(2, 3), seed=lq + lk, dv=7)
    rng = np.random.default_rng(lq)
    mb = rng.random((2, 1, lq, lk)) < 0.5
    mf = np.where(rng.random((lq, lk)) < 0.5, rand(rng, lq, lk), -np.inf)
    for m in (None, mb, mf):
        tm = None if m is None else torch.as_tensor(m)
        out, lse = flash_attention(_tt(q), _tt(k), _tt(v), mask=tm, causal=causal, block_q=8, block_k=16,
                                   return_lse=True)
        gold = sdpa(q, k, v, mask=m, causal=causal)
        assert out.dtype == torch.float64 and np.abs(out.numpy() - gold).max() <= 1e-10
        _, lse_np = flash_attention(q, k, v, mask=m, causal=causal, block_q=8, block_k=16, return_lse=True)
        np.testing.assert_allclose(lse.numpy(), lse_np, rtol=0, atol=1e-12)
    # float32: the tolerance rule
    lo = [_tt(x).float() for x in (q, k, v)]
    out = flash_attention(*lo, causal=causal, block_q=8, block_k=16)
    assert out.dtype == torch.float32
    assert_close_to_reference(out, *reference_pair(*lo, causal=causal))


def test_torch_twin_gradcheck_float64():
    torch = _torch()
    rng = np.random.default_rng(0)
    q = _tt(rand(rng, 1, 2, 5, 4), True)
    k = _tt(rand(rng, 1, 2, 7, 4), True)
    v = _tt(rand(rng, 1, 2, 7, 3), True)

    def gc(fn, *inputs):
        assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)

    gc(lambda q, k, v: flash_attention(q, k, v, block_q=2, block_k=3), q, k, v)
    gc(lambda q, k, v: flash_attention(q, k, v, causal="bottom_right", scale=-0.7, block_q=2, block_k=3), q, k, v)
    bm = torch.ones(5, 7, dtype=torch.bool)
    bm[1] = False  # a fully masked row
    bm[:, 4] = False
    gc(lambda q, k, v: flash_attention(q, k, v, mask=bm, causal=True, block_q=3, block_k=2), q, k, v)
    fm = _tt(rand(rng, 5, 7), True)  # finite float mask: its gradient too
    gc(lambda q, k, v, m: flash_attention(q, k, v, mask=m, block_q=2, block_k=4), q, k, v, fm)
    gc(lambda q, k, v: flash_attention(q, k, v, return_lse=True, block_q=2, block_k=3)[1], q, k, v)


def test_torch_twin_fully_masked_rows_zero_output_and_zero_finite_grads():
    torch = _torch()
    rng = np.random.default_rng(1)
    for dtype in (torch.float64, torch.float32, torch.float16):
        q = _tt(rand(rng, 2, 6, 8)).to(dtype).requires_grad_()
        k = _tt(rand(rng, 2, 9, 8)).to(dtype).requires_grad_()
        v = _tt(rand(rng, 2, 9, 4)).to(dtype).requires_grad_()
        m = torch.ones(2, 6, 9, dtype=torch.bool)
        m[0, 2] = False
        m[1, 5] = False
        out = flash_attention(q, k, v, mask=m, causal="bottom_right", block_q=4, block_k=4)
        (out * torch.arange(4, dtype=dtype)).sum().backward()
        assert (out[0, 2] == 0).all() and (out[1, 5] == 0).all() and torch.isfinite(out).all()
        for g in (q.grad, k.grad, v.grad):
            assert g.dtype == dtype and torch.isfinite(g).all()
        assert (q.grad[0, 2] == 0).all() and (q.grad[1, 5] == 0).all()
        assert q.grad[0, 3].abs().sum() > 0


def test_torch_twin_trace_and_errors_match_reference_torch():
    torch = _torch()
    from attn_edu import reference_torch

    q, k, v = qkv(9, 12, seed=2, dv=7, lead=(2,))
    out, trace = flash_attention(_tt(q), _tt(k), _tt(v), causal=True, block_q=4, block_k=4, return_trace=True)
    _, trace_np = flash_attention(q, k, v, causal=True, block_q=4, block_k=4, return_trace=True)
    assert [r.skipped for r in trace] == [r.skipped for r in trace_np]
    for a, b in zip(trace, trace_np):
        np.testing.assert_allclose(a.o.numpy(), b.o, rtol=0, atol=1e-13)
    z = torch.zeros
    cases = [
        (z(3, 4), z(5, 4), z(6, 4), {}),
        (z(3, 4), z(5, 4), z(5, 4), dict(mask=torch.ones(3, 5, dtype=torch.int64))),
        (z(3, 4), z(5, 4), z(5, 4), dict(mask=torch.full((3, 5), float("inf")))),
        (z(3, 4), z(5, 4), z(5, 4), dict(mask=masks.causal_mask(3, 5, device="cpu"), causal=True)),
        (z(3, 4), z(5, 4, device="meta"), z(5, 4), {}),
        (z(3, 4), z(5, 4), z(5, 4), dict(mask=np.ones((3, 5), bool))),
        (z(3, 4), z(5, 4), z(5, 4), dict(scale=0.0)),
    ]
    for q, k, v, kw in cases:
        with pytest.raises((ValueError, TypeError)) as ref:
            reference_torch.scaled_dot_product_attention(q, k, v, **kw)
        with pytest.raises(ref.type) as ours:
            flash_attention(q, k, v, **kw)
        assert str(ours.value) == str(ref.value)
    with pytest.raises(ValueError, match="block_k must be at least 1"):
        flash_attention(z(3, 4), z(5, 4), z(5, 4), block_k=0)


def test_torch_twin_on_cuda():
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q, k, v = qkv(130, 70, d=64, dv=64, lead=(2, 4), seed=3)
    m = np.random.default_rng(0).random((2, 1, 130, 70)) < 0.6
    for causal in (False, True, "bottom_right"):
        args = [_tt(x, device="cuda") for x in (q, k, v)]
        out = flash_attention(*args, mask=torch.as_tensor(m, device="cuda"), causal=causal, block_q=64, block_k=32)
        assert out.is_cuda
        assert np.abs(out.cpu().numpy() - sdpa(q, k, v, mask=m, causal=causal)).max() <= 1e-10
        lo = [x.float().requires_grad_() for x in args]
        out32 = flash_attention(*lo, causal=causal, block_q=64, block_k=32)
        assert_close_to_reference(out32, *reference_pair(*lo, causal=causal))
        out32.sum().backward()
        assert all(torch.isfinite(x.grad).all() for x in lo)


def test_parallel_row_blocks_give_the_same_numbers(monkeypatch):
    """With threadpoolctl the NumPy loop runs row blocks on several threads; force that path."""
    import attn_edu.flash as flash

    q, k, v = qkv(70, 90, lead=(2,), seed=6, dtype=np.float32, dv=7)
    m = np.random.default_rng(0).random((2, 1, 90)) < 0.7
    serial, lse_s, _ = flash_attention(q, k, v, mask=m, causal=True, block_q=8, block_k=8,
                                       return_lse=True, return_trace=True)  # traced: in order
    pytest.importorskip("threadpoolctl")  # without it the loop runs on one thread
    monkeypatch.setattr(flash, "_cpu_count", lambda: 3)
    assert flash.numpy_workers(70, 8) == 3
    out, lse = flash_attention(q, k, v, mask=m, causal=True, block_q=8, block_k=8, return_lse=True)
    assert_same_up_to_rounding(out, serial)  # other threads, other BLAS settings
    assert_same_up_to_rounding(lse, lse_s)


def test_torch_twin_gqa_broadcast_and_empty_lengths():
    torch = _torch()
    rng = np.random.default_rng(7)
    q, k, v = rand(rng, 2, 4, 11, 8), rand(rng, 1, 2, 13, 8), rand(rng, 1, 2, 13, 5)
    out = flash_attention(_tt(q), _tt(k), _tt(v), enable_gqa=True, causal="bottom_right", block_q=4, block_k=5)
    gold = sdpa(q, k, v, enable_gqa=True, causal="bottom_right")
    assert np.abs(out.numpy() - gold).max() <= 1e-10
    out, lse = flash_attention(_tt(q[..., :0, :]), _tt(k), _tt(v), return_lse=True, enable_gqa=True)
    assert out.shape == (2, 4, 0, 5) and lse.shape == (2, 4, 0)
    out, lse = flash_attention(_tt(q), _tt(k[..., :0, :]), _tt(v[..., :0, :]), return_lse=True, enable_gqa=True)
    assert (out == 0).all() and torch.isneginf(lse).all()


# --- TilePlan: a mask's layout built once and reused ------------------------------------------

def test_plan_gives_the_same_result_and_reuses_the_layout():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 67, 16)) for _ in range(3))
    mask = masks.sliding_window_mask(67, 9) | masks.global_mask(67, [0])
    plan = masks.plan_tiles(mask, 16, 8)
    gold = sdpa(q, k, v, mask=mask)
    np.testing.assert_allclose(flash_attention(q, k, v, mask=plan), gold, atol=1e-10, rtol=0)
    computed, partial = tile_layout(67, 67, 16, 8, mask=mask)
    np.testing.assert_array_equal(plan.computed, computed)
    np.testing.assert_array_equal(plan.partial, partial)
    assert plan.density == pytest.approx(computed.mean())
    # the trace shows the plan's layout being used: skipped tiles are the plan's empty ones
    _, trace = flash_attention(q, k, v, mask=plan, return_trace=True)
    assert sum(not r.skipped for r in trace) == computed.sum()


def test_plan_cannot_go_stale():
    mask = masks.sliding_window_mask(32, 4)
    plan = masks.plan_tiles(mask, 8, 8)
    mask[:] = True  # the caller changes their array afterwards ...
    assert not plan.mask.all()  # ... the plan kept its own copy
    with pytest.raises(ValueError):
        plan.mask[0, 0] = True  # and that copy is read-only


def test_plan_mismatches_are_errors():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((32, 8)) for _ in range(3))
    plan = masks.plan_tiles(masks.sliding_window_mask(32, 4), 8, 8, causal=False)
    with pytest.raises(ValueError, match="block_q=16 but the TilePlan was built with block_q=8"):
        flash_attention(q, k, v, mask=plan, block_q=16)
    with pytest.raises(ValueError, match="causal=True but the TilePlan was built with causal=None"):
        flash_attention(q, k, v, mask=plan, causal=True)
    with pytest.raises(ValueError, match="TilePlan is for"):
        flash_attention(q[:16], k, v, mask=plan)
    with pytest.raises(ValueError, match="causal"):
        masks.plan_tiles(masks.causal_mask(32), 8, 8, causal=True)  # causal stated twice
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="mask is a numpy.ndarray but q, k, v are torch tensors"):
        flash_attention(*(torch.as_tensor(x) for x in (q, k, v)), mask=plan)
    with pytest.raises(TypeError, match="mask is a torch tensor but q, k, v are NumPy"):
        flash_attention(q, k, v, mask=masks.plan_tiles(torch.ones(32, 32, dtype=torch.bool), 8, 8))


def test_plan_of_a_torch_mask_serves_the_torch_twin():
    torch = _torch()
    q, k, v = qkv(33, 40, seed=4, dv=7, lead=(2,))
    m = np.random.default_rng(4).random((2, 33, 40)) < 0.4
    plan = masks.plan_tiles(torch.as_tensor(m), 8, 16, causal="bottom_right")
    out = flash_attention(_tt(q), _tt(k), _tt(v), mask=plan, causal="bottom_right")
    assert np.abs(out.numpy() - sdpa(q, k, v, mask=m, causal="bottom_right")).max() <= 1e-10
    assert plan.computed.shape == (2, 5, 3)  # per batch element; the loop merges them


def test_plan_with_causal_matches_reference():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 45, 16)) for _ in range(3))
    pad = masks.padding_mask([45])[:, None, None, :]  # (1, 1, 1, 45)
    mask = np.broadcast_to(masks.sliding_window_mask(45, 7, causal=False), (1, 1, 45, 45)) & pad
    plan = masks.plan_tiles(mask, 8, 16, causal="bottom_right")
    gold = sdpa(q, k, v, mask=mask, causal="bottom_right")
    np.testing.assert_allclose(flash_attention(q, k, v, mask=plan, causal="bottom_right"),
                               gold, atol=1e-10, rtol=0)


# --- a plan's partial tiles kept with it (the NumPy loop's _BlockedTiles) ---------------------

def _plan_case(name):
    """(lq, lk, bq, bk, mask, causal) of a plan test; lengths the tiles do not divide."""
    rng = np.random.default_rng(5)
    if name == "window":  # chapter 11's pattern
        return 67, 67, 16, 8, masks.sliding_window_mask(67, 9, causal=True), False
    if name == "window and empty rows":
        rows = rng.random((45, 1)) < 0.7  # the other rows see no key at all
        return 45, 53, 8, 16, masks.sliding_window_mask(53, 5)[8:] & rows, False
    if name == "causal only":
        return 37, 29, 8, 8, None, "bottom_right"
    assert name == "batch mask and causal"
    return 33, 40, 8, 16, rng.random((2, 1, 33, 40)) < 0.5, True


PLAN_CASES = ["window", "window and empty rows", "causal only", "batch mask and causal"]


@pytest.mark.parametrize("name", PLAN_CASES)
def test_plan_keeps_its_partial_tiles_and_the_second_call_uses_them(monkeypatch, name):
    """The first call with a plan keeps its partial tiles' blocked entries; the second cuts
    nothing out of the mask, and both hold to the float64 reference by the tolerance rule
    (a fully masked row: zeros)."""
    import attn_edu.flash as flash

    lq, lk, bq, bk, mask, causal = _plan_case(name)
    q, k, v = qkv(lq, lk, d=16, dv=5, lead=(2, 1), seed=3, dtype=np.float32)
    plan = masks.plan_tiles(mask, bq, bk, causal, lq=lq, lk=lk)
    gold, naive = reference_pair(q, k, v, mask=mask, causal=causal)
    first = flash_attention(q, k, v, mask=plan, causal=causal)
    kept = plan.cached("numpy_blocked_tiles", lambda: None)
    assert sorted(kept.tiles) == [tuple(t) for t in np.argwhere(plan.merged().partial)]
    assert kept.budget == max(flash._BLOCKED_TILES_BYTES, 0 if mask is None else plan.mask.nbytes)
    cuts = []
    monkeypatch.setattr(flash, "mask_tile", lambda *a: cuts.append(a[3:]) or masks.tiles.mask_tile(*a))
    monkeypatch.setattr(flash, "causal_block", lambda *a: cuts.append(a) or masks.causal_block(*a))
    second = flash_attention(q, k, v, mask=plan, causal=causal)
    assert cuts == []  # every partial tile came from the plan
    np.testing.assert_array_equal(second, first)
    for out in (first, second):
        assert_close_to_reference(out, gold, naive)
    if name == "window and empty rows":
        empty = ~mask.any(axis=-1)
        assert empty.any() and (second[..., empty, :] == 0).all()


def test_plan_keeps_no_more_than_its_budget():
    """Past the budget a tile is cut out of the mask on every call, as without a plan."""
    import attn_edu.flash as flash

    lq, lk, bq, bk, mask, _ = _plan_case("window")
    q, k, v = qkv(lq, lk, seed=1)
    plan = masks.plan_tiles(mask, bq, bk)
    budget = 3 * bq * bk  # room for three whole boolean tiles, of more partial ones
    assert plan.partial.sum() > 3
    kept = plan.cached("numpy_blocked_tiles", lambda: flash._BlockedTiles(budget))
    gold = sdpa(q, k, v, mask=mask)
    for _ in range(2):
        assert np.max(np.abs(flash_attention(q, k, v, mask=plan) - gold)) <= 1e-10
    assert len(kept.tiles) == 3 and kept.nbytes == budget


def test_row_blocks_run_once_each_most_tiles_first():
    import attn_edu.flash as flash

    done = []
    flash._run_row_blocks(done.append, np.array([1, 5, 2, 5, 0]), workers=2)
    assert sorted(done) == [0, 1, 2, 3, 4]  # each once, whichever thread took it
    order = []
    flash._run_row_blocks(order.append, np.array([1, 5, 2, 5, 0]), workers=1)
    assert order == [1, 3, 2, 0, 4]  # most tiles first; ties in row order

    def broken(i):
        if i == 2:
            raise RuntimeError("row block 2")

    with pytest.raises(RuntimeError, match="row block 2"):
        flash._run_row_blocks(broken, np.arange(6), workers=2)
