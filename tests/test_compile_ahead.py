"""An autotuner's first call compiles its configurations in parallel, ahead of its timing loop
(attn_edu.kernels._compile_ahead), and the loop then compiles nothing.

No GPU here: in a child process without TRITON_INTERPRET, Triton compiles for sm_90a through
the package's stand-in driver (``gpu_target_stand_in``), each launch is made a compile only
and the autotuner's timing a stub (``launches_compile_only``). What is real: the launchers' own calls (the forward, a
FlashAttention-3 variant with host TMA descriptors, the backward's two kernels), their
pruning, the keys Triton files each compiled kernel under, and the autotuner's own loop.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

from attn_edu.kernels import _compile_ahead  # noqa: E402
from venvs import compiled_env  # noqa: E402

SCRIPT = r"""
import json, sys, torch
from attn_edu.kernels import _autotuned, _compile_ahead as ca
from attn_edu.kernels.flash_triton import launch

# two configurations per kernel, from each one's space: a short test
launch.forward_configs = lambda *a, **k: [(64, 32, 4, 2), (64, 64, 4, 3)]
launch.backward_configs = lambda *a, **k: [(32, 64, 8, 2), (32, 64, 8, 3)]
launch._device_shared_memory = lambda: 232448
_variant_configs = launch.variant_configs        # the ladder past host_tma: two 64-row tiles each
launch.variant_configs = lambda variant, *a, **k: (
    _variant_configs(variant, *a, **k) if variant == "host_tma" else [(64, 64, 4, 2), (64, 128, 4, 2)])
compiled = {}                                       # kernel name -> compiles
import threading, triton.compiler
lock, compile_ = threading.Lock(), triton.compiler.compile

in_loop, inside = {}, []                            # compiles within an Autotuner.run
def counted(src, *a, **k):                          # what each JITFunction compiles with
    with lock:
        compiled[src.name] = compiled.get(src.name, 0) + 1
        if inside:
            in_loop[src.name] = in_loop.get(src.name, 0) + 1
    return compile_(src, *a, **k)
triton.compiler.compile = counted

from triton.runtime.autotuner import Autotuner
tuner_runs = []                                     # each Autotuner.run, by kernel name
_tuner_run = Autotuner.run
def tuner_run(self, *a, **k):
    tuner_runs.append(self.base_fn.__name__)
    inside.append(1)
    try:
        return _tuner_run(self, *a, **k)
    finally:
        inside.pop()
Autotuner.run = tuner_run

# every variant's autotuner can be made (Triton 3.9 refuses a key that is not a kernel argument)
ladder = {v: launch._fa3_tuner(v).keys for v in launch.FORWARD_VARIANTS[1:]}
tuners = [launch._attn_fwd, launch._fa3_tuner("host_tma"), launch._attn_bwd_dkdv, launch._attn_bwd_dq]
from attn_edu.kernels.flash_triton import kernels
submitted = []
real = ca.compile_ahead
_autotuned.compile_ahead = lambda *calls: submitted.append(real(*calls)) or submitted[-1]

ladder_tuners = [launch._fa3_tuner(v) for v in ("wide_tiles", "warp_specialized", "persistent")]
with ca.gpu_target_stand_in((9, 0)), ca.launches_compile_only(*tuners, *ladder_tuners, kernels.attn_bwd_preprocess):
    q, k, v = (torch.randn(1, 2, 256, 64).to(torch.bfloat16) for _ in range(3))
    steps = []
    for name, call in (("fa2", lambda: launch.forward(q, k, v, None, 0.125)),
                       ("host_tma", lambda: launch.forward(q, k, v, None, 0.125, use_tma=True, variant="host_tma")),
                       ("fa2 again", lambda: launch.forward(q, k, v, None, 0.125)),
                       ("host_tma again", lambda: launch.forward(q, k, v, None, 0.125, use_tma=True,
                                                                 variant="host_tma")),
                       *((variant, lambda variant=variant: launch.forward(q, k, v, "top_left", 0.125, use_tma=True,
                                                                          variant=variant))
                         for variant in ("wide_tiles", "warp_specialized", "persistent"))):
        before = dict(compiled)
        call()
        steps.append({"step": name, "submitted": submitted[-1] if submitted else None, "tuner_runs": tuner_runs[:],
                      "compiled": {n: c - before.get(n, 0) for n, c in compiled.items() if c != before.get(n, 0)},
                      "in_loop": dict(in_loop)})
        submitted.clear(), tuner_runs.clear(), in_loop.clear()
    persistent_again = dict(compiled)
    launch.forward(q, k, v, "top_left", 0.125, use_tma=True, variant="persistent")
    steps.append({"step": "persistent again", "tuner_runs": tuner_runs[:],
                  "compiled": {n: c - persistent_again.get(n, 0) for n, c in compiled.items()
                               if c != persistent_again.get(n, 0)}})
    tuner_runs.clear()
    out, lse = torch.zeros_like(q), torch.zeros(1, 2, 256)
    for name in ("backward", "backward again"):
        before = dict(compiled)
        launch.backward(torch.randn_like(q), q, k, v, out, lse, None, 0.125)
        steps.append({"step": name, "submitted": submitted[-1] if submitted else None, "tuner_runs": tuner_runs[:],
                      "compiled": {n: c - before.get(n, 0) for n, c in compiled.items() if c != before.get(n, 0)},
                      "in_loop": dict(in_loop)})
        submitted.clear(), tuner_runs.clear(), in_loop.clear()
    # the autotuner's key buckets: B * H and the lengths rounded up to powers of two, so a
    # second shape in the same buckets is not tuned again, and its choice can be read back
    buckets = []
    for shape in ((1, 6, 100, 64), (1, 7, 120, 64)):   # B * H 6 and 7 -> 8; L 100 and 120 -> 128
        x = torch.randn(shape).to(torch.bfloat16)
        launch.forward(x, x, x, None, 0.125)
        key = launch.launch_key(x, x, x, False, launch.dot_precision(x, None), False)  # chosen_forward_config's
        buckets.append({"tuner_runs": tuner_runs[:], "chosen": launch.tuned_forward_config(key) is not None})
        tuner_runs.clear()
    tma = launch._fa3_tuner("host_tma")
    shapes = sorted({s for key in tma.fn.device_caches[0][0] for s in ("[1, 1, 64, 64]", "[1, 1, 32, 64]") if s in key})
