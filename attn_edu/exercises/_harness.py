"""The machinery behind every self-checking exercise (this package's one home for it).

A checker runs the reader's function on hidden :class:`Case` s and returns a
:class:`Result`: passed (and on how many cases), or the first case that failed -- its
name, the input, what was expected and what came back. A checker never raises because
the reader's function is wrong or unfinished (a ``NotImplementedError`` stub is
reported, not thrown), so a chapter's "your turn" cell runs in the built book as well.

Chapter modules (``ch03.py`` ...) declare their checkers with :func:`checker`, which
also records them in :data:`CHECKERS`, so the tests can prove that every checker catches
wrong answers.
"""
from __future__ import annotations

import dataclasses
import functools
import traceback
from typing import Any, Callable, Dict, Iterable, Optional, Sequence

import numpy as np

from ..i18n import gettext as _
from ..testing import to_numpy

__all__ = ["Case", "Result", "CHECKERS", "checker", "run_cases", "compare_arrays", "compare_parts",
           "describe"]


@dataclasses.dataclass(frozen=True)
class Case:
    """One hidden test: call ``fn(*args, **kwargs)`` and compare with ``expected``.

    ``expected`` is an array-like (compared by :func:`compare_arrays` with ``atol`` and
    ``rtol``), or a callable ``judge(got) -> Optional[str]`` that returns a complaint or
    None. ``shown`` is how the input is described in a failure message (default: the
    arguments, summarised by :func:`describe`).
    """

    name: str
    args: tuple
    expected: Any
    kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    atol: float = 1e-8
    rtol: float = 1e-6
    shown: Optional[str] = None
    dtype: Optional[str] = None  # when set, the result must have this dtype ("float32", ...)

    def input_text(self) -> str:
        if self.shown is not None:
            return self.shown
        parts = [describe(a) for a in self.args]
        parts += [f"{k}={describe(v)}" for k, v in self.kwargs.items()]
        return ", ".join(parts)


@dataclasses.dataclass
class Result:
    """What a checker found. Truthy when every case passed; shows itself as a message."""

    exercise: str
    passed: bool
    cases_run: int
    cases_total: int
    failed_case: Optional[str] = None
    message: str = ""

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return self.message

    def _repr_markdown_(self) -> str:  # Jupyter shows this; plain text elsewhere
        return self.message.replace("\n", "  \n")

    def raise_if_failed(self) -> "Result":
        """For tests and scripts: an ``AssertionError`` with the message when a case failed."""
        if not self.passed:
            raise AssertionError(self.message)
        return self


#: Every checker, by exercise name (filled in by :func:`checker`).
CHECKERS: Dict[str, Callable[[Callable], Result]] = {}


def checker(name: str, chapter: int) -> Callable:
    """Register ``check_<name>`` for chapter ``chapter``.

    The decorated function takes the reader's function and returns the list of
    :class:`Case` s; the decorator turns it into a checker returning a :class:`Result`.
    Extra keyword arguments of the decorated function are passed through.
    """

    def wrap(make_cases: Callable[..., Sequence[Case]]) -> Callable[..., Result]:
        @functools.wraps(make_cases)
        def check(fn: Callable, **options: Any) -> Result:
            if not callable(fn):
                raise TypeError(f"check_{name} needs your function; got {type(fn).__name__} {fn!r}")
            return run_cases(name, fn, make_cases(**options))

        check.exercise = name  # type: ignore[attr-defined]
        check.chapter = chapter  # type: ignore[attr-defined]
        CHECKERS[name] = check
        return check

    return wrap


def describe(x: Any, max_items: int = 12) -> str:
    """A short, readable description of an argument for a failure message."""
    if isinstance(x, (np.ndarray,)) or type(x).__module__.split(".")[0] == "torch":
        arr = to_numpy(x) if type(x).__module__.split(".")[0] == "torch" else np.asarray(x)
        kind = "tensor" if type(x).__module__.split(".")[0] == "torch" else "array"
        head = f"{kind} of shape {tuple(arr.shape)}, dtype {getattr(x, 'dtype', arr.dtype)}".replace("torch.", "")
        if arr.size <= max_items:
            body = np.array2string(arr, precision=4, separator=", ", max_line_width=10**6)
            return f"{head}: {' '.join(body.split())}"
        return head
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def _first_bad(bad: np.ndarray) -> tuple:
    return tuple(int(i) for i in np.argwhere(bad)[0])


