"""attn_edu.gpu_profile: the T4 profile's choices on a faked GPU, the GPU branches' sizes, their T4 estimates.

The GPU is faked as tests/test_impls.py fakes one: ``torch.cuda``'s functions monkeypatched
(an H100's capability, properties and memory), conftest's ``OnCuda`` tensors for the choices
that look at a tensor's device. Nothing is launched.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from attn_edu import gpu_profile as gp
from attn_edu import profiling
from attn_edu.decoding import GPUS

ROOT = Path(__file__).resolve().parents[1]
H100_TOTAL = 85_017_493_504  # torch's total_memory of the recorded H100 80GB HBM3 (the bench JSONs'
# memory_bytes; book/notation.md); 85_520_809_984 = 81,559 MiB is the total nvidia-smi reports
T4 = gp.GPUInfo("T4", (7, 5), 15 * 10**9, 40)
H100 = gp.GPUInfo("NVIDIA H100 80GB HBM3", (9, 0), H100_TOTAL, 132)


def test_no_variable_no_profile_and_a_bad_value_names_the_variable(monkeypatch):
    monkeypatch.delenv(gp.PROFILE_ENV, raising=False)
    assert gp.active_profile() is None and gp.apply_profile() is None
    monkeypatch.setenv(gp.PROFILE_ENV, "")
    assert gp.active_profile() is None
    monkeypatch.setenv(gp.PROFILE_ENV, "t4")
    assert gp.active_profile() is gp.PROFILES["t4"]
    for bad in ("T4", "a100", "t4 "):
        monkeypatch.setenv(gp.PROFILE_ENV, bad)
        with pytest.raises(ValueError) as err:
            gp.active_profile()
        assert gp.PROFILE_ENV in str(err.value) and "'t4'" in str(err.value) and repr(bad) in str(err.value)
    from attn_edu import setup_notebook

    with pytest.raises(ValueError, match=gp.PROFILE_ENV):  # the chapters' first cell says so too
        setup_notebook(plotly=False)


@pytest.fixture
def fake_h100(monkeypatch):
    """torch.cuda as on one H100 (capability 9.0, 80 GB, 132 SMs); the memory fractions set
    are recorded in the list this yields. The profile is removed afterwards."""
    torch = pytest.importorskip("torch")
    fractions = []
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=H100_TOTAL,
                            multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda fraction, device=None: fractions.append((fraction, device)))
    flash = torch.backends.cuda.flash_sdp_enabled()
    yield fractions
    gp.remove_profile()
    torch.backends.cuda.enable_flash_sdp(flash)


def test_t4_profile_caps_memory_once_and_every_choice_follows_capability_7_5(fake_h100, monkeypatch):
    import torch

    from attn_edu import bench

    monkeypatch.setenv(gp.PROFILE_ENV, "t4")
    assert bench.gpu_half_dtype("cuda") == "bfloat16"  # the H100 itself, before the profile
    assert gp.apply_profile() is gp.PROFILES["t4"] and gp.applied_profile() is gp.PROFILES["t4"]
    assert fake_h100 == [(15e9 / H100_TOTAL, 0)]  # 15 GB of the GPU's total
    assert gp.apply_profile() is gp.PROFILES["t4"] and len(fake_h100) == 1  # applied once
    # memory, capability, SMs and name, as torch reports them now
    props = torch.cuda.get_device_properties(0)
    assert (props.major, props.minor, props.multi_processor_count, props.total_memory) == (7, 5, 40, 15 * 10**9)
    assert props.name == "NVIDIA H100 80GB HBM3 (T4 profile)" and torch.cuda.get_device_name(0) == props.name
    assert torch.cuda.get_device_capability() == (7, 5)
    assert gp.gpu_info() == gp.GPUInfo("NVIDIA H100 80GB HBM3 (T4 profile)", (7, 5), 15 * 10**9, 40)
    # dtype: float16 as the half type; bfloat16 refused by the kernels' limits
    from attn_edu.kernels import _targets

    assert bench.gpu_half_dtype("cuda") == "float16"
    assert _targets.cuda_dtype_problem("bfloat16", torch.cuda.get_device_capability())
    assert not _targets.cuda_dtype_problem("bfloat16", (9, 0))
    # SDPA: no FlashAttention-2 (its own choice, and the backends the package probes)
    assert torch.backends.cuda.flash_sdp_enabled() is False
    assert gp.missing_sdpa_backends() == ("flash", "cudnn")
    monkeypatch.setattr(bench.env, "_sdpa_runs", lambda *a: True)  # every backend would run here
    assert bench.sdpa_backends("cuda", "float16") == ["efficient", "math"]
    assert bench.sdpa_backends("cpu", "float32") == ["flash", "efficient", "math"]


def test_t4_profile_configs_and_impl_choice(fake_h100, monkeypatch):
    import torch

    pytest.importorskip("triton")
    from attn_edu import impls
    from attn_edu.kernels import decode_triton as dt
    from attn_edu.kernels import flash_triton as ft
    from conftest import OnCuda

    h100_configs = ft.forward_configs((9, 0), 64)
    monkeypatch.setenv(gp.PROFILE_ENV, "t4")
    gp.apply_profile()
    cap = torch.cuda.get_device_capability()  # what the launchers read
    assert ft.forward_configs(cap, 64) == ft.forward_configs((7, 5), 64) == [(32, 32, 4, 1)]
    assert len(h100_configs) > 1 and (32, 32, 4, 1) not in h100_configs
    assert dt.pick_config(cap, 128) == dt.DECODE_CONFIGS[75][0] != dt.DECODE_CONFIGS[90][0]
    q, k, v = (torch.zeros(1, 2, 8, 64, dtype=torch.float16).as_subclass(OnCuda) for _ in range(3))
    name, reason = impls.choose_impl(q, k, v, causal=True)
    assert name == "sdpa" and "7.5" in reason
    assert gp.remove_profile() and torch.cuda.get_device_capability() == (9, 0)
    assert impls.choose_impl(q, k, v, causal=True)[0] == "triton"  # the H100 again
    assert fake_h100[-1] == (1.0, 0) and torch.backends.cuda.flash_sdp_enabled()


def test_triton_keeps_compiling_for_the_real_gpu(fake_h100, monkeypatch):
    """Triton's GPUDriver binds torch.cuda.get_device_capability when it starts: the profile
    starts it first, so it targets the GPU it runs on (sm_75 code would not load on an H100)."""
    import torch

    class Driver:  # as triton.backends.driver.GPUDriver: binds torch's function when it starts
        def __init__(self):
            self.get_device_capability = torch.cuda.get_device_capability

        def get_current_target(self):
            return self.get_device_capability(0)

    class Lazy:  # as triton.runtime.driver: the driver starts on first use
        def __getattr__(self, attr):
            self.__dict__["_d"] = self.__dict__.get("_d") or Driver()
            return getattr(self.__dict__["_d"], attr)

    lazy = Lazy()
    fake = SimpleNamespace(runtime=SimpleNamespace(driver=SimpleNamespace(active=lazy)),
                           __spec__=SimpleNamespace(name="triton"))
    monkeypatch.setitem(sys.modules, "triton", fake)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: fake.__spec__)
    monkeypatch.setenv(gp.PROFILE_ENV, "t4")
    gp.apply_profile()
    assert torch.cuda.get_device_capability() == (7, 5)  # what the package reads
    assert lazy.get_current_target() == (9, 0)  # what Triton compiles for


def test_profile_on_a_machine_without_a_gpu_changes_nothing(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(gp.PROFILE_ENV, "t4")
    before = torch.cuda.get_device_capability
    assert gp.apply_profile() is gp.PROFILES["t4"] and gp.applied_profile() is None
    assert torch.cuda.get_device_capability is before and not gp.remove_profile()


# ----------------------------------------------------------------------------- sizes
def _naive_peak(impl, b, h, n, d, s):  # the inputs, then the n x n and n x d matrices above them
    a, c = gp.PEAK_MATRICES[impl]
    return 3 * b * h * n * d * s + a * b * h * n * n * s + c * b * h * n * d * s


def test_t4_sizes_fit_in_15_gb_and_drop_what_would_not():
    budget = 0.9 * 15e9
    thr = gp.branch_sizes("10", "throughput", T4)
    assert thr.impls == ("triton", "sdpa_efficient", "sdpa_math") and thr.dtype == "float16"  # no flash, no bf16
    assert thr.lengths == (1024, 2048, 4096, 8192, 16384)
    assert thr.max_n == {"triton": 16384, "sdpa_efficient": 16384, "sdpa_math": 4096}
    assert _naive_peak("sdpa_math", 4, 16, 4096, 64, 2) <= budget < _naive_peak("sdpa_math", 4, 16, 8192, 64, 2)
    assert not thr.fits("sdpa_math", 8192) and thr.fits("triton", 16384)
    mem = gp.branch_sizes("10", "memory", T4)
    assert mem.impls == ("naive", "tiled", "triton", "sdpa_efficient") and mem.max_n["naive"] == 8192
    assert _naive_peak("naive", 1, 16, 8192, 64, 2) <= budget < _naive_peak("naive", 1, 16, 16384, 64, 2)
    assert gp.branch_sizes("08", "sweep", T4).max_n["naive"] == 16384  # B = 1, H = 4: 6.4 GB
    assert gp.branch_sizes("08", "sweep", T4).impls == ("naive", "sdpa_efficient", "tiled", "triton")
    assert gp.branch_sizes("13", "decode", T4).lengths == (4096, 16384, 65536)
    # every point of every branch fits in the 15 GB
    for (chapter, branch) in gp.BRANCHES:
        plan = gp.branch_sizes(chapter, branch, T4)
        s = 4 if plan.dtype == "float32" else 2
        for impl in plan.impls:
            for n in plan.lengths:
                if plan.fits(impl, n) and impl in ("naive", "sdpa_math"):
                    assert _naive_peak(impl, plan.batch, plan.heads, n, plan.d, s) <= budget


def test_h100_sizes_agree_with_the_recorded_out_of_memory_points():
    """On the H100 the plan keeps exactly the lengths the recorded sweep ran without running
    out of memory (naive and math stopped at 8192; 16384 was out of memory)."""
    doc = json.loads((ROOT / "attn_edu/data/bench/gpu_NVIDIA_H100_80GB_HBM3_d64.json").read_text())
    ran = {}
    for r in doc["results"]:
        if "error" not in r:
            ran[r["impl"]] = max(ran.get(r["impl"], 0), r["n"])
        else:
            assert r["reason"] == "out_of_memory"
    plan = gp.branch_sizes("10", "throughput", H100)
    assert plan.impls == ("triton", "sdpa_flash", "sdpa_efficient", "sdpa_math") and plan.dtype == "bfloat16"
    assert plan.max_n["sdpa_math"] == ran["torch_sdpa_math"] == 8192
    assert plan.max_n["triton"] == ran["triton"] == 16384
    assert gp.branch_sizes("10", "memory", H100).max_n["naive"] == 16384  # B = 1 there: 26 GB
    budget = 0.9 * H100_TOTAL  # the sweep's B = 4: out of memory at 16384, as recorded
    assert _naive_peak("naive", 4, 16, 16384, 64, 2) > budget >= _naive_peak("naive", 4, 16, 8192, 64, 2)
    assert ran["torch_naive"] == 8192


def test_peak_matrices_hold_the_recorded_peaks():
    for name in ("d64", "d128"):
        doc = json.loads((ROOT / f"attn_edu/data/bench/gpu_NVIDIA_H100_80GB_HBM3_{name}.json").read_text())
        c = doc["config"]
        for r in doc["results"]:
            impl = {"torch_naive": "naive", "torch_sdpa_math": "sdpa_math"}.get(r["impl"])
            if impl and r.get("peak_bytes"):
                a, b = gp.PEAK_MATRICES[impl]
                model = c["batch"] * c["heads"] * 2 * (a * r["n"] ** 2 + b * r["n"] * c["d"])
                assert r["peak_bytes"] <= model <= 1.03 * r["peak_bytes"], (name, r["impl"], r["n"])


def test_bad_branch_and_gpu_arguments():
    with pytest.raises(ValueError, match=r"\(chapter, branch\).*\('10', 'nope'\)"):
        gp.branch_sizes("10", "nope", T4)
    with pytest.raises(TypeError, match="gpu must be a GPUInfo"):
        gp.branch_sizes("10", "memory", {"memory": 1})
    with pytest.raises(TypeError, match="plan must be a BranchSizes"):
        gp.estimate_seconds(("10", "causal"))


# ----------------------------------------------------------------------------- estimates
def test_attainments_are_the_recorded_h100_shares_of_its_roofline():
    doc = json.loads((ROOT / "attn_edu/data/bench/gpu_NVIDIA_H100_80GB_HBM3_d64.json").read_text())
    ms = {r["impl"]: r["median_ms"] for r in doc["results"] if r["n"] == 8192 and "error" not in r}
    h100 = GPUS["H100 SXM"]
    flops = 4 * 4 * 16 * 8192**2 * 64
    for impl, name in [("triton", "triton"), ("sdpa_flash", "torch_sdpa_flash"),
                       ("sdpa_efficient", "torch_sdpa_efficient")]:
        assert gp.H100_ATTAINMENT[impl] == pytest.approx(flops / h100.flops_16bit / (ms[name] / 1e3), rel=0.01)
    nbytes = 2 * 4 * 16 * (4 * 8192**2 + 4 * 8192 * 64)  # FlashAttention's Algorithm 0, by hand
    for impl, name in [("naive", "torch_naive"), ("sdpa_math", "torch_sdpa_math")]:
        assert gp.H100_ATTAINMENT[impl] == pytest.approx(nbytes / h100.bandwidth / (ms[name] / 1e3), rel=0.01)
    loop = next(r for r in doc["results"] if r["impl"] == "torch_flash" and r["n"] == 16384)
    assert gp.TILED_LOOP_HOST_S == pytest.approx(loop["host_median_ms"] / 1e3 / (16384 // 128) ** 2, rel=0.01)
    decode = json.loads((ROOT / "attn_edu/data/bench/decode/decode_NVIDIA_H100_80GB_HBM3.json").read_text())
    at = {(r["impl"], r["batch"]): r for r in decode["results"] if r["context"] == 65536}
    assert gp.H100_ATTAINMENT["decode"] == pytest.approx(at["triton_split_kv", 8]["gb_per_s"] * 1e9
                                                         / h100.bandwidth, rel=0.01)
    for impl, host_s in gp._DECODE_HOST_S.items():
        assert host_s == pytest.approx(at[impl, 1]["host_median_ms"] / 1e3, rel=0.1), impl


def test_t4_estimate_of_the_causal_branch_by_hand():
    """Chapter 10's causal branch: Triton at n = 8192, B = 4, H = 16, d = 64, full and causal,
    12 calls each, on a T4's FMA units (8.1 TFLOP/s: no tensor cores in Triton before 8.0)."""
    plan = gp.branch_sizes("10", "causal", T4)
    full = 4 * 4 * 16 * 8192**2 * 64  # 4 B H n^2 d
    flush = 256 * 2**20 / 320e9  # zeroing the L2-flush buffer at 320 GB/s, before each timed call
    compile_s = [r["seconds"] for r in json.loads(
        (ROOT / "attn_edu/data/kernels/compile_report.json").read_text())["rows"] if r["target"] == "sm_75"]
    by_hand = (sum(compile_s) / len(compile_s)
               + 12 * (full / 8.1e12 / 0.455 + flush) + 12 * (full / 2 / 8.1e12 / 0.455 + flush))
    got = gp.estimate_seconds(plan, detail=True)
    assert got["flops"] == 12 * (full + full // 2)
    assert got["seconds"] == pytest.approx(by_hand, rel=1e-9)
    # the kernels' time alone is about 5.4 s; the compile is the report's mean sm_75 compile,
    # recorded on a shared CPU (1.4 s one day, 2.5 s on a busier one): seconds, not minutes
    compile_mean = sum(compile_s) / len(compile_s)
    assert 5.0 < got["seconds"] - compile_mean < 6.0 and 0 < compile_mean < 10


def test_every_branch_has_a_t4_estimate_within_three_minutes_per_chapter(capsys):
    rows = gp.t4_estimates()
    assert [(r["chapter"], r["branch"]) for r in rows] == list(gp.BRANCHES)
    for r in rows:
        assert r["flops"] > 0 and r["bytes"] > 0 and 0 < r["seconds"] <= r["chapter_seconds"]
        assert r["within_aim"] and r["chapter_seconds"] <= gp.T4_SECONDS_AIM
    from attn_edu.bench.cli import main

    assert main(["--t4-estimates"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 + len(rows) + len({r["chapter"] for r in rows})
    line = next(x for x in out if x.startswith("10      throughput"))
    assert "yes" in line and "sdpa_math <= 4096" in line


def test_a_branch_past_the_aim_is_shrunk_longest_lengths_first():
    full = gp.branch_sizes("10", "throughput", T4)
    cut = gp.branch_sizes("10", "throughput", T4, aim_s=10.0)
    assert cut.lengths == full.lengths[:len(cut.lengths)] and len(cut.lengths) < len(full.lengths)
    assert gp.estimate_seconds(cut) <= 10.0 < gp.estimate_seconds(gp.branch_sizes("10", "throughput", T4, aim_s=1e9))
    assert math.isclose(gp.estimate_seconds(full), gp.estimate_seconds(
        gp.branch_sizes("10", "throughput", T4, aim_s=gp.T4_SECONDS_AIM)))


def _cells() -> dict:
    cells = {}
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        for c in json.loads(path.read_text())["cells"]:
            cells[c.get("id")] = (path.name[:2], "".join(c["source"]))
    return cells


def test_the_chapters_branches_read_their_sizes_and_use_only_what_they_have():
    """Every branch's cell calls branch_sizes with its key (its sizes live in the package),
    and every attribute the chapter reads from what it returns exists (the GPU branches run
    on no machine of ours: a misspelt field would first fail on a reader's GPU)."""
    cells = _cells()
    fields = {f.name for f in dataclasses.fields(gp.BranchSizes)} | {"fits"}
    for (chapter, branch), plan in gp.BRANCHES.items():
        where, source = cells[plan.cell]
        assert where == chapter and f'branch_sizes("{chapter}", "{branch}")' in source, (chapter, branch)
        tree = ast.parse(source)
        names = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Call) and getattr(node.value.func, "attr", "") == "branch_sizes"
                 for t in node.targets if isinstance(t, ast.Name)}
        assert len(names) == 1, (chapter, branch, names)
        used = {node.attr for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) in names}
        assert used and used <= fields, (chapter, branch, used - fields)
    # the memory profile's and the sweep's skips name implementations the sizes know
    assert {gp.branch_sizes("10", "memory", T4).fits(k, 16384) for k in ("naive", "tiled")} == {False, True}
    thr = gp.branch_sizes("10", "throughput", T4)
    for shown in ("SDPA efficient", "SDPA math"):  # the chapter's names, as its cell maps them
        assert shown.lower().replace(" ", "_") in thr.max_n


def test_setup_notebook_applies_the_profile_once_and_says_so(fake_h100, monkeypatch, capsys):
    from attn_edu import setup_notebook

    monkeypatch.setenv(gp.PROFILE_ENV, "t4")
    assert setup_notebook(plotly=False) == "cuda"
    out = capsys.readouterr().out
    assert "ATTN_EDU_GPU_PROFILE=t4" in out and "15 GB" in out and "7.5" in out and "float16" in out
    assert setup_notebook(plotly=False) == "cuda" and capsys.readouterr().out == ""  # once
    assert fake_h100 == [(15e9 / H100_TOTAL, 0)] and gp.applied_profile() is gp.PROFILES["t4"]
    monkeypatch.delenv(gp.PROFILE_ENV)
    gp.remove_profile()
    assert setup_notebook(plotly=False) == "cuda" and gp.applied_profile() is None
