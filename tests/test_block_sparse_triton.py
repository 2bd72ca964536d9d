"""Tests for attn_edu.kernels.block_sparse_triton (the block-sparse Triton kernel).

Without a CUDA GPU the kernel runs in Triton's interpreter on the CPU (conftest.py sets
TRITON_INTERPRET=1 before anything imports triton); with a GPU the same tests run compiled.
"""
import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import attn_edu  # noqa: E402
from attn_edu import masks  # noqa: E402
from attn_edu.bench import block_sparse as bench_bs  # noqa: E402
from attn_edu.kernels import block_sparse_triton as bst  # noqa: E402
from attn_edu.testing import assert_close_to_reference, reference_pair  # noqa: E402
from conftest import CUDA, DEVICE, OnCuda, kernel_precision, lse_pair, torch_qkv  # noqa: E402
from venvs import compiled_env  # noqa: E402

if not CUDA and not bst.INTERPRETED:  # imported earlier without it
    bst = importlib.reload(bst)


# --- masks -------------------------------------------------------------------------------
def make_mask(kind, lq, lk, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "causal":
        m = np.asarray(masks.causal_mask(lq, lk))
    elif kind == "window":
        m = masks.sliding_window_mask(max(lq, lk), 20)[:lq, :lk]
    elif kind == "random":
        m = rng.random((lq, lk)) < 0.3
    elif kind == "random_blocks":  # 16x16 tiles on or off: many full tiles, a ragged edge
        tiles = rng.random((-(-lq // 16), -(-lk // 16))) < 0.4
        m = np.kron(tiles, np.ones((16, 16), bool))[:lq, :lk]
    else:
        raise ValueError(kind)
    m = np.array(m, dtype=bool)
    m[min(3, lq - 1)] = False  # a fully masked row
    return m


def check(q, k, v, mask, **kw):
    out = bst.block_sparse_attention(q, k, v, mask, **kw)
    gold, naive = reference_pair(q, k, v, mask=mask, scale=kw.get("scale"), precision=kernel_precision(q.dtype))
    assert out.dtype == q.dtype and out.shape == gold.shape
    assert not torch.isnan(out).any()
    assert_close_to_reference(out, gold, naive)
    return out


# --- numerics against the float64 reference -----------------------------------------------
@pytest.mark.parametrize("kind", ["causal", "window", "random", "random_blocks"])
@pytest.mark.parametrize("L,block,d", [(17, 16, 16), (64, 16, 64), (64, 32, 16),
                                       (129, 32, 64), (129, 16, 16)])
def test_matches_reference(kind, L, block, d):
    q, k, v = torch_qkv(L, L, d, lead=(1, 2))
    check(q, k, v, make_mask(kind, L, L), block_q=block, block_k=block)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["causal", "random_blocks"])
def test_half_precision(dtype, kind):
    q, k, v = torch_qkv(129, 129, 64, lead=(1, 2), dtype=dtype)
    check(q, k, v, make_mask(kind, 129, 129), block_q=32, block_k=32)


@pytest.mark.parametrize("lq,lk", [(17, 65), (65, 17), (1, 33)])
def test_lq_ne_lk_odd_head_dims_rectangular_tiles(lq, lk):
    q, k, v = torch_qkv(lq, lk, 59, dv=111, lead=(2, 1))
    mask = np.asarray(masks.causal_mask(lq, lk, "bottom_right"))
    check(q, k, v, mask, block_q=16, block_k=32)
    check(q, k, v, make_mask("random", lq, lk), block_q=32, block_k=16, scale=-0.3)


@pytest.mark.parametrize("d,dv", [(1, 1), (8, 3), (4, 16)])
def test_head_dims_below_16_are_padded(d, dv):
    """Head dimensions 1 to 15 run as 16 lanes with the rest masked, as in the other kernels."""
    q, k, v = torch_qkv(33, 40, d, dv=dv, lead=(1, 2))
    check(q, k, v, make_mask("random_blocks", 33, 40), block_q=16, block_k=16)


def test_mask_per_batch_and_head():
    q, k, v = torch_qkv(40, 40, 16, lead=(2, 3))
    rng = np.random.default_rng(1)
    per_head = rng.random((2, 3, 40, 40)) < 0.2
    per_head[1, 2, :16] = False  # a whole row block empty in one head only
    out = check(q, k, v, torch.from_numpy(per_head).to(DEVICE), block_q=16, block_k=16)
    assert out[1, 2, :16].abs().max() == 0
    per_batch = rng.random((2, 1, 40, 40)) < 0.5
    check(q, k, v, per_batch, block_q=16, block_k=16)
    key_padding = torch.from_numpy(rng.random((1, 1, 1, 40)) < 0.7)  # a (1, 40) row, broadcast
    check(q, k, v, key_padding.expand(2, 3, 40, 40).to(DEVICE), block_q=16, block_k=16)  # strides 0
    check(q[:1, :1], k[:1, :1], v[:1, :1], np.zeros((40, 40), bool), block_q=16, block_k=16)  # nothing allowed


def test_fully_masked_rows_give_zeros_and_lse_minus_inf():
    L = 64
    q, k, v = torch_qkv(L, L, 16, lead=(1, 2))
    mask = np.asarray(masks.causal_mask(L))
    mask[16:32] = False  # a whole row block with no tile at all
    mask[5] = False  # one row inside a partial tile
    out, lse = bst.block_sparse_attention(q, k, v, mask, block_q=16, block_k=16, return_lse=True)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert out[:, :, 16:32].abs().max() == 0 and out[:, :, 5].abs().max() == 0
    assert torch.isneginf(lse[:, :, 16:32]).all() and torch.isneginf(lse[:, :, 5]).all()
    assert torch.isfinite(lse[:, :, 32:]).all()


def test_lse_matches_float64_logsumexp():
    L = 65
    q, k, v = torch_qkv(L, L, 16, lead=(1, 2))
    mask = make_mask("window", L, L)
    _, lse = bst.block_sparse_attention(q, k, v, mask, block_q=16, block_k=16, return_lse=True)
    ref, naive = lse_pair(q, k, mask, 1 / 4.0, kernel_precision(q.dtype))  # scale 1/sqrt(16)
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, L)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref))
    fin = torch.isfinite(ref)
    assert_close_to_reference(lse[fin], ref[fin], naive[fin], what="lse")


