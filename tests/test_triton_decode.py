"""attn_edu.kernels.decode_triton: the split-KV decode kernel (chapter 13).

On a machine without a GPU the kernels run in Triton's CPU interpreter, so
TRITON_INTERPRET=1 is set here, before triton is imported (see tests/test_triton_flash.py
for why). Shapes are tiny: the interpreter runs each block through NumPy. The compile
report (tests/test_kernel_report.py) compiles the launcher's configurations for sm_75,
sm_80 and sm_90a; here what it leaves out is compiled for sm_80 and sm_90a (no GPU
needed), and its shared memory, registers and spills are read from Triton's own ptxas.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton and decode_triton are imported
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from attn_edu import decoding, reference_torch  # noqa: E402
from attn_edu.kernels import _targets  # noqa: E402
from attn_edu.kernels import decode_triton as dt  # noqa: E402
from attn_edu.testing import assert_close_to_reference, reference_pair  # noqa: E402
from conftest import DEVICE, GarbageTorch, OnCuda, kernel_precision, lse_pair, raises_with, torch_qkv  # noqa: E402
from venvs import compiled_env  # noqa: E402

DEVICE = "cuda" if CUDA else "cpu"
ROOT = Path(__file__).resolve().parents[1]
BF16_OK = CUDA and torch.cuda.get_device_capability() >= (8, 0)
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if BF16_OK else [])


def _inputs(b, hq, hkv, lq, lk, d, dv, dtype, seed=0):
    """q (B, H_q, L_q, d), k (B, H_kv, L_k, d), v (B, H_kv, L_k, d_v) on DEVICE."""
    return torch_qkv(lq, lk, d, dv, lead=(b, hq), lead_k=(b, hkv), seed=seed, dtype=dtype)


def _lse_refs(q, k, causal=False, seqlens=None):
    """``(gold, naive)`` lse for ``assert_close_to_reference`` (conftest.lse_pair): the K/V
    heads repeated over their groups, the causal mask and each sequence's length applied."""
    from attn_edu import masks

    b, hq, lq, d = q.shape
    lk = k.shape[2]
    kk = k.repeat_interleave(hq // k.shape[1], dim=1)
    align = {False: None, True: "top_left"}.get(causal, causal)
    lens = [lk] * b if seqlens is None else [int(x) for x in seqlens]
    allowed = torch.zeros(b, 1, lq, lk, dtype=torch.bool, device=q.device)
    for i, n in enumerate(lens):  # each sequence its own length (bottom-right: its own end)
        see = (masks.causal_mask(lq, n, align, device=q.device) if align
               else torch.ones(lq, n, dtype=torch.bool, device=q.device))
        allowed[i, 0, :, :n] = see
    return lse_pair(q, kk, allowed, d ** -0.5, kernel_precision(q.dtype))


def _assert_lse(lse, q, k, causal=False, seqlens=None):
    gold, naive = _lse_refs(q, k, causal, seqlens)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(gold))
    fin = torch.isfinite(gold)
    assert_close_to_reference(lse[fin], gold[fin], naive[fin], what="lse")


