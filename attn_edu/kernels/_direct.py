"""Launch a compiled Triton kernel again without Triton's per-call dispatch.

``kernel[grid](*args, **kwargs)`` spends host time on every call (20 to 30 us a launch on our
2-core CPU, ``python -m attn_edu.bench --host-overhead``), most of it in ``JITFunction.run``
binding the arguments, computing their specialization (the type of each
argument, whether a pointer is 16-byte aligned, whether an integer is 1 or a multiple of 16)
and looking the compiled kernel up. A decode step launches two kernels whose work on a GPU
takes tens of microseconds: Triton's dispatch is then as long as the work.

:func:`launch` answers the lookup from a finer key computed in Python (each argument's
class of values, see :func:`arg_key`; a host TMA descriptor, FlashAttention-3's four, by its
dtype and block shape): the first call with a key goes through Triton as
before and keeps the ``CompiledKernel`` it returns; a later call with the same key launches
that kernel with the same arguments, in the same order, through the same C launcher
``JITFunction.run`` calls (``CompiledKernel.run``; Triton's launch hooks and the description
of the launch they are called with are passed as None when no hook is registered,
:func:`_idle`). Two calls with the same key have the
same specialization (every fact Triton specializes on is in the key, and more), so the
kernel Triton would have chosen is the one launched. Everything else goes through Triton:
the interpreter; a kernel whose ``run`` is replaced (the compile-only launches of
``_compile_ahead``, a benchmark's stub); launch hooks before a launch (``pre_run_hooks``) or
a compile-stage hook; a kernel once given an argument of another kind (one ``arg_key`` has no
key for, a descriptor of fields it does not know among them); a constexpr passed by
position; a global the kernel
reads bound to another object since (Triton compares the values, and raises if they
differ). ``torch.compile``'s Inductor launches its Triton kernels the same way, through
``CompiledKernel.run``.

The key also holds the current device and the compile options Triton reads from its knobs
(``TRITON_DEBUG`` and the instrumentation mode). ``tests/test_direct_launch.py`` checks,
with kernels compiled for sm_90a on the CPU and the C launcher recorded, that every call
launches the kernel object ``JITFunction.run`` launches, with the same arguments.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from ._shared import HAS_TRITON

_Descriptor: Any = None  # triton.tools.tensor_descriptor.TensorDescriptor, where there is one
_HookChain: Any = None  # triton.knobs.HookChain, the launch hooks' type (Triton 3.6 and 3.9)
if HAS_TRITON:
    import torch
    from triton import knobs
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    _HookChain = getattr(knobs, "HookChain", None)

    try:
        from triton.tools.tensor_descriptor import TensorDescriptor as _Descriptor
    except ImportError:  # pragma: no cover - a Triton without host descriptors
        pass

__all__ = ["launch", "arg_key", "args_key", "cached"]

#: Per kernel, by its id, ``(kernel, table)``; the table maps a key to ``(compiled kernel,
#: arguments after the positional ones, the globals' objects)``, and is None once the kernel
#: must go through Triton.
_TABLES: Dict[int, Tuple[Any, Optional[Dict[Any, Any]]]] = {}
_I32, _U64 = 2 ** 31, 2 ** 63
_MISSING = object()


class _Other(Exception):
    """An argument :func:`arg_key` has no key for: the call goes through Triton."""


def arg_key(arg: Any) -> Any:
    """What of one argument a kernel's specialization can depend on, or finer: a tensor's
    dtype and its address modulo 16; an integer's residue modulo 16 and, unless it lies in
    2 .. 2**31 - 1, whether it is 1 and which of int32, int64 and uint64 holds it; a bool's
    value; a float's or None's type; a host TMA descriptor's dtype and block shape (:func:`_descriptor_key`).
    Keys of different kinds never compare equal. Raises ``_Other`` for anything else."""
    kind = type(arg)
    if kind is int:
        return arg & 15 if 1 < arg < _I32 else (int, arg == 1, arg & 15, -_I32 <= arg < _I32, arg < _U64)
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() & 15
    if kind is bool:
        return bool, arg
    if kind is float or arg is None:
        return kind
    if kind is _Descriptor:
        return _descriptor_key(arg)
    raise _Other(kind)


#: The fields of a host TensorDescriptor in the Triton versions :func:`_descriptor_key` knows
#: (3.9 added the rounding flag); one with other fields goes through Triton.
_DESCRIPTOR_FIELDS = (("base", "shape", "strides", "block_shape", "padding", "round_f32_to_tf32"),
                      ("base", "shape", "strides", "block_shape", "padding"))


def _descriptor_key(desc: Any) -> Tuple[Any, ...]:
    """A host TMA descriptor's key: its base's dtype and its block shape (all Triton 3.6 and
    3.9 specialize a descriptor on; the C launcher reads the rest, its address, shape and
    strides, on every launch), its padding and rounding flag. ``tests/test_direct_launch.py``
    checks against Triton's own specialization that nothing else of a descriptor changes it.
    Raises ``_Other`` for a descriptor with other fields (another Triton's) or a base that is
    not a tensor."""
    fields = desc.__dict__
    base = fields.get("base")
    if tuple(fields) not in _DESCRIPTOR_FIELDS or type(base) is not torch.Tensor:
        raise _Other(tuple(fields))
    return _Descriptor, base.dtype, tuple(fields["block_shape"]), fields["padding"], fields.get("round_f32_to_tf32")


def args_key(args: Sequence[Any]) -> Tuple[Any, ...]:
    """:func:`arg_key` of each argument (the two common kinds inline: a call has ~25)."""
    out = []
    for arg in args:
        if type(arg) is int and 1 < arg < _I32:
            out.append(arg & 15)
        elif type(arg) is torch.Tensor:
            out.append((arg.dtype, arg.data_ptr() & 15))
        else:
            out.append(arg_key(arg))
    return tuple(out)


def _options() -> Tuple[Any, ...]:
    """The compile options ``JITFunction.run`` takes from Triton's knobs on each call."""
    comp = knobs.compilation
    return (knobs.runtime.debug, getattr(comp, "instrumentation_mode", None),
            getattr(comp, "fpsan_homomorphic_casts", None))


def _table(kernel: Any) -> Optional[Dict[Any, Any]]:
    """The kernel's table of compiled kernels by key, or None where it must go through Triton
    on every call (not a compiled ``JITFunction``: the interpreter, a stand-in)."""
    entry = _TABLES.get(id(kernel))
    if entry is None:
        if not (HAS_TRITON and isinstance(kernel, JITFunction)):
            return None
        entry = _TABLES[id(kernel)] = (kernel, {})
    return entry[1]  # None once an argument had no key (see launch)


def cached(kernel: Any) -> int:
    """How many compiled kernels :func:`launch` keeps for ``kernel`` (0 where none)."""
    table = _table(kernel)
    return 0 if table is None else len(table)


def launch(kernel: Any, grid: Any, *args: Any, **kwargs: Any) -> None:
    """``kernel[grid](*args, **kwargs)``, through Triton's dispatch only the first time a key
    is seen (see the module's docstring). ``grid`` is a tuple of 1 to 3 ints; ``kwargs``
    the constexprs and launch options (``num_warps``, ``num_stages``), hashable values."""
    table = _table(kernel)
    if (table is None or kernel.pre_run_hooks or "run" in kernel.__dict__  # run replaced: a stand-in's
            or getattr(knobs.runtime, "add_stages_inspection_hook", None) is not None):
        kernel[grid](*args, **kwargs)
        return
    device = driver.active.get_current_device()
    try:
        key = (device, args_key(args), tuple(kwargs.items()), _options())
        hit = table.get(key)
    except (_Other, TypeError):  # an argument of another kind (a TMA descriptor), or an
        _TABLES[id(kernel)] = (kernel, None)  # unhashable option: this kernel through Triton from now on
        kernel[grid](*args, **kwargs)
        return
    if hit is None or _globals_changed(hit[2]):
        compiled = kernel[grid](*args, **kwargs)  # Triton checks the globals' values (or raises)
        tail = _tail(kernel, len(args), kwargs)
        if isinstance(compiled, CompiledKernel) and tail is not None:
            table[key] = (compiled, tail, _globals_now(kernel))
        return
    compiled, tail, _ = hit
    full = args + tail
    stream = driver.active.get_current_stream(device)
    enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    if _idle(enter) and _idle(leave):
        meta = enter = leave = None  # no hook to call, nothing to describe the launch to
    else:  # JITFunction.run's metadata, for the hooks (a profiler's, proton's)
        meta = compiled.launch_metadata(grid, stream, *full)
    n = len(grid)
    compiled.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, stream, compiled.function,
                 compiled.packed_metadata, meta, enter, leave, *full)


