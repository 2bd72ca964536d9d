"""profiling: FLOP and byte formulas against brute counts; memory and time measurements."""
import math

import numpy as np
import pytest

from attn_edu import masks, profiling
from attn_edu.reference import scaled_dot_product_attention


# --------------------------------------------------------------------------- FLOPs
def _count_madds(lq, lk, d, dv, allowed=None):
    """Multiply-adds of a plain triple-loop attention (only allowed pairs computed)."""
    madds = 0
    for i in range(lq):
        for j in range(lk):
            if allowed is not None and not allowed[i, j]:
                continue
            for _ in range(d):  # s_ij += q_ic * k_jc
                madds += 1
            for _ in range(dv):  # o_ic += p_ij * v_jc
                madds += 1
    return madds


@pytest.mark.parametrize("lq,lk,d,dv", [(4, 4, 3, 3), (3, 5, 2, 4), (5, 3, 4, 1), (1, 1, 1, 1)])
def test_attention_flops_match_a_counted_loop(lq, lk, d, dv):
    flops = profiling.attention_flops(1, 1, lq, lk, d, dv)
    assert flops == 2 * _count_madds(lq, lk, d, dv)
    # batch and heads multiply
    assert profiling.attention_flops(2, 3, lq, lk, d, dv) == 6 * flops


def test_forward_formula_is_4bhn2d():
    assert profiling.attention_flops(2, 8, 1024, 1024, 64) == 4 * 2 * 8 * 1024**2 * 64


@pytest.mark.parametrize("lq,lk", [(6, 6), (4, 7), (7, 4), (1, 5)])
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_exact_causal_counts_the_allowed_pairs(lq, lk, align):
    allowed = masks.causal_mask(lq, lk, align)
    exact = profiling.attention_flops(1, 1, lq, lk, 3, 2, causal=align, exact_causal=True)
    assert exact == 2 * _count_madds(lq, lk, 3, 2, allowed)


def test_causal_is_half_and_exact_is_n_n_plus_1_over_2():
    n, d = 64, 16
    full = profiling.attention_flops(1, 1, n, n, d)
    assert profiling.attention_flops(1, 1, n, n, d, causal=True) * 2 == full
    exact = profiling.attention_flops(1, 1, n, n, d, causal=True, exact_causal=True)
    assert exact == 4 * d * n * (n + 1) // 2
    assert exact > full // 2


def test_backward_is_two_and_a_half_forward():
    fwd = profiling.attention_flops(1, 2, 128, 128, 64)
    assert profiling.attention_flops(1, 2, 128, 128, 64, backward=True) == fwd * 5 // 2
    assert profiling.attention_flops(1, 2, 128, 128, 64, causal=True, backward=True) == fwd * 5 // 4


def test_projection_and_layer_flops_and_crossover():
    n, d = 100, 32
    assert profiling.projection_flops(1, n, d) == 8 * n * d * d
    lay = profiling.layer_flops(2, n, d, heads=4)
    assert lay["attention"] == 4 * 2 * n * n * d  # heads cancel
    assert lay["attention"] == profiling.layer_flops(2, n, d, heads=1)["attention"]
    assert lay["total"] == lay["projections"] + lay["attention"]
    nstar = profiling.crossover_length(d)
    at = profiling.layer_flops(1, nstar, d)
    assert at["projections"] == at["attention"]
    after = profiling.layer_flops(1, nstar + 1, d)
    assert after["attention"] > after["projections"]
    with pytest.raises(ValueError, match="divisible"):
        profiling.layer_flops(1, n, 30, heads=4)


@pytest.mark.parametrize("bad", [
    dict(lq=-1), dict(lq=0), dict(d=0), dict(batch=0), dict(heads=-2), dict(dv=0),
])
def test_bad_sizes_raise_value_error(bad):
    args = dict(batch=1, heads=1, lq=4, lk=4, d=8)
    args.update(bad)
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        profiling.attention_flops(**args)


def test_bad_types_and_causal_raise():
    with pytest.raises(TypeError, match="lq"):
        profiling.attention_flops(1, 1, 4.5, 4, 8)
    with pytest.raises(ValueError, match="causal"):
        profiling.attention_flops(1, 1, 4, 4, 8, causal="upper")
    with pytest.raises(ValueError, match="n"):
        profiling.naive_hbm_bytes(-3, 8)
    with pytest.raises(ValueError, match="block_q"):
        profiling.tiled_hbm_bytes(16, 8, 0, 4)
    with pytest.raises(ValueError, match="ms"):
        profiling.tflops(1e9, 0.0)


