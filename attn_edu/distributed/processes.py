"""Run a function on P processes joined in a ``torch.distributed`` process group.

:func:`launch` is what chapter 14 and the tests call to get P "devices" on one machine:
P fresh Python processes, connected through a store on 127.0.0.1 at a port the operating
system picks (so two launches never collide), each running ``fn(rank, world_size, *args)``.
The processes are fresh, not copies of the caller (which may hold threads, CUDA state or a
Jupyter kernel's sockets): where the platform has it (Linux, macOS), a ``forkserver`` that
imported torch once forks each rank, so a launch does not pay for importing torch P times
(about 2 CPU-seconds each); elsewhere (Windows) each rank is ``spawn``-ed and imports torch
itself. Either way the rank starts from a process that never touched CUDA. (The server
keeps the modules it imported when it started: after editing attn_edu's own source, restart
the kernel, as its own imports need anyway. A function in your own file is imported afresh
by every launch.)
The results come back to the caller in rank order. A run is bounded in time: a rank that
raises, dies or hangs ends the whole run with a :class:`LaunchError` that names the rank
and says what it was doing, and no process is left behind.

Fresh processes import ``fn`` by its module and name, so ``fn`` must live in an importable
module: a function of :mod:`attn_edu.distributed` (chapter 14 uses
:func:`attn_edu.distributed.run_attention`) or one in your own ``.py`` file. A function
defined in a notebook cell (module ``__main__`` of a Jupyter kernel), a lambda or a nested
function cannot be imported there; :func:`launch` refuses them with a TypeError that says so.
"""
from __future__ import annotations

import contextlib
import datetime
import math
import numbers
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["launch", "LaunchError", "local_device", "BACKENDS"]

#: The process-group backends :func:`launch` sets up.
BACKENDS = ("gloo", "nccl")


class LaunchError(RuntimeError):
    """A launched run failed: a rank raised, died or did not finish in time.

    Attributes:
        kind: ``"raised"``, ``"died"`` or ``"timeout"``.
        ranks: the ranks concerned (the first to fail first).
        pids: the process ids of every rank (all ended when this is raised).
    """

    def __init__(self, message: str, kind: str, ranks: List[int], pids: List[int]):
        super().__init__(message)
        self.kind, self.ranks, self.pids = kind, list(ranks), list(pids)


def local_device() -> Any:
    """Inside a launched function: this rank's device, ``cuda:<i>`` under NCCL, else ``cpu``."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ----------------------------------------------------------------------------- checks
def _interactive_main() -> bool:
    main = sys.modules.get("__main__")
    return main is None or not hasattr(main, "__file__")


def _check_importable(fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(rank, world_size, *args); got {type(fn).__name__}")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    hint = ("Use a function from an importable module: one of attn_edu.distributed's (e.g. "
            "attn_edu.distributed.run_attention), or write yours into a .py file (in Jupyter: "
            "%%writefile my_ranks.py) and import it from there.")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise TypeError(f"launch starts fresh processes, which import fn by module and name; "
                        f"{qualname!r} is a lambda or a nested function and cannot be imported. {hint}")
    if module == "__main__" and _interactive_main():
        raise TypeError(f"launch starts fresh processes, which import fn by module and name; "
                        f"{qualname!r} was defined in this notebook or interactive session (module "
                        f"__main__), which they cannot import. {hint}")


@contextlib.contextmanager
def _startable_main():
    """Let ranks start from ``python -`` or ``python -c``: spawn and forkserver re-run the
    main module's file in every child, and ``<stdin>`` is no file. Hidden for the start only."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or os.path.exists(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


#: the modules the forkserver imports once, before it forks any rank (torch, and the
#: functions chapter 14's ranks run); a rank then only unpickles ``fn`` and joins the group
_PRELOAD = ["torch", "torch.distributed", "attn_edu.distributed"]


