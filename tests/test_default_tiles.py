"""Default tiles per backend (masks.default_tiles): what the public loops and the bench use.

No timings here: the speed the defaults buy is measured with ``python -m attn_edu.bench``.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import conftest
from attn_edu import bench, masks
from attn_edu.bench import cli
from attn_edu.flash import flash_attention
from attn_edu.reference import scaled_dot_product_attention as sdpa
from attn_edu.testing import assert_close_to_reference

HAS_TORCH = importlib.util.find_spec("torch") is not None


def tiles_of(trace):
    """(block_q, block_k) of a loop, read off its first tile."""
    (r0, r1), (c0, c1) = trace[0].q_rows, trace[0].k_cols
    return r1 - r0, c1 - c0


def test_the_table_per_backend():
    assert masks.default_tiles("numpy") == masks.DEFAULT_TILES["numpy"]
    assert masks.default_tiles("torch") == masks.DEFAULT_TILES["torch_cpu"]
    for device in ("cuda", "cuda:1", "mps"):
        assert masks.default_tiles("torch", device) == masks.DEFAULT_TILES["torch_gpu"]
    for bq, bk in masks.DEFAULT_TILES.values():
        assert isinstance(bq, int) and isinstance(bk, int) and bq > 0 and bk > 0
    # on a CPU a tile costs Python calls: the defaults are larger than the kernels' 64 x 64
    assert min(masks.default_tiles("numpy")) > masks.DEFAULT_BLOCK_Q
    conftest.raises_with(ValueError, ["framework", "'jax'"], masks.default_tiles, "jax")


def test_numpy_loop_reads_its_default_from_the_table(monkeypatch):
    q, k, v = conftest.qkv(40, 50, 8, 5, seed=1)
    _, trace = flash_attention(q, k, v, return_trace=True)
    assert tiles_of(trace) == (40, 50)  # smaller than the default: one tile
    monkeypatch.setitem(masks.DEFAULT_TILES, "numpy", (8, 16))
    out, trace = flash_attention(q, k, v, causal=True, return_trace=True)
    assert tiles_of(trace) == (8, 16) and len(trace) == 5 * 4
    np.testing.assert_array_equal(out, flash_attention(q, k, v, causal=True, block_q=8, block_k=16))
    _, trace = flash_attention(q, k, v, block_q=20, return_trace=True)  # only one given
    assert tiles_of(trace) == (20, 16)
    plan = masks.plan_tiles(lq=40, lk=50, block_q=10, block_k=25)  # a plan's tiles win
    _, trace = flash_attention(q, k, v, mask=plan, return_trace=True)
    assert tiles_of(trace) == (10, 25)


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_torch_loop_reads_its_default_from_the_table(monkeypatch):
    q, k, v = conftest.torch_qkv(40, 50, 8, 5, seed=1, device="cpu")
    monkeypatch.setitem(masks.DEFAULT_TILES, "torch_cpu", (16, 8))
    monkeypatch.setitem(masks.DEFAULT_TILES, "numpy", (8, 16))  # not the NumPy row
    out, trace = flash_attention(q, k, v, causal=True, return_trace=True)
    assert tiles_of(trace) == (16, 8)
    np.testing.assert_array_equal(out.numpy(), flash_attention(q, k, v, causal=True, block_q=16,
                                                               block_k=8).numpy())


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_the_front_door_passes_the_tensors_device_to_the_table(monkeypatch):
    """The loop's tiles follow the tensors' device: a tensor off the CPU (here PyTorch's
    storage-free "meta" device, which a CUDA tensor would take the same way) gets the GPU's
    row, a CPU tensor the CPU's; NumPy its own."""
    import torch

    from attn_edu import _call

    monkeypatch.setitem(masks.DEFAULT_TILES, "torch_gpu", (32, 16))
    monkeypatch.setitem(masks.DEFAULT_TILES, "torch_cpu", (16, 8))
    monkeypatch.setitem(masks.DEFAULT_TILES, "numpy", (8, 4))
    for device, tiles in (("meta", (32, 16)), ("cpu", (16, 8))):
        q = torch.empty(1, 2, 40, 8, device=device)
        call = _call.attention_call(q, q, q, tiled=True)
        assert (call.block_q, call.block_k) == tiles, device
    q = np.zeros((1, 2, 40, 8))
    call = _call.attention_call(q, q, q, tiled=True)
    assert (call.block_q, call.block_k) == (8, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
def test_default_tiles_agree_with_the_reference(dtype, causal):
    """Lengths the default tiles do not divide, several tiles each way, a padding mask."""
    bq, bk = masks.default_tiles("numpy")
    lq, lk = 2 * bq + 3, bk + 7
    q, k, v = conftest.qkv(lq, lk, 8, 5, lead=(2,), seed=3)
    keep = np.random.default_rng(4).random((2, 1, lk)) < 0.9  # (B, 1, L_k) padding-like mask
    gold = sdpa(q, k, v, mask=keep, causal=causal)  # float64
    naive = sdpa(*(x.astype(dtype) for x in (q, k, v)), mask=keep, causal=causal)
    out, trace = flash_attention(*(x.astype(dtype) for x in (q, k, v)), mask=keep, causal=causal,
                                 return_trace=True)
    assert out.dtype == dtype and tiles_of(trace) == (bq, bk)
    assert_close_to_reference(out, gold, naive)


def test_bench_rows_record_the_tiles_they_ran_with(monkeypatch):
    monkeypatch.setitem(masks.DEFAULT_TILES, "numpy", (8, 16))
    cfg = bench.BenchConfig(d=4)
    row = bench.run_one("numpy_flash", 40, cfg, repeat=1, warmup=0)
    assert (row["block_q"], row["block_k"]) == (8, 16)
    row = bench.run_one("numpy_flash", 40, bench.BenchConfig(d=4, block_q=24), repeat=1, warmup=0)
    assert (row["block_q"], row["block_k"]) == (24, 16)
    row = bench.run_one("numpy_naive", 40, cfg, repeat=1, warmup=0)
    assert (row["block_q"], row["block_k"]) == (None, None)
    # and the impl really runs with them: the built function equals the loop at those tiles
    _, fn = bench.build_impl("numpy_flash", cfg)
    q, k, v = bench.make_inputs("numpy", 40, cfg)
    np.testing.assert_array_equal(fn(q, k, v), flash_attention(q, k, v, block_q=8, block_k=16))
    if HAS_TORCH:
        monkeypatch.setitem(masks.DEFAULT_TILES, "torch_cpu", (16, 8))
        row = bench.run_one("torch_flash", 40, cfg, repeat=1, warmup=0)
        assert (row["block_q"], row["block_k"]) == (16, 8)


def test_bench_cli_prints_the_tiles(monkeypatch, capsys):
    assert cli.main(["--n", "48", "--d", "4", "--impl", "numpy_flash", "numpy_naive", "--repeat", "1",
                     "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    bq, bk = masks.default_tiles("numpy")
    assert any(x.startswith("numpy_flash") and x.endswith(f"tiles {bq}x{bk}") for x in lines), lines
    assert not any(x.startswith("numpy_naive") and "tiles" in x for x in lines), lines
    assert cli.main(["--n", "48", "--d", "4", "--impl", "numpy_flash", "--repeat", "1", "--no-progress",
                     "--block-q", "16"]) == 0
    assert f"tiles 16x{bk}" in capsys.readouterr().out
