"""The GPU kernels checked without a GPU: compiled ahead of time for sm_75 / sm_80 / sm_90a
with Triton's own compiler (``attn_edu.kernels.report``), and their launch rules.

The compiles run in a subprocess: this test process has ``TRITON_INTERPRET=1`` set
(conftest), so its kernels are interpreted ones and cannot be compiled.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
import torch  # noqa: E402

from attn_edu.kernels import block_sparse_triton as bst  # noqa: E402
from attn_edu.kernels import flash_triton as ft  # noqa: E402
from attn_edu.kernels.flash_triton import launch as fl  # noqa: E402
from attn_edu.kernels import _targets  # noqa: E402
from attn_edu.kernels._targets import cuda_dtype_problem  # noqa: E402
from conftest import OnCuda  # noqa: E402
from venvs import compiled_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _run(args, timeout=300):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          env=compiled_env(TRITON_DEFAULT_FP_FUSION="1"), timeout=timeout)


@pytest.fixture(scope="module")
def subset(tmp_path_factory):
    """The report's command for a sample, once for the tests below: the first configuration
    of every kernel at d = 64 in bfloat16, for sm_80 and sm_90a, with each compile's Triton
    IR and PTX (``--asm``). Its rows, by (kernel, target)."""
    out = tmp_path_factory.mktemp("report") / "report.json"
    res = _run(["-m", "attn_edu.kernels.report", "--targets", "sm_80,sm_90a", "--d", "64",
                "--configs", "1", "--dtypes", "bfloat16", "--jobs", "2", "--asm", "--json", str(out)])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return {(r["kernel"], r["target"]): r for r in json.loads(out.read_text())["rows"]}


#: The row (or key) strides each kernel multiplies a block's first row by (its own block's,
#: or each block's of a loop): 32-bit products pass 2**31 in a packed (B, L, 3, H, D) qkv
#: view once L * 3 * H * D >= 2**31, and the block-sparse mask's row stride is L_k
#: (L = 46,341 is enough).
ROW_STRIDES = {
    "forward": {"stride_qm", "stride_kn", "stride_vn", "stride_om"},
    "forward_persistent": {"stride_qm", "stride_kn", "stride_vn", "stride_om"},  # pointer loads on sm_80
    "backward_dkdv": {"stride_qm", "stride_kn", "stride_vn", "stride_dom"},
    "backward_atomic_dq": {"stride_qm", "stride_kn", "stride_vn", "stride_dom"},
    "backward_dq": {"stride_qm", "stride_kn", "stride_vn", "stride_dom"},
    "block_sparse_forward": {"s_qm", "s_kn", "s_vn", "s_om", "s_mm"},
    "decode_split": {"stride_kn", "stride_vn"},
}


@pytest.mark.slow  # compiles kernels for GPU targets
def test_every_kernel_addresses_its_tensors_with_int64_offsets(subset):
    # b * stride_b passes 2**31 for tensors of more than 2**31 elements (or a packed qkv
    # view), and so does row * stride_m in a long one: in int32 they wrap and the kernel
    # reads the wrong memory. Read from the compiled TTIR: base offsets are i64 and every
    # row stride is widened to i64 before it multiplies a block's first row.
    offsets = {}
    for (kernel, target), row in subset.items():
        if target != "sm_80" or kernel == "decode_reduce_kernel":
            continue
        ttir = row["asm"]["ttir"]
        offsets[kernel.replace("_kernel", "")] = {
            # the first addptr on each tensor argument: base + b * stride_b + h * stride_h
            "base": {m.group(1): m.group(2) for m in re.finditer(
                r"tt\.addptr %(Q|K|V|Out|O|DO|Lse|LSE|Delta), %\S+ : !tt\.ptr<\w+>, (i\d+)", ttir)},
            # row strides widened to 64 bits: a block's first row * stride in int64
            "wide": sorted(set(re.findall(r"arith\.extsi %(\w+) : i32 to i64", ttir)))}
    assert set(offsets) == set(ROW_STRIDES)
    for name, got in offsets.items():
        if name != "decode_split":
            assert {"Q", "K", "V"} <= set(got["base"]), (name, got)
            assert set(got["base"].values()) == {"i64"}, (name, got)
        assert ROW_STRIDES[name] <= set(got["wide"]), (name, got["wide"])


@pytest.mark.slow  # compiles kernels for GPU targets
def test_compile_report_subset_passes_and_uses_wgmma_on_hopper(subset):
    # the first configuration of every kernel at d = 64: mma.sync on sm_80, wgmma and no
    # spills on sm_90a, everything within shared memory (the full report is a command:
    # python -m attn_edu.kernels.report)
    rows = list(subset.values())
    kernels = {"forward", "backward_dkdv", "backward_dq", "backward_atomic_dq", "block_sparse_forward"}
    decode = {"decode_split_kernel", "decode_reduce_kernel"}  # listed by compile_specs
    # FlashAttention-3's steps: the persistent grid everywhere, the others where they launch (Hopper)
    hopper_only = {"forward_host_tma", "forward_wide_tiles", "forward_warp_specialized"}
    everywhere = kernels | decode | {"forward_persistent"}
    assert {r["kernel"] for r in rows} == everywhere | hopper_only
    assert len(rows) == 2 * len(everywhere) + len(hopper_only)
    assert {t for (k, t) in subset if k in hopper_only} == {"sm_90a"}
    assert not any(r["problems"] for r in rows)
    for r in (r for r in rows if r["kernel"] not in decode):
        assert r["shared"] <= r["shared_limit"] and r["registers"] > 0 and not r["problems"], r
        assert r["matrix"] == {"sm_80": "mma.sync", "sm_90a": "wgmma"}[r["target"]], r
        # TMA tensor copies: the forwards on Hopper only (the launcher's choice there)
        assert r["tma"] == (r["kernel"].startswith("forward") and r["target"] == "sm_90a"), r
        # register reallocation between a producer and its consumers: where it was asked for
        # (the 64-row tiles of "warp_specialized" and "persistent" on Hopper), nowhere else
        assert r["setmaxnreg"] == bool(r.get("warp_specialize")), r
        if r["target"] == "sm_90a":
            assert r["spill_bytes"] == 0, r
    assert subset["forward_warp_specialized", "sm_90a"]["setmaxnreg"]
    assert not subset["forward_persistent", "sm_80"].get("warp_specialize")


@pytest.mark.slow  # compiles kernels for GPU targets
def test_backward_matmul_counts_in_the_compiled_kernels(subset):
    # chapter 10's count, read from Triton's IR: the two-kernel backward recomputes S and dP
    # in both kernels (4 + 3 = 7 matmuls per tile pair); FlashAttention-2's Algorithm 2
    # (backward="atomic_dq") does 5, adding dQ with float32 atomics instead
    got = {}
    for name in ("backward_dkdv", "backward_dq", "backward_atomic_dq"):
        row = subset[name, "sm_90a"]
        got[name] = {"dots": len(re.findall(r"= tt\.dot ", row["asm"]["ttir"])),
                     "atomics": len(re.findall(r"\b(?:red|atom)\.global\S*\.add\S*\.f32", row["asm"]["ptx"])),
                     "matrix": row["matrix"], "mma_sync": len(re.findall(r"\bmma\.sync", row["asm"]["ptx"]))}
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
cfg = k.configs((9, 0), 64, "bfloat16", "tf32")[0]
ptx = report.compile_kernel(k, "sm_90a", cfg, 64, "bfloat16")["asm"]["ptx"]
fma_out = set(re.findall(r"fma\.rn\.f32\s+(%\w+),", ptx))
ex2_in = re.findall(r"ex2\.approx\S*\s+%\w+, (%\w+);", ptx)
print(json.dumps({"config": cfg, "ex2": len(ex2_in), "fed": sum(x in fma_out for x in ex2_in)}))
"""


