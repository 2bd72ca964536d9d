"""Sparse attention patterns (chapter 11): definitions, costs, receptive fields, execution.

Every pattern is checked against a brute-force loop written from its paper's definition,
its pair count against the closed form, and its tiled execution (which skips empty
tiles) against the dense float64 reference with the same mask.
"""
import math

import numpy as np
import pytest

import attn_edu
from attn_edu import masks
from attn_edu.flash import flash_attention
from conftest import qkv

SIZES = [1, 3, 17, 20]


def brute(n, rule):
    return np.array([[bool(rule(i, j)) for j in range(n)] for i in range(n)], dtype=bool).reshape(n, n)


# ----------------------------------------------------------------------------- definitions
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("w", [1, 2, 5, 25])
def test_sliding_window_matches_definition(n, w):
    m = masks.sliding_window_mask(n, w)
    np.testing.assert_array_equal(m, brute(n, lambda i, j: i - w + 1 <= j <= i))
    assert m.dtype == bool and m.shape == (n, n)
    # each row sees min(i + 1, w) keys: exactly w once the window is full
    np.testing.assert_array_equal(m.sum(1), np.minimum(np.arange(n) + 1, w))
    sym = masks.sliding_window_mask(n, w, causal=False)
    np.testing.assert_array_equal(sym, brute(n, lambda i, j: abs(i - j) <= w // 2))
    np.testing.assert_array_equal(sym, sym.T)


def test_sliding_window_extremes():
    np.testing.assert_array_equal(masks.sliding_window_mask(6, 1), np.eye(6, dtype=bool))
    np.testing.assert_array_equal(masks.sliding_window_mask(6, 6), masks.causal_mask(6))
    assert masks.sliding_window_mask(6, 11, causal=False).all()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("s", [1, 3, 4, 30])
def test_strided_and_local_strided_match_definition(n, s):
    st = masks.strided_mask(n, s)
    np.testing.assert_array_equal(st, brute(n, lambda i, j: j <= i and (i - j) % s == 0))
    np.testing.assert_array_equal(masks.strided_mask(n, s, causal=False),
                                  brute(n, lambda i, j: (i - j) % s == 0))
    ls = masks.local_strided_mask(n, s)
    np.testing.assert_array_equal(
        ls, brute(n, lambda i, j: j <= i and (i - j < s or (i - j) % s == 0)))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("w,r", [(1, 3), (3, 1), (3, 2), (4, 3)])
def test_dilated_matches_definition(n, w, r):
    m = masks.dilated_mask(n, w, r)
    np.testing.assert_array_equal(
        m, brute(n, lambda i, j: 0 <= i - j < w * r and (i - j) % r == 0))
    np.testing.assert_array_equal(
        masks.dilated_mask(n, w, r, causal=False),
        brute(n, lambda i, j: abs(i - j) <= (w // 2) * r and (i - j) % r == 0))
    np.testing.assert_array_equal(masks.dilated_mask(n, w, 1), masks.sliding_window_mask(n, w))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("block,summary", [(1, 1), (4, 1), (4, 2), (5, 5), (7, 3)])
def test_fixed_matches_child_et_al(n, block, summary):
    def rule(i, j):
        same = i // block == j // block  # A(1)
        summ = j % block >= block - summary  # A(2): the last c of every block
        return same or summ

    np.testing.assert_array_equal(masks.fixed_mask(n, block, summary, causal=False), brute(n, rule))
    np.testing.assert_array_equal(masks.fixed_mask(n, block, summary),
                                  brute(n, lambda i, j: j <= i and rule(i, j)))


@pytest.mark.parametrize("n,g", [(1, [0]), (9, [0]), (9, [0, 4, 8]), (9, [3, 3]), (5, [])])
def test_global_tokens(n, g):
    m = masks.global_mask(n, g)
    np.testing.assert_array_equal(m, brute(n, lambda i, j: i in g or j in g))
    k = len(set(g))
    assert m.sum() == masks.allowed_pairs("global", n, n_global=k) == 2 * k * n - k * k


def test_longformer_union_and_causal_intersection():
    n = 12
    lf = masks.combine_masks(masks.sliding_window_mask(n, 3, causal=False),
                             masks.global_mask(n, [0]), op="or")
    np.testing.assert_array_equal(lf, brute(n, lambda i, j: abs(i - j) <= 1 or i == 0 or j == 0))
    dec = masks.combine_masks(lf, masks.causal_mask(n))
    np.testing.assert_array_equal(dec, brute(n, lambda i, j: j <= i and (i - j <= 1 or j == 0)))
    # the causal window already lies inside the causal mask: intersecting changes nothing
    w = masks.sliding_window_mask(n, 4)
    np.testing.assert_array_equal(masks.combine_masks(w, masks.causal_mask(n)), w)


@pytest.mark.parametrize("n,block,r", [(16, 4, 1), (17, 4, 2), (10, 3, 9), (5, 8, 1)])
def test_random_blocks_are_whole_tiles_seeded(n, block, r):
    a = masks.random_block_mask(n, block, r, seed=3)
    np.testing.assert_array_equal(a, masks.random_block_mask(n, block, r, seed=3))
    lay = masks.block_layout(a, block, block)
    nb = -(-n // block)
    np.testing.assert_array_equal(lay.sum(1), np.full(nb, min(r, nb)))
    # whole tiles: every chosen tile is full
    assert (masks.full_blocks(a, block, block) == lay).all()
    c = masks.random_block_mask(n, block, r, seed=3, causal=True)
    assert not (c & ~masks.causal_mask(n)).any()
    np.testing.assert_array_equal(masks.block_layout(c, block, block).sum(1),
                                  np.minimum(r, np.arange(nb) + 1))


def test_random_blocks_differ_across_seeds_and_accept_a_generator():
    draws = {masks.random_block_mask(64, 4, 2, seed=s).tobytes() for s in range(5)}
    assert len(draws) == 5
    g1, g2 = np.random.default_rng(7), np.random.default_rng(7)
    np.testing.assert_array_equal(masks.random_block_mask(32, 4, 2, seed=g1),
                                  masks.random_block_mask(32, 4, 2, seed=g2))


def test_bigbird_has_window_global_and_random_blocks():
    n, b = 40, 4
    m = masks.bigbird_mask(n, b, n_random=2, window_blocks=3, global_blocks=1, seed=0)
    lay = masks.block_layout(m, b, b)
    nb = n // b
    blocks = np.arange(nb)
    window = np.abs(blocks[:, None] - blocks[None, :]) <= 1
    assert lay[window].all() and lay[0].all() and lay[:, 0].all()
    extra = lay & ~window
    extra[:, 0] = False
    # every non-global block row has exactly n_random blocks beyond window and global
    np.testing.assert_array_equal(extra[1:].sum(1), np.full(nb - 1, 2))
    np.testing.assert_array_equal(m, masks.bigbird_mask(n, b, n_random=2, seed=0))
    assert not np.array_equal(m, masks.bigbird_mask(n, b, n_random=2, seed=1))


# ----------------------------------------------------------------------------- costs
@pytest.mark.parametrize("n", [1, 7, 64, 100, 257])
def test_allowed_pairs_closed_forms(n):
    assert masks.allowed_pairs("dense", n) == n * n
    assert masks.allowed_pairs("causal", n) == masks.causal_mask(n).sum()
    for w in (1, 3, 16, 300):
        got = masks.sliding_window_mask(n, w).sum()
        assert masks.allowed_pairs("sliding_window", n, window=w) == got
        if w <= n:
            assert got == n * w - w * (w - 1) // 2
    for s in (1, 3, 8, 300):
        assert masks.allowed_pairs("strided", n, stride=s) == masks.strided_mask(n, s).sum()
        assert masks.allowed_pairs("local_strided", n, stride=s) == masks.local_strided_mask(n, s).sum()
    for block, c in ((1, 1), (8, 1), (8, 3), (10, 2)):
        assert masks.allowed_pairs("fixed", n, block=block, summary=c) == masks.fixed_mask(n, block, c).sum()


def test_allowed_pairs_of_symmetric_windows_and_rectangular_causal_masks():
    """The one home of pair counting covers what the benchmarks and FLOP counts need."""
    for n, w in [(1, 4), (3, 1), (17, 4), (63, 8), (65, 7), (129, 256), (300, 31)]:
        got = masks.allowed_pairs("sliding_window", n, window=w, causal=False)
        assert got == masks.sliding_window_mask(n, w, causal=False).sum(), (n, w)
    for lq, lk in [(1, 1), (5, 9), (9, 5), (17, 3), (3, 17)]:
        for align in ("top_left", "bottom_right"):
            got = masks.allowed_pairs("causal", lq, lk=lk, alignment=align)
            assert got == masks.causal_mask(lq, lk, align).sum(), (lq, lk, align)
    with pytest.raises(ValueError, match="window"):
        masks.allowed_pairs("sliding_window", 8, window=0, causal=False)


def test_sqrt_n_patterns_grow_like_n_to_the_1_5():
    ns = np.array([256, 1024, 4096])
    pairs = [masks.allowed_pairs("local_strided", int(n), stride=int(math.isqrt(int(n)))) for n in ns]
    slope = np.polyfit(np.log(ns), np.log(pairs), 1)[0]
    assert 1.4 < slope < 1.6
    pairs_w = [masks.allowed_pairs("sliding_window", int(n), window=64) for n in ns]
    assert 0.95 < np.polyfit(np.log(ns), np.log(pairs_w), 1)[0] < 1.1


def test_mask_flops_agrees_with_dense_formula():
    n, d = 32, 16
    assert masks.mask_flops(np.ones((n, n), bool), d) == 4 * n * n * d
    assert masks.mask_flops(masks.causal_mask(n), d, dv=8) == n * (n + 1) // 2 * 2 * (d + 8)
    assert masks.mask_flops(np.ones((2, 3, n, n), bool), d) == 2 * 3 * 4 * n * n * d
    profiling = pytest.importorskip("attn_edu.profiling")
    assert masks.mask_flops(np.ones((n, n), bool), d) == profiling.attention_flops(1, 1, n, n, d)


def test_block_flops_counts_whole_tiles_and_partial_edges():
    n, d, b = 20, 8, 8
    m = masks.sliding_window_mask(n, 5)
    lay = masks.block_layout(m, b, b)  # 3 x 3 tiles, the last row/column 4 long
    nominal = masks.block_flops(lay, b, b, d)
    exact = masks.block_flops(lay, b, b, d, lq=n, lk=n)
    assert nominal == lay.sum() * b * b * 4 * d
    sizes = np.array([8, 8, 4])
    assert exact == int((lay * np.outer(sizes, sizes)).sum()) * 4 * d
    assert masks.mask_flops(m, d) <= exact < nominal
    assert masks.block_flops(np.ones((3, 3), bool), b, b, d, lq=n, lk=n) == 4 * n * n * d


# ----------------------------------------------------------------------------- receptive field
@pytest.mark.parametrize("n", [16, 64, 100])
def test_local_plus_strided_reaches_everything_in_two_layers(n):
    s = math.isqrt(n)
    local, strided = masks.sliding_window_mask(n, s), masks.strided_mask(n, s)
    both = masks.local_strided_mask(n, s)
    assert not masks.reaches_all_earlier(masks.receptive_field(both, 1))
    assert masks.reaches_all_earlier(masks.receptive_field(both, 2))
    # alternating heads across layers (Child et al.): strided first, then local
    assert masks.reaches_all_earlier(masks.receptive_field([strided, local]))
    assert masks.layers_to_reach_all(both) == 2
    # a causal pattern never lets the future in
    assert not (masks.receptive_field(both, 3) & ~masks.causal_mask(n)).any()


def test_receptive_field_is_the_boolean_matrix_power():
    n, w = 30, 4
    m = masks.sliding_window_mask(n, w)
    r3 = masks.receptive_field(m, 3)
    np.testing.assert_array_equal(r3, np.linalg.matrix_power(m.astype(np.int64), 3) > 0)
    np.testing.assert_array_equal(r3, masks.sliding_window_mask(n, 3 * (w - 1) + 1))
    assert masks.layers_to_reach_all(m) == math.ceil((n - 1) / (w - 1))
    assert masks.layers_to_reach_all(masks.strided_mask(n, 5), max_layers=8) is None
    # residual connections: a global-only layer still keeps each position's own input
    g = masks.global_mask(n, [0])
    assert masks.receptive_field(g, 1).diagonal().all()
    np.testing.assert_array_equal(masks.receptive_field(g, 1, residual=False), g)


def test_fixed_pattern_reaches_everything_in_two_layers():
    n, block = 36, 6
    assert masks.layers_to_reach_all(masks.fixed_mask(n, block)) == 2


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("call,words", [
    (lambda: masks.sliding_window_mask(8, 0), "window"),
    (lambda: masks.sliding_window_mask(0, 2), "n"),
    (lambda: masks.strided_mask(8, 0), "stride"),
    (lambda: masks.strided_mask(8, -2), "stride"),
    (lambda: masks.dilated_mask(8, 2, 0), "dilation"),
    (lambda: masks.dilated_mask(8, 0, 2), "window"),
    (lambda: masks.fixed_mask(8, 0), "block"),
    (lambda: masks.fixed_mask(8, 4, summary=5), "summary"),
    (lambda: masks.fixed_mask(8, 4, summary=0), "summary"),
    (lambda: masks.global_mask(8, [0, 8]), "global_tokens"),
    (lambda: masks.global_mask(8, [-1]), "global_tokens"),
    (lambda: masks.random_block_mask(8, 0, 1), "block"),
    (lambda: masks.random_block_mask(8, 2, -1), "n_random"),
    (lambda: masks.bigbird_mask(8, 4, global_blocks=3), "global_blocks"),
    (lambda: masks.receptive_field([np.eye(3, dtype=bool), np.eye(4, dtype=bool)]), "same length"),
    (lambda: masks.receptive_field(np.ones((3, 4), bool)), "square"),
    (lambda: masks.receptive_field(np.eye(3, dtype=bool), 0), "layers"),
    (lambda: masks.combine_masks(np.eye(3, dtype=bool), np.eye(4, dtype=bool), op="or"), "broadcast"),
    (lambda: masks.allowed_pairs("sliding_window", 8), "window"),
    (lambda: masks.allowed_pairs("log", 8), "pattern"),
    (lambda: masks.block_flops(np.ones((2, 2), bool), 4, 4, 8, lq=20), "lq"),
])
def test_bad_parameters_name_the_argument(call, words):
    with pytest.raises(ValueError, match=words):
        call()


@pytest.mark.parametrize("call", [
    lambda: masks.sliding_window_mask(8, 2.5),
    lambda: masks.global_mask(8, [0.5]),
    lambda: masks.random_block_mask(8, 2, 1, seed="x"),
    lambda: masks.mask_flops(np.ones((2, 2)), 8),
    lambda: masks.receptive_field(np.ones((3, 3))),
])
def test_wrong_types_are_type_errors(call):
    with pytest.raises(TypeError):
        call()


# ----------------------------------------------------------------------------- execution
N = 37


def patterns(n=N):
    return {
        "sliding_window": masks.sliding_window_mask(n, 6),
        "sliding_window_symmetric": masks.sliding_window_mask(n, 7, causal=False),
        "strided": masks.strided_mask(n, 6),
        "local_strided": masks.local_strided_mask(n, 6),
        "dilated": masks.dilated_mask(n, 4, 3),
        "fixed": masks.fixed_mask(n, 6, summary=2),
        "global+window": masks.combine_masks(masks.global_mask(n, [0, 20]),
                                             masks.sliding_window_mask(n, 5, causal=False), op="or"),
        "random_blocks": masks.random_block_mask(n, 8, 2, seed=1),
        "bigbird": masks.bigbird_mask(n, 8, n_random=1, seed=2),
        "no_global_tokens": masks.global_mask(n, []),  # every row fully masked -> zeros
    }


def computed_tiles(trace):
    return sum(not t.skipped for t in trace)


def causal_and_mask_tiles(mask, bq, bk):
    n = mask.shape[-1]
    return (masks.block_layout(mask, bq, bk) & masks.causal_block_layout(n, n, bq, bk)).sum()


@pytest.mark.parametrize("name", list(patterns()))
@pytest.mark.parametrize("bq,bk", [(8, 8), (16, 5)])
def test_flash_with_pattern_equals_dense_reference(name, bq, bk):
    mask = patterns()[name]
    q, k, v = qkv(N, N, 16, 11, lead=(2,), seed=0)
    gold = attn_edu.scaled_dot_product_attention(q, k, v, mask=mask)
    out, trace = flash_attention(q, k, v, mask=mask, block_q=bq, block_k=bk, return_trace=True)
    assert np.max(np.abs(out - gold)) <= 1e-10
    assert computed_tiles(trace) == masks.block_layout(mask, bq, bk).sum()
    assert np.isfinite(out).all()


@pytest.mark.parametrize("name", ["strided", "global+window", "random_blocks", "bigbird",
                                  "sliding_window_symmetric"])
def test_pattern_with_causal_flag_or_mask_equals_reference(name):
    mask = patterns()[name]
    q, k, v = qkv(N, N, 16, seed=1)
    both = masks.combine_masks(mask, masks.causal_mask(N))
    gold = attn_edu.scaled_dot_product_attention(q, k, v, mask=both)
    out1, tr1 = flash_attention(q, k, v, mask=mask, causal=True, block_q=8, block_k=8, return_trace=True)
    out2, tr2 = flash_attention(q, k, v, mask=both, block_q=8, block_k=8, return_trace=True)
    for out in (out1, out2):
        assert np.max(np.abs(out - gold)) <= 1e-10
    # with causal=True, mask and causality are intersected before tiling: a tile where
    # each is non-empty but their intersection is empty is skipped too
    want = masks.block_layout(both, 8, 8).sum()
    assert computed_tiles(tr1) == computed_tiles(tr2) == want
    assert want <= causal_and_mask_tiles(mask, 8, 8)


@pytest.mark.parametrize("name", ["sliding_window", "fixed", "bigbird"])
def test_pattern_with_padding_equals_reference(name):
    lengths = [30, 20, 9]
    pad = masks.key_mask(masks.padding_mask(lengths, N))  # (B, 1, N)
    mask = masks.combine_masks(patterns()[name], pad)  # (B, N, N)
    q, k, v = qkv(N, N, 16, lead=(3,), seed=2)
    gold = attn_edu.scaled_dot_product_attention(q, k, v, mask=mask)
    out, trace = flash_attention(q, k, v, mask=mask, block_q=8, block_k=8, return_trace=True)
    assert np.max(np.abs(out - gold)) <= 1e-10
    # the loop is vectorised over the batch: a tile runs when any batch entry needs it
    assert computed_tiles(trace) == masks.block_layout(mask, 8, 8).any(axis=0).sum()
    # keys 32..36 are padding in every entry, so their tiles are skipped too
    assert computed_tiles(trace) < masks.block_layout(patterns()[name], 8, 8).sum()


@pytest.mark.parametrize("name", ["sliding_window", "local_strided", "fixed", "global+window",
                                  "random_blocks", "no_global_tokens"])
def test_torch_cpu_twin_with_pattern_equals_reference(name):
    torch = pytest.importorskip("torch")
    mask = patterns()[name]
    q, k, v = qkv(N, N, 16, lead=(1, 2), seed=3)
    gold = attn_edu.scaled_dot_product_attention(q, k, v, mask=mask)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    tmask = torch.from_numpy(mask)
    out, trace = flash_attention(tq, tk, tv, mask=tmask, causal=True, block_q=16, block_k=8,
                                 return_trace=True)
    both = masks.combine_masks(mask, masks.causal_mask(N))
    gold_c = attn_edu.scaled_dot_product_attention(q, k, v, mask=both)
    assert out.dtype == torch.float64
    assert float((out - torch.from_numpy(gold_c)).abs().max()) <= 1e-10
    assert computed_tiles(trace) == masks.block_layout(both, 16, 8).sum()
    out2 = flash_attention(tq, tk, tv, mask=tmask, block_q=16, block_k=8)
    assert float((out2 - torch.from_numpy(gold)).abs().max()) <= 1e-10


def test_sliding_window_skips_most_tiles():
    n, w, b = 256, 32, 32
    lay = masks.block_layout(masks.sliding_window_mask(n, w), b, b)
    # a window of one tile touches the diagonal tile and the one before it
    assert lay.sum() == 2 * (n // b) - 1
    assert masks.block_density(lay) < 0.25
