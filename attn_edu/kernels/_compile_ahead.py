"""An autotuner's first call, compiled in parallel: the configurations it is about to time,
each compiled in a thread of its own before it times them.

Triton's autotuner compiles each configuration lazily, inside its timing loop, one after
another; the compiles are CPU work (Triton's passes, LLVM, ``ptxas``) and release the GIL.
:func:`compile_ahead` submits them all at once to a thread pool through Triton's
``AsyncCompileMode`` (``triton.runtime._async_compile``, in Triton 3.6 and 3.9 alike), so
that the timing loop finds every kernel compiled. What is timed, and what is chosen, does
not change: the autotuner still times each configuration alone, one after the other.

Package-internal (the underscore): the launchers of :mod:`attn_edu.kernels.flash_triton`
call it in front of each autotuned launch.
"""
from __future__ import annotations

import contextlib
import functools
import os
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Sequence, Tuple

from ._shared import HAS_TRITON

#: At most this many compiling threads (each compile of a FlashAttention kernel holds a few
#: hundred MB while LLVM runs).
COMPILE_WORKERS_MAX = 16
#: The environment variable that sets the number of compiling threads; with one thread the
#: autotuner compiles in series, inside its loop, as Triton does by itself.
COMPILE_WORKERS_ENV = "ATTN_EDU_COMPILE_WORKERS"


def compile_workers() -> int:
    """The threads :func:`compile_ahead` compiles with: ``ATTN_EDU_COMPILE_WORKERS`` when set
    (an int >= 1), else the CPUs this process may run on, at most ``COMPILE_WORKERS_MAX``."""
    raw = os.environ.get(COMPILE_WORKERS_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{COMPILE_WORKERS_ENV} must be an int >= 1; got {raw!r}")
        return value
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(COMPILE_WORKERS_MAX, cpus))


