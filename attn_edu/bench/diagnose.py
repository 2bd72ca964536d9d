"""Why a call is slow: where its host time goes, and what Nsight Compute reads in its kernels.

The tools of the ``profile`` measurement (``python -m attn_edu.bench --measure profile``,
:mod:`attn_edu.bench.measure`), which a GPU run takes for the calls behind its goals, so that
a missed goal comes with what the profile shows:

* :func:`host_breakdown` -- a call repeated under :mod:`cProfile`: the host's time per call
  split by whose code spent it (:data:`OWNERS`: this package, Triton, PyTorch, the rest), each
  owner's Python apart from the C functions its Python called. A built-in's time goes to the
  function that called it (cProfile keeps it per caller), and so does the time of code with no
  file (Triton's generated binder, ``<string>``); a built-in the benchmark's own closure calls
  (``harness``) goes to the library its name says (``torch._C...``: PyTorch). An operator
  (``a @ b``) is no call cProfile sees: its time is the Python line's that writes it. On a GPU Triton's C part is its launcher and
  the driver's launch; PyTorch's is its operators (an allocation, a view). The profiler slows
  Python more than C, so the split is the profile's; the time per call beside it is measured
  without the profiler.
* :func:`ncu_command`, :func:`parse_ncu_csv`, :func:`ncu_kernels` -- Nsight Compute (``ncu``)
  around a child process that runs each call once between ``cudaProfilerStart`` and
  ``cudaProfilerStop``, each call after a marker kernel (:data:`MARKER`, PyTorch's
  ``torch.cuda._sleep``), so the kernels of the report fall back to the calls that launched
  them. The sections read (:data:`NCU_SECTIONS`) give per kernel its duration, the SM's and
  memory's throughput as a share of their peaks, occupancy, registers, waves, and from the raw
  metrics the reasons its warps stalled (:data:`SUMMARY_METRICS`, :func:`stall_reasons`).

``ncu`` needs the GPU's hardware counters, which not every machine exposes (a sandboxed
runtime refuses them: "LibraryNotLoaded"); the measurement then records ncu's own words and
keeps the host profile, which needs no counters.
"""
from __future__ import annotations

import cProfile
import csv
import glob
import importlib.util
import io
import os
import pstats
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .._checks import check_positive_int

__all__ = ["OWNERS", "host_breakdown", "format_host_breakdown", "NCU_SECTIONS", "MARKER", "SUMMARY_METRICS",
           "ncu_executable", "ncu_command", "ncu_import_command", "parse_ncu_csv", "ncu_kernels",
           "stall_reasons"]

#: Whose code a host profile splits the time by; ``harness`` is the benchmark's own loop and
#: closures in ``attn_edu/bench``, apart from the package they measure.
OWNERS = ("attn_edu", "triton", "torch", "other", "harness")

_HERE = Path(__file__).resolve().parent            # attn_edu/bench
_PACKAGE = _HERE.parent                            # attn_edu


def _package_dir(name: str) -> Optional[str]:
    """Where an installed package's files are, without importing it (None if absent)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def _owner_of_file(path: str, dirs: Sequence[Tuple[str, str]]) -> Optional[str]:
    """The owner of a code file; None for code with no file (a built-in ``~``, ``<string>``)."""
    if path == "~" or path.startswith("<"):
        return None
    real = os.path.realpath(path)
    for owner, d in dirs:
        if real == d or real.startswith(d + os.sep):
            return owner
    return "other"


def host_breakdown(fn: Callable[[], Any], calls: int = 50, sync: Optional[Callable[[], Any]] = None,
                   top: int = 8) -> Dict[str, Any]:
    """The host's time in ``fn()`` per call, and whose code spent it.

    ``fn`` is called once (warm), ``calls`` times timed with ``time.perf_counter`` and nothing
    else (``host_us``: microseconds per call), then ``calls`` times under cProfile. ``sync``
    (``torch.cuda.synchronize`` on a GPU) runs before each timed stretch and after it, never
    inside: the GPU's work queues up as in a model's loop, and the host's time is the launch.
    Returns ``{"calls", "host_us", "profiled_us", "owners": {owner: {"python_us", "c_us"}},
    "top": [{"function", "owner", "self_us", "calls"}]}`` (per call; ``top``: the ``top``
    functions with the most time of their own, C functions among them, each with its owner).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {type(fn).__name__}")
    calls = check_positive_int("calls", calls)
    top = check_positive_int("top", top)
    if sync is not None and not callable(sync):
        raise TypeError(f"sync must be callable or None; got {type(sync).__name__}")
    wait = sync or (lambda: None)
    fn()
    wait()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host_s = (time.perf_counter() - t0) / calls
    wait()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    wait()
    return _split(pstats.Stats(prof).stats, calls, host_s, top)