@pytest.mark.slow  # compiles kernels for GPU targets
def test_forward_softmax_is_one_fma_per_score_then_exp2():
    # p = exp2(fma(qk, qk_scale, -m)): every score's exponent comes straight from a fused
    # multiply-add (tl.fma), also with LLVM's own contraction off (Triton 3.10's default)
    env = compiled_env(TRITON_DEFAULT_FP_FUSION="0")
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
    """Every kernel, target, dtype and configuration compiles without a problem. The
    committed report records a fingerprint of the kernel package's sources and Triton's
    version (``report.sources_fingerprint``): while it matches, the report describes this very
    code and its rows are checked here (the subset test above still compiles a sample);
    when the kernels change, the full report compiles again (one compile per core; its time:
    CONTRIBUTING.md, "A kernel"). Re-record with ``python -m attn_edu.kernels.report --jobs N --json
    attn_edu/data/kernels/compile_report.json``."""
    from attn_edu.kernels import report

    if report.recorded_is_current():
        rows = report.recorded_report()
        assert len(rows) >= 150 and not [r for r in rows if r["problems"]]
        assert "0 with problems" in json.loads(report.RECORDED.read_text())["summary"]
        return
    jobs = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))
    res = _run(["-m", "attn_edu.kernels.report", "--jobs", str(jobs)], timeout=1200)
    assert res.returncode == 0, res.stdout[-5000:]


