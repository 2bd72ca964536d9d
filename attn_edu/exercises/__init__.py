"""Self-checking exercises: every chapter's "your turn" cell calls a checker here.

::

    from attn_edu import exercises

    def my_softmax(x):
        ...                                   # your code
    exercises.check_stable_softmax(my_softmax)   # ✓ all 8 hidden cases passed / ✗ which case failed

A checker runs your function on hidden cases (odd lengths, fully masked rows, huge
logits, ...) and answers with a :class:`Result`: passed, or the first case that failed,
on what input, expected vs. got. It never raises because your function is wrong or
unfinished. ``exercises.CHECKERS`` lists every checker by name.

One module per chapter (``ch03.py`` ...) holds that chapter's checkers; the shared
machinery is in ``_harness.py``.
"""
from __future__ import annotations

from ._harness import CHECKERS, Case, Result, compare_arrays, describe, run_cases
from .ch03 import check_stable_softmax
from .ch05 import check_bottom_right_mask
from .ch06 import check_split_heads
from .ch07 import check_rollout
from .ch08 import check_attention_flops
from .ch13 import check_merge_partials, check_page_slot
from .ch14 import check_merge_ranks

__all__ = ["CHECKERS", "Case", "Result", "compare_arrays", "describe", "run_cases",
           "check_stable_softmax", "check_bottom_right_mask", "check_split_heads",
           "check_rollout", "check_attention_flops",
           "check_merge_partials", "check_page_slot",
           "check_merge_ranks"]

# chapters 01, 02, 04
from .ch01 import check_attention  # noqa: E402
from .ch02 import check_dot_product_moments  # noqa: E402
from .ch04 import check_rotary  # noqa: E402

__all__ += ["check_attention", "check_dot_product_moments", "check_rotary"]

# chapters 09-12
from .ch09 import check_online_softmax_update  # noqa: E402
from .ch10 import check_scores_gradient  # noqa: E402
from .ch11 import check_sliding_window_mask  # noqa: E402
from .ch12 import check_decay_mask  # noqa: E402

__all__ += ["check_online_softmax_update", "check_scores_gradient",
            "check_sliding_window_mask", "check_decay_mask"]

from . import _harness  # noqa: E402  (documented here, where the API page reads it)

#: Every checker, by name; ``CHECKERS["stable_softmax"](fn)`` grades ``fn`` and returns a :class:`Result`.
CHECKERS = _harness.CHECKERS