print(json.dumps({"steps": steps, "tma_block_shapes": shapes, "ladder_keys": ladder, "buckets": buckets,
                  "chosen": [list(t.best_config.kwargs.values()) for t in tuners]}))
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    env = compiled_env(TRITON_CACHE_DIR=str(tmp_path_factory.mktemp("triton-cache")), ATTN_EDU_COMPILE_WORKERS="2",
                       TRITON_DEFAULT_FP_FUSION="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _step(run, name):
    return next(s for s in run["steps"] if s["step"] == name)


def test_the_forwards_first_call_compiles_ahead_and_its_autotuner_then_compiles_nothing(run):
    # two configurations submitted, two compiled: the autotuner's loop (which times each, then
    # launches the best) found every one compiled under the key it launches with
    fa2 = _step(run, "fa2")
    assert fa2["submitted"] == 2 and fa2["compiled"] == {"attn_fwd": 2}, fa2
    # ... none of them inside the autotuner's run (its loop would compile each in turn)
    assert fa2["tuner_runs"] and fa2["in_loop"] == {}, fa2
    # host descriptors: each configuration's pre-hook gave its descriptors their block shapes
    # before its compile (the shapes are in the kernel's signature); otherwise the loop would
    # have compiled again under the shapes it launches with
    tma = _step(run, "host_tma")
    assert tma["submitted"] == 2 and tma["compiled"] == {"attn_fwd_fa3": 2} and tma["in_loop"] == {}, tma
    assert run["tma_block_shapes"] == ["[1, 1, 32, 64]", "[1, 1, 64, 64]"], run["tma_block_shapes"]
    # a key already tuned: nothing submitted, nothing compiled
    again = _step(run, "fa2 again")
    assert again["submitted"] is None and again["compiled"] == {}, again


def test_every_ladder_variants_first_call_compiles_ahead(run):
    # wider tiles, warp specialization (setmaxnreg, in the compile report), the persistent
    # causal grid: each variant's own autotuner, its configurations compiled ahead, none in its loop
    for variant in ("wide_tiles", "warp_specialized", "persistent"):
        step = _step(run, variant)
        assert step["submitted"] == 2 and step["compiled"] == {"attn_fwd_fa3": 2} and step["in_loop"] == {}, step


def test_every_variants_autotuner_keys_on_its_own_arguments(run):
    # host descriptors or pointer loads, persistent or not: each its own tuning
    assert set(run["ladder_keys"]) == {"host_tma", "wide_tiles", "warp_specialized", "persistent"}
    for variant, key in run["ladder_keys"].items():
        assert "HOST_TMA" in key and "PERSISTENT" in key and "USE_TMA" not in key, (variant, key)


def test_the_backwards_two_kernels_compile_ahead_in_one_pool(run):
    bwd = _step(run, "backward")
    assert bwd["submitted"] == 4, bwd
    # the preprocess kernel is launched directly (one configuration), once
    assert bwd["compiled"] == {"attn_bwd_dkdv": 2, "attn_bwd_dq": 2, "attn_bwd_preprocess": 1}, bwd
    assert bwd["in_loop"] == {}, bwd  # all four ahead, none in the autotuners' loops
    # the same key again: its tuning is known (the plan's key with the device), nothing is submitted
    again = _step(run, "backward again")
    assert again["submitted"] is None and again["compiled"] == {}, again


def test_a_tuned_key_launches_the_autotuners_choice_without_the_autotuner(run):
    # a key's first call goes through the autotuner (it times the configurations); a later
    # call launches the chosen configuration directly (attn_edu.kernels._autotuned): no
    # Autotuner.run, and nothing compiled, so the kernel launched has the very
    # specialization and options the autotuner launched -- for host descriptors too, whose
    # block shapes (set by the configuration's pre-hook) are part of the kernel's signature
    assert _step(run, "fa2")["tuner_runs"] == ["attn_fwd"], _step(run, "fa2")
    assert _step(run, "host_tma")["tuner_runs"] == ["attn_fwd_fa3"], _step(run, "host_tma")
    assert _step(run, "backward")["tuner_runs"] == ["attn_bwd_dkdv", "attn_bwd_dq"], _step(run, "backward")
    for name in ("fa2 again", "host_tma again", "persistent again", "backward again"):
        step = _step(run, name)
        assert step["tuner_runs"] == [] and step["compiled"] == {}, step


def test_a_shape_in_the_same_buckets_is_not_tuned_again(run):
    first, second = run["buckets"]
    assert first["tuner_runs"] == ["attn_fwd"] and second["tuner_runs"] == [], run["buckets"]
    assert first["chosen"] and second["chosen"]  # what chosen_forward_config reads, found


def test_the_chosen_configurations_are_the_autotuners_own(run):
    # the stubbed timing ties every configuration: the autotuner keeps its first, as it would
    assert run["chosen"][0][:2] == [64, 32], run["chosen"]


def test_compile_workers_reads_its_variable(monkeypatch):
    monkeypatch.setenv(_compile_ahead.COMPILE_WORKERS_ENV, "3")
    assert _compile_ahead.compile_workers() == 3
    monkeypatch.setenv(_compile_ahead.COMPILE_WORKERS_ENV, "1")
    assert _compile_ahead.compile_workers() == 1
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv(_compile_ahead.COMPILE_WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=f"{_compile_ahead.COMPILE_WORKERS_ENV} must be an int >= 1; got '{bad}'"):
            _compile_ahead.compile_workers()
    monkeypatch.delenv(_compile_ahead.COMPILE_WORKERS_ENV)
    # unset: one per CPU this process may run on, at most COMPILE_WORKERS_MAX
    for cpus, want in ((1, 1), (3, 3), (64, _compile_ahead.COMPILE_WORKERS_MAX)):
        monkeypatch.setattr(_compile_ahead.os, "sched_getaffinity", lambda pid, n=cpus: set(range(n)))
        assert _compile_ahead.compile_workers() == want, cpus
    assert _compile_ahead.COMPILE_WORKERS_MAX == 16


def test_one_compiling_thread_leaves_the_autotuner_to_compile_in_its_loop(monkeypatch):
    """With one thread there is nothing to gain: ``compile_ahead`` prunes nothing and submits
    nothing, for a call it would compile ahead with two (a stand-in autotuner records what
    it is asked; no kernel is compiled)."""
    from triton.runtime.autotuner import Autotuner, Config

    class Recorder:
        def __init__(self):
            self.warmups = []

        def warmup(self, *args, **kwargs):
            self.warmups.append(kwargs["BLOCK"])

    def tuner():
        t = object.__new__(Autotuner)   # an Autotuner's state, without a kernel behind it
        t.configs = [Config({"BLOCK": 32}), Config({"BLOCK": 64})]
        t.arg_names, t.keys, t.cache, t.nargs, t.fn = ["x", "n"], ["n"], {}, None, Recorder()
        t.pruned = 0

        def prune_configs(kwargs):
            t.pruned += 1
            return t.configs
        t.prune_configs = prune_configs
        return t

    monkeypatch.setenv(_compile_ahead.COMPILE_WORKERS_ENV, "2")
    two = tuner()
    assert _compile_ahead.compile_ahead((two, (None, 128), {})) == 2
    assert two.pruned == 1 and sorted(two.fn.warmups) == [32, 64]
    two.cache[(128,)] = two.configs[0]        # this key tuned: nothing left to compile
    assert _compile_ahead.compile_ahead((two, (None, 128), {})) == 0 and two.pruned == 1
    monkeypatch.setenv(_compile_ahead.COMPILE_WORKERS_ENV, "1")
    one = tuner()
    assert _compile_ahead.compile_ahead((one, (None, 128), {})) == 0
    assert one.pruned == 0 and one.fn.warmups == []


def test_the_compile_benchmark_refuses_bad_sizes_and_prints_its_ratio():
    from attn_edu.bench import compile_time

    for bad in ({"d": 0}, {"d": True}, {"rounds": 0}, {"rounds": 1.5}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be a positive int"):
            compile_time.compile_ahead_time(**bad)
    text = compile_time.format_compile_ahead({"d": 64, "configs": 12, "workers": 4, "cpus": 8,
                                              "serial_s": [20.0, 24.0, 22.0], "ahead_s": [6.0, 5.0, 5.5]})
    assert "12 configurations" in text and "22.0 s" in text and "5.5 s" in text
    assert "serial / ahead 4.00" in text and "8 CPUs" in text and "3 alternating rounds" in text