def _start_context() -> Any:
    """The multiprocessing context ranks start from: ``forkserver`` with :data:`_PRELOAD`
    where the platform has it, else ``spawn``. Both give processes that share nothing with
    the caller but what is passed; the server starts on the first launch and lives as long
    as the caller (it exits when the caller does)."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)  # before the server's first start; a no-op once it runs
    return ctx


def _threads_per_rank(world_size: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // world_size)


# ----------------------------------------------------------------------------- the worker
def _to_cpu(x: Any) -> Any:
    """Tensors in a result (nested in lists, tuples, dicts) detached and moved to the CPU."""
    if type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach"):
        return x.detach().cpu()
    if isinstance(x, dict):
        return {k: _to_cpu(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_to_cpu(v) for v in x)
    return x


def _watch_launcher(lifeline: Any) -> None:
    """Exit when the launcher is gone (killed, crashed): nothing is left behind.

    ``lifeline`` is the read end of a pipe whose only write end the launcher holds and never
    writes to: reading it returns end-of-file once the launcher has ended, however it ended.
    (The parent process id would not do: under forkserver the parent is the server, which
    stays alive as long as any rank does.)"""
    try:
        lifeline.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(1)


def _send(conn: Any, message: tuple) -> None:
    """Send with the plain pickler: tensors are copied into the message. (A Connection's own
    pickler, with torch's reductions registered, would pass tensors through shared memory that
    vanishes when this process exits, before the parent has read them.)"""
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def _worker(rank: int, world_size: int, port: int, backend: str, timeout: float, blob: bytes,
            conn: Any, threads: int, dump_path: str, lifeline: Any) -> None:
    """The body of every launched process: join the group, run fn, report to the parent."""
    import faulthandler

    dump = open(dump_path, "w")
    if hasattr(signal, "SIGUSR1"):  # the parent asks "where are you?" before ending a hung run
        faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    threading.Thread(target=_watch_launcher, args=(lifeline,), daemon=True).start()
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(threads)
        fn, args, kwargs = pickle.loads(blob)
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False,
                              timeout=datetime.timedelta(seconds=timeout))
        # the group's own timeout is longer than the run's: a hang is reported by the parent,
        # which can say where every rank was, rather than by one rank's collective timing out
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout + 60))
        result = _to_cpu(fn(rank, world_size, *args, **kwargs))
        _send(conn, ("ok", rank, result))
    except BaseException as err:  # noqa: BLE001 - reported to the parent, which raises
        try:
            _send(conn, ("error", rank, time.time(), type(err).__name__, str(err), traceback.format_exc()))
        finally:
            conn.close()
            dump.close()
            os._exit(1)
    # No rank closes its connections before every rank has reported: a rank whose fn makes
    # no collective call (or whose last one finished first here) would otherwise close its
    # sockets while a slower rank is still joining the group, whose connectFullMesh then
    # fails with gloo's "Connection closed by peer" (seen on a loaded machine). The result
    # is already with the parent, so a failure from here on (a peer that failed, or that the
    # parent ended once every result was in) is not this rank's to report.
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - see above
        pass
    finally:
        conn.close()
        dump.close()


# ----------------------------------------------------------------------------- the parent
@dataclass
class _Failure:
    rank: int
    when: float
    kind: str
    summary: str
    details: str = ""


def _where(dump_text: str) -> Tuple[str, bool]:
    """The innermost frames of the main thread from a faulthandler dump, as one line, and
    whether the rank was inside torch.distributed (waiting on the others)."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump_text.strip())
    main = next((b for b in blocks if " in _worker" in b), blocks[0] if blocks else "")
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', main)
    shown, waiting = [], False
    for path, line, func in frames:  # most recent call first
        if func == "_worker":
            break
        waiting = waiting or f"{os.sep}distributed{os.sep}" in path and f"{os.sep}torch{os.sep}" in path
        shown.append(f"{func} ({os.path.basename(path)}:{line})")
    if not shown:
        return "starting up (before fn was called)", False
    return " <- ".join(shown[:5]), waiting


_PEER_LOST = ("connection closed by peer", "connection reset by peer", "remote worker", "communicator was aborted")