def test_the_fingerprint_follows_the_kernel_sources(tmp_path, monkeypatch):
    """A change to any kernel module, or another Triton, makes the committed report stale (so
    the full compile runs again): the fingerprint covers every file of the kernel package
    and Triton's version, and the record is current only while its fingerprint matches."""
    triton = pytest.importorskip("triton")
    from attn_edu.kernels import report

    before = report.sources_fingerprint()
    record = json.loads(report.RECORDED.read_text())
    for sources, current in ((before, True), ("0123456789abcdef", False)):
        copy = tmp_path / f"report_{current}.json"
        copy.write_text(json.dumps({**record, "sources": sources}))
        monkeypatch.setattr(report, "RECORDED", copy)
        assert report.recorded_is_current() is current
    monkeypatch.setattr(triton, "__version__", triton.__version__ + ".post1")
    assert report.sources_fingerprint() != before
    monkeypatch.undo()
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: real(self) + (b"# edited" if self.name == "launch.py" else b""))
    assert report.sources_fingerprint() != before


def test_report_problems_rules():
    from attn_edu.kernels import report

    row = dict(target="sm_90a", shared=100, shared_limit=50, matrix="mma.sync", spill_bytes=8, seconds=1.0)
    assert len(report.problems(row)) == 3
    assert report.problems(row, needs_wgmma=False) == [
        "shared memory 100 B > limit 50 B", "spills 8 B of registers"]
    # spills count on sm_80 too, and so does a slow compile on any target
    assert report.problems(dict(row, target="sm_80", shared=10)) == ["spills 8 B of registers"]
    assert report.problems(dict(row, target="sm_80", shared=10, spill_bytes=0)) == []
    for target in ("sm_75", "sm_80", "sm_90a"):  # the compile's CPU seconds: every target
        slow = dict(row, target=target, shared=10, spill_bytes=0, matrix="wgmma", tma=True, seconds=12.5)
        assert report.problems(slow) == ["compiles in 12 s > 10 s"], target
    assert report.problems(dict(row, target="sm_75", shared=10)) == []  # sm_75 spills: per group
    # exact float32 has no wgmma (FMA code) and does not use TMA: neither is asked of it
    assert report.problems(dict(row, shared=10, spill_bytes=0, precision="ieee", matrix="fma"),
                           needs_tma=True) == []
    hopper_ok = dict(target="sm_90a", shared=10, shared_limit=50, matrix="wgmma", spill_bytes=0)
    assert report.problems(dict(hopper_ok, tma=False), needs_tma=True) == ["no TMA on sm_90a"]
    assert report.problems(dict(hopper_ok, tma=True), needs_tma=True) == []
    # a row that asked for warp specialization and got no register reallocation: a problem on
    # Hopper (the compiler left the loop alone), nothing elsewhere (no such instruction)
    ws = dict(hopper_ok, tma=True, warp_specialize=True)
    assert report.problems(dict(ws, setmaxnreg=False), needs_tma=True) == [
        "no warp specialization (setmaxnreg) on sm_90a"]
    assert report.problems(dict(ws, setmaxnreg=True), needs_tma=True) == []
    assert report.problems(dict(ws, target="sm_80", matrix="mma.sync", setmaxnreg=False)) == []
    assert report.matrix_instructions("wgmma.mma_async.sync.aligned") == "wgmma"
    assert report.matrix_instructions("mma.sync.aligned.m16n8k16") == "mma.sync"
    assert report.matrix_instructions("fma.rn.f32") == "fma"
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        report.kernels()  # this process interprets its kernels