# --------------------------------------------------------------------------- bytes
def _simulate_tiled(n, lk, d, dv, bq, bk, itemsize, causal):
    """Walk the tiled loop and add up every slow-memory read and write."""
    allowed = masks.causal_mask(n, lk, causal) if causal else np.ones((n, lk), bool)
    moved = 0
    for i0 in range(0, n, bq):
        rows = min(bq, n - i0)
        moved += rows * d  # load the Q block
        for j0 in range(0, lk, bk):
            cols = min(bk, lk - j0)
            if not allowed[i0:i0 + rows, j0:j0 + cols].any():
                continue  # an empty tile is skipped: nothing loaded
            moved += cols * d + cols * dv  # load the K and V blocks
        moved += rows * dv  # store the O block
    return moved * itemsize


@pytest.mark.parametrize("n,lk,bq,bk", [(64, 64, 16, 16), (65, 65, 16, 8), (17, 40, 5, 7), (40, 17, 8, 3)])
@pytest.mark.parametrize("causal", [False, "top_left", "bottom_right"])
def test_tiled_bytes_match_a_simulated_loop(n, lk, bq, bk, causal):
    d, dv, s = 8, 5, 2
    got = profiling.tiled_hbm_bytes(n, d, bq, bk, itemsize=s, causal=causal, lk=lk, dv=dv)
    assert got == _simulate_tiled(n, lk, d, dv, bq, bk, s, causal)


def test_causal_tiled_traffic_is_about_half_for_the_kv_part():
    n, d, b = 4096, 64, 128
    full = profiling.tiled_hbm_bytes(n, d, b, b)
    causal = profiling.tiled_hbm_bytes(n, d, b, b, causal=True)
    linear = 4 * (2 * n * d)  # Q read, O written (float32)
    ratio = (causal - linear) / (full - linear)
    assert abs(ratio - 0.5) < 0.02


def test_naive_bytes_formula_and_quadratic_growth():
    n, d = 256, 32
    assert profiling.naive_hbm_bytes(n, d, itemsize=2) == 2 * (4 * n * n + 4 * n * d)
    assert profiling.naive_hbm_bytes(n, d, batch=2, heads=3) == 6 * profiling.naive_hbm_bytes(n, d)
    # the n^2 term dominates: doubling n gives nearly 4x
    r = profiling.naive_hbm_bytes(8192, 64) / profiling.naive_hbm_bytes(4096, 64)
    assert 3.8 < r < 4.0


def test_bound_is_one_eighth_of_the_loop_with_algorithm_one_tiles():
    n, d, s, sram = 8192, 64, 2, 128 * 1024
    m = sram // s
    block = m // (4 * d)  # Algorithm 1's tile size, 256 rows here
    loop = profiling.tiled_hbm_bytes(n, d, block, block, itemsize=s)
    bound = profiling.tiled_hbm_bytes_bound(n, d, sram, itemsize=s)
    assert math.isclose(loop - s * 2 * n * d, 8 * bound, rel_tol=1e-12)
    # and far below the naive traffic
    assert loop < profiling.naive_hbm_bytes(n, d, itemsize=s) / 7  # 4n^2 vs n^2/2
    with pytest.raises(ValueError, match="sram_bytes"):
        profiling.tiled_hbm_bytes_bound(n, d, 8)


# --------------------------------------------------------------------------- measuring
def test_peak_memory_sees_a_known_numpy_allocation():
    result, peak = profiling.peak_memory(np.ones, 10**6)
    assert result.shape == (10**6,)
    assert 8_000_000 <= peak < 8_200_000


def test_peak_memory_excludes_the_baseline_and_sees_temporaries():
    keep = np.ones(2 * 10**6)  # allocated before the call: not counted

    def temporaries():
        a = np.ones(10**6)  # 8 MB
        b = a * 2           # +8 MB, both alive: peak 16 MB
        del a, b
        return 1.0

    _, peak = profiling.peak_memory(temporaries)
    assert 16_000_000 <= peak < 16_500_000
    assert keep.sum() == 2 * 10**6
    assert profiling.memory_method(keep) == "numpy"