# B, H_q, H_kv, L_q, L_k, d, d_v, num_splits: odd lengths, GQA and MQA, ragged blocks,
# more splits than key blocks (empty chunks), d not a power of two
CASES = [
    (1, 1, 1, 1, 1, 16, 16, 1),
    (2, 4, 2, 1, 37, 16, 16, 3),
    (1, 8, 1, 1, 50, 24, 40, None),
    (2, 2, 2, 3, 33, 32, 32, 7),
    (1, 6, 3, 2, 17, 16, 8, 5),  # 5 splits of 16 keys over 17 keys: three are empty
    (1, 8, 1, 9, 40, 16, 16, 2),  # 8 heads x 9 queries = 72 packed rows: two row blocks
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("causal", [False, "bottom_right", True], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kernel_meets_the_tolerance_rule(case, causal, dtype):
    b, hq, hkv, lq, lk, d, dv, splits = case
    q, k, v = _inputs(b, hq, hkv, lq, lk, d, dv, dtype, seed=lk)
    out, lse = dt.split_kv_decode(q, k, v, num_splits=splits, causal=causal, enable_gqa=True, return_lse=True)
    assert out.dtype == dtype and out.shape == (b, hq, lq, dv) and lse.dtype == torch.float32
    gold, naive = reference_pair(q, k, v, causal=causal, enable_gqa=True, precision=kernel_precision(dtype))
    assert_close_to_reference(out, gold, naive)
    _assert_lse(lse, q, k, causal)


def test_seqlens_fully_masked_chunks_and_empty_sequences():
    """A padded cache: sequence 0 holds no key (zeros, lse -inf), sequence 1 fewer keys
    than one chunk (its other chunks are fully masked), sequence 2 the whole cache."""
    q, k, v = _inputs(3, 4, 2, 2, 70, 16, 16, torch.float32, seed=3)
    seqlens = torch.tensor([0, 9, 70], device=DEVICE)
    for causal in (False, "bottom_right"):
        out, lse = dt.split_kv_decode(q, k, v, num_splits=4, causal=causal, seqlens=seqlens,
                                      enable_gqa=True, return_lse=True)
        assert (out[0] == 0).all() and torch.isneginf(lse[0]).all() and not out.isnan().any()
        gold, naive = reference_pair(q, k, v, causal=causal, enable_gqa=True, seqlens=seqlens,
                                     precision=kernel_precision(torch.float32))
        assert_close_to_reference(out[1:], gold[1:], naive[1:])
    # bottom-right with a sequence shorter than L_q: its first queries see nothing
    out = dt.split_kv_decode(q, k, v, num_splits=2, causal="bottom_right",
                             seqlens=torch.tensor([1, 2, 3], device=DEVICE), enable_gqa=True)
    assert (out[0, :, 0] == 0).all() and (out[0, :, 1] != 0).any()


def test_a_call_allocates_its_output_and_one_workspace_and_the_kernels_fill_what_is_read(monkeypatch):
    """No memset, two allocations: the output and one float32 workspace holding every chunk's
    (m, l, o) and the lse. Every torch.empty starts as NaN here, so a part of the workspace
    the split kernel does not write (an empty chunk, a sequence with no key) and the
    reduction reads, or a part overlapping another, shows up in out or lse."""
    garbage = GarbageTorch()
    monkeypatch.setattr(dt, "torch", garbage)
    q, k, v = _inputs(3, 6, 3, 2, 17, 16, 8, torch.float32, seed=8)
    seqlens = torch.tensor([0, 5, 17], device=DEVICE)
    for causal, lens in ((False, None), ("bottom_right", seqlens), (True, seqlens)):
        before = garbage.empties
        out, lse = dt.split_kv_decode(q, k, v, num_splits=5, causal=causal, seqlens=lens, enable_gqa=True,
                                      return_lse=True)  # 5 chunks of 16 keys over 17 keys: 3 empty
        assert garbage.empties - before == 2, garbage.empties - before
        gold, naive = reference_pair(q, k, v, causal=causal, enable_gqa=True, seqlens=lens,
                                     precision=kernel_precision(torch.float32))
        assert not out.isnan().any() and not lse.isnan().any(), causal
        assert_close_to_reference(out, gold, naive)
        _assert_lse(lse, q, k, causal, lens)
        if lens is not None:  # sequence 0 holds no key: -inf; the others see at least one
            assert torch.isneginf(lse[0]).all() and torch.isfinite(lse[1:]).all(), lse


def test_split_count_does_not_change_the_answer_and_merge_matches_numpy():
    # 300 keys: several key blocks on a GPU too (BLOCK_N up to 128), so each split count merges
    # several non-empty chunks
    q, k, v = _inputs(1, 4, 1, 1, 300, 16, 16, torch.float32, seed=5)
    outs = [dt.split_kv_decode(q, k, v, num_splits=s, enable_gqa=True) for s in (1, 2, 7, 40)]
    for o in outs[1:]:
        assert (o - outs[0]).abs().max() <= 1e-5
    numpy_twin = decoding.split_kv_attention(*(x.double().cpu().numpy() for x in (q, k, v)), 7, enable_gqa=True)
    gold, naive = reference_pair(q, k, v, enable_gqa=True, precision=kernel_precision(q.dtype))
    assert (torch.from_numpy(numpy_twin) - gold.cpu()).abs().max() <= 1e-12  # the merge is exact
    assert_close_to_reference(outs[2], gold, naive)  # from sm_80 float32 is TF32: float16's rule


def test_noncontiguous_cache_and_explicit_scale():
    b, hkv, lk, d = 2, 2, 29, 16
    g = torch.Generator().manual_seed(4)
    k, v = (torch.randn(b, lk, hkv, d, generator=g).to(DEVICE).transpose(1, 2) for _ in range(2))
    q = torch.randn(b, 4, 1, d, generator=g).to(DEVICE)
    assert not k.is_contiguous()
    out = dt.split_kv_decode(q, k, v, num_splits=3, scale=-0.4, enable_gqa=True)
    gold, naive = reference_pair(q, k, v, scale=-0.4, enable_gqa=True, precision=kernel_precision(q.dtype))
    assert_close_to_reference(out, gold, naive)


def test_bad_inputs_get_clear_errors():
    q, k, v = _inputs(1, 4, 2, 1, 8, 16, 16, torch.float32)
    f = dt.split_kv_decode
    msg = raises_with(ValueError, ["enable_gqa=True"], f, q, k, v)
    with pytest.raises(ValueError) as ref:
        reference_torch.scaled_dot_product_attention(q, k, v)
    assert msg == str(ref.value)  # the reference's words
    raises_with(TypeError, ["float64", "split_kv_attention"], f, q.double(), k.double(), v.double(), enable_gqa=True)
    raises_with(ValueError, ["4-D"], f, q[0], k[0], v[0], enable_gqa=True)
    big = torch.zeros(1, 2, 8, 200, device=DEVICE)
    raises_with(ValueError, ["1 to 128", "200"], f, big[:, :, :1], big, big, enable_gqa=True)
    raises_with(ValueError, ["num_splits must be at most 128"], f, q, k, v, num_splits=129, enable_gqa=True)
    assert f(q, k, v, num_splits=128, enable_gqa=True).shape == q.shape  # 128 itself is allowed
    raises_with(ValueError, ["num_splits must be at least 1"], f, q, k, v, num_splits=0, enable_gqa=True)
    raises_with(TypeError, ["seqlens must be an integer tensor"], f, q, k, v, seqlens=torch.ones(1), enable_gqa=True)
    raises_with(TypeError, ["seqlens must be an integer tensor", "bool"], f, q, k, v,
                seqlens=torch.ones(1, dtype=torch.bool), enable_gqa=True)
    raises_with(ValueError, ["seqlens must have shape (B,)"], f, q, k, v, seqlens=torch.ones(2, dtype=torch.int64),
            enable_gqa=True)
    if not CUDA:  # checked on the CPU only: on a GPU it would be a host sync (the kernel clamps)
        raises_with(ValueError, ["0 .. L_k = 8"], f, q, k, v, seqlens=torch.tensor([9]), enable_gqa=True)
        raises_with(ValueError, ["0 .. L_k = 8", "-1"], f, q, k, v, seqlens=torch.tensor([-1]), enable_gqa=True)
    raises_with(ValueError, ["same batch and head axes"], f, q.expand(2, 4, 1, 16), k, v, enable_gqa=True)
    # one K/V head broadcast over four query heads is grouped-query attention: asked for by name
    raises_with(ValueError, ["same batch and head axes", "enable_gqa=True"], f, q, k[:, :1], v[:, :1])
    raises_with(ValueError, ["causal"], f, q, k, v, causal="left", enable_gqa=True)
    if not CUDA:
        raises_with(TypeError, ["bfloat16", "interpreter"], f, q.bfloat16(), k.bfloat16(), v.bfloat16(),
                enable_gqa=True)


def test_launch_choices():
    assert dt.block_m_for(1, 1) == 16 and dt.block_m_for(8, 3) == 32 and dt.block_m_for(32, 4) == 64
    # one (batch, K/V head) program on a 132-SM GPU: split into as many chunks as there are blocks
    assert dt.choose_num_splits(8, 100_000, 64, 132) == 16  # 128 programs: one whole wave
    assert dt.choose_num_splits(8, 200, 64, 132) == 4  # no more splits than key blocks
    assert dt.choose_num_splits(256, 100_000, 64, 132) == 1  # two waves already nearly full
    assert dt.choose_num_splits(1, 10**7, 16, 1000, max_splits=8) == 8
    assert dt.choose_num_splits(1, 10**7, 16, 1000) <= dt.MAX_SPLITS
    assert dt.pick_config(None, 128) == dt.INTERPRET_CONFIG
    assert dt.pick_config((7, 5), 128) == dt.DECODE_CONFIGS[75][0]
    assert dt.pick_config((8, 6), 64) == dt.DECODE_CONFIGS[80][1]
    assert dt.pick_config((9, 0), 80) == dt.DECODE_CONFIGS[90][0]
    assert dt.pick_config((12, 0), 64) == dt.DECODE_CONFIGS[90][1]


@pytest.mark.skipif(CUDA, reason="the CPU-interpreter switch is what is tested here")
def test_cpu_without_interpreter_or_too_late_gets_a_clear_error():
    """No TRITON_INTERPRET: ValueError; set after triton was imported: RuntimeError."""
    code = (
        "import os\n"
        "os.environ.pop('TRITON_INTERPRET', None)\n"
        "import torch\n"
        "from attn_edu.kernels import split_kv_decode\n"
        "q = torch.randn(1, 1, 1, 16)\n"
        "for env, exc, words in ((None, ValueError, ('TRITON_INTERPRET=1', 'GPU')),\n"
        "                        ('1', RuntimeError, ('after triton', 'before'))):\n"
        "    if env:\n"
        "        os.environ['TRITON_INTERPRET'] = env\n"
        "    try:\n"
        "        split_kv_decode(q, q, q)\n"
        "    except exc as e:\n"
        "        assert all(w in str(e) for w in words), e\n"
        "    else:\n"
        "        raise AssertionError('no error')\n"
        "print('ok')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=compiled_env(), cwd=ROOT,
                         timeout=300)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]


AOT_SCRIPT = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attn_edu.kernels import _targets
from attn_edu.kernels import decode_triton as dt
from attn_edu.kernels.report import _ptxas_usage  # Triton's bundled ptxas -v, in a folder it removes


def usage(kernel, capability, arch):
    u = _ptxas_usage(kernel.asm["ptx"], arch, capability)
    assert u["registers"] > 0, ("ptxas did not report registers", arch)
    return u["registers"], u["spill_bytes"]

# the launcher's configurations for sm_75 float16 and sm_80 / sm_90a bfloat16 at d = 64 and 128
# are the compile report's rows (tests/test_kernel_report.py); here what it does not compile:
# float16 on sm_80, a group of 8 query heads per KV head, the kernel's other branches, and
# the cp.async pipeline in the PTX (on Hopper too)
for arch, dtype, ds in [("sm_80", "float16", (64, 128)), ("sm_90a", "bfloat16", (128,))]:
    target = _targets.TARGETS[arch]
    for d in ds:
        for spec in dt.compile_specs(arch, dtype, d, group=8):
            src = ASTSource(fn=spec["fn"], signature=spec["signature"], constexprs=spec["constexprs"],
                            attrs=spec["attrs"])
            k = triton.compile(src, target=GPUTarget("cuda", spec["capability"], 32), options=spec["options"])
            regs, spilled = usage(k, spec["capability"], arch)
            ptx = k.asm["ptx"]
            assert f".target {arch}" in ptx, arch
            if spec["config"] is not None:  # the other branches of the kernel compile too
                plain = dict(spec["constexprs"], CAUSAL=False, BOTTOM_RIGHT=False, HAS_SEQLENS=False)
                triton.compile(ASTSource(fn=spec["fn"], signature=spec["signature"], constexprs=plain,
                                         attrs=spec["attrs"]),
                               target=GPUTarget("cuda", spec["capability"], 32), options=spec["options"])
            assert k.metadata.shared <= target.shared_memory, (arch, spec["name"], k.metadata.shared)
            assert spilled == 0, (arch, spec["name"], regs, spilled)
            if spec["config"] is not None and target.capability >= 80:
                assert "mma.sync" in ptx and "cp.async" in ptx, "no tensor cores or async copies"
            print(f"compiled {arch} {dtype} d={d} {spec['name']}: shared {k.metadata.shared} B, "
                  f"{regs} registers, {spilled} B spilled")
"""


@pytest.mark.slow
@pytest.mark.skipif(CUDA, reason="on a GPU the kernel runs for real above")
def test_kernel_compiles_ahead_of_time_for_a100_h100_beyond_the_report(tmp_path):
    """Triton's own compiler builds the launched configuration and the reduction here, on a
    CPU, for what the compile report leaves out (float16 on sm_80, a group of 8, the other
    branches): the tiles fit the target's shared memory, nothing spills, and the split kernel
    uses tensor cores and a cp.async pipeline on sm_80 and sm_90a."""
    env = compiled_env(TRITON_CACHE_DIR=str(tmp_path), TRITON_DEFAULT_FP_FUSION="1")
    r = subprocess.run([sys.executable, "-c", AOT_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode and "No module named 'triton.backends" in r.stderr:
        pytest.skip(f"this triton has no ahead-of-time compile API: {r.stderr[-200:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("compiled") == 6, r.stdout
    print(r.stdout)


def test_compile_specs_refuse_what_a_target_cannot_do():
    with pytest.raises(TypeError, match="compute capability 8.0"):
        dt.compile_specs("sm_75", "bfloat16")
    with pytest.raises(ValueError, match="arch must be one of"):
        dt.compile_specs("sm_70")
    if not CUDA:  # interpreted kernels have nothing to compile
        with pytest.raises(RuntimeError, match="without TRITON_INTERPRET=1"):
            dt.compile_specs("sm_80")


# ---------------------------------------------------------------- launch limits, host syncs
class _Launches:
    """Stands in for a kernel: records each launch's grid and keyword arguments, runs nothing."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kw: self.launches.append((grid, kw))


def test_batch_times_kv_heads_is_on_the_grid_x_axis(monkeypatch):
    # B * H_kv = 70,000: CUDA's y and z axes stop at 65,535, x takes 2**31 - 1
    split, reduce = _Launches(), _Launches()
    monkeypatch.setattr(dt, "_split_kernel", split)
    monkeypatch.setattr(dt, "_reduce_kernel", reduce)
    q = torch.zeros(2, 35_000, 1, 16, device=DEVICE)  # no launch: the kernels are stand-ins
    dt.split_kv_decode(q, q, q, num_splits=3)
    (grid, _), = split.launches
    assert grid == (70_000, 3, 1)
    (rgrid, _), = reduce.launches
    assert len(rgrid) == 1 and rgrid[0] == 70_000


class _NoSync(OnCuda):
    """conftest's ``OnCuda`` (a CPU tensor that claims GPU 0) that also fails on anything that
    reads a value back to the host (what would be a device synchronisation on a GPU)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in {"item", "tolist", "__int__", "__float__", "__bool__", "__index__", "cpu", "numpy"}:
            raise AssertionError(f"host sync: Tensor.{name}")
        kwargs = dict(kwargs or {})
        if name == "to":  # it says it is on GPU 0 already: stay on the CPU
            kwargs.pop("device", None)
        return super().__torch_function__(func, types, args, kwargs)


def test_the_launcher_reads_nothing_back_from_the_gpu_and_fills_no_buffer(monkeypatch):
    # CUDA-graph capturable: no .item()/int() on a device tensor (seqlens included), and no
    # memset kernels (torch.zeros / torch.full) for buffers the kernels write completely
    split, reduce = _Launches(), _Launches()
    monkeypatch.setattr(dt, "_split_kernel", split)
    monkeypatch.setattr(dt, "_reduce_kernel", reduce)
    monkeypatch.setattr(dt, "_BUILT_INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: type("P", (), {"multi_processor_count": 132}))
    fills = []
    for name in ("zeros", "full", "zeros_like", "full_like"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, _r=real, _n=name, **kw: fills.append(_n) or _r(*a, **kw))
    for name in ("zero_", "fill_"):  # a memset in place, on what torch.empty gave
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _r=real, _n=name, **kw: fills.append(_n)
                            or _r(self, *a, **kw))
    # the stand-in tensors live on the CPU: let the launcher's allocations land there too
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: real_empty(*a, **{**kw, "device": "cpu"}))
    q, k, v = (torch.randn(2, 4, 1, 16).as_subclass(_NoSync), torch.randn(2, 2, 40, 16).as_subclass(_NoSync),
               torch.randn(2, 2, 40, 16).as_subclass(_NoSync))
    seqlens = torch.tensor([40, 7], dtype=torch.int32).as_subclass(_NoSync)
    with pytest.raises(AssertionError, match="host sync"):
        int(seqlens.max())  # the stand-in does catch a read-back
    dt.split_kv_decode(q, k, v, seqlens=seqlens, causal="bottom_right", enable_gqa=True, return_lse=True)
    assert len(split.launches) == 1 and len(reduce.launches) == 1
    assert split.launches[0][1]["INPUT_PRECISION"] == "tf32" and split.launches[0][1]["HAS_SEQLENS"]
    assert fills == []


def test_float32_precision_follows_the_one_rule():
    assert dt.pick_config((9, 0), 128, "ieee") == dt.DECODE_CONFIGS[75][0]
    assert dt.pick_config((9, 0), 128, "tf32") == dt.DECODE_CONFIGS[90][0]
    q, k, v = _inputs(1, 2, 1, 1, 20, 16, 16, torch.float32)
    exact = dt.split_kv_decode(q, k, v, enable_gqa=True, precision="ieee")
    gold, naive = reference_pair(q, k, v, enable_gqa=True, precision=kernel_precision(torch.float32, "ieee"))
    assert_close_to_reference(exact, gold, naive)
    raises_with(ValueError, ["precision must be"], dt.split_kv_decode, q, k, v, enable_gqa=True, precision="x")


def test_seqlens_out_of_range_are_clamped_by_the_kernel():
    # on a GPU the front door does not read seqlens (a host sync), the kernel clamps them into
    # 0 .. L_k; on the CPU the front door refuses them, so the launcher is called directly
    q, k, v = _inputs(2, 2, 2, 1, 24, 16, 16, torch.float16)
    scale = 16 ** -0.5
    run = ((lambda lens: dt.split_kv_decode(q, k, v, seqlens=lens)) if CUDA else
           (lambda lens: dt.decode(q, k, v, None, scale, 1, seqlens=lens)))
    over = run(torch.tensor([30, -3], device=DEVICE))
    clamped = run(torch.tensor([24, 0], device=DEVICE))
    assert torch.equal(over, clamped) and (clamped[1] == 0).all() and (clamped[0] != 0).any()


def test_an_empty_cache_or_batch_gives_zeros_and_lse_minus_infinity(monkeypatch):
    garbage = GarbageTorch()  # torch.empty is NaN: what the launcher does not fill shows
    monkeypatch.setattr(dt, "torch", garbage)
    q, k, v = _inputs(2, 4, 2, 1, 8, 16, 16, torch.float32)
    for q_, k_, v_ in ((q, k[:, :, :0], v[:, :, :0]), (q[:0], k[:0], v[:0])):
        out, lse = dt.split_kv_decode(q_, k_, v_, enable_gqa=True, return_lse=True)
        assert out.shape == q_.shape and (out == 0).all() and torch.isneginf(lse).all()


def test_keys_the_last_query_cannot_see_are_never_loaded():
    # top-left causal, 2 queries: keys from 2 on are masked for every row, so NaN there
    # (a cache's unwritten tail) must not reach the output
    q, k, v = _inputs(1, 2, 1, 2, 40, 16, 16, torch.float32, seed=6)
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, :, 20:], v_nan[:, :, 20:] = float("nan"), float("nan")
    for splits in (1, 3):
        out = dt.split_kv_decode(q, k_nan, v_nan, num_splits=splits, causal=True, enable_gqa=True)
        gold, naive = reference_pair(q, k, v, causal=True, enable_gqa=True, precision=kernel_precision(q.dtype))
        assert_close_to_reference(out, gold, naive, what=f"{splits} splits")