def compare_arrays(got: Any, expected: Any, atol: float = 1e-8, rtol: float = 1e-6) -> Optional[str]:
    """None when ``got`` equals ``expected`` (same shape, NaN in the same places, values
    within ``atol + rtol * |expected|``); otherwise a sentence saying what differs."""
    if got is None:
        return _("your function returned None (did you forget `return`?)")
    try:
        g = to_numpy(got)
    except Exception:  # noqa: BLE001 - anything that is not array-like
        return _("expected an array, got {type}").format(type=type(got).__name__)
    e = np.asarray(to_numpy(expected))
    if g.shape != e.shape:
        return _("expected shape {want}, got shape {got}").format(want=e.shape, got=g.shape)
    nan_g, nan_e = np.isnan(g), np.isnan(e)
    if (nan_g & ~nan_e).any():
        idx = _first_bad(nan_g & ~nan_e)
        return _("got NaN at index {idx}, expected {want}").format(idx=idx, want=f"{e[idx]:.6g}")
    if (nan_e & ~nan_g).any():
        idx = _first_bad(nan_e & ~nan_g)
        return _("expected NaN at index {idx} (NaN in the input must propagate), got {got}").format(
            idx=idx, got=f"{g[idx]:.6g}")
    ok = ~nan_e
    inf_mismatch = ok & (np.isinf(g) | np.isinf(e)) & (g != e)
    if inf_mismatch.any():
        idx = _first_bad(inf_mismatch)
        return _("at index {idx} expected {want}, got {got}").format(idx=idx, want=f"{e[idx]:.6g}",
                                                                     got=f"{g[idx]:.6g}")
    finite = ok & np.isfinite(e)
    with np.errstate(invalid="ignore"):  # inf - inf where both are -inf (compared above)
        err = np.where(finite, np.abs(g - e), 0.0)
    bad = err > atol + rtol * np.abs(np.where(finite, e, 0.0))
    if bad.any():
        idx = _first_bad(bad)
        return _("at index {idx} expected {want}, got {got} (largest difference {diff})").format(
            idx=idx, want=f"{e[idx]:.6g}", got=f"{g[idx]:.6g}", diff=f"{float(err.max()):.3g}")
    return None


def compare_parts(got: Any, parts: Dict[str, Any], atol: float, rtol: float,
                  dtype: Optional[str] = None) -> Optional[str]:
    """None when ``got`` is a tuple of arrays equal to ``parts`` (name -> expected array, in
    order) by :func:`compare_arrays`, each of ``dtype`` when one is given; otherwise a
    sentence naming the part that differs (or saying the tuple has the wrong length)."""
    names = tuple(parts)
    if not isinstance(got, (tuple, list)) or len(got) != len(names):
        text = (_("expected a pair ({names}), got {got}") if len(names) == 2
                else _("expected a tuple ({names}), got {got}"))
        return text.format(names=", ".join(names), got=describe(got))
    for name, value, want in zip(names, got, parts.values()):
        complaint = _dtype_complaint(value, dtype) or compare_arrays(value, want, atol, rtol)
        if complaint:
            return f"{name}: {complaint}"
    return None


def _call(fn: Callable, case: Case):
    # the reader's overflow is reported by the comparison, not as a stream of NumPy warnings
    with np.errstate(all="ignore"):
        return fn(*case.args, **case.kwargs)


def _dtype_complaint(got: Any, want: Optional[str]) -> Optional[str]:
    if want is None:
        return None
    seen = str(getattr(got, "dtype", type(got).__name__)).replace("torch.", "")
    return None if seen == want else _("expected dtype {want} (the input's), got {got}").format(want=want, got=seen)


def run_cases(name: str, fn: Callable, cases: Iterable[Case]) -> Result:
    """Run ``fn`` on every case in order; stop at the first failure."""
    cases = list(cases)
    total = len(cases)
    fn_name = getattr(fn, "__name__", "your function")
    for i, case in enumerate(cases, start=1):
        try:
            got = _call(fn, case)
        except NotImplementedError:
            return Result(name, False, i, total, case.name,
                          _("✗ {name}: `{fn}` is not written yet (it raised NotImplementedError). "
                            "Fill in its body and run the check again.").format(name=name, fn=fn_name))
        except Exception as err:  # noqa: BLE001 - the reader's bug, reported not raised
            where = traceback.extract_tb(err.__traceback__)[-1]
            return Result(name, False, i, total, case.name,
                          _("✗ {name}: case {i}/{total} ({case}) raised {error}\n"
                            "   input: {input}\n"
                            "   (line {line}: `{code}`)").format(
                              name=name, i=i, total=total, case=case.name,
                              error=f"{type(err).__name__}: {err}", input=case.input_text(),
                              line=where.lineno, code=(where.line or "").strip()))
        if got is None:
            complaint = _("your function returned None (did you forget `return`?)")
        else:
            complaint = _dtype_complaint(got, case.dtype)
        if complaint:
            pass
        elif callable(case.expected):
            complaint = case.expected(got)
        else:
            complaint = compare_arrays(got, case.expected, case.atol, case.rtol)
        if complaint:
            return Result(name, False, i, total, case.name,
                          _("✗ {name}: case {i}/{total} ({case}) failed: {complaint}\n"
                            "   input: {input}").format(name=name, i=i, total=total, case=case.name,
                                                        complaint=complaint, input=case.input_text()))
    return Result(name, True, total, total, None,
                  _("✓ {name}: all {total} hidden cases passed.").format(name=name, total=total))