def test_repeated_runs_bitwise_equal():
    q, k, v = torch_qkv(33, 33, 16, lead=(1, 1))
    mask = make_mask("random", 33, 33)
    assert torch.equal(bst.block_sparse_attention(q, k, v, mask, block_q=16, block_k=16),
                       bst.block_sparse_attention(q, k, v, mask, block_q=16, block_k=16))


# --- the plan and its compression ---------------------------------------------------------
def _dense(num, idx, nk):
    """Rebuild a (..., nq, nk) tile layout from its lists: the inverse of the compression."""
    listed = np.arange(idx.shape[-1]) < num[..., None]  # the first `num` entries of a row
    out = np.zeros(idx.shape[:-1] + (nk,), dtype=bool)
    where = np.nonzero(listed)
    out[where[:-1] + (idx[where],)] = True
    return out


@pytest.mark.parametrize("kind", ["causal", "window", "random", "random_blocks"])
@pytest.mark.parametrize("lq,lk,bq,bk", [(64, 64, 16, 16), (129, 65, 32, 16), (17, 100, 16, 64)])
def test_tile_lists_match_masks_block_layout(kind, lq, lk, bq, bk):
    mask = make_mask(kind, lq, lk)
    plan = masks.plan_tiles(mask, bq, bk)
    layout = masks.block_layout(mask, bq, bk)
    full = masks.full_blocks(mask, bq, bk) & layout
    assert np.array_equal(plan.computed, layout) and np.array_equal(plan.full, full)
    # ... and the layout is what the mask's tiles hold, tile by tile (NumPy, not masks')
    nq, nk = -(-lq // bq), -(-lk // bk)
    tiles = [[mask[i * bq:(i + 1) * bq, j * bk:(j + 1) * bk] for j in range(nk)] for i in range(nq)]
    assert np.array_equal(layout, [[t.any() for t in row] for row in tiles])
    assert np.array_equal(full, [[t.all() for t in row] for row in tiles])
    full_num, full_idx, part_num, part_idx = plan.tile_lists()
    nk = layout.shape[-1]
    assert np.array_equal(_dense(full_num, full_idx, nk), full)  # rebuilt from the lists alone
    assert np.array_equal(_dense(part_num, part_idx, nk) | full, layout)
    assert np.array_equal(full_num, full.sum(-1)) and np.array_equal(part_num, (layout & ~full).sum(-1))
    for num, idx in ((full_num, full_idx), (part_num, part_idx)):
        for r in range(layout.shape[0]):  # listed columns ascend
            assert np.all(np.diff(idx[r, : num[r]]) > 0)


def test_causal_plan_has_half_the_tiles_and_full_tiles_below_diagonal():
    plan = masks.plan_tiles(np.asarray(masks.causal_mask(128)), 32, 32)
    assert np.array_equal(plan.computed, masks.causal_block_layout(128, 128, 32, 32))
    assert np.array_equal(plan.full, np.tri(4, 4, -1, dtype=bool))  # diagonal is partial
    assert plan.tile_lists()[2].tolist() == [1, 1, 1, 1]


def test_a_plan_is_reused_and_copied_to_the_device_once():
    q, k, v = torch_qkv(48, 48, 16, lead=(1, 2))
    mask = make_mask("window", 48, 48)
    plan = masks.plan_tiles(torch.from_numpy(mask).to(DEVICE), 16, 32)
    out = bst.block_sparse_attention(q, k, v, plan)
    gold, naive = reference_pair(q, k, v, mask=mask, precision=kernel_precision(q.dtype))
    assert_close_to_reference(out, gold, naive)
    cached = dict(plan._derived)
    assert len(cached) == 1  # its mask and tile lists, on q's device
    torch.testing.assert_close(bst.block_sparse_attention(q, k, v, plan), out, rtol=0, atol=0)
    assert all(a is b for a, b in zip(plan._derived[next(iter(cached))], next(iter(cached.values()))))


# --- tiles are really skipped ------------------------------------------------------------
def test_empty_tiles_are_never_loaded():
    """NaN in K and V of keys that sit only in empty tiles cannot reach the output."""
    L, block = 64, 16
    q, k, v = torch_qkv(L, L, 16, lead=(1, 2))
    mask = np.asarray(masks.causal_mask(L)).copy()
    mask[:, 16:32] = False  # key block 1 is empty in every row block
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, :, 16:32] = float("nan")
    v_nan[:, :, 16:32] = float("nan")
    out = bst.block_sparse_attention(q, k_nan, v_nan, mask, block_q=block, block_k=block)
    # a kernel that loaded those tiles would give NaN (0 * NaN), like the naive one does
    naive_nan = attn_edu.scaled_dot_product_attention(
        q.cpu(), k_nan.cpu(), v_nan.cpu(), mask=torch.from_numpy(mask))
    assert torch.isnan(naive_nan[:, :, 32:]).all()
    assert torch.isfinite(out).all()
    gold, naive = reference_pair(q, k, v, mask=mask, precision=kernel_precision(q.dtype))  # finite K, V give the answer
    assert_close_to_reference(out, gold, naive)


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # the interpreter's max
def test_skipping_is_per_row_block_and_nan_still_propagates():
    """Causal: key block 3 is loaded only by row block 3, where NaN must propagate."""
    L, block = 64, 16
    q, k, v = torch_qkv(L, L, 16, lead=(1, 1))
    mask = np.asarray(masks.causal_mask(L))
    k[:, :, 48:] = float("nan")
    v[:, :, 48:] = float("nan")
    out = bst.block_sparse_attention(q, k, v, mask, block_q=block, block_k=block)
    assert torch.isnan(out[:, :, 48:]).all()  # these rows attend NaN keys
    assert torch.isfinite(out[:, :, :48]).all()  # these never load key block 3
    gold, naive = reference_pair(q[:, :, :48], k[:, :, :48], v[:, :, :48], mask=mask[:48, :48],
                                 precision=kernel_precision(q.dtype))
    assert_close_to_reference(out[:, :, :48], gold, naive)


