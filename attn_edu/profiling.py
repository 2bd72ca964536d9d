"""Measuring attention: peak memory, wall time, and the analytic FLOP and byte counts.

Three kinds of numbers, kept apart on purpose:

* **measured** -- :func:`peak_memory` (bytes above the baseline at call time) and
  :func:`time_ms` and :func:`time_interleaved_ms` (median and minimum time; on a GPU
  CUDA events with the L2 cache flushed before each call, as ``triton.testing.do_bench``,
  and the host's time in the call beside it; :func:`time_cuda_graph_ms` replays a CUDA
  graph for calls shorter than their launch);
* **counted** -- :func:`attention_flops`, :func:`projection_flops` (matmul FLOPs, one
  multiply-add = 2 FLOPs, the convention of PyTorch, Triton and FlashAttention
  benchmarks);
* **modelled** -- :func:`attention_peak_bytes` (extra memory of a call), and
  :func:`naive_hbm_bytes`, :func:`tiled_hbm_bytes` and :func:`tiled_hbm_bytes_bound`: bytes moved between slow memory (a GPU's HBM, a CPU's
  DRAM) and fast memory (SRAM, cache) by the standard and the tiled algorithm
  (FlashAttention, Dao et al. 2022, Algorithm 0 and Theorem 2).

How peak memory is measured depends on where the arrays live:

=================  ==========================================================
``"numpy"``        ``tracemalloc``: NumPy reports its data buffers to it, so
                   the peak of traced memory during the call, minus the traced
                   memory before it, is the extra memory the call needed.
``"torch_cpu"``    torch's CPU allocator is **not** seen by tracemalloc (a
                   ``torch.ones(10**6)`` registers ~0 bytes), so the call runs
                   under ``torch.profiler`` with ``profile_memory=True`` and the
                   peak is the running sum of its allocation/free records.
                   Profiling slows the call; use it for memory, not for time.
``"cuda"``         ``torch.cuda.reset_peak_memory_stats`` then
                   ``max_memory_allocated() - memory_allocated_before``: memory
                   handed out by PyTorch's caching allocator (what the tensors
                   need, not what the allocator reserved from the driver).
=================  ==========================================================

The result of ``fn`` is still alive when the peak is read, so the output counts.
Chapter 08 derives the counts and measures them; chapters 09-10 use the byte model.
"""
from __future__ import annotations

import os
import statistics
import time
import tracemalloc
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import _checks
from ._checks import check_positive_int, is_torch_tensor
from .masks import allowed_pairs, causal_block_layout

__all__ = [
    "peak_memory",
    "memory_method",
    "time_ms",
    "time_interleaved_ms",
    "Timing",
    "L2_FLUSH_BYTES",
    "time_cuda_graph_ms",
    "capture_cuda_graph",
    "best_interleaved_ms",
    "attention_flops",
    "projection_flops",
    "layer_flops",
    "crossover_length",
    "tflops",
    "naive_hbm_bytes",
    "tiled_hbm_bytes",
    "attention_peak_bytes",
    "tiled_hbm_bytes_bound",
]

MEMORY_METHODS = ("numpy", "torch_cpu", "cuda")


# --------------------------------------------------------------------------- measuring
def _tensor_device(args: tuple, kwargs: dict) -> Optional[str]:
    """'cpu' or 'cuda' for the first torch tensor among the arguments, else None."""
    for x in list(args) + list(kwargs.values()):
        if is_torch_tensor(x) and hasattr(x, "device"):
            return x.device.type
    return None


def memory_method(*args: Any, device: Optional[str] = None, **kwargs: Any) -> str:
    """Which of "numpy", "torch_cpu", "cuda" :func:`peak_memory` uses for these arguments.

    ``device=None`` or ``"cpu"`` looks at the arguments: torch tensors on the CPU give
    ``"torch_cpu"``, on a GPU ``"cuda"``, and anything else (NumPy) ``"numpy"``.
    ``device="numpy"``, ``"torch_cpu"`` or ``"cuda"`` forces the method.
    """
    if device is not None and not isinstance(device, str):
        device = getattr(device, "type", device)  # a torch.device
    if device in MEMORY_METHODS:
        return device
    if device not in (None, "cpu"):
        raise ValueError(
            f"device must be None, 'cpu', 'numpy', 'torch_cpu' or 'cuda'; got {device!r}"
        )
    seen = _tensor_device(args, kwargs)
    if seen == "cuda":
        return "cuda"
    if seen == "cpu":
        return "torch_cpu"
    if seen is not None:
        raise ValueError(f"peak memory on torch device {seen!r} is not supported")
    return "numpy"


