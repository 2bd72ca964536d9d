"""The FlashAttention-3 ladder of the Triton forward (``flash_triton.FORWARD_VARIANTS``).

Every variant against the float64 reference with the tolerance rule, causal and not, on
ragged lengths and padded head dims, through each of its paths: pointer loads, host-built
TMA descriptors (the interpreter runs ``TensorDescriptor`` arguments, so the CPU tests the
descriptors' zero fill and clipped stores), the warp-specialized single loop (64-row tiles)
and the persistent grid (three programs under the interpreter, so each loops over several
tiles, causal ones longest first). Then what a launch leaves out where a step cannot run
(before Hopper, float32) and the autotuner's spaces per GPU. The compiled side (TMA,
wgmma, setmaxnreg on sm_90a) is tests/test_kernel_report.py's.
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attn_edu.kernels import flash_triton as ft  # noqa: E402
from attn_edu.kernels.flash_triton import kernels as fk, launch as fl  # noqa: E402
from attn_edu.testing import assert_close_to_reference, reference_pair  # noqa: E402
from conftest import CUDA, kernel_precision, torch_qkv  # noqa: E402

CAUSALS = [False, True, "bottom_right"]
LADDER = ft.FORWARD_VARIANTS[1:]
# (B, H, Lq, Lk, Dk, Dv): ragged last blocks, Lq != Lk both ways, padded head dims (48, 80);
# every row a multiple of 16 bytes in float16, so TMA can address them
SHAPES = [(1, 2, 65, 129, 64, 64), (2, 1, 70, 33, 48, 80)] if not CUDA else \
    [(2, 3, 1000, 1000, 64, 64), (1, 2, 300, 1030, 128, 128), (2, 2, 129, 65, 48, 80)]
# (use_tma, config): on the CPU the default (pointer loads), host descriptors forced, and
# descriptors with a 64-row tile, where "warp_specialized" and "persistent" take the
# warp-specialized loop; on a GPU the launcher's choice, autotuned and with a 64-row tile
PATHS = [(None, None), (True, None), (True, (64, 32, 4, 1))] if not CUDA else [(None, None), (None, (64, 64, 4, 2))]


def _inputs(shape, seed=0):
    B, H, LQ, LK, DK, DV = shape
    return torch_qkv(LQ, LK, DK, DV, lead=(B, H), seed=seed, dtype=torch.float16)


def _lse(q, k, causal, dtype=torch.float64):
    """log-sum-exp of the (masked) scores computed in ``dtype`` (float64: the gold one)."""
    from attn_edu import masks

    q, k = q.to(dtype), k.to(dtype)
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    align = {False: None, True: "top_left"}.get(causal, causal)
    if align is not None:
        s = s.masked_fill(~masks.causal_mask(q.shape[-2], k.shape[-2], align, device=q.device), float("-inf"))
    return torch.logsumexp(s, dim=-1)


class _Spy:
    """Stands in for a jitted kernel and records each launch's grid and constants."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.seen.append((grid, dict(kwargs), args[:4]))
            return self.kernel[grid](*args, **kwargs)
        return launch