def test_full_tiles_do_not_read_the_element_mask():
    """With the layout of mask A, entries of the element mask inside A's full tiles are
    never read: a mask B that differs from A only there gives A's answer."""
    L = 64
    q, k, v = torch_qkv(L, L, 16, lead=(1, 1))
    a = np.asarray(masks.causal_mask(L))
    b = a.copy()
    b[40:48, 0:8] = False  # inside tile (2, 0), which is full in A
    plan_a = masks.plan_tiles(a, 16, 16)
    assert plan_a.full[2, 0]
    # a plan whose mask is B but whose tiles are A's: what the kernel reads of the mask
    plan_mixed = masks.TilePlan(16, 16, L, L, None, plan_a.computed, plan_a.partial, b)
    out = bst.block_sparse_attention(q, k, v, plan_mixed)
    gold_a, naive_a = reference_pair(q, k, v, mask=a, precision=kernel_precision(q.dtype))
    assert_close_to_reference(out, gold_a, naive_a)
    out_b = check(q, k, v, b, block_q=16, block_k=16)  # B's own layout marks the tile partial
    assert not torch.allclose(out_b, out)


# --- FlexAttention on the same mask ------------------------------------------------------
needs_flex = pytest.mark.skipif(not bst.flex_available(),
                                reason="torch.nn.attention.flex_attention is not available")


