"""A reader's first autotuned call, its compiles in series and ahead in parallel: ``--compile-ahead``.

The first call of the Triton forward for a new shape makes the autotuner compile every
configuration of :func:`attn_edu.kernels.flash_triton.forward_configs` (12 on an H100 at
d = 64) before it times them. Triton compiles them one after another inside its timing
loop; the package compiles them first, in parallel threads
(``attn_edu.kernels._compile_ahead``). Compiling is CPU work, so it can be measured here,
without a GPU: two child processes (each with an empty Triton cache, without
``TRITON_INTERPRET``) run the launcher's first call for an H100 (sm_90a, through
``gpu_target_stand_in``), one with ``ATTN_EDU_COMPILE_WORKERS=1`` (Triton's own serial loop),
one with the default threads; the autotuner's timing is stubbed (``launches_compile_only``),
so the seconds are the compiles'. They alternate ``rounds`` times; each prints the median.
CPU seconds on this machine, with its core count: a GPU machine's host compiles at its own
speed.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict

__all__ = ["compile_ahead_time", "format_compile_ahead"]

_CHILD = r"""
import json, sys, time, torch
from attn_edu.kernels import _compile_ahead as ca
from attn_edu.kernels.flash_triton import launch
d, cap = int(sys.argv[1]), (9, 0)
configs = launch.forward_configs(cap, d, None, 2)
with ca.gpu_target_stand_in(cap), ca.launches_compile_only(launch._attn_fwd):
    q, k, v = (torch.zeros(4, 16, 1024, d, dtype=torch.bfloat16) for _ in range(3))
    start = time.perf_counter()
    launch.forward(q, k, v, None, d ** -0.5)
    seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "configs": len(configs), "workers": ca.compile_workers()}))
"""


def _child(d: int, workers: str) -> Dict[str, Any]:
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory(prefix="attn_edu_compile_") as cache:
        env.update(TRITON_CACHE_DIR=cache, TRITON_DEFAULT_FP_FUSION=env.get("TRITON_DEFAULT_FP_FUSION", "1"),
                   PYTHONPATH=os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p))
        if workers:
            env["ATTN_EDU_COMPILE_WORKERS"] = workers
        else:
            env.pop("ATTN_EDU_COMPILE_WORKERS", None)
        r = subprocess.run([sys.executable, "-c", _CHILD, str(d)], env=env, capture_output=True, text=True,
                           timeout=1800)
    if r.returncode:
        raise RuntimeError(f"the compile child failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compile_ahead_time(d: int = 64, rounds: int = 1) -> Dict[str, Any]:
    """The first call's compile seconds for an H100 (sm_90a, bfloat16, head dimension ``d``),
    serial against ahead, alternating ``rounds`` times: ``{"serial_s": [...], "ahead_s": [...],
    "configs", "workers", "cpus", "d"}``."""
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be a positive int; got {d!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive int; got {rounds!r}")
    serial, ahead, info = [], [], {}
    for _ in range(rounds):
        serial.append(_child(d, "1")["seconds"])
        info = _child(d, "")
        ahead.append(info["seconds"])
    return {"d": d, "configs": info["configs"], "workers": info["workers"], "cpus": os.cpu_count(),
            "serial_s": serial, "ahead_s": ahead}


def format_compile_ahead(result: Dict[str, Any]) -> str:
    """The result as three lines: serial, ahead and their ratio, medians."""
    s, a = statistics.median(result["serial_s"]), statistics.median(result["ahead_s"])
    return "\n".join([
        f"first call of the Triton forward for an H100 (sm_90a), bfloat16, d = {result['d']}: "
        f"{result['configs']} configurations compiled",
        f"  {'in series (the autotuner loop)':32s} {s:6.1f} s",
        f"  {'ahead, ' + str(result['workers']) + ' threads':32s} {a:6.1f} s   (serial / ahead {s / a:.2f})",
        f"(CPU seconds of compiling on this machine, {result['cpus']} CPUs, median of "
        f"{len(result['serial_s'])} alternating rounds; the autotuner's timing stubbed, no GPU)"])