def test_too_little_shared_memory_is_a_problem_only_when_no_configuration_of_the_group_fits():
    from attn_edu.kernels import report

    def group(*shared):
        rows = [dict(target="sm_80", shared=x, shared_limit=100, spill_bytes=0, matrix="mma.sync") for x in shared]
        for r in rows:
            r["problems"] = report.problems(r)
        report._fallbacks(rows)
        return rows

    one_fits = group(150, 80)  # the launch skips the first and runs the second
    assert [r["problems"] for r in one_fits] == [[], []] and one_fits[0]["note"] == "no fit: skipped"
    assert "note" not in one_fits[1]
    none_fits = group(150, 120)
    assert [len(r["problems"]) for r in none_fits] == [1, 1] and not any("note" in r for r in none_fits)
    assert none_fits[0]["problems"][0].startswith("shared memory 150 B > limit 100 B")


def test_t4_spills_are_a_warning_only_when_no_configuration_avoids_them():
    from attn_edu.kernels import report

    def group(*spills, target="sm_75"):
        return [dict(target=target, spill_bytes=s, problems=[]) for s in spills]

    every = group(2660, 1580)
    report._judge_spills(every)
    assert all(r["problems"] == [] and r["warnings"][0].startswith(report.T4_SPILL) for r in every)
    avoidable = group(0, 31624)
    report._judge_spills(avoidable)
    assert avoidable[0]["warnings"] == avoidable[0]["problems"] == []
    assert avoidable[1]["warnings"] == [] and "another configuration" in avoidable[1]["problems"][0]
    ampere = group(108, target="sm_80")  # judged by problems(), not here
    report._judge_spills(ampere)
    assert ampere[0]["warnings"] == [] and ampere[0]["problems"] == []


def test_format_rows_names_a_single_kernel_once():
    from attn_edu.kernels import report

    fwd = report.recorded_report("forward")
    lines = report.format_rows(fwd).splitlines()
    assert lines[0] == "kernel: forward" and lines[1].startswith("target ")
    assert len(lines) == 2 + len(fwd) and max(map(len, lines)) <= 88  # fits the book's code box
    assert lines[2].split()[:3] == [fwd[0]["target"], str(fwd[0]["d"]), report._dtype_label(fwd[0])]
    first_ok = next(i for i, r in enumerate(fwd) if not r.get("warnings"))
    words = lines[2 + first_ok].split()
    assert words[-3:] == ["yes" if fwd[first_ok]["tma"] else "no", f"{fwd[first_ok]['seconds']:.1f}", "ok"]
    # the T4's warning class is a status of its own, and the summary counts it
    warned = [i for i, r in enumerate(fwd) if r.get("warnings")]
    assert warned and all(lines[2 + i].endswith(report.T4_SPILL) for i in warned)
    assert {fwd[i]["target"] for i in warned} == {"sm_75"}
    assert f"{len(warned)} with warnings ({report.T4_SPILL})" in report.summary(fwd)
    mixed = report.format_rows(report.recorded_report("backward_dq")[:1] + fwd[:1]).splitlines()
    assert mixed[0].startswith("kernel ") and len(mixed) == 3


def test_forward_autotunes_on_length_and_batch_heads_buckets_not_exact_sizes():
    # every new exact length would re-run the autotuner (and compile every config); one
    # choice for every B * H would carry a tile tuned at B * H = 8 to B * H = 64
    assert "LQ" not in ft.FWD_AUTOTUNE_KEY and "LK" not in ft.FWD_AUTOTUNE_KEY and "H" not in ft.FWD_AUTOTUNE_KEY
    assert {"LQ_BUCKET", "LK_BUCKET", "BH_BUCKET"} <= set(ft.FWD_AUTOTUNE_KEY)
    params = ft.kernel_source("forward").split(":", 1)[0]
    assert "LQ_BUCKET" in params and "LK_BUCKET" in params and "BH_BUCKET" in params


def test_atomic_backward_configs_per_gpu():
    assert ft.atomic_backward_configs((9, 0), 128)[0] == (64, 64, 8, 2)
    assert ft.atomic_backward_configs((8, 0), 64)[0] == (32, 64, 8, 2)
    assert ft.atomic_backward_configs((8, 6), 128)[0] == (32, 64, 8, 2)
    # exact float32: one small tile with 4 warps on every GPU (2 spilled 16 B at d = 128 on
    # sm_80 with Colab's Triton 3.6), not the two-kernel backward's 2
    for cap in ((7, 5), (8, 0), (9, 0)):
        assert ft.atomic_backward_configs(cap, 128, "ieee") == [(16, 16, 4, 1)]
    assert ft.backward_configs((8, 0), 128, "ieee") == [ft.IEEE_BACKWARD_CONFIG] == [(16, 16, 2, 1)]