def test_naive_attention_peak_grows_with_the_n_by_n_matrix():
    d = 16
    peaks = []
    for n in (256, 512):
        q = np.ones((n, d), np.float32)
        _, peak = profiling.peak_memory(scaled_dot_product_attention, q, q, q)
        peaks.append(peak)
        assert peak >= n * n * 4  # at least one float32 n x n matrix
    assert 3.5 < peaks[1] / peaks[0] < 4.5


def test_peak_memory_of_torch_cpu_tensors_uses_the_profiler():
    torch = pytest.importorskip("torch")
    x = torch.ones(10)
    assert profiling.memory_method(x) == "torch_cpu"

    def two_buffers(t):
        a = torch.ones(10**6, dtype=torch.float64)
        b = a * 2
        del a
        return b

    out, peak = profiling.peak_memory(two_buffers, x)
    assert out.shape == (10**6,)
    assert 16_000_000 <= peak < 16_100_000


def test_memory_method_rejects_unknown_devices():
    with pytest.raises(ValueError, match="device"):
        profiling.memory_method(device="tpu")
    with pytest.raises(TypeError, match="fn"):
        profiling.peak_memory(42)


def test_time_ms_is_positive_and_runs_warmup_then_repeat():
    calls = []

    def f(x, scale=1.0):
        calls.append(x)
        return sum(range(2000)) * scale

    t = profiling.time_ms(f, 1, repeat=4, warmup=2, scale=2.0)
    assert len(calls) == 6
    assert t > 0 and t.min_ms > 0 and t.min_ms <= t.median_ms
    assert float(t) == t.median_ms and t.repeat == 4 and len(t.times_ms) == 4
    assert t.as_dict()["warmup"] == 2
    with pytest.raises(ValueError, match="repeat"):
        profiling.time_ms(f, 1, repeat=0)
    with pytest.raises(ValueError, match="warmup"):
        profiling.time_ms(f, 1, warmup=-1)


def test_time_ms_orders_small_and_large_work():
    small = np.ones((64, 64))
    big = np.ones((256, 256))
    ts = profiling.time_ms(np.matmul, small, small, repeat=5)
    tb = profiling.time_ms(np.matmul, big, big, repeat=5)
    assert tb.min_ms > ts.min_ms  # 64x the FLOPs


def test_tflops():
    assert profiling.tflops(2e12, 1000.0) == pytest.approx(2.0)


def test_timing_survives_copy_and_pickle():
    """plotly deep-copies figure data: a Timing must copy as itself, extras included."""
    import copy
    import pickle

    t = profiling.Timing([3.0, 1.0, 2.0], warmup=1)
    for u in (copy.copy(t), copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
        assert isinstance(u, profiling.Timing)
        assert float(u) == 2.0 and u.min_ms == 1.0 and u.times_ms == (3.0, 1.0, 2.0)
        assert u.warmup == 1 and u.method == "perf_counter" and u.host_ms is None
    g = profiling.Timing([3.0, 1.0], warmup=2, method="cuda_events_l2_flushed", host_times_ms=[0.5, 0.1, 0.2])
    for u in (copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert u.method == "cuda_events_l2_flushed" and u.host_times_ms == (0.5, 0.1, 0.2)
        assert u.host_ms == 0.2 and u.as_dict()["host_median_ms"] == 0.2


# ------------------------------------------------- best_interleaved_ms (chapters 11, 12)
def test_best_interleaved_ms_calls_every_entry_in_rounds_and_keeps_the_minimum():
    from attn_edu import profiling
    order = []
    calls = {"a": lambda: order.append("a"), ("b", 2): lambda: order.append("b")}
    best = profiling.best_interleaved_ms(calls, rounds=2, repeat=lambda key: 3 if key == "a" else 1)
    assert set(best) == {"a", ("b", 2)} and all(0 <= t < 1e3 for t in best.values())
    # one warm-up round, then two timed rounds; a runs 3 times per round, b once: interleaved
    assert order == (["a"] * 3 + ["b"]) * 3
    order.clear()
    profiling.best_interleaved_ms(calls, rounds=1, repeat=2, warmup=0)
    assert order == ["a", "a", "b", "b"]


def test_best_interleaved_ms_rejects_bad_input():
    import pytest
    from attn_edu import profiling
    with pytest.raises(ValueError, match="calls"):
        profiling.best_interleaved_ms({})
    with pytest.raises(TypeError, match=r"calls\['x'\]"):
        profiling.best_interleaved_ms({"x": 3})
    with pytest.raises(ValueError, match="rounds"):
        profiling.best_interleaved_ms({"x": lambda: None}, rounds=0)
