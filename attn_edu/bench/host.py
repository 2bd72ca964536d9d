"""The package's own Python time per Triton call, the launch stubbed out: ``--host-overhead``.

A kernel call spends time on the host before the GPU sees anything: the front door's
checks, then what the launcher decides from shapes, dtypes and the GPU (the precision,
the configuration, TMA, the split count, the kernel's integer arguments), then Triton's
launch itself. This benchmark times the first two, the part this package owns, on the
CPU: in a child process with ``TRITON_INTERPRET=1`` (so CPU tensors pass the checks), every
``@triton.jit`` kernel the launchers call is replaced by a no-op, and each call is timed

* ``before``: with every launch decision computed again on each call (the functions of
  ``attn_edu.kernels._plans.PLAN_CACHES`` replaced by their uncached originals,
  :func:`~attn_edu.kernels._plans.uncached_plans`; the front door's input check among
  them, which then checks each call in full), as the launchers did before the caches;
* ``after``: as the package runs, each decision cached per key.

The two alternate round by round in one process (torch on one thread), so a busy machine
slows both alike; a row gives the best round's mean microseconds per call (the least
disturbed by other work), and ``before / after``.
CPU microseconds of Python, not a GPU number: on a GPU the call adds Triton's own launch
(its argument binding and the driver call), which this does not measure. Under the
interpreter the CPU path differs from the GPU path where the launchers ask the GPU (compute
capability, SM count): those calls are skipped here.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

__all__ = ["host_overhead", "format_host_overhead", "HOST_CASES", "dispatch_overhead", "format_dispatch_overhead",
           "DISPATCH_CASES"]

#: The calls timed, with their shapes (CPU tensors, float16 but the block-sparse one, float32).
HOST_CASES = {
    "flash forward": "triton_attention_forward, B=4 H=16 L=1024 d=64 causal",
    "flash backward": "the autograd backward of triton_attention, B=1 H=4 L=256 d=64 causal",
    "split-KV decode": "split_kv_decode, B=1 H_q=32 H_kv=8 L_k=65536 d=128 (128 split candidates)",
    "decode, growing": "the same call as a decode loop makes it: L_k = 65536, 65537, ... one more key each call "
                       "(views of one cache)",
    "block-sparse": "block_sparse_attention with a TilePlan, B=1 H=16 L=4096 d=64, a causal mask's 128 x 64 tiles",
    "flash front door": "check_triton_inputs alone (every call checked; inputs whose facts passed before "
                        "answered from a table of those that passed)",
}


#: The launches timed with Triton's own dispatch (:func:`dispatch_overhead`), compiled for an
#: H100 (sm_90a), CPU tensors in bfloat16, below the front door; all but the decode step autotuned.
DISPATCH_CASES = {
    "flash forward": "launch.forward, the FlashAttention-2 kernel, B=4 H=16 L=1024 d=64 causal",
    "FA3 persistent": "launch.forward, variant='persistent': host TMA descriptors made per call, the persistent "
                      "grid, warp specialization, same shapes",
    "flash backward": "launch.backward, the two autotuned kernels (and the preprocess one), B=1 H=4 L=256 d=64 causal",
    "split-KV decode": "decode_triton.decode, B=1 H_q=32 H_kv=8 L_k=16384 d=128: its two kernels, not autotuned",
}
_AUTOTUNED = ("flash forward", "FA3 persistent", "flash backward")  # the first table's rows


class _NoLaunch:
    """Stands in for a ``@triton.jit`` kernel: ``kernel[grid](*args, **meta)`` does nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def _child(repeat: int, rounds: int) -> Dict[str, Any]:
    """Runs in the child process (``TRITON_INTERPRET=1`` set before triton is imported)."""
    import torch

    torch.set_num_threads(1)  # one thread: a fill of a few KB spun up to 10 ms of threads on a shared CPU
    from ..kernels import _plans, block_sparse_triton as bs, decode_triton as dt, flash_triton as ft
    from ..kernels.flash_triton import kernels as fk
    from ..masks import plan_tiles

    for name in ("attn_fwd", "attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq"):
        setattr(fk, name, _NoLaunch())
    for module in (dt, bs):   # each kernel module names the kernels it launches
        for name in module.LAUNCHED:
            setattr(module, name, _NoLaunch())

    h = torch.float16
    q = torch.randn(4, 16, 1024, 64, dtype=h)
    qb = torch.randn(1, 4, 256, 64, dtype=h)
    qg = qb.clone().requires_grad_()
    out = ft.triton_attention(qg, qb, qb, causal=True)
    g = torch.ones_like(out)
    qd, kd = torch.randn(1, 32, 1, 128, dtype=h), torch.randn(1, 8, 65536, 128, dtype=h)
    kv_cache = torch.randn(1, 8, 65536 + 2 * rounds * (repeat + 1), 128, dtype=h)
    length = itertools.count(65536)  # each call, in every round, one key longer
    qs = torch.randn(1, 16, 4096, 64)
    plan = plan_tiles(torch.ones(4096, 4096, dtype=torch.bool).tril(), 128, 64)

    def decode_step():
        kv = kv_cache[:, :, :next(length)]
        return dt.split_kv_decode(qd, kv, kv, enable_gqa=True)

    calls = {
        "flash forward": lambda: ft.triton_attention_forward(q, q, q, causal=True),
        "flash backward": lambda: torch.autograd.grad(out, (qg,), g, retain_graph=True),
        "split-KV decode": lambda: dt.split_kv_decode(qd, kd, kd, enable_gqa=True),
        "decode, growing": decode_step,
        "block-sparse": lambda: bs.block_sparse_attention(qs, qs, qs, plan),
        "flash front door": lambda: ft.check_triton_inputs(q, q, q, True),
    }

    times: Dict[str, Dict[str, List[float]]] = {name: {"before": [], "after": []} for name in calls}
    for cache in _plans.PLAN_CACHES.values():
        cache.cache_clear()
    for _ in range(rounds):
        for name, fn in calls.items():
            with _plans.uncached_plans():
                times[name]["before"].append(_per_call(fn, repeat))
            times[name]["after"].append(_per_call(fn, repeat))
    rows = _rows(times, HOST_CASES)
    hits = {qualified.rpartition(".")[2]: cache.cache_info().hits
            for qualified, cache in _plans.PLAN_CACHES.items()}
    return {"rows": rows, "cache_hits": hits, "repeat": repeat, "rounds": rounds}


