"""Chapter 11's self-checking exercise: a sliding-window mask for decoding with a cache."""
from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from ..masks import causal_offset
from ..i18n import gettext as _
from ._harness import Case, checker, describe


def _gold_window(lq: int, lk: int, window: int) -> np.ndarray:
    # query i sits at position i + lk - lq (bottom-right alignment); (lq, lk) bool
    pos = np.arange(lq)[:, None] + causal_offset(lq, lk, "bottom_right")
    dist = pos - np.arange(lk)[None, :]
    return (dist >= 0) & (dist < window)


def _judge(expected: np.ndarray):
    def judge(got: Any) -> Optional[str]:
        g = np.asarray(got)
        if g.shape != expected.shape:
            return _("expected shape {want}, got {got}").format(want=expected.shape, got=describe(got))
        if g.dtype != bool:
            return _("expected a boolean mask (True = may attend), got dtype {dtype}").format(dtype=g.dtype)
        bad = np.argwhere(g != expected)
        if len(bad):
            i, j = (int(x) for x in bad[0])
            return _("entry (query {i}, key {j}) should be {want}, got {got} ({n} wrong entries in all)").format(
                i=i, j=j, want=bool(expected[i, j]), got=bool(g[i, j]), n=len(bad))
        return None

    return judge


__all__ = ["check_sliding_window_mask"]


@checker("sliding_window_mask", chapter=11)
def check_sliding_window_mask() -> List[Case]:
    """Grade ``fn(lq, lk, window) -> mask``: a causal sliding window, bottom-right aligned.

    The ``lq`` queries are the *last* ``lq`` of ``lk`` positions (decoding with a KV cache):
    query ``i`` sits at position ``p = i + lk - lq`` and may attend to key ``j`` when
    ``0 <= p - j < window`` (itself and the ``window - 1`` keys before it). Returns an
    ``(lq, lk)`` boolean array, True = may attend. When ``lq > lk`` the first ``lq - lk``
    queries have no key at all: their rows are all False.
    """
    shapes = [
        ("square, n = 9, window 3 (the chapter's mask)", (9, 9, 3)),
        ("window 1: only the diagonal", (5, 5, 1)),
        ("window >= length: the plain causal mask", (6, 6, 10)),
        ("decoding one token against a cache of 11", (1, 11, 4)),
        ("a chunk of 3 new queries, 10 keys (bottom-right alignment)", (3, 10, 4)),
        ("odd sizes, 7 queries and 13 keys, window 5", (7, 13, 5)),
        ("more queries than keys: the first rows see nothing", (6, 4, 2)),
    ]
    return [Case(name, args, _judge(_gold_window(*args)),
                 shown=f"lq={args[0]}, lk={args[1]}, window={args[2]}") for name, args in shapes]