def tuning_key(tuner: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> tuple:
    """The key ``tuner`` (a ``triton.autotune`` kernel) files this call's choice under, as
    ``Autotuner.run`` computes it: the values of its ``key`` arguments, then the dtype of
    every argument that has one."""
    named = {n: x for n, x in {**dict(zip(tuner.arg_names, args)), **kwargs}.items() if n in tuner.arg_names}
    return tuple([named[n] for n in tuner.keys if n in named]
                 + [str(x.dtype) for x in named.values() if hasattr(x, "dtype")])


def compile_ahead(*calls: Tuple[Any, Sequence[Any], Dict[str, Any]]) -> int:
    """Compile every configuration each autotuner will time for its call, in
    :func:`compile_workers` threads, before the calls time them. Each of ``calls`` is
    ``(tuner, args, kwargs)`` for a launch ``tuner[grid](*args, **kwargs)`` about to be made
    (a backward's two kernels share one pool).

    Returns how many configurations were submitted: 0 where there is nothing to gain (no
    triton or one without ``AsyncCompileMode``, one compiling thread, and per call: not an
    autotuner, this key already tuned, at most one configuration left after pruning). A
    configuration's pre-hook runs before its compile is submitted, as before its launch
    (the host TMA descriptors' block shapes are part of the kernel's signature). A compile
    that fails is left to the autotuner, which compiles it again in its loop and handles
    the failure as it always does (an out-of-resources configuration is timed as
    infinitely slow)."""
    workers = compile_workers() if HAS_TRITON else 0
    if workers < 2:
        return 0
    try:
        from triton.runtime._async_compile import AsyncCompileMode
        from triton.runtime.autotuner import Autotuner
    except ImportError:  # a Triton before AsyncCompileMode: the autotuner compiles as it always did
        return 0
    todo = []  # (tuner, args, kwargs, nargs, configs)
    for tuner, args, kwargs in calls:
        if not isinstance(tuner, Autotuner) or len(tuner.configs) < 2 or tuning_key(tuner, args, kwargs) in tuner.cache:
            continue
        nargs = dict(zip(tuner.arg_names, args))
        tuner.nargs = nargs  # what its pruning reads, as in Autotuner.run
        try:
            configs = tuner.prune_configs(kwargs)
        finally:
            tuner.nargs = None
        if len(configs) > 1:
            todo.append((tuner, args, kwargs, nargs, configs))
    total = sum(len(item[-1]) for item in todo)
    if not total:
        return 0
    with ThreadPoolExecutor(max_workers=min(workers, total)) as pool, \
            AsyncCompileMode(pool, ignore_errors=True):
        for tuner, args, kwargs, nargs, configs in todo:
            for config in configs:
                if config.pre_hook is not None:
                    config.pre_hook({**nargs, **kwargs, **config.all_kwargs()})
                tuner.fn.warmup(*args, grid=(1,), **kwargs, **config.all_kwargs())
    return total


#: What ``torch.cuda.get_device_properties`` answers within :func:`gpu_target_stand_in`,
#: an H100's streaming multiprocessors (the persistent grid's size), whatever the target.
STAND_IN_PROPERTIES = types.SimpleNamespace(name="stand-in", multi_processor_count=132)


@contextlib.contextmanager
def gpu_target_stand_in(capability: Tuple[int, int] = (9, 0)):
    """Within this block Triton compiles for a GPU of ``capability`` on a machine without
    one (the test and the benchmark of :func:`compile_ahead`): Triton's active driver is a
    CUDA driver that answers this target, device 0 and stream 0 and loads nothing, and
    ``torch.cuda.get_device_capability`` answers ``capability`` (and
    ``get_device_properties`` :data:`STAND_IN_PROPERTIES`). ``kernel.warmup`` then
    compiles exactly what a launch on that GPU would (a launch itself would fail: there is
    no GPU to load the kernel on). Needs this package imported without ``TRITON_INTERPRET``."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.driver import CudaDriver
    from triton.runtime import driver

    major, minor = (int(c) for c in capability)

    class StandIn(CudaDriver):
        def __init__(self) -> None:  # no libcuda: nothing is loaded or launched
            pass

        def get_current_target(self):
            return GPUTarget("cuda", major * 10 + minor, 32)

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

    saved, saved_props, saved_driver = (torch.cuda.get_device_capability, torch.cuda.get_device_properties,
                                        driver._active)  # (the driver None: made on first use)
    driver.set_active(StandIn())
    torch.cuda.get_device_capability = lambda *args, **kwargs: (major, minor)
    torch.cuda.get_device_properties = lambda *args, **kwargs: STAND_IN_PROPERTIES
    try:
        yield
    finally:
        torch.cuda.get_device_capability, torch.cuda.get_device_properties = saved, saved_props
        driver._active = saved_driver  # (reset_active would make the default driver: no GPU, an error)


@contextlib.contextmanager
def launches_compile_only(*tuners: Any):
    """Within :func:`gpu_target_stand_in`: every launch of these autotuned kernels (and of
    any plain ``JITFunction`` among them) compiles and returns (``warmup``), and each
    autotuner's timing of a configuration is a stub that launches it once and reports
    1 ms, so a launcher's first call runs its whole path -- pruning, compiles, the
    autotuner's loop, the final launch -- with no GPU. For the test and the benchmark."""
    from triton.runtime.autotuner import Autotuner

    saved = []
    for tuner in tuners:
        fn = tuner.fn if isinstance(tuner, Autotuner) else tuner
        saved.append((fn, "run", fn.__dict__.get("run")))
        fn.run = functools.partial(_compile_only, type(fn).run.__get__(fn))
        if fn is not tuner:
            saved.append((tuner, "do_bench", tuner.__dict__.get("do_bench")))
            tuner.__dict__["do_bench"] = _one_ms
    try:
        yield
    finally:
        for obj, name, value in reversed(saved):
            if value is None:
                obj.__dict__.pop(name, None)
            else:
                obj.__dict__[name] = value


def _compile_only(run: Callable, *args: Any, **kwargs: Any) -> Any:
    return run(*args, **{**kwargs, "warmup": True})


def _one_ms(kernel_call: Callable, quantiles: Any = None) -> list:
    kernel_call()
    return [1.0, 1.0, 1.0]
