"""An autotuned launch that pays for the autotuner once per key.

``tuner[grid](*args)`` on a ``triton.autotune`` kernel runs ``Autotuner.run`` on every call:
it rebuilds its key from all the arguments (a dict of them, then the dtype of each one that
has one) before it looks up the configuration it chose. The launchers already know that
key's equivalent, the key of their plan (:mod:`attn_edu.kernels._plans`), so
:func:`launch_autotuned` asks the autotuner only on a key's first call and afterwards
launches the kernel with the configuration it chose, as ``Autotuner.run`` itself does on a
cached key (a key's first call compiles the configurations it will time in parallel first,
``attn_edu.kernels._compile_ahead``): the configuration's pre-hook, then the kernel with its meta-parameters,
``num_warps`` and ``num_stages``. The kernel launched is the one the autotuner launched
(the same specialization and options, so Triton compiles nothing new: a test). A key of the
plan that is finer than the autotuner's only means one more look-up by the autotuner; the
kernel itself specializes on its arguments as always, so a key cannot make a launch wrong.

Package-internal (the underscore): the FlashAttention launchers call it for each autotuned
kernel. ``python -m attn_edu.bench --host-overhead`` times it against the autotuner's path.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Hashable, Optional, Sequence, Tuple

from . import _direct
from ._compile_ahead import compile_ahead

__all__ = ["CHOSEN", "chosen", "launch_autotuned"]

#: Each autotuned kernel's configuration per key in this process, (tuner, key) -> the
#: ``triton.Config`` its autotuner chose on that key's first call.
CHOSEN: Dict[Tuple[Any, Hashable], Any] = {}


def chosen(tuner: Any, key: Hashable) -> Optional[Tuple[int, int, int, int]]:
    """``(BLOCK_M, BLOCK_N, num_warps, num_stages)`` of the configuration ``tuner`` chose for
    ``key`` in this process (:func:`launch_autotuned`'s ``key``); None before its first call."""
    config = CHOSEN.get((tuner, key))
    if config is None:
        return None
    return config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.num_warps, config.num_stages


def launch_autotuned(tuner: Any, grid: Callable, args: Sequence[Any], kwargs: Dict[str, Any],
                     key: Hashable, ahead: Optional[Sequence[Tuple[Any, Sequence[Any], Dict[str, Any]]]] = None) -> Any:
    """Launch ``tuner[grid](*args, **kwargs)``; return the ``triton.Config`` it ran with.

    ``key`` (hashable) names what decides the choice, at least as finely as the autotuner's
    own key: on its first call the configurations are compiled ahead (``compile_ahead`` of
    ``ahead``, the ``(tuner, args, kwargs)`` calls to compile in one pool, by default this
    one; ``()``: none, another call's pool compiled them), the autotuner times them (or
    finds its choice) and :data:`CHOSEN` keeps it; later calls with ``key`` launch
    ``tuner.fn`` with that configuration directly (``attn_edu.kernels._direct``: Triton's
    dispatch only for a specialization's first launch). ``grid`` is called with the
    arguments by name as Triton calls it; on those later calls with the keywords and the
    configuration's (all the launchers' grids read)."""
    chosen = CHOSEN.get((tuner, key))
    if chosen is None:
        ahead = [(tuner, args, kwargs)] if ahead is None else ahead
        if ahead:
            compile_ahead(*ahead)
        tuner[grid](*args, **kwargs)
        chosen = CHOSEN[(tuner, key)] = tuner.best_config
        return chosen
    named = {**kwargs, **chosen.all_kwargs()}  # the keywords and the configuration's
    if chosen.pre_hook is not None:  # as Autotuner.run: the hook sees every argument by name
        chosen.pre_hook({**dict(zip(tuner.arg_names, args)), **named})
    # tuner.fn[grid](...) without Triton's dispatch; the grid of the keywords (what the launchers' grids read)
    _direct.launch(tuner.fn, grid(named), *args, **named)
    return chosen