def test_pre_ampere_gpus_get_one_small_config():
    # a T4 compiles one forward configuration (nothing to autotune) and one backward: the
    # ones that spill least there (the report's T4 spill warnings)
    t4 = ft.forward_configs((7, 5))
    assert t4 == ft.FWD_CONFIGS_PRE_AMPERE and len(t4) == 1 and t4[0][3] == 1
    assert ft.forward_configs((7, 5), 128) == t4
    assert ft.forward_configs((7, 5), 64, dtype_bytes=4, precision="ieee") == [ft.IEEE_FORWARD_CONFIG]
    assert ft.backward_configs((8, 0), 128) == [(32, 64, 8, 2)]  # 4 warps spill there
    assert ft.backward_configs((7, 5)) == ft.BWD_CONFIGS_CUDA[-1:]
    assert ft.atomic_backward_configs((7, 5), 128) == ft.BWD_CONFIGS_CUDA[-1:]


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (9, 0)])
@pytest.mark.parametrize("d", [16, 64, 128])
def test_backward_autotune_space_is_small_and_starts_with_the_old_config(cap, d):
    # a reader's first backward compiles each listed configuration of both kernels: at most
    # three each; the first is the fixed 32 x 64 tile of earlier editions (with 8 warps before
    # Hopper: 4 spilled 8 B on sm_80 with Colab's Triton 3.6); float32 (exact) and a T4 keep
    # one configuration, nothing to tune
    configs = ft.backward_configs(cap, d)
    assert 1 <= len(configs) <= 3 and len(set(configs)) == len(configs)
    assert configs[0][:2] == (32, 64) and configs[0][2] == (8 if cap < (9, 0) else 4)
    assert (len(configs) > 1) == (cap >= (9, 0) or d <= 64)
    assert not any(c[:3] == (32, 128, 4) for c in configs)  # spills on sm_80 and sm_90a
    assert ft.backward_configs(cap, d, "ieee") == [ft.IEEE_BACKWARD_CONFIG]
    assert set(configs) <= {c for cs in ft.BWD_AUTOTUNE_CONFIGS.values() for c in cs}


@pytest.mark.parametrize("cap", [(8, 0), (9, 0)])
@pytest.mark.parametrize("d", [64, 128])
def test_forward_search_space_is_pruned_to_at_most_twelve(cap, d):
    # the tutorial's space (36 configurations), pruned: few enough to autotune on a GPU,
    # and nothing the compile report saw spill
    assert len(ft.FWD_CONFIGS_CUDA) == 36
    got = ft.forward_configs(cap, d)
    assert 6 <= len(got) <= 12 and set(got) <= set(ft.FWD_CONFIGS_CUDA)
    family = (90 if cap >= (9, 0) else 80, d, 2)
    assert not set(got) & ft.FWD_SPILL_CONFIGS.get(family, set())
    limit = next(t.shared_memory for t in _targets.TARGETS.values() if divmod(t.capability, 10) == cap)
    for bm, bn, w, s in got:
        a100_tile = cap == (8, 0) and d == 128 and (bm, bn, w) == (128, 64, 8)
        assert bn <= d and (w == 4 or bm * bn == 128 * 128 or a100_tile), (bm, bn, w, s)
        assert ft.forward_shared_memory((bm, bn, w, s), d) <= limit
        assert d == 64 or (bm, bn, w) not in ft.FWD_SPILL_TILES_D128
    # a GPU with less shared memory (99 KiB: sm_86, sm_89) gets a subset; float32 fewer still
    small = ft.forward_configs(cap, d, shared_memory=101376)
    assert set(small) <= set(got) and (len(small) < len(got) or d == 64)
    small32 = ft.forward_configs(cap, d, shared_memory=101376, dtype_bytes=4)
    assert set(small32) <= set(ft.forward_configs(cap, d, dtype_bytes=4)) and len(small32) < len(small)
    if cap == (8, 0):  # 8.6 is not in TARGETS: it gets the 99 KiB fallback
        assert ft.forward_configs((8, 6), d) == small
    # the A100's 128 x 64 tile with 8 warps is back in its search at d = 128
    assert ((128, 64, 8, 3) in got) == (cap == (8, 0) and d == 128)
    # float32 on TF32 has its own short list, within shared memory
    f32 = ft.forward_configs(cap, d, dtype_bytes=4)
    assert 1 <= len(f32) <= 6 and set(f32) <= set(ft.FWD_CONFIGS_TF32)
    assert all(ft.forward_shared_memory(c, d, 4) <= limit for c in f32)