@pytest.mark.triton
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", CAUSALS, ids=str)
@pytest.mark.parametrize("variant", LADDER)
def test_every_variant_matches_the_reference_on_every_path(variant, causal, shape, monkeypatch):
    q, k, v = _inputs(shape)
    align, scale = ft.check_triton_inputs(q, k, v, causal, None)
    gold, naive = reference_pair(q, k, v, causal=causal, precision=kernel_precision(q.dtype))
    gold_lse = _lse(q, k, causal)
    empty = torch.isneginf(gold_lse)  # bottom-right with Lq > Lk: rows that see no key
    seen, fa2 = [], []
    monkeypatch.setattr(fk, "attn_fwd_fa3", _Spy(fk.attn_fwd_fa3, seen))
    monkeypatch.setattr(fk, "attn_fwd", _Spy(fk.attn_fwd, fa2))
    for use_tma, config in PATHS:
        out, lse = fl.forward(q, k, v, align, scale, use_tma=use_tma, config=config, variant=variant)
        assert_close_to_reference(out, gold, naive, what=f"{variant} {use_tma} {config}")
        assert not torch.isnan(out).any() and torch.equal(torch.isneginf(lse), empty)
        naive_lse = _lse(q, k, causal, q.dtype)  # the naive lse, in the inputs' dtype
        assert_close_to_reference(lse[~empty], gold_lse[~empty], naive_lse[~empty], what="lse")
    if CUDA:
        return
    # what ran: the FlashAttention-3 kernel with the steps asked for, but where a launch is
    # left with no step (path 0, pointer loads, of every variant but "persistent"): that is
    # what fa2's kernel does, and fa2's kernel runs
    persistent = variant == "persistent"
    assert len(fa2) == (not persistent) and len(seen) == len(PATHS) - len(fa2)
    paths = PATHS[len(fa2):]
    assert [m["HOST_TMA"] for _, m, _ in seen] == [use_tma is True for use_tma, _ in paths]
    assert [isinstance(a[0], fl._TensorDescriptor) for _, _, a in seen] == [m["HOST_TMA"] for _, m, _ in seen]
    (_, m1, a1), (_, m2, a2) = seen[-2:]  # the two descriptor paths
    assert a1[0].block_shape == [1, 1, 32, 64] and a2[1].block_shape == [1, 1, 32, 64]  # Q: BLOCK_M; K: BLOCK_N
    ws = FORWARD_RANK[variant] >= 3
    assert [m1["WARP_SPECIALIZE"], m2["WARP_SPECIALIZE"]] == [False, ws]  # 64-row tiles only
    assert all(m["PERSISTENT"] == persistent for _, m, _ in seen)
    B, H, LQ = shape[:3]
    tiles = B * H * -(-LQ // 32)
    assert seen[0][0] == ((fl.PERSISTENT_PROGRAMS_INTERPRETED,) if persistent else (tiles,))
    assert not persistent or tiles >= 2 * fl.PERSISTENT_PROGRAMS_INTERPRETED  # each program loops


FORWARD_RANK = {v: i for i, v in enumerate(ft.FORWARD_VARIANTS)}


@pytest.mark.triton
def test_the_public_functions_take_a_variant_and_check_it(monkeypatch):
    from attn_edu import reference_torch

    q, k, v = _inputs(SHAPES[0])
    gold, naive = reference_pair(q, k, v, causal=True, precision=kernel_precision(q.dtype))
    seen, fa2 = [], []
    monkeypatch.setattr(fk, "attn_fwd_fa3", _Spy(fk.attn_fwd_fa3, seen))
    monkeypatch.setattr(fk, "attn_fwd", _Spy(fk.attn_fwd, fa2))
    for variant in LADDER:
        seen.clear(), fa2.clear()
        out, _ = ft.triton_attention_forward(q, k, v, causal=True, variant=variant)
        assert_close_to_reference(out, gold, naive, what=variant)
        if CUDA:  # autotuned: its tuner holds the kernels the spies stand in front of
            continue
        # the variant reached the launcher: the kernel of launched_variant ran, once
        ran = "fa2" if fa2 else variant
        assert (len(seen), len(fa2)) in ((1, 0), (0, 1)) and ran == fl.launched_variant(q, k, v, variant)
        assert not seen or seen[0][1]["PERSISTENT"] == (variant == "persistent")
        # the interpreter's pointer loads: only "persistent" has a step left
        assert (ran == "fa2") == (variant != "persistent")
    with pytest.raises(ValueError, match="variant must be one of 'fa2'.*got 'fa4'"):
        ft.triton_attention_forward(q, k, v, variant="fa4")
    with pytest.raises(ValueError, match="variant must be one of"):
        ft.triton_attention(q, k, v, variant=None)
    # the backward after the top rung's forward, in float16: its saved output and lse are
    # the same kind, and the gradients hold to the float64 reference (the backward's rule)
    seen.clear()
    xs = [x.clone().requires_grad_() for x in (q, k, v)]
    do = torch.randn(q.shape[:3] + (v.shape[-1],), generator=torch.Generator().manual_seed(2)).to(q)
    ft.triton_attention(*xs, causal=True, variant="persistent").backward(do)
    assert CUDA or (len(seen) == 1 and seen[0][1]["PERSISTENT"])
    refs = {}
    for dtype in (torch.float64, q.dtype):  # gold, then naive in the inputs' dtype
        ins = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
        reference_torch.scaled_dot_product_attention(*ins, causal=True).backward(do.to(dtype))
        refs[dtype] = [x.grad for x in ins]
    for name, x, g, n in zip("qkv", xs, refs[torch.float64], refs[q.dtype]):
        assert_close_to_reference(x.grad, g, n, factor=3.0, what=f"d{name} after variant='persistent'")


def test_each_step_is_left_out_where_it_cannot_run_and_says_why():
    steps = ft.variant_steps
    hopper = steps("persistent", (9, 0), 2, True)
    assert hopper == dict(host_tma=True, wide=True, warp_specialize=True, persistent=True, left_out=())
    # each rung adds one step to the one below
    on = [{k for k, x in (steps(v, (9, 0), 2, True) or {}).items() if x is True} for v in ft.FORWARD_VARIANTS]
    assert on == [set(), {"host_tma"}, {"host_tma", "wide"}, {"host_tma", "wide", "warp_specialize"},
                  {"host_tma", "wide", "warp_specialize", "persistent"}]
    ampere = steps("persistent", (8, 0), 2, True)  # an A100: no TMA, so no warp specialization either
    assert (ampere["host_tma"], ampere["wide"], ampere["warp_specialize"], ampere["persistent"]) == (
        False, False, False, True)
    assert "compute capability 9.0" in ampere["left_out"][0] and len(ampere["left_out"]) == 3
    turing = steps("host_tma", (7, 5), 2, True)
    assert turing["host_tma"] is False and "9.0" in turing["left_out"][0]
    odd = steps("warp_specialized", (9, 0), 2, False)  # Hopper, tensors TMA cannot address
    assert not odd["host_tma"] and not odd["warp_specialize"] and "cannot address" in odd["left_out"][0]
    # float32 and exact products: FlashAttention-2's kernel, whatever the variant
    assert steps("persistent", (9, 0), 4, True) is None and steps("wide_tiles", (9, 0), 2, True, "ieee") is None
    assert steps("fa2", (9, 0), 2, True) is None
    # a launch left with no step runs fa2's kernel (pointer loads, no persistent grid: before
    # Hopper, or tensors TMA cannot address); one step left is enough for the FA3 kernel
    plan = lambda variant, cap, tma_ok: fl._variant_plan(variant, cap, torch.bfloat16, None, tma_ok)  # noqa: E731
    assert [plan(v, (8, 0), True) for v in LADDER[:-1]] == [None] * 3 and plan("persistent", (8, 0), True) == ampere
    assert plan("host_tma", (9, 0), False) is None and plan("wide_tiles", (9, 0), False)["wide"]
    assert plan("host_tma", (9, 0), True)["host_tma"]
    with pytest.raises(ValueError, match="variant must be one of"):
        steps("fa3", (9, 0), 2, True)


@pytest.mark.parametrize("cap", [(7, 5), (8, 0), (9, 0)], ids=str)
def test_the_variant_launched_is_the_one_whose_autotuner_chosen_forward_config_reads(cap, monkeypatch):
    # launched_variant is what chosen_forward_config looks the autotuner's choice up under:
    # fa2's for a variant left with no step (before Hopper; on Hopper tensors TMA cannot
    # address, as CPU tensors here) and for float32, else the variant's own
    monkeypatch.setattr(fl, "_capability", lambda x: cap)
    q = torch.zeros(1, 1, 64, 64, dtype=torch.bfloat16)
    got = {v: fl.launched_variant(q, q, q, v) for v in ft.FORWARD_VARIANTS}
    want = {v: v if v == "persistent" or (cap >= (9, 0) and v in ("wide_tiles", "warp_specialized")) else "fa2"
            for v in ft.FORWARD_VARIANTS}
    assert got == want
    forced = fl.launched_variant(q, q, q, "host_tma", use_tma=True)  # descriptors asked for: Hopper's
    assert forced == ("host_tma" if cap >= (9, 0) else "fa2")
    assert {fl.launched_variant(q.float(), q.float(), q.float(), v) for v in ft.FORWARD_VARIANTS} == {"fa2"}


@pytest.mark.triton
def test_float32_runs_every_variant_as_fa2(monkeypatch):
    q, k, v = (x.float() for x in _inputs(SHAPES[1]))
    ref, ref_lse = ft.triton_attention_forward(q, k, v, causal=True)
    seen = []
    monkeypatch.setattr(fk, "attn_fwd_fa3", _Spy(fk.attn_fwd_fa3, seen))
    for variant in LADDER:
        out, lse = ft.triton_attention_forward(q, k, v, causal=True, variant=variant)
        assert torch.equal(out, ref) and torch.equal(lse, ref_lse)  # the same kernel, run twice
    assert seen == [] or CUDA  # ... and it is fa2's: the FlashAttention-3 kernel never ran (the
    # spy sees the interpreter's fixed-tile launches; on a GPU the autotuners hold the kernels)


@pytest.mark.parametrize("d", [64, 128])
def test_the_autotuner_spaces_grow_one_step_at_a_time_on_hopper_only(d):
    hopper, ampere, turing = (9, 0), (8, 0), (7, 5)
    base = ft.forward_configs(hopper, d)
    assert ft.variant_configs("host_tma", hopper, d) == base  # host descriptors: the same tiles
    wide = ft.variant_configs("wide_tiles", hopper, d)
    ws = ft.variant_configs("warp_specialized", hopper, d)
    assert wide[:len(base)] == base and ws[:len(wide)] == wide and len(base) < len(wide) <= len(ws) <= 20
    # at d = 128 the 64 x 128 tile spills (FWD_SPILL_TILES_D128): warp specialization then adds
    # no tile, it specializes the 64-row ones fa2 has already
    assert (len(ws) > len(wide)) == (d == 64)
    assert any(ft.warp_specialize_applies(c) for c in ws)
    # the persistent kernel without what spills there (Triton 3.6: 128 x 32 with 4 stages at d = 128)
    spills = fl.FWD_SPILL_CONFIGS_PERSISTENT.get((90, d, 2), set())
    assert ft.variant_configs("persistent", hopper, d) == [c for c in ws if c not in spills]
    assert bool(spills) == (d == 128)
    assert ((128, 128, 8, 2) in wide) and (d == 128 or (128, 128, 8, 2) not in base)  # 128 x 128, 8 warps
    assert {c for c in ws if c not in wide} <= set(ft.FWD_CONFIGS_WS)
    assert all(ft.warp_specialize_applies(c) for c in ft.FWD_CONFIGS_WS)
    assert not any(ft.warp_specialize_applies(c) for c in ft.FWD_CONFIGS_WIDE)  # 128 rows: not specialized
    limit = 232448  # sm_90a's shared memory per block
    assert all(ft.forward_shared_memory(c, d, 2, True) <= limit for c in ws)
    for cap in (ampere, turing):  # before Hopper every variant autotunes over fa2's space...
        assert all(ft.variant_configs(v, cap, d) == ft.forward_configs(cap, d) for v in LADDER[:-1])
        # ...the persistent one (pointer loads) without what spills there in the compile report
        persistent = ft.variant_configs("persistent", cap, d)
        spills = fl.FWD_SPILL_CONFIGS_PERSISTENT.get((80, d, 2), set()) if cap == ampere else set()
        assert persistent == [c for c in ft.forward_configs(cap, d) if c not in spills] != []
    assert ft.variant_configs("persistent", hopper, d, dtype_bytes=4) == ft.forward_configs(hopper, d, dtype_bytes=4)


@pytest.mark.triton
@pytest.mark.skipif(CUDA, reason="reads the tiles the interpreter runs, program by program")
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "not causal"])
def test_the_persistent_grid_takes_its_tiles_in_its_order_causal_longest_first(causal, monkeypatch):
    # what the kernel runs, recorded at its call of the per-tile function: under the
    # interpreter the programs run one after another, each looping over tiles p, p + P, ...
    tile_fn = fk.attn_fwd_fa3_tile
    at = {name: i for i, name in enumerate(tile_fn.arg_names)}
    ran = []

    def tile(*args):
        ran.append((int(args[at["off_hz"]]), int(args[at["start_m"]])))
        return tile_fn(*args)

    monkeypatch.setattr(fk, "attn_fwd_fa3_tile", tile)
    B, H, n = 1, 2, 150  # 2 (b, h), 5 query blocks of 32 rows, on 3 programs
    q, k, v = _inputs((B, H, n, n, 16, 16))
    out, _ = fl.forward(q, k, v, "top_left" if causal else None, 0.25, variant="persistent")
    assert_close_to_reference(out, *reference_pair(q, k, v, causal=causal, precision=kernel_precision(q.dtype)))
    BH, bm, P = B * H, fl.INTERPRET_BLOCK_M, fl.PERSISTENT_PROGRAMS_INTERPRETED
    n_m = -(-n // bm)
    assert sorted(ran) == sorted((h, m * bm) for h in range(BH) for m in range(n_m))  # every tile once
    if causal:  # the last query block of every (batch, head) first, (b, h) fastest
        rule = lambda t: (t % BH, (n_m - 1 - t // BH) * bm)  # noqa: E731
    else:  # query blocks fastest: neighbouring tiles share a (b, h)'s K and V
        rule = lambda t: (t // n_m, t % n_m * bm)  # noqa: E731
    programs = [[rule(t) for t in range(p, BH * n_m, P)] for p in range(P)]
    assert ran == [t for mine in programs for t in mine]
    if causal:  # a causal tile sees start_m // bm + 1 key blocks: a program's work never grows
        assert all([m for _, m in mine] == sorted((m for _, m in mine), reverse=True) for mine in programs)