def _peak_numpy(fn: Callable, args: tuple, kwargs: dict) -> Tuple[Any, int]:
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return result, max(0, peak - baseline)


def _peak_torch_cpu(fn: Callable, args: tuple, kwargs: dict) -> Tuple[Any, int]:
    # Kineto prints "USDT ... profiler_start/stop" lines on every run unless its log level
    # is above USDT (5); read when the profiler first starts. A value the user set wins.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
    try:  # the raw allocation records, in time order (all threads)
        events = prof.profiler.kineto_results.events()
        records = sorted(
            (e.start_ns(), e.nbytes()) for e in events
            if e.name() == "[memory]" and e.device_type().name == "CPU"
        )
    except AttributeError as err:  # pragma: no cover - a torch without these internals
        raise RuntimeError(
            "peak memory of torch CPU tensors is not measurable with this torch version "
            "(torch.profiler did not expose its allocation records); measure NumPy arrays "
            "or CUDA tensors instead"
        ) from err
    running = peak = 0
    for _, nbytes in records:
        running += nbytes
        peak = max(peak, running)
    return result, peak


def _peak_cuda(fn: Callable, args: tuple, kwargs: dict) -> Tuple[Any, int]:
    import torch

    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn(*args, **kwargs)
    torch.cuda.synchronize()
    return result, max(0, torch.cuda.max_memory_allocated() - baseline)