def _split(stats: Dict[tuple, tuple], calls: int, host_s: float, top: int) -> Dict[str, Any]:
    dirs = [("harness", str(_HERE)), ("attn_edu", str(_PACKAGE))]
    dirs += [(name, d) for name in ("triton", "torch") if (d := _package_dir(name))]
    own: Dict[tuple, str] = {}

    def owner(func: tuple, seen: frozenset = frozenset()) -> str:
        """A function's owner: its file's, else (no file) that of the caller that spent the most in it."""
        if func in own:
            return own[func]
        found = _owner_of_file(func[0], dirs)
        if found is None:
            callers = stats.get(func, (0, 0, 0, 0, {}))[4]
            heaviest = max((c for c in callers if c not in seen), key=lambda c: callers[c][3], default=None)
            found = "other" if heaviest is None else owner(heaviest, seen | {func})
        own[func] = found
        return found

    split = {o: {"python_us": 0.0, "c_us": 0.0} for o in OWNERS}
    mine: List[Tuple[float, tuple, str]] = []
    for func, (_cc, nc, tt, _ct, callers) in stats.items():
        if func[2].startswith("<method 'disable' of '_lsprof.Profiler"):
            continue   # the profiler's own switch
        builtin = func[0] == "~"
        if builtin and callers:   # a C function: its time per caller, to each caller's owner
            for caller, (_, _, c_tt, _) in callers.items():
                split[_c_owner(owner(caller), func[2])]["c_us"] += c_tt
            mine.append((tt, func, _c_owner(owner(max(callers, key=lambda c: callers[c][2])), func[2])))
        else:
            o = owner(func)
            split[o]["c_us" if builtin else "python_us"] += tt
            mine.append((tt, func, o))
    per_call = 1e6 / calls
    for parts in split.values():
        for k in parts:
            parts[k] *= per_call
    mine.sort(key=lambda x: -x[0])
    return {"calls": calls, "host_us": host_s * 1e6,
            "profiled_us": sum(p["python_us"] + p["c_us"] for p in split.values()),
            "owners": split,
            "top": [{"function": _function_name(f), "owner": o, "self_us": tt * per_call,
                     "calls": stats[f][1] / calls} for tt, f, o in mine[:top]]}


def _c_owner(caller_owner: str, name: str) -> str:
    """Who a C function's time goes to: its caller's owner, but for the benchmark's own closures
    (``harness``), which call the library they measure directly: the library its name says."""
    if caller_owner != "harness":
        return caller_owner
    return next((lib for lib in ("torch", "triton") if lib in name), "harness")


def _function_name(func: tuple) -> str:
    path, line, name = func
    if path == "~":
        return name
    short = "/".join(Path(path).parts[-2:])
    return f"{short}:{line}({name})"


def format_host_breakdown(result: Dict[str, Any]) -> str:
    """One line of a :func:`host_breakdown`: the time per call and each owner's share."""
    total = result["profiled_us"] or 1.0
    parts = []
    for o, p in result["owners"].items():
        share = (p["python_us"] + p["c_us"]) / total
        if share >= 0.005:
            parts.append(f"{o} {share:.0%} (C {p['c_us'] / total:.0%})")
    return f"host {result['host_us']:8.1f} us/call; profiled: " + ", ".join(parts)


