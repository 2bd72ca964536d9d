"""Chapter 08's self-checking exercise: count the matrix-product FLOPs of one attention
layer exactly, for queries and keys of different lengths (cross-attention)."""
from __future__ import annotations

from typing import Callable, List, Optional

from ..multihead import mha_flops
from ..i18n import gettext as _
from ._harness import Case, checker

__all__ = ["check_attention_flops"]


def _judge(expected: int) -> Callable:
    def judge(got) -> Optional[str]:
        try:
            value = int(got)
        except (TypeError, ValueError):
            return _("expected a whole number of FLOPs, got {got}").format(got=f"{type(got).__name__} {got!r}")
        if value != got:
            return _("expected a whole number of FLOPs, got {got}").format(got=repr(got))
        if value == expected:
            return None
        ratio = value / expected
        return _("expected {want} FLOPs, got {got} ({ratio} times the right count)").format(
            want=f"{expected:,}", got=f"{value:,}", ratio=f"{ratio:.3g}")

    return judge


@checker("attention_flops", chapter=8)
def check_attention_flops() -> List[Case]:
    """Grade ``fn(n_q, n_k, d)``: the matrix-product FLOPs of one attention layer of width
    ``d`` (one head, one sequence) with ``n_q`` queries and ``n_k`` keys and values: the
    four projections ``W_Q`` (on the queries' inputs), ``W_K``, ``W_V`` (on the keys'
    inputs) and ``W_O``, the scores and the weighted sum, at 2 FLOPs per multiply-add.
    Self-attention is ``n_q == n_k == n``: ``8 n d^2 + 4 n^2 d``.
    """
    shapes = [(128, 128, 64, "self-attention, n = 128, d = 64"),
              (1, 1, 8, "one token"),
              (7, 7, 5, "odd sizes"),
              (4, 1000, 64, "cross-attention: 4 queries, 1000 keys"),
              (300, 12, 48, "more queries than keys"),
              (1, 4096, 128, "one decoding query against 4096 keys")]
    return [Case(name, (nq, nk, d), _judge(mha_flops(1, nq, nk, d, 1)["total"]),
                 shown=f"n_q={nq}, n_k={nk}, d={d}") for nq, nk, d, name in shapes]