def peak_memory(fn: Callable, *args: Any, device: Optional[str] = None, **kwargs: Any) -> Tuple[Any, int]:
    """Run ``fn(*args, **kwargs)``; return ``(result, peak_bytes)``.

    ``peak_bytes`` is the highest amount of memory allocated *during* the call above what
    was allocated just before it (inputs already allocated do not count; the returned
    result does). The method follows the data (see the module docstring and
    :func:`memory_method`): tracemalloc for NumPy, torch.profiler's allocation records
    for torch CPU tensors, ``torch.cuda.max_memory_allocated`` for CUDA tensors.

    >>> _, peak = peak_memory(np.ones, 10**6)   # doctest: +SKIP
    >>> peak                                      # about 8_000_000 bytes  # doctest: +SKIP

    Chapter 08 measures naive attention's n x n peak with it; chapter 10 the GPU peaks.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {type(fn).__name__}")
    method = memory_method(*args, device=device, **kwargs)
    if method == "numpy":
        return _peak_numpy(fn, args, kwargs)
    if method == "torch_cpu":
        return _peak_torch_cpu(fn, args, kwargs)
    return _peak_cuda(fn, args, kwargs)


#: Bytes zeroed on the GPU before each timed call, so that no input is still in the L2
#: cache (``triton.testing.do_bench`` zeroes the same 256 MB; an H100 has 50 MB of L2).
L2_FLUSH_BYTES = 256 * 2**20


class Timing(float):
    """Wall time of a call, in milliseconds. Its float value is the **median**.

    Attributes: ``median_ms``, ``min_ms``, ``times_ms`` (every timed run), ``repeat``,
    ``warmup``, ``method`` (how it was timed: ``"perf_counter"`` on the CPU,
    ``"cuda_events_l2_flushed"`` or ``"cuda_events"`` or ``"cuda_graph"`` on a GPU) and, on a
    GPU, ``host_times_ms`` / ``host_ms`` (median): the time the host spent in each call,
    launcher and input checks, without waiting for the GPU. When ``host_ms`` is close to
    or above ``median_ms`` the GPU waited for the launch: the call is launch-bound and
    :func:`time_cuda_graph_ms` measures the GPU's part. Being a float, ``time_ms(...) < 5``
    and ``f"{t:.2f}"`` work directly.
    """

    median_ms: float
    min_ms: float
    times_ms: Tuple[float, ...]
    warmup: int
    method: str
    host_times_ms: Optional[Tuple[float, ...]]

    def __new__(cls, times_ms: List[float], warmup: int, method: str = "perf_counter",
                host_times_ms: Optional[List[float]] = None) -> "Timing":
        med = statistics.median(times_ms)
        obj = super().__new__(cls, med)
        obj.median_ms = float(med)
        obj.min_ms = float(min(times_ms))
        obj.times_ms = tuple(float(t) for t in times_ms)
        obj.warmup = warmup
        obj.method = method
        obj.host_times_ms = None if host_times_ms is None else tuple(float(t) for t in host_times_ms)
        return obj

    def __reduce__(self):  # copy / deepcopy / pickle (plotly deep-copies figure data)
        host = None if self.host_times_ms is None else list(self.host_times_ms)
        return (Timing, (list(self.times_ms), self.warmup, self.method, host))

    @property
    def repeat(self) -> int:
        return len(self.times_ms)

    @property
    def host_ms(self) -> Optional[float]:
        """Median host time of a call in ms (GPU timings only; None on the CPU)."""
        return None if self.host_times_ms is None else float(statistics.median(self.host_times_ms))

    def as_dict(self) -> Dict[str, Any]:
        return {"median_ms": self.median_ms, "min_ms": self.min_ms,
                "times_ms": list(self.times_ms), "warmup": self.warmup, "method": self.method,
                "host_median_ms": self.host_ms}

    def __repr__(self) -> str:
        return f"Timing(median_ms={self.median_ms:.4g}, min_ms={self.min_ms:.4g}, repeat={self.repeat})"


def _timing_device(device, args, kwargs) -> Optional[str]:
    if device is not None and not isinstance(device, str):
        device = getattr(device, "type", device)
    if device == "cuda" or (device is None and _tensor_device(args, kwargs) == "cuda"):
        return "cuda"
    if device not in (None, "cpu", "numpy", "torch_cpu"):
        raise ValueError(f"device must be None, 'cpu', 'numpy', 'torch_cpu' or 'cuda'; got {device!r}")
    return "cpu"


def _l2_flush_buffer():
    """A CUDA buffer of :data:`L2_FLUSH_BYTES`; ``.zero_()`` evicts the L2 cache."""
    import torch

    return torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")


def time_interleaved_ms(fns: Dict[str, Callable], *args: Any, repeat: int = 5, warmup: int = 1,
                        device: Optional[str] = None, l2_flush: bool = True,
                        **kwargs: Any) -> Dict[str, Timing]:
    """Time several functions on the same arguments, interleaved: a, b, a, b, ...

    ``warmup`` untimed rounds, then ``repeat`` rounds of one call of each function; a
    :class:`Timing` per name (its value is the median). Interleaving makes the load of a
    shared machine, clock changes and thermal drift hit every function alike, so their
    *ratio* is trustworthy even when the times wander.

    On CUDA it times as ``triton.testing.do_bench`` does, call by call: a 256 MB buffer is
    zeroed before each call (``l2_flush=True``), so no call finds its inputs in the L2
    cache left by the previous one (a 40 MB KV cache fits an H100's 50 MB L2), and the
    call is bracketed by two ``torch.cuda.Event`` records read after one final
    synchronisation: the time is what the GPU spent between them. The flush also gives
    the host a head start, so a launch shorter than the flush is not in the GPU time; the
    host's own time in each call (``perf_counter`` around the call, no synchronisation:
    launcher and input checks) is kept beside it, ``Timing.host_ms``. On the CPU,
    ``time.perf_counter``.
    """
    if not fns or not all(callable(f) for f in fns.values()):
        raise TypeError("fns must be a non-empty dict of callables")
    repeat = check_positive_int("repeat", repeat)
    warmup = _checks.check_length("warmup", warmup)
    cuda = _timing_device(device, args, kwargs) == "cuda"
    for _ in range(warmup):
        for fn in fns.values():
            fn(*args, **kwargs)
    marks: Dict[str, List[Any]] = {name: [] for name in fns}
    if cuda:
        import torch

        flush = _l2_flush_buffer() if l2_flush else None
        host: Dict[str, List[float]] = {name: [] for name in fns}
        torch.cuda.synchronize()
        for _ in range(repeat):
            for name, fn in fns.items():
                if flush is not None:
                    flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                t0 = time.perf_counter()
                fn(*args, **kwargs)
                host[name].append((time.perf_counter() - t0) * 1e3)
                end.record()
                marks[name].append((start, end))
        torch.cuda.synchronize()
        method = "cuda_events_l2_flushed" if l2_flush else "cuda_events"
        return {name: Timing([s.elapsed_time(e) for s, e in ev], warmup, method, host[name])
                for name, ev in marks.items()}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            marks[name].append((time.perf_counter() - t0) * 1e3)
    return {name: Timing(ts, warmup) for name, ts in marks.items()}


def time_ms(fn: Callable, *args: Any, repeat: int = 5, warmup: int = 1, device: Optional[str] = None,
            l2_flush: bool = True, **kwargs: Any) -> Timing:
    """Time of ``fn(*args, **kwargs)`` in ms: a :class:`Timing` (a float = the median).

    ``warmup`` untimed calls first (caches, lazy initialisation, kernel compilation), then
    ``repeat`` timed calls: with ``time.perf_counter`` on the CPU, with CUDA events around
    each call on a GPU (``device="cuda"``, or torch tensors on a GPU among the arguments),
    the L2 cache flushed before each (``l2_flush``) and the host's time in the call kept
    beside the GPU's (:func:`time_interleaved_ms`). The median resists the odd slow run
    of a shared machine; the minimum is the best case. Several functions to compare:
    :func:`time_interleaved_ms`.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {type(fn).__name__}")
    return time_interleaved_ms({"fn": fn}, *args, repeat=repeat, warmup=warmup, device=device,
                               l2_flush=l2_flush, **kwargs)["fn"]