def _idle(hook: Any) -> bool:
    """Whether a launch hook of Triton's knobs calls nothing: None, or a ``HookChain`` (the
    knobs' default in Triton 3.6 and 3.9) that holds no function. ``JITFunction.run`` hands
    the C launcher the chains and a ``LazyDict`` describing the launch
    (``CompiledKernel.launch_metadata``) on every launch, and the launcher calls each chain
    with it: when both chains are empty that calls nothing, so :func:`launch` passes None
    for the three, which the launcher skips (0.7 to 0.9 us of this CPU a launch for the
    description alone)."""
    return hook is None or (type(hook) is _HookChain and not hook.calls)


def _tail(kernel: Any, positional: int, kwargs: Dict[str, Any]) -> Optional[Tuple[Any, ...]]:
    """The arguments after the positional ones, in the kernel's order (a keyword's value, or
    the parameter's default), as ``JITFunction.run`` passes them to the launcher; None when a
    constexpr was passed by position (its value is not in the key)."""
    params = kernel.params
    if any(p.is_constexpr for p in params[:positional]):
        return None
    return tuple(kwargs[p.name] if p.name in kwargs else p.default for p in params[positional:])


def _globals_now(kernel: Any) -> Tuple[Tuple[Dict[str, Any], str, Any], ...]:
    """The objects the globals a kernel reads are bound to now, just after Triton checked
    their values against those it compiled with."""
    return tuple((g, name, g.get(name, _MISSING)) for (name, _), (_, g) in kernel.used_global_vals.items())


def _globals_changed(seen: Tuple[Tuple[Dict[str, Any], str, Any], ...]) -> bool:
    """Whether a global is bound to another object than when :func:`_globals_now` looked
    (then the call goes through Triton, which compares the values and raises if they differ)."""
    return any(g.get(name, _MISSING) is not obj for g, name, obj in seen)
