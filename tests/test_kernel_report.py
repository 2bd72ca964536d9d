"""The GPU kernels checked without a GPU: compiled ahead of time for sm_75 / sm_80 / sm_90a
with Triton's own compiler (``attn_edu.kernels.report``), and their launch rules.

The compiles run in a subprocess: this test process has ``TRITON_INTERPRET=1`` set
(conftest), so its kernels are interpreted ones and cannot be compiled.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
import torch  # noqa: E402

from attn_edu.kernels import block_sparse_triton as bst  # noqa: E402
from attn_edu.kernels import flash_triton as ft  # noqa: E402
from attn_edu.kernels import _targets  # noqa: E402
from attn_edu.kernels._targets import cuda_dtype_problem  # noqa: E402
from conftest import OnCuda  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _compiled_env():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1")
    return env


def _run(args, timeout=300):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          env=_compiled_env(), timeout=timeout)


_TTIR_SCRIPT = r"""
import json, re, sys
from attn_edu.kernels import report
out = {}
for k in report.kernels():
    row = report.compile_kernel(k, "sm_80", k.configs((8, 0), 64)[0], 64, "bfloat16")
    # the first addptr on each tensor argument: base + b * stride_b + h * stride_h
    out[k.name] = {m.group(1): m.group(2) for m in re.finditer(
        r"tt\.addptr %(Q|K|V|Out|O|DO|Lse|LSE|Delta), %\S+ : !tt\.ptr<\w+>, (i\d+)",
        row["asm"]["ttir"])}
print(json.dumps(out))
"""


def test_every_kernel_addresses_its_tensors_with_int64_offsets():
    # b * stride_b passes 2**31 for tensors of more than 2**31 elements (or a packed qkv
    # view): in int32 it wraps and the kernel reads the wrong memory
    res = _run(["-c", _TTIR_SCRIPT])
    assert res.returncode == 0, res.stderr[-3000:]
    offsets = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(offsets) == {"forward", "backward_dkdv", "backward_dq", "backward_atomic_dq",
                            "block_sparse_forward"}
    for name, per_tensor in offsets.items():
        assert {"Q", "K", "V"} <= set(per_tensor), (name, per_tensor)
        assert set(per_tensor.values()) == {"i64"}, (name, per_tensor)


def test_compile_report_subset_passes_and_uses_wgmma_on_hopper(tmp_path):
    # the first configuration of every kernel at d = 64: mma.sync on sm_80, wgmma and no
    # spills on sm_90a, everything within shared memory (the full report is a command:
    # python -m attn_edu.kernels.report)
    out = tmp_path / "report.json"
    res = _run(["-m", "attn_edu.kernels.report", "--targets", "sm_80,sm_90a", "--d", "64",
                "--configs", "1", "--json", str(out)])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    kernels = {"forward", "backward_dkdv", "backward_dq", "backward_atomic_dq", "block_sparse_forward"}
    decode = {"decode_split_kernel", "decode_reduce_kernel"}  # listed by compile_specs
    assert {r["kernel"] for r in rows} == kernels | decode and len(rows) == 2 * len(kernels | decode)
    assert not any(r["problems"] for r in rows)
    for r in (r for r in rows if r["kernel"] in kernels):
        assert r["shared"] <= r["shared_limit"] and r["registers"] > 0 and not r["problems"], r
        assert r["matrix"] == {"sm_80": "mma.sync", "sm_90a": "wgmma"}[r["target"]], r
        # TMA tensor copies: the forward on Hopper only (the launcher's choice there)
        assert r["tma"] == (r["kernel"] == "forward" and r["target"] == "sm_90a"), r
        if r["target"] == "sm_90a":
            assert r["spill_bytes"] == 0, r


_DOTS_SCRIPT = r"""
import json, re
from attn_edu.kernels import report
out = {}
for k in report.kernels(["backward_dkdv", "backward_dq", "backward_atomic_dq"]):
    row = report.compile_kernel(k, "sm_90a", k.configs((9, 0), 64)[0], 64, "bfloat16")
    out[k.name] = {"dots": len(re.findall(r"= tt\.dot ", row["asm"]["ttir"])),
                   "atomics": len(re.findall(r"\b(?:red|atom)\.global\S*\.add\S*\.f32", row["asm"]["ptx"])),
                   "matrix": row["matrix"], "mma_sync": len(re.findall(r"\bmma\.sync", row["asm"]["ptx"]))}