def capture_cuda_graph(fn: Callable, *args: Any, warmup: int = 2, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` captured once into a ``torch.cuda.CUDAGraph``, after ``warmup``
    eager calls on a side stream (as capture requires): what :func:`time_cuda_graph_ms` replays,
    and may be given (``graph=``) to time one capture several ways. CUDA only."""
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {type(fn).__name__}")
    warmup = _checks.check_length("warmup", warmup)
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up on a side stream, as capture requires
        for _ in range(warmup):
            fn(*args, **kwargs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*args, **kwargs)
    return graph


def time_cuda_graph_ms(fn: Callable, *args: Any, repeat: int = 20, warmup: int = 2,
                       l2_flush: bool = True, steps: int = 1, graph: Any = None, **kwargs: Any) -> Timing:
    """GPU time of ``fn(*args, **kwargs)`` replayed from a CUDA graph, in ms (a :class:`Timing`).

    For calls shorter than their launch (a decoding step over a short KV cache, a small
    forward): ``warmup`` eager calls (compiles, autotunes), one capture into a
    ``torch.cuda.CUDAGraph``, then ``repeat`` replays, each after an L2 flush and bracketed
    by CUDA events. A replay launches every kernel of the call from the driver, with no
    Python in between, so the time is the GPU's work (as ``triton.testing.do_bench_cudagraph``
    measures it). The call must be capturable: no host synchronisation (``.item()``,
    ``int(tensor)``), no allocation that differs between calls. The ``host_times_ms`` are
    the host's time to launch each replay. ``steps`` > 1: each timed run is that many
    replays back to back, and the times are per replay (``"cuda_graph_loop"``: a decode
    loop replaying its step). ``graph``: this call's graph, already captured
    (:func:`capture_cuda_graph`), replayed as it is (no warm-up, no capture). CUDA only.
    """
    steps = check_positive_int("steps", steps)
    repeat = check_positive_int("repeat", repeat)
    if graph is None:
        graph = capture_cuda_graph(fn, *args, warmup=warmup, **kwargs)
    elif not hasattr(graph, "replay"):
        raise TypeError(f"graph must be a torch.cuda.CUDAGraph (capture_cuda_graph); got {type(graph).__name__}")

    def replay() -> None:
        for _ in range(steps):
            graph.replay()
    timing = time_interleaved_ms({"graph": replay}, repeat=repeat, warmup=1, device="cuda",
                                 l2_flush=l2_flush)["graph"]
    return Timing([t / steps for t in timing.times_ms], warmup, "cuda_graph" if steps == 1 else "cuda_graph_loop",
                  [t / steps for t in timing.host_times_ms])


def best_interleaved_ms(calls: Dict[Any, Callable[[], Any]], rounds: int = 3,
                        repeat: Union[int, Callable[[Any], int]] = 1, warmup: int = 1) -> Dict[Any, float]:
    """The best time in ms of one call of every zero-argument callable in ``calls``, by key.

    :func:`time_interleaved_ms` on the CPU, with each entry run ``repeat`` times per round
    (``repeat`` may be a function of the key, e.g. more runs for cheap calls): ``warmup``
    untimed rounds, then ``rounds`` timed rounds, entry after entry. A busy second on a shared
    machine slows one round of each entry instead of all rounds of one entry, and a neighbour
    only ever makes a round slower, so the fastest round (divided by ``repeat``) is the
    estimate. Chapters 11 and 12 use it; on a GPU use :func:`time_interleaved_ms` (CUDA events).
    """
    if not isinstance(calls, dict) or not calls:
        raise ValueError(f"calls must be a non-empty dict of zero-argument callables; got {calls!r:.80}")
    for key, fn in calls.items():
        if not callable(fn):
            raise TypeError(f"calls[{key!r}] must be callable; got {type(fn).__name__}")
    rounds = check_positive_int("rounds", rounds)
    counts = {key: check_positive_int("repeat", repeat(key) if callable(repeat) else repeat) for key in calls}

    def batch(fn: Callable[[], Any], n: int) -> Callable[[], None]:
        def run() -> None:
            for _ in range(n):
                fn()
        return run

    timings = time_interleaved_ms({key: batch(fn, counts[key]) for key, fn in calls.items()},
                                  repeat=rounds, warmup=warmup, device="cpu")
    return {key: timings[key].min_ms / counts[key] for key in calls}


# --------------------------------------------------------------------------- FLOPs
def attention_flops(batch: int, heads: int, lq: int, lk: int, d: int, dv: Optional[int] = None,
                    causal: Union[bool, str] = False, backward: bool = False,
                    exact_causal: bool = False) -> int:
    r"""Matmul FLOPs of scaled dot-product attention (one multiply-add = 2 FLOPs).

    Per head, :math:`QK^\top` costs :math:`2 L_q L_k d` and :math:`PV` costs
    :math:`2 L_q L_k d_v`, so the forward pass is

    .. math:: F = 2 B H L_q L_k (d + d_v) \;=\; 4 B H n^2 d \quad (L_q = L_k = n,\ d_v = d).

    Softmax, scaling and masking (a few FLOPs per score, :math:`O(L_q L_k)`) are left out,
    as in every FlashAttention/Triton benchmark.

    * ``causal=True`` (or "top_left"/"bottom_right"): **half** of ``F`` -- the convention
      of the FlashAttention benchmarks. With ``exact_causal=True`` the count uses the
      exact number of allowed pairs instead (``n(n+1)/2`` when ``L_q = L_k = n``, so
      slightly more than half), with the given alignment.
    * ``backward=True``: the backward pass, counted as **2.5 x** the forward (the
      FlashAttention convention: 5 matmuls of the same size against the forward's 2).
      The package's default Triton backward (``backward="two_kernels"``) really does 7,
      3.5 x the forward (its dQ kernel recomputes S and dP), so TFLOP/s under this count
      understate its arithmetic by 7/5; ``backward="atomic_dq"`` does the 5 counted.

    Chapter 08 derives it and checks it against PyTorch's FLOP counter
    (``torch.utils.flop_counter.FlopCounterMode``).
    """
    batch, heads = check_positive_int("batch", batch), check_positive_int("heads", heads)
    lq, lk, d = check_positive_int("lq", lq), check_positive_int("lk", lk), check_positive_int("d", d)
    dv = d if dv is None else check_positive_int("dv", dv)
    align = _checks.check_causal(causal)
    if align is None:
        pairs2 = 2 * lq * lk  # twice the pairs, so halving stays an integer
    elif exact_causal:
        pairs2 = 2 * allowed_pairs("causal", lq, lk=lk, alignment=align)
    else:
        pairs2 = lq * lk
    forward = batch * heads * pairs2 * (d + dv)  # = 2 * pairs * (d + dv) per head
    return forward * 5 // 2 if backward else forward


def projection_flops(batch: int, n: int, d_model: int, heads: int = 1, d_head: Optional[int] = None,
                     lk: Optional[int] = None, num_kv_heads: Optional[int] = None) -> int:
    r"""Matmul FLOPs of the four projections of one attention layer: Q, K, V and output.

    With ``heads * d_head = d_model`` and ``lk = n``: :math:`4 \cdot 2 n d_\text{model}^2
    = 8 B n d^2` -- linear in ``n``. This is
    ``mha_flops(...)["projections"] + mha_flops(...)["output_projection"]`` from
    :func:`attn_edu.multihead.mha_flops` (chapter 06), one home for the count.
    """
    from .multihead import mha_flops

    n = check_positive_int("n", n)
    f = mha_flops(batch, n, n if lk is None else lk, d_model, heads, num_kv_heads, d_head)
    return f["projections"] + f["output_projection"]


def layer_flops(batch: int, n: int, d_model: int, heads: int = 1) -> Dict[str, int]:
    r"""FLOPs of one self-attention layer split into its n·d² and n²·d parts.

    ``{"projections": 8 B n d², "attention": 4 B n² d, "total": ...}`` with
    ``d = d_model`` and ``d_head = d_model / heads``. The attention part is
    :math:`4 B H n^2 (d/H) = 4 B n^2 d`: the number of heads cancels, so multi-head
    attention has the same order as one head of width ``d`` (seed note 001).
    """
    d_model, heads = check_positive_int("d_model", d_model), check_positive_int("heads", heads)
    if d_model % heads:
        raise ValueError(f"d_model must be divisible by heads; got d_model={d_model}, heads={heads}")
    proj = projection_flops(batch, n, d_model, heads)
    attn = attention_flops(batch, heads, n, n, d_model // heads)
    return {"projections": proj, "attention": attn, "total": proj + attn}


def crossover_length(d_model: int) -> int:
    r"""The length where the quadratic term equals the projections: :math:`n^* = 2d`.

    From :math:`4 n^2 d = 8 n d^2` (matmul FLOPs of :func:`layer_flops`). Below ``n*`` the
    projections cost more, above it the scores and the weighted sum do. Independent of
    the number of heads and of the batch.
    """
    return 2 * check_positive_int("d_model", d_model)


def tflops(flops: float, ms: float) -> float:
    """Throughput in TFLOP/s: ``flops / (ms * 1e-3) / 1e12``."""
    ms = _checks.check_real("ms", ms, positive=True)
    return float(flops) / (ms * 1e-3) / 1e12


# --------------------------------------------------------------------------- bytes moved
def naive_hbm_bytes(n: int, d: int, itemsize: int = 4, batch: int = 1, heads: int = 1,
                    lk: Optional[int] = None, dv: Optional[int] = None) -> int:
    r"""Bytes the standard algorithm moves to and from slow memory (FlashAttention Alg. 0).

    Per head, with :math:`L_q = n`: read Q, K (:math:`n d + L_k d`); write S
    (:math:`n L_k`); read S, write P (:math:`2 n L_k`); read P and V
    (:math:`n L_k + L_k d_v`); write O (:math:`n d_v`):

    .. math:: \text{bytes} = s\,B H\,(4 n L_k + n d + L_k d + L_k d_v + n d_v)
              \;=\; s\,BH\,(4n^2 + 4nd) \quad(L_k = n,\ d_v = d),

    :math:`\Theta(N d + N^2)` with :math:`s` = ``itemsize``. The :math:`4n^2` is the
    n x n matrix written and read twice; chapter 09 compares it with the tiled count.
    """
    n, d = check_positive_int("n", n), check_positive_int("d", d)
    lk = n if lk is None else check_positive_int("lk", lk)
    dv = d if dv is None else check_positive_int("dv", dv)
    s, bh = check_positive_int("itemsize", itemsize), check_positive_int("batch", batch) * check_positive_int("heads", heads)
    return s * bh * (4 * n * lk + n * d + lk * d + lk * dv + n * dv)


def attention_peak_bytes(n: int, d: int, itemsize: int = 2, batch: int = 1, heads: int = 1,
                         tiled: bool = False) -> int:
    r"""Model of the extra memory one attention forward allocates above its inputs, in bytes.

    From the tensors each algorithm allocates (``s`` = ``itemsize``, :math:`L_q = L_k = n`,
    :math:`d_v = d`): the naive one keeps the scores :math:`S` and the weights :math:`P`
    alive at once next to its output, :math:`s\,BH(2n^2 + nd)`; the tiled one (chapter
    09's loop, the Triton kernel, SDPA's fused backends) only its output and a float32
    log-sum-exp per row, :math:`s\,BH\,nd + 4BHn`. Chapter 10 measures both on a GPU
    (a real naive call may hold a third temporary, e.g. NumPy's ``exp``); chapter 08 draws
    the model against the memory of common GPUs.
    """
    n, d = check_positive_int("n", n), check_positive_int("d", d)
    s, bh = check_positive_int("itemsize", itemsize), check_positive_int("batch", batch) * check_positive_int("heads", heads)
    out = s * bh * n * d
    return out + 4 * bh * n if tiled else out + 2 * s * bh * n * n


def tiled_hbm_bytes(n: int, d: int, block_q: int, block_k: int, itemsize: int = 4,
                    causal: Union[bool, str] = False, batch: int = 1, heads: int = 1,
                    lk: Optional[int] = None, dv: Optional[int] = None) -> int:
    r"""Exact bytes moved by the tiled loop (FlashAttention-2 order: query blocks outside).

    For each of the :math:`\lceil n / B_q \rceil` query blocks: read its Q block once,
    read every K and V block it visits (all of them, or only the non-empty ones of
    :func:`attn_edu.masks.causal_block_layout` when ``causal``), write its O block once.
    Running max, sum and accumulator stay in fast memory. Without a mask:

    .. math:: \text{bytes} = s\,BH\left(n d + \lceil n/B_q\rceil L_k (d + d_v) + n d_v\right)
              \approx s\,BH\,\frac{2 n^2 d}{B_q}  \quad(L_k = n,\ d_v = d,\ n \gg B_q).

    No :math:`n^2` matrix is stored; K and V are re-read once per query block, so larger
    query blocks mean less traffic. Partial edge blocks count their true sizes.
    """
    n, d = check_positive_int("n", n), check_positive_int("d", d)
    lk = n if lk is None else check_positive_int("lk", lk)
    dv = d if dv is None else check_positive_int("dv", dv)
    block_q = check_positive_int("block_q", block_q)
    block_k = check_positive_int("block_k", block_k)
    s, bh = check_positive_int("itemsize", itemsize), check_positive_int("batch", batch) * check_positive_int("heads", heads)
    align = _checks.check_causal(causal)
    if align is None:
        kv_rows = -(-n // block_q) * lk  # every query block reads all of K and V
    else:
        layout = causal_block_layout(n, lk, block_q, block_k, align)  # (nq, nk)
        sizes = [min(block_k, lk - j * block_k) for j in range(layout.shape[1])]
        kv_rows = int(sum(int(layout[:, j].sum()) * sizes[j] for j in range(layout.shape[1])))
    return s * bh * (n * d + kv_rows * (d + dv) + n * dv)


def tiled_hbm_bytes_bound(n: int, d: int, sram_bytes: int, itemsize: int = 4, batch: int = 1,
                          heads: int = 1) -> float:
    r"""The FlashAttention IO bound, :math:`\Theta(N^2 d^2 / M)` (Dao et al. 2022, Theorem 2).

    Returns :math:`s\,BH\,n^2 d^2 / M` bytes with :math:`M` = ``sram_bytes / itemsize``
    the fast memory in elements -- the Theta expression with its constant set to 1.
    Algorithm 1 picks tiles of :math:`M/(4d)` rows; with ``block_q = block_k = M/(4d)``
    :func:`tiled_hbm_bytes` gives :math:`8\,n^2 d^2 / M` elements (K and V re-read per
    query block) plus the linear :math:`2nd` (Q read once, O written once): 8x this
    value, up to the linear term.
    Valid for :math:`d \le M \le n d`.
    """
    n, d = check_positive_int("n", n), check_positive_int("d", d)
    s = check_positive_int("itemsize", itemsize)
    sram = check_positive_int("sram_bytes", sram_bytes)
    m = sram / s
    if m < d:
        raise ValueError(f"sram_bytes must hold at least one row of d={d} elements; got {sram_bytes}")
    return s * check_positive_int("batch", batch) * check_positive_int("heads", heads) * n * n * d * d / m
