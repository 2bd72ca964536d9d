"""Launch decisions cached per key (attn_edu.kernels._plans.plan_cache) and the stubbed
host-overhead benchmark (attn_edu.bench.host): the cache returns what the uncached function
returns, is hit, and the benchmark runs. No timing is asserted (a shared CPU)."""
import importlib.util
import itertools
import math
import random

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None,
                                reason="needs torch and triton")


def test_cached_split_choice_equals_the_search_at_the_true_length_over_a_grid():
    from attn_edu.decoding import split_waves
    from attn_edu.kernels import decode_triton as dt

    def search(programs, lk, block_k, num_sms, max_splits):  # the rule, at the length itself
        candidates = range(1, min(max(1, -(-lk // block_k)), max_splits) + 1)
        cost = {s: math.prod(split_waves(programs, lk, s, num_sms, block_k)) for s in candidates}
        return next(s for s in candidates if cost[s] <= (1 + dt.SPLIT_TOLERANCE) * min(cost.values()))

    grid = list(itertools.product([1, 3, 8, 33, 132, 300], [0, 1, 15, 16, 17, 1000, 16383, 16384, 65537, 131072],
                                  [16, 64, 128], [8, 40, 108, 132], [1, 16, 128]))
    random.Random(0).shuffle(grid)
    dt._best_num_splits.cache_clear()
    for args in grid + grid:  # the second pass is answered from the cache
        assert dt.choose_num_splits(*args) == search(*args), args
    # filed by the number of key blocks: lengths with as many blocks share one entry
    keys = {(p, -(-lk // bk), sms, m) for p, lk, bk, sms, m in grid}
    info = dt._best_num_splits.cache_info()
    assert len(keys) < len(grid) and info.currsize == len(keys) and info.hits >= len(grid)
    # the docstring's example: 8 programs on 132 SMs, 16 splits (one full wave), not 17
    assert dt.choose_num_splits(8, 65536, 64, 132) == 16
    # a bool is not an int: refused, although True == 1 and would hash like a cached key
    dt.choose_num_splits(1, 1000, 16, 8)
    with pytest.raises((TypeError, ValueError), match="programs"):
        dt.choose_num_splits(True, 1000, 16, 8)


def test_a_decode_loop_finds_its_launch_decisions_in_the_caches(monkeypatch):
    """L_k grows by one each step, as when decoding: the front door, the configuration and
    the split count are each decided again only where a rule reads what changed (the split
    count once per INTERPRET_CONFIG.block_k = 16 keys), and each step launches the chunks
    the search at its own length gives."""
    import torch

    from attn_edu.decoding import chunk_size
    from attn_edu.kernels import _targets
    from attn_edu.kernels import decode_triton as dt

    launched = []

    class Kernel:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **meta: launched.append((self.name, grid, args))

    for name in dt.LAUNCHED:
        monkeypatch.setattr(dt, name, Kernel(name))
    caches = (_targets.check_kernel_inputs, dt._decode_config, dt._best_num_splits)
    for cache in caches:
        cache.cache_clear()
    q, kv = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 80, 8)
    lengths = range(40, 81)  # 3 to 5 blocks of 16 keys
    for lk in lengths:
        dt.split_kv_decode(q, kv[:, :, :lk], kv[:, :, :lk], enable_gqa=True)
    misses = [c.cache_info().misses for c in caches]
    assert misses == [1, 1, len({-(-lk // 16) for lk in lengths})], misses
    steps = [(grid, args) for name, grid, args in launched if name == "_split_kernel"]
    assert len(steps) == len(lengths)
    for lk, (grid, args) in zip(lengths, steps):
        # after q, k, v, lens, the 3 partial buffers and 12 strides: H_kv, L_q, L_k, offset, chunk, splits
        _, _, length, _, chunk, splits = args[19:25]
        assert length == lk and grid == (2, splits, 1)
        assert splits == dt.choose_num_splits(2, lk, 16, 8) and chunk == chunk_size(lk, splits, 16)
    # a length the rule does read is still checked on every call: k and v of two lengths
    with pytest.raises(ValueError, match="same length L_k"):
        dt.split_kv_decode(q, kv[:, :, :41], kv[:, :, :42], enable_gqa=True)


def test_plan_cache_refuses_what_the_function_refuses_and_skips_unhashable_arguments():
    from attn_edu.kernels._plans import PLAN_CACHES, plan_cache

    calls = []

    @plan_cache
    def plan(n, names):
        calls.append(n)
        if n < 0:
            raise ValueError(f"n must be >= 0; got {n}")
        return n * 2

    try:
        assert plan(3, ("a",)) == 6 and plan(3, ("a",)) == 6 and calls == [3]
        assert plan(3, ["a"]) == 6 and calls == [3, 3]  # a list cannot be a key: computed, not cached
        for _ in range(2):  # an error is not cached: raised each time
            with pytest.raises(ValueError, match="n must be"):
                plan(-1, ())
        assert calls == [3, 3, -1, -1]
        # True == 1 and hashes alike, but each type is its own key: the function sees the bool
        # (and a check in it that refuses bools refuses it), not 1's answer
        assert plan(1, ()) == 2 and plan(True, ()) == 2 and calls[-2:] == [1, True]
        assert type(calls[-1]) is bool
    finally:
        PLAN_CACHES.pop(f"{plan.__module__}.{plan.__qualname__}")


def test_stubbed_host_overhead_benchmark_runs_and_its_caches_are_hit():
    from attn_edu.bench.host import HOST_CASES, format_host_overhead, host_overhead

    repeat, rounds = 2, 1
    result = host_overhead(repeat=repeat, rounds=rounds)
    assert [r["call"] for r in result["rows"]] == list(HOST_CASES)
    # each launcher's plan answered every timed call after the first from its cache
    for name in ("_forward_plan", "_backward_plan", "_decode_config", "_best_num_splits", "_sparse_launch", "check_kernel_inputs"):
        assert result["cache_hits"][name] >= 2, (name, result["cache_hits"])
    # ... and none of the "before" calls (run without the caches, before the "after" ones in
    # each round): the plans one case alone reads missed once, on the first "after" call, of
    # rounds * (repeat + 1) (_per_call makes one untimed call first)
    once = {name: result["cache_hits"][name] for name in ("_forward_plan", "_backward_plan", "_sparse_launch")}
    assert once == dict.fromkeys(once, rounds * (repeat + 1) - 1), once
    assert "before/after" in format_host_overhead(result)


def test_the_dispatch_benchmark_times_the_autotuner_triton_and_the_direct_launch_beside_the_package():
    pytest.importorskip("triton")
    from attn_edu.bench.host import DISPATCH_CASES, dispatch_overhead, format_dispatch_overhead

    result = dispatch_overhead(repeat=2, rounds=1)
    autotuned = [name for name in DISPATCH_CASES if name != "split-KV decode"]
    assert [r["call"] for r in result["rows"]] == autotuned
    # then every call with Triton's dispatch and without: one dispatch skipped per kernel launched
    assert [r["call"] for r in result["split"]] == list(DISPATCH_CASES)
    assert {r["call"]: r["launches"] for r in result["split"]} == {
        "flash forward": 1, "FA3 persistent": 1, "flash backward": 3, "split-KV decode": 2}
    # as the package runs, a key seen before skips Triton's dispatch (attn_edu.kernels._direct),
    # FlashAttention-3's launch with its four host TMA descriptors too
    assert [r["call"] for r in result["direct"]] == list(DISPATCH_CASES)
    assert {r["call"]: r["through_triton"] for r in result["direct"]} == {
        "flash forward": 0, "FA3 persistent": 0, "flash backward": 0, "split-KV decode": 0}
    text = format_dispatch_overhead(result)
    assert "autotuner us" in text and "the C launcher stubbed" in text and "FA3 persistent" in text
    assert "direct us" in text and "package us" in text and "split-KV decode 2" in text


def test_the_front_door_checks_every_call_and_answers_facts_that_passed_from_a_table(monkeypatch):
    import torch

    from attn_edu.kernels import _targets
    from attn_edu.kernels import flash_triton as ft
    from attn_edu.kernels.flash_triton import kernels

    check = _targets.check_kernel_inputs
    full = check.__wrapped__
    q = torch.randn(1, 2, 16, 8)
    check.cache_clear()
    ok = check(kernels.LIMITS, q, q, q, kernels.BUILT_INTERPRETED)
    assert ok == full(kernels.LIMITS, q, q, q, kernels.BUILT_INTERPRETED)
    assert check(kernels.LIMITS, q.clone(), q, q, kernels.BUILT_INTERPRETED) == ok  # same facts, new tensor
    assert check.cache_info().hits == 1 and check.cache_info().misses == 1
    # each fact the check reads is in the key: a change is checked in full and refused as before
    bad = {"dtype": (q.double(), TypeError, "float64"), "shape": (q[0], ValueError, "4-D"),
           "head dim": (torch.randn(1, 2, 16, 200), ValueError, "200"),
           "heads": (torch.randn(1, 3, 16, 8), ValueError, "must match or broadcast")}
    for what, (x, error, words) in bad.items():
        with pytest.raises(error, match=words):
            check(kernels.LIMITS, x, q, q, kernels.BUILT_INTERPRETED)
        with pytest.raises(error, match=words):  # and again: a refusal is never remembered as a pass
            check(kernels.LIMITS, x, q, q, kernels.BUILT_INTERPRETED)
    # not exactly a torch.Tensor (a subclass, a list): checked in full on every call
    with pytest.raises(TypeError, match="q"):
        check(kernels.LIMITS, q.tolist(), q, q, kernels.BUILT_INTERPRETED)
    p = torch.nn.Parameter(q.clone())
    before = check.cache_info().misses
    check(kernels.LIMITS, p, q, q, kernels.BUILT_INTERPRETED)
    check(kernels.LIMITS, p, q, q, kernels.BUILT_INTERPRETED)
    assert check.cache_info().misses == before + 2
    # on the CPU the interpreter switch is read on every call: unset now, refused now
    if kernels.BUILT_INTERPRETED:
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(ValueError, match="TRITON_INTERPRET"):
            ft.check_triton_inputs(q, q, q)
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        assert ft.check_triton_inputs(q, q, q)[0] is None
    # True == 1 hashes alike: each type its own key (the full check decides what 1 means)
    check(kernels.LIMITS, q, q, q, kernels.BUILT_INTERPRETED, True)
    keys_before, misses_before = check.cache_info().currsize, check.cache_info().misses
    check(kernels.LIMITS, q, q, q, kernels.BUILT_INTERPRETED, 1)
    assert check.cache_info().currsize == keys_before + 1 and check.cache_info().misses == misses_before + 1


def test_a_gpus_facts_are_asked_once_per_device_and_anew_when_another_function_answers(monkeypatch):
    """The launchers ask the compute capability and the SM count on every call; each is
    asked of torch once per device, and again when torch.cuda's function is another (the
    GPU profile, the compile stand-in and tests swap it in-process)."""
    import types

    import torch

    from attn_edu.kernels import _targets

    asked = []

    def capability(device=None):
        asked.append(device)
        return [8, 6]

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    gpu0, gpu1 = torch.device("cuda", 0), torch.device("cuda", 1)
    assert _targets.device_capability(gpu0) == (8, 6) == _targets.device_capability(gpu0)
    assert asked == [gpu0]  # asked once
    assert _targets.device_capability(gpu1) == (8, 6) and asked == [gpu0, gpu1]  # per device
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))  # a profile's
    assert _targets.device_capability(gpu0) == (7, 5)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: types.SimpleNamespace(multi_processor_count=132))
    assert _targets.sm_count(gpu0) == 132
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: types.SimpleNamespace(multi_processor_count=40))
    assert _targets.sm_count(gpu0) == 40