@needs_flex
@pytest.mark.parametrize("kind", ["window", "random"])
def test_matches_flex_attention(kind):
    L = 65
    q, k, v = torch_qkv(L, L, 16, lead=(1, 2))
    mask = make_mask(kind, L, L)
    out, lse = bst.block_sparse_attention(q, k, v, mask, block_q=16, block_k=16, return_lse=True)
    ref, ref_lse = bst.flex_reference(q, k, v, mask, 16, return_lse=True, compiled=False)
    precision = kernel_precision(q.dtype)
    gold, naive = reference_pair(q, k, v, mask=mask, precision=precision)
    assert_close_to_reference(ref, gold, naive)  # FlexAttention agrees with the gold answer
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    fin = torch.isfinite(ref_lse)
    # the kernel and FlexAttention, each held to the rule against the float64 answer (from
    # sm_80 the kernel multiplies float32 in TF32 and eager FlexAttention does not)
    gold_lse, naive_lse = lse_pair(q, k, mask, 1 / 4.0, precision)
    assert_close_to_reference(out, gold, naive)
    for what, x in (("lse", lse), ("FlexAttention's lse", ref_lse)):
        assert_close_to_reference(x[fin], gold_lse[fin], naive_lse[fin], what=what)


@needs_flex
def test_flex_block_mask_has_the_same_tile_lists():
    L = 64
    mask = make_mask("window", L, L)
    full_num, _, part_num, part_idx = masks.plan_tiles(mask, 16, 16).tile_lists()
    bm = bst.flex_block_mask_from_bool(mask, 16)
    assert bm.full_kv_num_blocks[0, 0].cpu().tolist() == full_num.tolist()
    assert bm.kv_num_blocks[0, 0].cpu().tolist() == part_num.tolist()
    for r in range(L // 16):
        n = int(part_num[r])
        assert sorted(bm.kv_indices[0, 0, r, :n].tolist()) == part_idx[r, :n].tolist()


# --- bad input ---------------------------------------------------------------------------
class _SmallSharedMemory:
    """Stands in for the kernel on a GPU whose shared memory is too small for tiles over 64
    (a T4 with a 128 x 64 tile at d = 128: 96 KiB of 64 in the compile report)."""

    def __init__(self, real, limit_block=64):
        self.real, self.limit_block, self.tiles = real, limit_block, []

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.tiles.append((kw["PLAN_M"], kw["BLOCK_N"]))  # the tile (a program may take a slice)
            if max(kw["PLAN_M"], kw["BLOCK_N"]) > self.limit_block:
                raise bst._targets.OutOfResources(98304, 65536, "shared memory")
            return self.real[grid](*args, **kw)
        return launch


def test_a_tile_too_big_for_the_gpu_falls_back_to_64_by_64(monkeypatch):
    q, k, v = torch_qkv(80, 80, 32, lead=(1, 2))
    mask = make_mask("random_blocks", 80, 80)
    fake = _SmallSharedMemory(bst._block_sparse_fwd_kernel)
    monkeypatch.setattr(bst, "_block_sparse_fwd_kernel", fake)
    with pytest.warns(UserWarning, match="a 128 x 64 tile at head dim 32 needs more shared memory"):
        out = bst.block_sparse_attention(q, k, v, mask, block_q=128, block_k=64)
    assert fake.tiles == [(128, 64), (64, 64)]
    gold, naive = reference_pair(q, k, v, mask=mask, precision=kernel_precision(q.dtype))
    assert_close_to_reference(out, gold, naive)
    # nothing smaller to fall back to: a clear error, not Triton's
    monkeypatch.setattr(bst, "_block_sparse_fwd_kernel", _SmallSharedMemory(fake.real, limit_block=16))
    with pytest.raises(ValueError, match="a 64 x 64 tile at head dim 32 needs more shared memory"):
        bst.block_sparse_attention(q, k, v, mask)


class _Grids:
    """Stands in for the kernel: records each launch's grid and precision, runs nothing."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kw: self.launches.append((grid, kw["PRECISION"]))


@pytest.mark.skipif(CUDA, reason="a stand-in launch on CPU tensors")
def test_batch_times_heads_is_on_the_grid_x_axis(monkeypatch):
    # B * H = 70,000 (CUDA's y axis stops at 65,535): one axis of B * H * row blocks
    fake = _Grids()
    monkeypatch.setattr(bst, "_block_sparse_fwd_kernel", fake)
    q = torch.zeros(1, 70_000, 1, 16)
    mask = torch.ones(1, 1, dtype=torch.bool)
    bst.block_sparse_attention(q, q, q, mask, 16, 16)
    bst.block_sparse_attention(q, q, q, mask, 16, 16, precision="tf32")  # (the interpreter is exact anyway)
    assert fake.launches == [((70_000,), "ieee"), ((70_000,), "tf32")]


def test_exact_float32_runs_in_row_slices_and_is_refused_where_tf32_exists(monkeypatch):
    # exact float32 (a T4, the interpreter): 16 query rows per program, the plan's tile lists
    assert bst.launch_config(64, 64, 128, "ieee") == (bst.IEEE_ROWS, 64, bst.IEEE_WARPS, bst.IEEE_STAGES)
    assert bst.launch_config(64, 64, 128, "tf32") == (64, 64, 8, 3)
    assert bst.launch_config(64, 64, 64, "tf32") == (64, 64, 4, 3)
    q, k, v = torch_qkv(70, 70, 16, lead=(1, 1))
    mask = make_mask("random_blocks", 70, 70)
    out = bst.block_sparse_attention(q, k, v, mask, 64, 32)  # float32: 4 programs per row block
    assert_close_to_reference(out, *reference_pair(q, k, v, mask=mask, precision=kernel_precision(q.dtype)))
    # on an A100 or H100 exact float32 would spill: refused, TF32 is the default there
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    onc = torch.zeros(1, 1, 16, 16).as_subclass(OnCuda)
    with pytest.raises(ValueError, match="precision='ieee'.*8.0"):
        bst.block_sparse_attention(onc, onc, onc, torch.ones(16, 16, dtype=torch.bool), precision="ieee")


def test_bad_inputs():
    q, k, v = torch_qkv(16, 16, 16, lead=(1, 1))
    mask = np.ones((16, 16), bool)
    f = bst.block_sparse_attention
    with pytest.raises(TypeError, match="torch.Tensor"):
        f(q.cpu().numpy(), k, v, mask)
    with pytest.raises(ValueError, match=r"\(B, H, L, D\)"):
        f(q[0], k[0], v[0], mask)
    with pytest.raises(ValueError, match="1 to 128.*d_k = 200"):
        f(*torch_qkv(16, 16, 200, lead=(1, 1)), mask)
    with pytest.raises(ValueError, match="1 to 128.*d_v = 160"):
        f(*torch_qkv(16, 16, 16, dv=160, lead=(1, 1)), mask)
    with pytest.raises(TypeError, match="float16, bfloat16, float32.*float64"):
        f(q.double(), k.double(), v.double(), mask)
    with pytest.raises(TypeError, match="same dtype"):
        f(q, k.half(), v, mask)
    with pytest.raises(TypeError, match="boolean"):
        f(q, k, v, torch.zeros(16, 16, device=DEVICE))
    with pytest.raises(TypeError, match="boolean"):
        f(q, k, v, mask.astype(np.int64))
    with pytest.raises(ValueError, match="does not broadcast"):
        f(q, k, v, np.ones((16, 15), bool))
    with pytest.raises(ValueError, match="power of two from 16 to 256"):
        f(q, k, v, mask, block_q=24, block_k=24)
    with pytest.raises(ValueError, match="block_k"):
        f(q, k, v, mask, block_k=8)
    with pytest.raises(ValueError, match="at least 1"):
        f(q, k, v, mask, block_q=0, block_k=0)
    with pytest.raises(ValueError, match="scale must be non-zero"):
        f(q, k, v, mask, scale=0.0)
    plan = masks.plan_tiles(mask, 16, 16)
    with pytest.raises(ValueError, match="block_q=32 but the TilePlan was built with block_q=16"):
        f(q, k, v, plan, block_q=32)
    with pytest.raises(ValueError, match="TilePlan is for"):
        f(*torch_qkv(32, 32, 16, lead=(1, 1)), plan)
    with pytest.raises(TypeError, match="boolean"):
        f(q, k, v, masks.plan_tiles(np.zeros((16, 16)), 16, 16))
    # a causal TilePlan: its partial tiles would read the mask without the causal part
    with pytest.raises(ValueError, match="causal=False but the TilePlan was built with causal='top_left'"):
        f(q, k, v, masks.plan_tiles(mask, 16, 16, causal=True))
    with pytest.raises(ValueError, match="needs a mask"):  # a plan of the causal rule alone
        f(q, k, v, masks.plan_tiles(None, 16, 16, lq=16, lk=16))
    with pytest.raises(ValueError, match="power of two from 16 to 256.*got 512"):
        f(q, k, v, mask, block_q=512)


def test_cpu_without_interpreter_gives_a_clear_error(monkeypatch):
    # the three kernels' one check (_targets.check_runnable): a ValueError, as for the others
    q, k, v = (x.cpu() for x in torch_qkv(16, 16, 16, lead=(1, 1)))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="block_sparse_attention needs a CUDA GPU.*TRITON_INTERPRET=1"):
        bst.block_sparse_attention(q, k, v, np.ones((16, 16), bool))
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # set, but after the kernel was built for the GPU
    monkeypatch.setattr(bst, "INTERPRETED", False)
    with pytest.raises(RuntimeError, match="after triton had been imported"):
        bst.block_sparse_attention(q, k, v, np.ones((16, 16), bool))


@pytest.mark.skipif(CUDA, reason="on a GPU the benchmark would run")
def test_benchmark_says_it_was_skipped_without_a_gpu(capsys):
    assert bench_bs.bench_block_sparse(n_list=(256,)) == []
    assert "SKIPPED" in capsys.readouterr().out


@pytest.mark.parametrize("capability, expected", [((7, 5), "float16"), ((8, 0), "bfloat16"),
                                                  ((9, 0), "bfloat16")])
def test_benchmark_dtype_is_float16_before_ampere(monkeypatch, capability, expected):
    """A Colab T4 (7.5) emulates bfloat16 in PyTorch (torch.cuda.is_bf16_supported() is
    True there) but Triton kernels need it natively: the benchmark defaults to float16."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    assert bench_bs.default_dtype() == expected


def test_benchmark_tries_only_eight_warps_before_ampere():
    """On a T4 (7.5) half-type tiles live in registers: the 4-warp configurations (7 times
    the spills of 8 warps) are dropped; from Ampere on, and in the CPU's dry run, every
    configuration given is tried."""
    mine = ((4, 2), (4, 3), (8, 2), (8, 3))
    assert bench_bs._sized_configs(mine, (7, 5)) == [(8, 2), (8, 3)]
    assert bench_bs._sized_configs(((4, 3), (8, 3)), (7, 5)) == [(8, 3)]   # chapter 11's pair
    assert bench_bs._sized_configs(((4, 3), (4, 2)), (7, 5)) == [(8, 2), (8, 3)]  # none left: 8 warps, its stages
    for cap in ((8, 0), (9, 0), None):
        assert bench_bs._sized_configs(mine, cap) == list(mine)
    assert bench_bs.PRE_AMPERE_MIN_WARPS == 8
    for bad in ((), ((4,),), ((0, 3),), ((4.0, 3),)):
        with pytest.raises(ValueError, match="configs must be .num_warps, num_stages. pairs"):
            bench_bs._sized_configs(bad, (7, 5))


AOT_SCRIPT = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attn_edu.kernels import block_sparse_triton as bst

fn = bst._block_sparse_fwd_kernel
assert type(fn).__name__ == "JITFunction", type(fn)
for cc, dt, d, bq, bk, even in [(80, "fp16", 59, 64, 32, False)]:  # the report compiles EVEN=True
    sig = {name: "i32" for name in fn.arg_names}
    sig.update({p: "*" + dt for p in ("Q", "K", "V", "O")}, M="*u8", LSE="*fp32", qk_scale="fp32")
    sig.update({p: "*i32" for p in ("FULL_NUM", "FULL_IDX", "PART_NUM", "PART_IDX")})
    bd = triton.next_power_of_2(d)
    consts = dict(D=d, DV=d, BLOCK_M=bq, BLOCK_N=bk, BLOCK_D=bd, BLOCK_DV=bd, EVEN=even,
                  PRECISION=None, UPCAST=False, PLAN_M=bq)
    sig.update({c: "constexpr" for c in consts})
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                       target=GPUTarget("cuda", cc, 32), options={"num_warps": 4, "num_stages": 3})
    assert "mma.sync" in k.asm["ptx"], "no tensor-core instruction"
    assert k.metadata.shared <= 166912  # an A100's shared memory per block
    print("compiled", cc, dt, d, bq, bk)
"""


@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="with a GPU the tests above compile it")
def test_kernel_compiles_for_gpus_without_a_gpu(tmp_path):
    """Triton compiles the (non-interpreted) kernel's bounds-checked path (``EVEN=False``: a
    head dimension of 59, keys not a multiple of the tile) to PTX for sm_80 here, on a
    machine with no GPU: catches what the lenient interpreter lets through. The launcher's
    own configurations (the even path) for sm_75, sm_80 and sm_90a, their shared memory,
    spills and matrix instructions are the compile report's rows
    (tests/test_kernel_report.py), compiled again whenever the kernels change."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", AOT_SCRIPT], env=compiled_env(TRITON_CACHE_DIR=str(tmp_path)),
                       capture_output=True,
                       text=True, timeout=300)
    if r.returncode and ("No module named 'triton.backends" in r.stderr
                         or "cannot import name" in r.stderr):
        pytest.skip(f"this triton has no ahead-of-time compile API: {r.stderr[-200:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("compiled") == 1, r.stdout
