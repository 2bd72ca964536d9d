"""Launch decisions made once per key: the one cache of the launchers and the front door.

What a kernel call decides from shapes, dtypes and the GPU (the configuration, TMA, the
split count, the kernel's integer arguments) and whether its inputs pass the front door's
check are pure functions of a few hashable facts. :func:`plan_cache` files each answer
under its key, so a second call with the same facts costs a lookup. Every cached function
is registered in ``PLAN_CACHES``: the host-overhead benchmark (:mod:`attn_edu.bench.host`)
reads their hit counts and, in :func:`uncached_plans`, runs without them. Importing this
module imports nothing heavy (the front door's module, ``_targets``, uses it without
triton); package-internal (the underscore).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
from typing import Any, Callable, Dict, NamedTuple, Optional

__all__ = ["PLAN_CACHES", "PLANS_MAX", "CacheInfo", "plan_cache", "uncached_plans"]

#: The functions cached per key (:func:`plan_cache`), by qualified name
#: ("attn_edu.kernels.decode_triton._decode_config").
PLAN_CACHES: Dict[str, Any] = {}
#: How many keys one cached function keeps.
PLANS_MAX = 4096


class CacheInfo(NamedTuple):
    """What ``cache_info()`` of a :func:`plan_cache` function says, as ``functools.lru_cache``'s."""
    hits: int
    misses: int
    maxsize: int
    currsize: int


_MISSING = object()


def plan_cache(fn: Optional[Callable] = None, *, key: Optional[Callable[..., Optional[tuple]]] = None) -> Callable:
    """Decide once per key: ``fn`` (a pure function of what the key reads of its arguments)
    behind a table of the answers it gave, registered in ``PLAN_CACHES``. Used bare
    (``@plan_cache``) the key is the arguments themselves (shapes, strides, dtypes, the
    device, its compute capability, flags) with their types: ``True`` and ``1`` are
    different keys, so a check inside ``fn`` that refuses a bool still refuses it; the
    table is then ``functools.lru_cache(maxsize=PLANS_MAX, typed=True)`` (the lookup in C:
    these run on every kernel call). ``@plan_cache(key=facts)`` files a call under
    ``facts(*args)`` instead (the front door: the facts of its tensors, not the tensors);
    a key of None means "check in full, remember nothing", and the table is emptied when it
    holds ``PLANS_MAX`` keys.

    A call whose key cannot be hashed (a list where an int belongs) goes to ``fn`` uncached,
    whose checks then name it. A call that raises caches nothing. The wrapper keeps
    ``cache_info()``, ``cache_clear()`` and the uncached function as ``__wrapped__``."""
    if fn is None:
        return functools.partial(plan_cache, key=key)
    if key is None:
        cached = functools.lru_cache(maxsize=PLANS_MAX, typed=True)(fn)

        @functools.wraps(fn)
        def wrapper(*args):
            try:
                hash(args)
            except TypeError:
                return fn(*args)
            return cached(*args)

        wrapper.cache_info, wrapper.cache_clear = cached.cache_info, cached.cache_clear
    else:
        wrapper = _keyed(fn, key)
    PLAN_CACHES[f"{fn.__module__}.{fn.__qualname__}"] = wrapper
    return wrapper


def _keyed(fn: Callable, key: Callable[..., Optional[tuple]]) -> Callable:
    """``fn`` behind a dict filed by ``key(*args)``: :func:`plan_cache` with a key."""
    table: Dict[tuple, Any] = {}
    counts = [0, 0]  # hits, misses

    @functools.wraps(fn)
    def wrapper(*args):
        k = key(*args)
        answer = _MISSING
        if k is not None:
            try:
                answer = table.get(k, _MISSING)
            except TypeError:  # an unhashable argument: computed, not cached
                k = None
        if answer is not _MISSING:
            counts[0] += 1
            return answer
        counts[1] += 1
        answer = fn(*args)
        if k is not None:
            if len(table) >= PLANS_MAX:
                table.clear()
            table[k] = answer
        return answer

    def cache_info() -> CacheInfo:
        return CacheInfo(counts[0], counts[1], PLANS_MAX, len(table))

    def cache_clear() -> None:
        table.clear()
        counts[:] = [0, 0]

    wrapper.cache_info, wrapper.cache_clear = cache_info, cache_clear
    return wrapper


@contextlib.contextmanager
def uncached_plans():
    """Within this block every :func:`plan_cache` function is replaced, in its module, by
    the uncached original: each call decides everything again, as the launchers did before
    the caches (the host-overhead benchmark's "before")."""
    saved = []
    for qualified, wrapper in PLAN_CACHES.items():
        module_name, _, name = qualified.rpartition(".")
        module = importlib.import_module(module_name)
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, wrapper.__wrapped__)
    try:
        yield
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
