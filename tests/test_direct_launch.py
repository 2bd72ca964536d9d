"""A kernel launched again without Triton's dispatch (attn_edu.kernels._direct) is the kernel
Triton would launch, with the same arguments.

No GPU here: in a child process without TRITON_INTERPRET, Triton compiles for sm_90a through
the package's stand-in driver, and the C launcher (``CompiledKernel.run``) records each launch:
the compiled kernel, the grid and every argument. Each call is made twice, through
``kernel[grid](...)`` (Triton's ``JITFunction.run``) and through ``_direct.launch``, after every
case has been seen once, so a key too coarse to tell two specializations apart launches
another case's kernel. What is real: Triton's own specialization of each argument, its
kernel cache, and the package's launch sites (the decode step's two kernels, an autotuned
forward's chosen configuration with its callable grid, the block-sparse kernel).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("triton")

from venvs import compiled_env  # noqa: E402

SCRIPT = r'''
import json, torch, triton, triton.language as tl
from triton import knobs
from triton.compiler.compiler import CompiledKernel
from triton.tools.tensor_descriptor import TensorDescriptor
from attn_edu.kernels import _compile_ahead as ca, _direct, block_sparse_triton as bs, decode_triton as dt
from attn_edu.kernels.flash_triton import launch
from attn_edu.bench.host import _via_triton as via_triton  # kernel[grid](...), Triton's dispatch

GAIN = tl.constexpr(1.0)  # a global the kernel reads: Triton checks it on every launch

@triton.jit
def tiny(X, Y, n, stride, alpha, BLOCK: tl.constexpr, FLAG: tl.constexpr = False):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs * stride, mask=offs < n)
    tl.store(Y + offs, (x * alpha * GAIN).to(Y.dtype.element_ty), mask=offs < n)

@triton.jit
def tiny_desc(D, Y):  # a host TMA descriptor: its block loaded and summed
    tl.store(Y, tl.sum(tl.sum(D.load([0, 0]).to(tl.float32), 1), 0))

records, hands = [], []  # each launch: what it launched; whether it was handed hooks
def recorder(self):
    def run(g0, g1, g2, stream, function, packed, meta, enter, exit_, *args):
        records.append((id(self), (g0, g1, g2), [describe(a) for a in args]))
        hands.append([meta is not None, enter is not None, exit_ is not None])
        for hook in (enter, exit_):  # as Triton's C launcher does
            if hook is not None:
                hook(meta)
    return run

def describe(a):  # a tensor by what a launch can tell of it; anything else by value
    if isinstance(a, torch.Tensor):
        return ["tensor", list(a.shape), list(a.stride()), str(a.dtype), a.data_ptr() % 16]
    if isinstance(a, TensorDescriptor):  # every field (the C launcher reads them all)
        return ["descriptor", describe(a.base), a.base.storage_offset(), list(a.shape), list(a.strides),
                list(a.block_shape), a.padding, getattr(a, "round_f32_to_tf32", None)]
    return [type(a).__name__, a if isinstance(a, (int, float, str, bool, type(None))) else repr(a)]

def both(call):
    """call(launcher) once through Triton, once through _direct: the two launch records."""
    records.clear(); call(via_triton); triton_said = list(records)
    records.clear(); call(_direct.launch); direct_said = list(records)
    return triton_said, direct_said

x = torch.zeros(256, dtype=torch.float16)
y = torch.zeros(256, dtype=torch.float16)
cases = {  # each one specialization Triton tells apart from the base case
    "base": ((x, y, 64, 1, 0.5), {"BLOCK": 64}),
    "X 2 bytes off 16": ((x[1:], y, 64, 1, 0.5), {"BLOCK": 64}),
    "n 17, not a multiple of 16": ((x, y, 17, 1, 0.5), {"BLOCK": 64}),
    "stride 1 vs 16": ((x, y, 64, 16, 0.5), {"BLOCK": 64}),
    "n = 1": ((x, y, 1, 1, 0.5), {"BLOCK": 64}),
    "stride past int32": ((x, y, 64, 2 ** 31 + 16, 0.5), {"BLOCK": 64}),
    "alpha an int": ((x, y, 64, 1, 2), {"BLOCK": 64}),
    "X float32": ((torch.zeros(256), y, 64, 1, 0.5), {"BLOCK": 64}),
    "FLAG given": ((x, y, 64, 1, 0.5), {"BLOCK": 64, "FLAG": True}),
    "num_warps 8": ((x, y, 64, 1, 0.5), {"BLOCK": 64, "num_warps": 8}),
}
out = {"cases": {}}
with ca.gpu_target_stand_in((9, 0)):
    CompiledKernel._init_handles = lambda self: None
    CompiledKernel.run = property(recorder)
    for args, kwargs in cases.values():  # every case seen once: the direct table holds them all
        _direct.launch(tiny, (2,), *args, **kwargs)
    for name, (args, kwargs) in cases.items():
        out["cases"][name] = both(lambda go: go(tiny, (2,), *args, **kwargs))
    out["kernels"] = len({r[0][0][0] for r in out["cases"].values()})
    out["tiny_cached"] = _direct.cached(tiny)
    # TRITON_DEBUG's option compiles another kernel: the direct launch must not reuse the first
    # a launch hook (a profiler's): with one registered, both ways call it with the launch's
    # description (the kernel's name); with none, the direct launch hands the launcher no hooks
    hands.clear(); both(lambda go: go(tiny, (2,), *cases["base"][0], **cases["base"][1]))
    out["hands_idle"] = list(hands)
    names = []
    hook = lambda meta: names.append(meta.get()["name"])
    knobs.runtime.launch_enter_hook.add(hook)
    hands.clear(); out["hooked"] = both(lambda go: go(tiny, (2,), *cases["base"][0], **cases["base"][1]))
    knobs.runtime.launch_enter_hook.remove(hook)
    out["hands_hooked"], out["hook_names"] = list(hands), list(names)
    names.clear()  # an exit hook alone is called too, with the same description
    knobs.runtime.launch_exit_hook.add(hook)
    hands.clear(); out["exit_hooked"] = both(lambda go: go(tiny, (2,), *cases["base"][0], **cases["base"][1]))
    knobs.runtime.launch_exit_hook.remove(hook)
    out["hands_exit_hooked"], out["exit_hook_names"] = list(hands), list(names)
    # a pre-run hook on the kernel: every call through Triton, which runs it each time
    ran = []
    tiny.add_pre_run_hook(lambda *args, **kwargs: ran.append(kwargs["BLOCK"]))
    hands.clear(); out["pre_run"] = both(lambda go: go(tiny, (2,), *cases["base"][0], **cases["base"][1]))
    tiny.pre_run_hooks.clear()
    out["pre_run_ran"], out["hands_pre_run"] = ran, list(hands)
    knobs.runtime.debug = True
    out["debug"] = both(lambda go: go(tiny, (2,), *cases["base"][0], **cases["base"][1]))
    knobs.runtime.debug = False
    # a constexpr passed by position: through Triton on every call, nothing kept
    out["positional"] = both(lambda go: go(tiny, (2,), x, y, 64, 1, 0.5, 32))
    out["tiny_cached_after"] = _direct.cached(tiny)
    # the global rebound: to an equal value, both launch the kernel; to another, both raise
    base_args, base_kwargs = cases["base"]
    GAIN = tl.constexpr(1.0)
    out["global_equal"] = both(lambda go: go(tiny, (2,), *base_args, **base_kwargs))
    GAIN = tl.constexpr(2.0)
    out["global_changed"] = []
    for go in (via_triton, _direct.launch):
        try:
            go(tiny, (2,), *base_args, **base_kwargs)
            out["global_changed"].append("launched")
        except RuntimeError as e:
            out["global_changed"].append(str(e)[:40])
    GAIN = tl.constexpr(1.0)

    # host descriptors: Triton specializes one on its dtype and block shape, the key too; a
    # descriptor that differs in anything else launches the base case's kernel, with its own fields
    m = torch.zeros(128, 128, dtype=torch.float16)
    desc = lambda x, block, **kw: TensorDescriptor(x, list(x.shape), list(x.stride()), block, **kw)
    specialized = {
        "base": desc(m[:64, :64], [16, 16]),
        "block 32 x 16": desc(m[:64, :64], [32, 16]),
        "float32": desc(torch.zeros(64, 64), [16, 16]),
    }
    same = {
        "shape 17 x 64": desc(m[:17, :64], [16, 16]),
        "row stride 128": desc(m[:, :64], [16, 16]),
        "base 16 rows on": desc(m[16:80, :64], [16, 16]),
        "padding nan": desc(m[:64, :64], [16, 16], padding="nan"),
    }
    for d in specialized.values():
        _direct.launch(tiny_desc, (1,), d, y)
    out["descriptors"] = {name: both(lambda go: go(tiny_desc, (1,), d, y)) for name, d in {**specialized, **same}.items()}
    out["descriptor_kernels"] = len({out["descriptors"][n][0][0][0] for n in specialized})
    out["descriptor_cached"] = _direct.cached(tiny_desc)

    # the package's launch sites: the decode step (two kernels, constexprs by keyword), the
    # autotuned forward's chosen configuration (a callable grid) and the block-sparse kernel
    b = torch.bfloat16
    qd, kd = torch.randn(1, 32, 1, 128).to(b), torch.randn(1, 8, 1000, 128).to(b)
    q = torch.randn(1, 2, 128, 64).to(b)
    launch.forward_configs = lambda *a, **k: [(64, 32, 4, 2), (64, 64, 4, 3)]
    launch.variant_configs = lambda *a, **k: [(64, 64, 4, 2), (128, 64, 8, 2)]
    # block-sparse has no launcher below its front door, which refuses CPU tensors without the
    # interpreter: its check answers as it would for CUDA ones
    bs._targets.check_kernel_inputs = lambda limits, q, k, v, *rest: ("bfloat16", tuple(q.shape[:2]), 1)
    causal = torch.ones(256, 256, dtype=torch.bool).tril()
    qs = torch.randn(1, 2, 256, 64).to(b)
    steps = {
        "decode": lambda: dt.decode(qd, kd, kd, "bottom_right", 128 ** -0.5, 4),
        "forward": lambda: launch.forward(q, q, q, "top_left", 0.125),
        # FlashAttention-3's ladder at its top: host descriptors, a persistent grid, warp specialization
        "fa3": lambda: launch.forward(q, q, q, "top_left", 0.125, use_tma=True, variant="persistent"),
        # ... and with a configuration given (config=): not autotuned, launched the same way
        "fa3 config": lambda: launch.forward(q, q, q, "top_left", 0.125, use_tma=True, variant="persistent",
                                             config=(64, 64, 4, 2)),
        "block-sparse": lambda: bs.block_sparse_attention(qs, qs, qs, causal),
    }
    compiled_only = (launch._attn_fwd, launch._fa3_tuner("persistent"), bs._block_sparse_fwd_kernel,
                     *(getattr(dt, n) for n in dt.LAUNCHED))
    with ca.launches_compile_only(*compiled_only):
        for step in steps.values():
            step()  # compiled (and the forward tuned)
    for name, step in steps.items():
        step()  # Triton's dispatch once more: the direct table keeps the kernels
        def call(go, step=step):
            saved, _direct.launch = _direct.launch, go
            try:
                step()
            finally:
                _direct.launch = saved
        hands.clear()
        out[name] = both(call)
        out["hands " + name] = hands[len(hands) // 2:]  # the direct half's (no hook registered)
    out["sites_cached"] = {name: _direct.cached(kernel) for name, kernel in (
        ("decode", dt._split_kernel), ("forward", launch._attn_fwd.fn), ("fa3", launch.kernels.attn_fwd_fa3),
        ("block-sparse", bs._block_sparse_fwd_kernel))}  # fa3 and fa3 config: one kernel, two kept
print("DIRECT " + json.dumps(out))
'''


@pytest.fixture(scope="module")
def said(tmp_path_factory):
    script = tmp_path_factory.mktemp("direct") / "direct_child.py"
    script.write_text(SCRIPT)  # a file: @triton.jit reads the kernel's source
    done = subprocess.run([sys.executable, str(script)], env=compiled_env(TRITON_DEFAULT_FP_FUSION="1"),
                          capture_output=True, text=True, timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("DIRECT ")), None)
    assert done.returncode == 0 and line, done.stderr[-3000:]
    return json.loads(line[len("DIRECT "):])


def test_every_specialization_gets_the_kernel_triton_launches(said):
    cases = said["cases"]
    for name, (triton_said, direct_said) in cases.items():
        assert len(triton_said) == 1 and direct_said == triton_said, name
    # the cases are ten specializations: ten kernels, each kept once
    assert said["kernels"] == len(cases) == said["tiny_cached"]


def test_a_registered_launch_hook_is_called_and_none_is_handed_over_without_one(said):
    triton_said, direct_said = said["hooked"]
    assert direct_said == triton_said == said["cases"]["base"][0]
    assert said["hook_names"] == ["tiny", "tiny"]  # Triton's launch, then the direct one
    # (description, enter hook, exit hook) handed to the C launcher: Triton hands its two
    # chains, empty or not, and a description; the direct launch hands them only when one
    # holds a hook
    assert said["hands_hooked"] == [[True, True, True]] * 2
    assert said["hands_idle"] == [[True, True, True], [False, False, False]]
    triton_said, direct_said = said["exit_hooked"]
    assert direct_said == triton_said and said["exit_hook_names"] == ["tiny", "tiny"]
    assert said["hands_exit_hooked"] == [[True, True, True]] * 2


def test_a_kernel_with_a_pre_run_hook_goes_through_triton_which_runs_it_every_call(said):
    triton_said, direct_said = said["pre_run"]
    assert direct_said == triton_said == said["cases"]["base"][0]
    assert said["pre_run_ran"] == [64, 64]  # Triton's launch, then "direct": Triton's again
    assert said["hands_pre_run"] == [[True, True, True]] * 2


def test_a_debug_build_and_a_positional_constexpr_go_through_triton(said):
    triton_said, direct_said = said["debug"]
    assert direct_said == triton_said and triton_said[0][0] != said["cases"]["base"][0][0][0]
    triton_said, direct_said = said["positional"]
    assert direct_said == triton_said and triton_said[0][2][5] == ["int", 32]
    assert said["tiny_cached_after"] == said["tiny_cached"] + 1  # the debug kernel, not the positional one


def test_a_global_rebound_goes_through_triton_which_raises_when_its_value_changed(said):
    triton_said, direct_said = said["global_equal"]
    assert direct_said == triton_said == said["cases"]["base"][0]
    assert said["global_changed"] == ["Global variable GAIN has changed since w"] * 2


def test_a_host_descriptor_is_keyed_on_what_triton_specializes_it_on(said):
    cases = said["descriptors"]
    for name, (triton_said, direct_said) in cases.items():
        assert len(triton_said) == 1 and direct_said == triton_said, name
    # dtype and block shape: three kernels; shape, strides, address and padding: the base's kernel
    # (the key holds the padding too, finer than Triton: four entries kept)
    assert said["descriptor_kernels"] == 3 and said["descriptor_cached"] == 4
    base_kernel = cases["base"][0][0][0]
    for name in ("shape 17 x 64", "row stride 128", "base 16 rows on", "padding nan"):
        assert cases[name][0][0][0] == base_kernel, name
        assert cases[name][0][0][2] != cases["base"][0][0][2], name  # launched with its own fields


def test_the_package_launch_sites_launch_what_triton_launches(said):
    triton_said, direct_said = said["decode"]
    assert len(triton_said) == 2 and direct_said == triton_said  # split, then reduce
    triton_said, direct_said = said["forward"]
    assert len(triton_said) == 1 and direct_said == triton_said
    grid, args = triton_said[0][1], triton_said[0][2]
    assert grid == [2 * 2, 1, 1] and ["int", 64] in args  # B * H * 128 / BLOCK_M = 64 rows
    triton_said, direct_said = said["fa3"]  # four host descriptors, each with its block shape
    assert len(triton_said) == 1 and direct_said == triton_said
    blocks = [a[5] for a in triton_said[0][2] if a[0] == "descriptor"]
    assert blocks == [[1, 1, 64, 64]] * 4 or blocks == [[1, 1, 128, 64], [1, 1, 64, 64], [1, 1, 64, 64],
                                                        [1, 1, 128, 64]]
    triton_said, direct_said = said["fa3 config"]  # the tile asked for: 64-row blocks
    assert len(triton_said) == 1 and direct_said == triton_said
    assert [a[5] for a in triton_said[0][2] if a[0] == "descriptor"] == [[1, 1, 64, 64]] * 4
    triton_said, direct_said = said["block-sparse"]
    assert len(triton_said) == 1 and direct_said == triton_said
    # and each site's launches took the direct path: handed no launch hooks, which only
    # JITFunction.run hands over when none is registered (the test above); one compiled
    # kernel kept per site and configuration
    for name in ("decode", "forward", "fa3", "fa3 config", "block-sparse"):
        assert said["hands " + name] == [[False, False, False]] * len(said[name][0]), name
    assert said["sites_cached"] == {"decode": 1, "forward": 1, "fa3": 2, "block-sparse": 1}