def _consequence(f: _Failure) -> int:
    """0 for a rank's own error, 1 for a death, 2 for an error caused by losing a peer (the
    others' collectives fail once one rank is gone); the cause is reported first."""
    if f.kind == "died":
        return 1
    return 2 if any(s in f.summary.lower() for s in _PEER_LOST) else 0


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _stop(procs: List[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=3)
        if p.is_alive():
            p.kill()
            p.join(timeout=3)


def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo",
           timeout: float = 120.0, threads: Optional[int] = None, **kwargs: Any) -> List[Any]:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` processes; return the results.

    Each process joins one ``torch.distributed`` process group (``backend`` "gloo" for CPU
    tensors, "nccl" for CUDA tensors, one GPU per rank) through a store on 127.0.0.1 at a
    free port, then calls ``fn``. Returns ``[result of rank 0, result of rank 1, ...]``;
    tensors in the results come back on the CPU. ``args`` and ``kwargs`` are pickled to
    every process (pass the full tensors and let each rank take its shard).

    Args:
        fn: a function importable by module and name (see the module docstring).
        world_size: the number of processes P (>= 1).
        backend: "gloo" or "nccl".
        timeout: seconds for the whole run, start-up included (importing torch takes a few
            seconds per process).
        threads: torch threads per process (default: the CPU cores divided among the ranks).

    Raises :class:`LaunchError` when a rank raises (its exception type, message and
    traceback; the first rank to fail is named first), dies without reporting, or when the
    run is not done within ``timeout`` (the unfinished ranks are named, with the function
    each one was in). Every process has ended when ``launch`` returns or raises.
    TypeError for a function that fresh processes cannot import or arguments that cannot be
    pickled; ValueError for a bad ``world_size``, ``backend`` or ``timeout``. Chapter 14.
    """
    _check_importable(fn)
    if isinstance(world_size, bool) or not isinstance(world_size, numbers.Integral) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer; got {world_size!r}")
    world_size = int(world_size)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}; got {backend!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not (0 < timeout < math.inf):
        raise ValueError(f"timeout must be a positive number of seconds; got {timeout!r}")
    timeout = float(timeout)
    threads = _threads_per_rank(world_size) if threads is None else threads
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        raise ValueError(f"threads must be a positive integer; got {threads!r}")
    import torch
    import torch.distributed as dist
    from multiprocessing.connection import wait

    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(f"backend='nccl' needs one CUDA GPU per rank: world_size={world_size} but torch sees "
                         f"{torch.cuda.device_count()} GPU(s); use backend='gloo' with CPU tensors")
    try:
        blob = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:
        raise TypeError(f"launch sends fn and its arguments to every process by pickling them, and "
                        f"they could not be pickled: {type(err).__name__}: {err}") from None

    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout))
    ctx = _start_context()
    tmp = tempfile.mkdtemp(prefix="attn_edu_launch_")
    procs: List[Any] = []
    conns: Dict[int, Any] = {}
    results: Dict[int, Any] = {}
    failures: List[_Failure] = []
    lifeline, lifeline_end = ctx.Pipe(duplex=False)  # the ranks get the read end; see _watch_launcher
    start = time.monotonic()
    try:
        for rank in range(world_size):
            reader, writer = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, name=f"attn_edu rank {rank}", daemon=True,
                            args=(rank, world_size, store.port, backend, timeout, blob, writer, threads,
                                  os.path.join(tmp, f"rank{rank}.txt"), lifeline))
            with _startable_main():
                p.start()
            writer.close()
            procs.append(p)
            conns[rank] = reader
        deadline = start + timeout
        pending = set(range(world_size))
        closed = set()  # ranks whose pipe reached end-of-file without a message
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            handles = [conns[r] for r in pending - closed] + [procs[r].sentinel for r in pending]
            ready = set(wait(handles, timeout=remaining))
            for rank in sorted(pending):
                conn, proc = conns[rank], procs[rank]
                if conn not in ready and proc.sentinel not in ready:
                    continue
                msg = None
                if rank not in closed:
                    try:
                        if conn.poll():
                            msg = pickle.loads(conn.recv_bytes())
                    except (EOFError, OSError):
                        closed.add(rank)
                if msg is None:
                    if proc.is_alive():
                        continue
                    proc.join(timeout=1)
                    failures.append(_Failure(rank, time.time(), "died",
                                             f"rank {rank} exited with code {proc.exitcode} without "
                                             "reporting a result (it failed to start, was killed, ran out of "
                                             "memory or crashed in C code; its standard error says which)"))
                elif msg[0] == "ok":
                    results[rank] = msg[2]
                else:
                    _, _, when, name, text, tb = msg
                    failures.append(_Failure(rank, when, "raised", f"rank {rank} raised {name}: {text}", tb))
                pending.discard(rank)
            if failures:  # give near-simultaneous failures a moment to arrive, then stop
                deadline = min(deadline, time.monotonic() + 1.0)
        if failures:
            failures.sort(key=lambda f: (_consequence(f), f.when))
            first = failures[0]
            message = f"{first.summary} (world_size={world_size})"
            if first.details:
                message += f"\n--- traceback of rank {first.rank} ---\n{first.details.rstrip()}"
            if len(failures) > 1:
                message += "\nafterwards: " + "; ".join(_short(f.summary) for f in failures[1:])
            raise LaunchError(message, first.kind, [f.rank for f in failures], [p.pid for p in procs])
        if len(results) < world_size:
            late = sorted(set(range(world_size)) - set(results))
            if hasattr(signal, "SIGUSR1"):
                for r in late:
                    if procs[r].is_alive():
                        os.kill(procs[r].pid, signal.SIGUSR1)
                time.sleep(0.5)
            where, culprits = [], []
            for r in late:
                try:
                    with open(os.path.join(tmp, f"rank{r}.txt")) as fh:
                        text, waiting = _where(fh.read())
                except OSError:
                    text, waiting = "(no stack available)", True
                where.append(f"  rank {r}: in {text}")
                if not waiting:
                    culprits.append(r)
            if culprits and len(culprits) < len(late):
                where.append(f"  (rank{'s' if len(culprits) > 1 else ''} {', '.join(map(str, culprits))} "
                             "not inside torch.distributed: the likely cause; the others wait for it)")
            ranks = ", ".join(map(str, late))
            raise LaunchError(
                f"rank{'s' if len(late) > 1 else ''} {ranks} of {world_size} did not finish within "
                f"timeout={timeout:g} s (a rank that hangs keeps the others waiting for it in their "
                "collectives); where each one was:\n" + "\n".join(where),
                "timeout", late, [p.pid for p in procs])
        return [results[r] for r in range(world_size)]
    finally:
        _stop(procs)
        for c in (*conns.values(), lifeline, lifeline_end):
            c.close()
        shutil.rmtree(tmp, ignore_errors=True)
        del store