print(json.dumps(out))
"""


def test_backward_matmul_counts_in_the_compiled_kernels():
    # chapter 10's count, read from Triton's IR: the two-kernel backward recomputes S and dP
    # in both kernels (4 + 3 = 7 matmuls per tile pair); FlashAttention-2's Algorithm 2
    # (backward="atomic_dq") does 5, adding dQ with float32 atomics instead
    res = _run(["-c", _DOTS_SCRIPT])
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["backward_dkdv"]["dots"] == 4 and got["backward_dq"]["dots"] == 3, got
    assert got["backward_atomic_dq"]["dots"] == 5, got
    assert got["backward_dkdv"]["atomics"] == got["backward_dq"]["atomics"] == 0, got
    assert got["backward_atomic_dq"]["atomics"] > 0 and got["backward_atomic_dq"]["matrix"] == "wgmma", got
    # its Hopper tile (64 x 64, 8 warps) puts all five on wgmma, the dQ product included
    assert got["backward_atomic_dq"]["mma_sync"] == 0, got


_FMA_SCRIPT = r"""
import json, re
from attn_edu.kernels import report
k = report.kernels(["forward"])[0]
cfg = k.configs((9, 0), 64)[0]
ptx = report.compile_kernel(k, "sm_90a", cfg, 64, "bfloat16")["asm"]["ptx"]
fma_out = set(re.findall(r"fma\.rn\.f32\s+(%\w+),", ptx))
ex2_in = re.findall(r"ex2\.approx\S*\s+%\w+, (%\w+);", ptx)
print(json.dumps({"config": cfg, "ex2": len(ex2_in), "fed": sum(x in fma_out for x in ex2_in)}))
"""


def test_forward_softmax_is_one_fma_per_score_then_exp2():
    # p = exp2(fma(qk, qk_scale, -m)): every score's exponent comes straight from a fused
    # multiply-add (tl.fma), also with LLVM's own contraction off (Triton 3.10's default)
    env = dict(_compiled_env(), TRITON_DEFAULT_FP_FUSION="0")
    res = subprocess.run([sys.executable, "-c", _FMA_SCRIPT], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    bm, bn, warps, _ = got["config"]
    per_loop = bm * bn // (32 * warps)  # scores per thread in one tile
    # two inner loops (unmasked, masked), each: per_loop exp2 of scores + a few alphas
    assert got["fed"] == 2 * per_loop and got["ex2"] > got["fed"], got


@pytest.mark.slow
def test_full_compile_report_exits_zero():
    res = _run(["-m", "attn_edu.kernels.report"], timeout=1200)
    assert res.returncode == 0, res.stdout[-5000:]


def test_report_problems_rules():
    from attn_edu.kernels import report

    row = dict(target="sm_90a", shared=100, shared_limit=50, matrix="mma.sync", spill_bytes=8)
    assert len(report.problems(row)) == 3
    assert report.problems(row, needs_wgmma=False) == [
        "shared memory 100 B > limit 50 B", "spills 8 B of registers"]
    assert report.problems(dict(row, target="sm_80", shared=10)) == []
    hopper_ok = dict(target="sm_90a", shared=10, shared_limit=50, matrix="wgmma", spill_bytes=0)
    assert report.problems(dict(hopper_ok, tma=False), needs_tma=True) == ["no TMA on sm_90a"]
    assert report.problems(dict(hopper_ok, tma=True), needs_tma=True) == []
    assert report.matrix_instructions("wgmma.mma_async.sync.aligned") == "wgmma"
    assert report.matrix_instructions("mma.sync.aligned.m16n8k16") == "mma.sync"
    assert report.matrix_instructions("fma.rn.f32") == "fma"
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        report.kernels()  # this process interprets its kernels


def test_format_rows_names_a_single_kernel_once():
    from attn_edu.kernels import report

    fwd = report.recorded_report("forward")
    lines = report.format_rows(fwd).splitlines()
    assert lines[0] == "kernel: forward" and lines[1].startswith("target ")
    assert len(lines) == 2 + len(fwd) and max(map(len, lines)) <= 88  # fits the book's code box
    assert lines[2].split()[:3] == [fwd[0]["target"], str(fwd[0]["d"]), fwd[0]["dtype"]]
    assert lines[2].split()[-2:] == ["yes" if fwd[0]["tma"] else "no", "ok"]
    mixed = report.format_rows(report.recorded_report("backward_dq")[:1] + fwd[:1]).splitlines()
    assert mixed[0].startswith("kernel ") and len(mixed) == 3


def test_forward_autotunes_on_length_buckets_not_exact_lengths():
    # every new exact length would re-run the autotuner (and compile every config)
    assert "LQ" not in ft.FWD_AUTOTUNE_KEY and "LK" not in ft.FWD_AUTOTUNE_KEY
    assert {"LQ_BUCKET", "LK_BUCKET"} <= set(ft.FWD_AUTOTUNE_KEY)
    params = ft.kernel_source("forward").split(":", 1)[0]
    assert "LQ_BUCKET" in params and "LK_BUCKET" in params


def test_atomic_backward_configs_per_gpu():
    assert ft.atomic_backward_configs((9, 0), 128)[0] == (64, 64, 8, 2)
    assert ft.atomic_backward_configs((8, 0), 64)[0] == (32, 64, 4, 2)
    assert ft.atomic_backward_configs((8, 6), 128)[0] == (32, 64, 8, 2)
    assert ft.atomic_backward_configs((7, 5), 128) == ft.BWD_CONFIGS_CUDA


def test_pre_ampere_gpus_get_a_short_config_list():
    t4 = ft.forward_configs((7, 5))
    assert 1 <= len(t4) <= 2 and all(stages == 1 for *_, stages in t4)
    assert ft.forward_configs((7, 5), 128) == t4
    assert ft.backward_configs((9, 0)) == ft.BWD_CONFIGS_CUDA[:1]
    assert ft.backward_configs((7, 5)) == ft.BWD_CONFIGS_CUDA


@pytest.mark.parametrize("cap", [(8, 0), (9, 0)])
@pytest.mark.parametrize("d", [64, 128])
def test_forward_search_space_is_pruned_to_at_most_twelve(cap, d):
    # the tutorial's space (36 configurations), pruned: few enough to autotune on a GPU
    assert len(ft.FWD_CONFIGS_CUDA) == 36
    got = ft.forward_configs(cap, d)
    assert 9 <= len(got) <= 12 and set(got) <= set(ft.FWD_CONFIGS_CUDA)
    limit = next(t.shared_memory for t in _targets.TARGETS.values() if divmod(t.capability, 10) == cap)
    for bm, bn, w, s in got:
        assert bn <= d and (w == 4 or bm * bn == 128 * 128), (bm, bn, w, s)
        assert ft.forward_shared_memory((bm, bn, w, s), d) <= limit
        assert d == 64 or (bm, bn, w) not in ft.FWD_SPILL_TILES_D128
    # a GPU with less shared memory (99 KiB: sm_86, sm_89) gets a subset; float32 fewer still
    small = ft.forward_configs(cap, d, shared_memory=101376)
    assert set(small) <= set(got) and (len(small) < len(got) or d == 64)
    assert set(ft.forward_configs(cap, d, shared_memory=101376, dtype_bytes=4)) < set(small)
    if cap == (8, 0):  # 8.6 is not in TARGETS: it gets the 99 KiB fallback
        assert ft.forward_configs((8, 6), d) == small


def test_autotuner_prune_keeps_the_configs_for_the_device_and_dtype(monkeypatch):
    # what the autotuner's early_config_prune does on a GPU with 99 KiB (an RTX 3090, 8.6)
    import triton

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 6))
    monkeypatch.setattr(ft, "_device_shared_memory", lambda: 101376)
    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
               for bm, bn, w, s in ft.FWD_CONFIGS_CUDA + ft.FWD_CONFIGS_PRE_AMPERE]
    key = lambda c: (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)  # noqa: E731
    for dtype, size in ((torch.float16, 2), (torch.float32, 4)):
        kept = ft._prune_fwd_configs(configs, {"Q": torch.empty(1, dtype=dtype), "HEAD_DK": 128,
                                               "HEAD_DV": 128})
        assert [key(c) for c in kept] == ft.forward_configs((8, 6), 128, 101376, size) != []
    # nothing fits: the two small tiles, never the whole space
    monkeypatch.setattr(ft, "_device_shared_memory", lambda: 1024)
    kept = ft._prune_fwd_configs(configs, {"Q": torch.empty(1), "HEAD_DK": 64, "HEAD_DV": 64})
    assert [key(c) for c in kept] == ft.FWD_CONFIGS_PRE_AMPERE


def test_shared_memory_estimate_matches_the_compiled_kernels():
    # within TMA's 1 KiB of barriers on sm_90a, an upper bound on sm_80 (the committed
    # report, compiled by Triton 3.9)
    from attn_edu.kernels import report

    rows = report.recorded_report("forward")
    assert {r["tma"] for r in rows if r["target"] == "sm_90a"} == {True}
    assert {r["tma"] for r in rows if r["target"] != "sm_90a"} == {False}
    for r in (r for r in rows if r["target"] in ("sm_80", "sm_90a")):
        hopper = r["target"] == "sm_90a"
        est = ft.forward_shared_memory((r["block_m"], r["block_n"], r["num_warps"], r["num_stages"]),
                                       r["d"], tma=hopper)
        assert est - (ft.TMA_EXTRA_SHARED if hopper else est) <= r["shared"] <= est, r


def test_block_sparse_refuses_bfloat16_before_compute_capability_8(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    q = torch.randn(1, 1, 32, 32, dtype=torch.bfloat16).as_subclass(OnCuda)
    with pytest.raises(TypeError) as err:
        bst.block_sparse_attention(q, q, q, torch.ones(32, 32, dtype=torch.bool))
    msg = str(err.value)
    assert "bfloat16" in msg and "7.5" in msg and "8.0" in msg and "float16" in msg
    assert msg == "block_sparse_attention: " + cuda_dtype_problem("bfloat16", (7, 5))


def test_recorded_report_matches_the_kernels_configurations():
    # the committed report (chapter 10's table) covers exactly what a launch can use now;
    # regenerate it with python -m attn_edu.kernels.report --json <RECORDED> after a change
    from attn_edu.kernels import report

    rows = report.recorded_report()
    assert rows and not any(r["problems"] for r in rows)
    assert {r["kernel"] for r in rows} >= set(report.SPEC_KERNELS)
    rows = [r for r in rows if r["kernel"] not in report.SPEC_KERNELS]
    got = {(r["kernel"], r["target"], r["d"], r["block_m"], r["block_n"], r["num_warps"],
            r["num_stages"]) for r in rows}
    caps = {t: divmod(spec.capability, 10) for t, spec in _targets.TARGETS.items()}
    want = set()
    for mod in (ft, bst):
        for k in mod.aot_kernels():
            for t, cap in caps.items():
                for d in (64, 128):
                    want |= {(k.name, t, d, *c) for c in k.configs(cap, d)}
    assert got == want
    fwd = {r["target"]: r["matrix"] for r in report.recorded_report("forward")}
    assert fwd == {"sm_75": "fma", "sm_80": "mma.sync", "sm_90a": "wgmma"}