# --------------------------------------------------------------------------------------- ncu
#: The Nsight Compute sections a profile collects (``--section``), for the throughputs
#: against the peaks, occupancy, the launch's resources, and where warps wait.
NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "ComputeWorkloadAnalysis")
#: The kernel launched before each profiled call (``torch.cuda._sleep``'s, in ATen's
#: ``Sleep.cu``): where one call's kernels end and the next call's begin in the report.
MARKER = "spin_kernel"
#: What a kernel's summary keeps of the report's sections, by the name ncu prints (details
#: page), as (key, metric name).
SUMMARY_METRICS = (
    ("duration", "Duration"),
    ("sm_throughput_pct", "Compute (SM) Throughput"),
    ("memory_throughput_pct", "Memory Throughput"),
    ("dram_throughput_pct", "DRAM Throughput"),
    ("achieved_occupancy_pct", "Achieved Occupancy"),
    ("theoretical_occupancy_pct", "Theoretical Occupancy"),
    ("registers_per_thread", "Registers Per Thread"),
    ("block_size", "Block Size"),
    ("grid_size", "Grid Size"),
    ("waves_per_sm", "Waves Per SM"),
    ("dynamic_shared_bytes", "Dynamic Shared Memory Per Block"),
    ("warp_cycles_per_issue", "Warp Cycles Per Issued Instruction"),
    ("issue_slots_busy_pct", "Issue Slots Busy"),
)
_TIME_UNITS = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3, "ns": 1e-6, "us": 1e-3,
               "ms": 1.0, "s": 1e3}
_BYTE_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6,
               "Kibyte": 1024, "Mibyte": 2**20}  # per block: "Kbyte/block"
#: the raw metrics of a stall reason (cycles a warp waits per issued instruction, by reason)
_STALL = re.compile(r"^smsp__average_warps?_(?:latency_)?issue_stalled_([a-z0-9_]+?)"
                    r"(?:_per_issue_active)?\.ratio$")


def ncu_executable() -> Optional[str]:
    """The ``ncu`` to run: ``$ATTN_EDU_NCU``, else ``ncu`` on PATH, else the CUDA toolkit's or
    an Nsight Compute install's (the newest); None when there is none."""
    named = os.environ.get("ATTN_EDU_NCU")
    if named:
        return named
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu",
                    "/usr/local/NVIDIA-Nsight-Compute*/ncu"):
        hits = sorted(glob.glob(pattern))
        if hits and os.access(hits[-1], os.X_OK):
            return hits[-1]
    return None


def ncu_command(child: Sequence[str], report: str, ncu: str = "ncu") -> List[str]:
    """``ncu`` around the ``child`` command line, its report written to ``report``: only the
    kernels between the child's ``cudaProfilerStart`` and ``cudaProfilerStop``, the clocks
    left as they are (``--clock-control none``), caches flushed before each kernel (ncu's
    default), ncu's own exit code 0 whatever the child's (the report says what ran)."""
    if not child:
        raise ValueError("child must be a command line (a non-empty list of strings)")
    sections = [x for s in NCU_SECTIONS for x in ("--section", s)]
    # (--check-exit-code 0: a child whose one call failed still leaves its report to read)
    return [ncu, "--profile-from-start", "off", "--clock-control", "none", "--check-exit-code", "0", *sections,
            "--force-overwrite", "--export", str(report), *child]


def ncu_import_command(report: str, page: str, ncu: str = "ncu") -> List[str]:
    """``ncu --import REPORT --csv --page PAGE``: a report printed as CSV (``details``: one row
    per section metric; ``raw``: one row per kernel, a column per metric)."""
    if page not in ("details", "raw"):
        raise ValueError(f"page must be 'details' or 'raw'; got {page!r}")
    return [ncu, "--import", str(report), "--csv", "--page", page]