def test_autotuner_prune_keeps_the_configs_for_the_device_and_dtype(monkeypatch):
    # what the autotuner's early_config_prune does on a GPU with 99 KiB (an RTX 3090, 8.6)
    import triton

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 6))
    monkeypatch.setattr(fl, "_device_shared_memory", lambda: 101376)
    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
               for bm, bn, w, s in ft.FWD_CONFIGS_CUDA + ft.FWD_CONFIGS_PRE_AMPERE]
    key = lambda c: (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)  # noqa: E731
    configs += [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                for bm, bn, w, s in ft.FWD_CONFIGS_TF32 if (bm, bn, w, s) not in ft.FWD_CONFIGS_CUDA]
    for dtype, size in ((torch.float16, 2), (torch.float32, 4)):
        kept = fl._prune_fwd_configs(configs, {"Q": torch.empty(1, dtype=dtype), "HEAD_DK": 128,
                                               "HEAD_DV": 128, "INPUT_PRECISION": "tf32"})
        assert [key(c) for c in kept] == ft.forward_configs((8, 6), 128, 101376, size) != []
    # nothing fits: the two small tiles, never the whole space
    monkeypatch.setattr(fl, "_device_shared_memory", lambda: 1024)
    kept = fl._prune_fwd_configs(configs, {"Q": torch.empty(1), "HEAD_DK": 64, "HEAD_DV": 64})
    assert [key(c) for c in kept] == ft.FWD_CONFIGS_PRE_AMPERE


def test_shared_memory_estimate_matches_the_compiled_kernels():
    # within TMA's 1 KiB of barriers on sm_90a, an upper bound on sm_80 (the committed
    # report, compiled by Triton 3.9)
    from attn_edu.kernels import report

    rows = report.recorded_report("forward")
    # TMA on Hopper, except exact float32 (FMA code: the launcher uses pointer loads there)
    assert {r["tma"] for r in rows if r["target"] == "sm_90a"} == {True, False}
    assert all(r["tma"] == (r["target"] == "sm_90a" and r["precision"] != "ieee") for r in rows)
    for r in (r for r in rows if r["target"] in ("sm_80", "sm_90a")):
        hopper = r["tma"]
        est = ft.forward_shared_memory((r["block_m"], r["block_n"], r["num_warps"], r["num_stages"]),
                                       r["d"], 4 if r["dtype"] == "float32" else 2, tma=hopper)
        assert est - (ft.TMA_EXTRA_SHARED if hopper else est) <= r["shared"] <= est, r