def host_overhead(repeat: int = 200, rounds: int = 7, timeout: float = 900.0) -> Dict[str, Any]:
    """Time the package's Python per call, launches stubbed, before and after the caches.

    Runs :data:`HOST_CASES` in a child process with ``TRITON_INTERPRET=1`` (``repeat`` calls
    per timing, ``rounds`` alternating rounds) and returns ``{"rows": [{"call", "what",
    "before_us", "after_us", "ratio"}, ...], "cache_hits": {cache: hits}, ...}``: microseconds
    of CPU per call, not GPU numbers (the module docstring says what is left out).
    """
    code = (f"import json; from attn_edu.bench.host import _child; "
            f"print('HOST_OVERHEAD ' + json.dumps(_child({int(repeat)}, {int(rounds)})))")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    line = next((x for x in done.stdout.splitlines() if x.startswith("HOST_OVERHEAD ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"the host-overhead child failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(line[len("HOST_OVERHEAD "):])


class _Forgets(dict):
    """A table of choices that never holds one: every call asks the autotuner (``before``)."""

    def get(self, key, default=None):
        return default


def _dispatch_child(repeat: int, rounds: int) -> Dict[str, Any]:
    """Runs in the child process (no ``TRITON_INTERPRET``): :data:`DISPATCH_CASES` compiled
    for sm_90a through the stand-in driver, each compiled kernel's launcher a no-op."""
    import torch

    torch.set_num_threads(1)
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

    from ..kernels import _autotuned, _compile_ahead as ca, _direct, decode_triton as dt
    from ..kernels.flash_triton import kernels as fk, launch

    # two configurations per autotuner (what a call costs once its key is tuned does not
    # depend on the size of the space; compiling the space would)
    launch.forward_configs = lambda *a, **k: [(64, 32, 4, 2), (64, 64, 4, 3)]
    launch.backward_configs = lambda *a, **k: [(32, 64, 4, 2), (32, 64, 4, 3)]
    launch.variant_configs = lambda *a, **k: [(64, 64, 4, 2), (128, 64, 8, 2)]
    b = torch.bfloat16
    q = torch.randn(4, 16, 1024, 64).to(b)
    qb = torch.randn(1, 4, 256, 64).to(b)
    out, lse = torch.zeros_like(qb), torch.zeros(1, 4, 256)
    qd, kd = torch.randn(1, 32, 1, 128).to(b), torch.randn(1, 8, 16384, 128).to(b)
    calls = {
        "flash forward": lambda: launch.forward(q, q, q, "top_left", 0.125),
        "FA3 persistent": lambda: launch.forward(q, q, q, "top_left", 0.125, use_tma=True, variant="persistent"),
        "flash backward": lambda: launch.backward(qb, qb, qb, qb, out, lse, "top_left", 0.125),
        "split-KV decode": lambda: dt.decode(qd, kd, kd, None, 128 ** -0.5, 4),
    }
    tuners = launch.autotuned_kernels(["persistent"])
    plain = [fk.attn_bwd_preprocess, *(getattr(dt, name) for name in dt.LAUNCHED)]  # launched without a tuner
    jits = [t.fn for t in tuners] + plain  # every JITFunction the calls launch
    with ca.gpu_target_stand_in((9, 0)):
        with ca.launches_compile_only(*tuners, *plain):
            for fn in calls.values():  # each key tuned (the timing stubbed) and compiled
                fn()
        # no GPU to load a kernel onto or to launch it on: loading and the C launcher do nothing
        CompiledKernel._init_handles, CompiledKernel.run = _no_op, property(lambda self: _no_op)
        times: Dict[str, Dict[str, List[float]]] = {name: {"before": [], "after": []} for name in _AUTOTUNED}
        split: Dict[str, Dict[str, List[float]]] = {name: {"before": [], "after": []} for name in calls}
        direct = {name: {"before": split[name]["before"], "after": []} for name in calls}
        chosen, ahead, launch_direct = _autotuned.CHOSEN, _autotuned.compile_ahead, _direct.launch
        launches, counts = [], {}  # Triton's dispatches skipped, one per kernel launched; per call

        def count(*args: Any, **kwargs: Any) -> None:
            launches.append(1)

        for _ in range(rounds):
            _direct.launch = _via_triton  # the autotuner's table: Triton's dispatch on every launch
            for name in _AUTOTUNED:
                # before: the autotuner on every call, as the launchers called it (each key's
                # configurations compiled ahead once, not asked again)
                _autotuned.CHOSEN, _autotuned.compile_ahead = _Forgets(), _no_op
                times[name]["before"].append(_per_call(calls[name], repeat))
                _autotuned.CHOSEN, _autotuned.compile_ahead = chosen, ahead
                times[name]["after"].append(_per_call(calls[name], repeat))
            for name, fn in calls.items():  # Triton's dispatch, the direct launch, the package alone
                _direct.launch = _via_triton
                split[name]["before"].append(_per_call(fn, repeat))
                _direct.launch = launch_direct
                direct[name]["after"].append(_per_call(fn, repeat))
                _direct.launch = count
                for jit in jits:
                    jit.run = count
                launches.clear()
                split[name]["after"].append(_per_call(fn, repeat))
                for jit in jits:
                    del jit.run
                counts[name] = len(launches) / (repeat + 1)
        _direct.launch = launch_direct
        through = {}  # per call as the package runs: the launches that still took Triton's dispatch
        run = JITFunction.run  # counted in the class (a kernel's own run is a stand-in's, see _direct)
        JITFunction.run = lambda self, *args, **kwargs: launches.append(1) or run(self, *args, **kwargs)
        try:
            for name, fn in calls.items():
                fn()
                launches.clear()
                fn()
                through[name] = len(launches)
        finally:
            JITFunction.run = run
    rows, direct_rows = _rows(split, DISPATCH_CASES), _rows(direct, DISPATCH_CASES)
    for row, direct_row in zip(rows, direct_rows):
        row["launches"], direct_row["through_triton"] = counts[row["call"]], through[row["call"]]
    return {"rows": _rows(times, DISPATCH_CASES), "direct": direct_rows, "split": rows,
            "repeat": repeat, "rounds": rounds}


def _no_op(*args: Any) -> None:
    return None


def _via_triton(kernel: Any, grid: Any, *args: Any, **kwargs: Any) -> None:
    """``attn_edu.kernels._direct.launch`` as it was: Triton's dispatch on every launch."""
    kernel[grid](*args, **kwargs)


def _per_call(fn, repeat: int) -> float:
    """Mean microseconds per call of ``repeat`` calls, after one untimed."""
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat * 1e6


def _rows(times: Dict[str, Dict[str, List[float]]], cases: Dict[str, str]) -> List[Dict[str, Any]]:
    """Each call's best round before and after, and their ratio."""
    rows = []
    for name, t in times.items():
        before, after = min(t["before"]), min(t["after"])
        rows.append({"call": name, "what": cases[name], "before_us": before, "after_us": after,
                     "ratio": before / after})
    return rows


def dispatch_overhead(repeat: int = 200, rounds: int = 7, timeout: float = 900.0) -> Dict[str, Any]:
    """Time the launches with Triton's dispatch: the autotuned ones through the autotuner on
    every call (``before``) against the autotuner's choice launched directly (``after``,
    ``attn_edu.kernels._autotuned``); then every call of :data:`DISPATCH_CASES` with
    Triton's dispatch on every launch against the package's direct launch (a key's compiled
    kernel launched again without ``JITFunction.run``, ``attn_edu.kernels._direct``), and
    with Triton's dispatch against the package's Python alone (every launch a no-op), which
    splits a call's host time between the two.

    A child process without ``TRITON_INTERPRET`` compiles :data:`DISPATCH_CASES` for an
    H100 (sm_90a) through the package's stand-in driver and stubs each compiled kernel's C
    launcher: what is timed is the package's launcher, the autotuner and Triton's
    ``JITFunction.run`` (binding and specializing the arguments, the kernel's cache), all
    but the driver's launch (and, for host descriptors, the encoding of their tensor maps,
    which happens in it). Microseconds of this CPU, not a GPU number; returns ``{"rows":
    [{"call", "what", "before_us", "after_us", "ratio"}, ...], "direct": [the same, Triton's
    dispatch on every launch as ``before_us``, as the package runs, each launch through
    ``attn_edu.kernels._direct`` (Triton's dispatch only for a key's first launch), as
    ``after_us``, and ``through_triton``, the launches of one call that still took Triton's
    dispatch], "split": [the same, with Triton's dispatch as ``before_us``, the package
    alone as ``after_us`` and ``launches``, kernels launched per call], "repeat", "rounds"}``.
    """
    code = (f"import json; from attn_edu.bench.host import _dispatch_child; "
            f"print('DISPATCH ' + json.dumps(_dispatch_child({int(repeat)}, {int(rounds)})))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    with tempfile.TemporaryDirectory(prefix="attn_edu_dispatch_") as cache:
        env["TRITON_CACHE_DIR"] = env.get("TRITON_CACHE_DIR") or cache
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              timeout=timeout)
    line = next((x for x in done.stdout.splitlines() if x.startswith("DISPATCH ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"the dispatch child failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(line[len("DISPATCH "):])


def format_dispatch_overhead(result: Dict[str, Any]) -> str:
    """Three tables: through the autotuner against its choice launched, then each call with
    Triton's dispatch on every launch against the package's direct launch, then with
    Triton's dispatch against the package alone (microseconds per call, ratio)."""
    how = "CPU, with Triton's dispatch: compiled for sm_90a, the C launcher stubbed"
    direct = _table({**result, "rows": result["direct"]}, ("with Triton us", "direct us", "ratio"),
                    how + "; direct: a key's compiled kernel launched again without JITFunction.run")
    split = _table({**result, "rows": result["split"]}, ("with Triton us", "package us", "ratio"),
                   how + "; package: every launch a no-op")
    launches = "; ".join(f"{r['call']} {r['launches']:g}" for r in result["split"])
    through = "; ".join(f"{r['call']} {r['through_triton']}" for r in result["direct"])
    return (_table(result, ("autotuner us", "its choice us", "ratio"), how + "; Triton's dispatch on every launch")
            + "\n\n" + direct + f"\n(launches still through Triton's dispatch: {through})\n\n" + split + f"\n(kernels launched per call: {launches})")


def format_host_overhead(result: Dict[str, Any]) -> str:
    """The rows as a table: call, before and after (microseconds per call), ratio."""
    return _table(result, ("before us", "after us", "before/after"),
                  "CPU, Python only: the Triton launches stubbed, TRITON_INTERPRET=1")


def _table(result: Dict[str, Any], heads: tuple, how: str) -> str:
    """A result's rows under three column heads, each row's case, then how it was timed."""
    widths = [max(10, len(h) + 1) for h in heads]
    lines = [f"{'call':18s} " + " ".join(f"{h:>{w}s}" for h, w in zip(heads, widths))]
    for r in result["rows"]:
        lines.append(f"{r['call']:18s} {r['before_us']:{widths[0]}.1f} {r['after_us']:{widths[1]}.1f} "
                     f"{r['ratio']:{widths[2]}.2f}")
    lines += [f"  {r['call']}: {r['what']}" for r in result["rows"]]
    lines.append(f"({how}; best of {result['rounds']} alternating rounds of {result['repeat']} calls)")
    return "\n".join(lines)