def _number(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> List[Dict[str, str]]:
    """The rows of ncu's CSV output as dicts (its header's names as keys); ncu's own messages
    (lines starting ``==PROF==``, ``==WARNING==``) and a ``raw`` page's row of units are left out."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("==")]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    return [r for r in rows if (r.get("ID") or "").strip() != ""]


def stall_reasons(raw: Dict[str, str], top: int = 5) -> Dict[str, float]:
    """The ``top`` reasons a kernel's warps waited, in cycles per issued instruction, from its
    raw metrics (one row of :func:`parse_ncu_csv` of a ``raw`` page), the longest first; the
    cycle of the issue itself (``selected``, about 1) is no reason and is left out."""
    found = {}
    for name, value in raw.items():
        m = _STALL.match(name or "")
        v = _number(value)
        if m and v is not None and m.group(1) != "selected":   # "selected": the issue itself, ~1
            found[m.group(1)] = max(v, found.get(m.group(1), 0.0))
    return dict(sorted(found.items(), key=lambda kv: -kv[1])[:top])


def _summary(metrics: Dict[str, Tuple[str, str]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, name in SUMMARY_METRICS:
        if name not in metrics:
            continue
        unit, value = metrics[name]
        v = _number(value)
        if key == "duration":
            key, v = "duration_ms", None if v is None or unit not in _TIME_UNITS else v * _TIME_UNITS[unit]
        elif key == "dynamic_shared_bytes" and v is not None:
            v = v * _BYTE_UNITS.get(unit.split("/")[0], 1)
        out[key] = v   # None where ncu printed no number ("n/a")
    return out


def ncu_kernels(details: str, raw: str = "", calls: Sequence[Any] = ()) -> Dict[str, Any]:
    """The kernels of a report (its ``details`` and ``raw`` pages as CSV text), each with its
    :data:`SUMMARY_METRICS` and :func:`stall_reasons`, grouped by the call that launched them.

    ``calls``: what the child ran, in order (one entry per call, each after a :data:`MARKER`
    kernel). Returns ``{"kernels": [...], "by_call": {index: [kernel, ...]}, "problem": str or
    None}``; ``problem`` says why the kernels could not be given to the calls (a count of
    markers that is not the count of calls), and ``by_call`` is then empty.
    """
    order: List[str] = []
    per: Dict[str, Dict[str, Any]] = {}
    for row in parse_ncu_csv(details):
        kid = row["ID"].strip()
        if kid not in per:
            order.append(kid)
            per[kid] = {"id": int(_number(kid) or 0), "name": (row.get("Kernel Name") or "").strip(), "metrics": {}}
        name = (row.get("Metric Name") or "").strip()
        if name and name not in per[kid]["metrics"]:
            per[kid]["metrics"][name] = ((row.get("Metric Unit") or "").strip(), row.get("Metric Value") or "")
    stalls = {r["ID"].strip(): stall_reasons(r) for r in parse_ncu_csv(raw)} if raw else {}
    kernels = []
    for kid in order:
        k = per[kid]
        kernels.append({"id": k["id"], "name": k["name"], **_summary(k["metrics"]),
                        "stalls": stalls.get(kid, {})})
    by_call: Dict[int, List[Dict[str, Any]]] = {}
    marks = [i for i, k in enumerate(kernels) if MARKER in k["name"]]
    problem = None
    if calls and len(marks) != len(calls):
        problem = (f"{len(marks)} marker kernels ({MARKER}) for {len(calls)} calls: the kernels are listed "
                   "without the calls that launched them")
    elif calls:
        for c, start in enumerate(marks):
            end = marks[c + 1] if c + 1 < len(marks) else len(kernels)
            by_call[c] = kernels[start + 1:end]
    return {"kernels": [k for k in kernels if MARKER not in k["name"]], "by_call": by_call, "problem": problem}