def test_block_sparse_refuses_bfloat16_before_compute_capability_8(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    q = torch.randn(1, 1, 32, 32, dtype=torch.bfloat16).as_subclass(OnCuda)
    with pytest.raises(TypeError) as err:
        bst.block_sparse_attention(q, q, q, torch.ones(32, 32, dtype=torch.bool))
    msg = str(err.value)
    assert "bfloat16" in msg and "7.5" in msg and "8.0" in msg and "float16" in msg
    assert msg == cuda_dtype_problem("bfloat16", (7, 5))  # the words of the other two kernels


def test_recorded_report_matches_the_kernels_configurations():
    # the committed report (chapter 10's table) covers exactly what a launch can use now,
    # float32 included (TF32 and exact); regenerate it with
    # python -m attn_edu.kernels.report --json <RECORDED> after a change
    from attn_edu.kernels import report

    rows = report.recorded_report()
    assert rows and not any(r["problems"] for r in rows)
    assert all(r["seconds"] <= report.MAX_COMPILE_SECONDS for r in rows)  # compile time recorded
    assert all(r["spill_bytes"] == 0 for r in rows if r["target"] != "sm_75")
    assert {r["target"] for r in rows if r.get("warnings")} <= {"sm_75"}
    assert {r["kernel"] for r in rows} >= set(report.SPEC_KERNELS)
    assert {(r["target"], r["dtype"], r["precision"]) for r in rows} == {
        ("sm_75", "float16", None), ("sm_75", "float32", "ieee"),
        ("sm_80", "bfloat16", None), ("sm_80", "float32", "tf32"), ("sm_80", "float32", "ieee"),
        ("sm_90a", "bfloat16", None), ("sm_90a", "float32", "tf32"), ("sm_90a", "float32", "ieee")}
    rows = [r for r in rows if r["kernel"] not in report.SPEC_KERNELS]
    got = {(r["kernel"], r["target"], r["d"], r["dtype"], r["precision"], r["block_m"], r["block_n"],
            r["num_warps"], r["num_stages"]) for r in rows}
    caps = {t: divmod(spec.capability, 10) for t, spec in _targets.TARGETS.items()}
    want = set()
    for mod in (ft, bst):
        for k in mod.aot_kernels():
            for t, cap in caps.items():
                for dtype, prec in report.variants(t):
                    for d in (64, 128):
                        want |= {(k.name, t, d, dtype, prec, *c) for c in k.configs(cap, d, dtype, prec or "tf32")}
    assert got == want
    fwd = {r["target"]: r["matrix"] for r in report.recorded_report("forward")}
    assert fwd == {"sm_75": "fma", "sm_80": "mma.sync", "sm_90a": "wgmma"}


def test_the_persistent_grid_fits_its_programs_on_an_sm():
    # ft.persistent_programs_per_sm programs of every recorded persistent compile share one
    # SM's 65,536 registers and its shared memory (the per-block limit standing for the
    # SM's): a program that does not fit waits for another to end, and the grid is no
    # longer persistent. Warp specialization adds warps: more threads than num_warps asked.
    # (A compile over the shared memory is one the autotuner prunes: report._fallbacks.)
    from attn_edu.kernels import report

    rows = [r for r in report.recorded_report() if r["kernel"] == "forward_persistent"
            and r["shared"] <= r["shared_limit"]]
    assert rows and all(r["threads"] >= 32 * r["num_warps"] for r in rows)
    for r in rows:
        n = ft.persistent_programs_per_sm(r["block_m"], r.get("warp_specialize", False))
        assert n * r["threads"] * r["registers"] <= 65536 and n * r["shared"] <= r["shared_limit"], (n, r)
    ws = [r for r in rows if r.get("warp_specialize")]
    assert ws and all(r["threads"] > 32 * r["num_warps"] for r in ws)
    assert ft.persistent_programs_per_sm(64, True) == 1


def test_the_recorded_report_shows_each_fa3_step_on_hopper():
    # chapter 10's ladder in the compiled code (Triton 3.9): host descriptors (TMA copies) in
    # every step on sm_90a, 8-warp 128-row tiles added by "wide_tiles", the producer/consumer
    # split (setmaxnreg) on the 64-row tiles of "warp_specialized" and "persistent", and the
    # persistent grid with pointer loads before Hopper; FlashAttention-2's forward has no
    # setmaxnreg
    from attn_edu.kernels import report

    rows = report.recorded_report()

    def at(kernel, target):
        return [r for r in rows if r["kernel"] == kernel and r["target"] == target]

    assert not any(r["setmaxnreg"] for r in rows if r["kernel"] == "forward")
    for name in ("forward_host_tma", "forward_wide_tiles", "forward_warp_specialized", "forward_persistent"):
        hopper = at(name, "sm_90a")
        assert hopper and all(r["tma"] and r["matrix"] == "wgmma" and not r["problems"] for r in hopper), name
        assert {r["dtype"] for r in hopper} == {"bfloat16"}  # float32 launches fa2's kernel
        assert all(r["setmaxnreg"] == r.get("warp_specialize", False) for r in hopper), name
    assert all((r["block_m"], r["num_warps"]) == (128, 8) for r in at("forward_wide_tiles", "sm_90a"))
    ws = at("forward_warp_specialized", "sm_90a")
    assert {(r["block_m"], r["num_warps"]) for r in ws} == {(64, 4)} and all(r["warp_specialize"] for r in ws)
    persistent = at("forward_persistent", "sm_90a")
    assert {r.get("warp_specialize", False) for r in persistent} == {True, False}
    for target in ("sm_75", "sm_80"):  # before Hopper: the persistent grid alone, pointer loads
        assert not [r for r in rows if r["target"] == target and r["kernel"] in (
            "forward_host_tma", "forward_wide_tiles", "forward_warp_specialized")]
        before = at("forward_persistent", target)
        assert before and not any(r["tma"] or r["setmaxnreg"] or r["problems"] for r in before)
