"""Chapter 05's self-checking exercise: a causal mask aligned bottom-right, the mask that
decoding with a KV cache needs."""
from __future__ import annotations

from typing import Callable, List, Optional

import numpy as np

from ..masks import causal_mask
from ..i18n import gettext as _
from ._harness import Case, checker

__all__ = ["check_bottom_right_mask"]


def _mask_complaint(got, expected: np.ndarray) -> Optional[str]:
    """None when ``got`` is a boolean array equal to ``expected``; otherwise what differs
    (shape, dtype, or the first (query, key) pair with the wrong value)."""
    try:
        is_torch = type(got).__module__.split(".")[0] == "torch"
        g = got.detach().cpu().numpy() if is_torch else np.asarray(got)
    except Exception:  # noqa: BLE001 - anything that is not array-like
        return _("expected a boolean array, got {type}").format(type=type(got).__name__)
    e = np.asarray(expected)
    if g.shape != e.shape:
        return _("expected shape {want} (L_q, L_k), got shape {got}").format(want=e.shape, got=g.shape)
    if g.dtype != np.bool_:
        return _("expected a boolean array (True = may attend), got dtype {dtype}").format(dtype=g.dtype)
    bad = np.argwhere(g != e)
    if len(bad):
        i, j = (int(t) for t in bad[0])
        want = _("True (may attend)") if e[i, j] else _("False (masked)")
        return _("query {i}, key {j} should be {want}; {n} of {size} entries differ\n"
                 "   expected:\n{expected}\n   got:\n{got}").format(
            i=i, j=j, want=want, n=len(bad), size=e.size, expected=e.astype(int), got=g.astype(int))
    return None


def _judge(expected: np.ndarray) -> Callable:
    return lambda got: _mask_complaint(got, expected)


@checker("bottom_right_mask", chapter=5)
def check_bottom_right_mask() -> List[Case]:
    """Grade ``fn(lq, lk)``: the causal mask for ``lq`` queries that are the **last**
    ``lq`` of ``lk`` positions, a boolean ``(lq, lk)`` array, True = may attend:
    ``M[i, j] = j <= i + lk - lq`` (0-based). Hidden cases include ``lq == lk``, one
    query against a cache, and ``lq > lk``, where the first ``lq - lk`` rows are fully
    masked.
    """
    shapes = [(4, 4, "square: the ordinary causal mask"),
              (1, 6, "one new token after a cache of 5: it sees every key"),
              (2, 5, "two new tokens at the end of 5 positions"),
              (3, 8, "odd lengths, Lq < Lk"),
              (1, 1, "a single position"),
              (5, 2, "Lq > Lk: the first 3 rows are fully masked"),
              (7, 3, "Lq > Lk with odd lengths")]
    return [Case(name, (lq, lk), _judge(np.asarray(causal_mask(lq, lk, "bottom_right"))),
                 shown=f"lq={lq}, lk={lk}") for lq, lk, name in shapes]
