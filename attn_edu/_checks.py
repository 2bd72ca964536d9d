"""Argument checks shared by every module of attn_edu, NumPy and PyTorch alike.

Every public function validates its arguments here, so NumPy and PyTorch give the same
error, with the same words, for the same mistake. The checks work on shapes (tuples of
ints), dtype *names* (strings) and methods every array and tensor has (``.shape``,
``.dtype``, ``!=``, ``.any()``), so this module imports neither NumPy nor torch
(``check_seed`` imports NumPy when it is called).

The rule: bad input raises ``ValueError`` (wrong value or shape) or
``TypeError`` (wrong kind of object or dtype) naming the argument and what was seen.

This is a package-internal module (the leading underscore): its names are public to the
other modules of attn_edu, which call them, and not part of the API the chapters use.
One home each for: "all NumPy or all torch" (:func:`uses_torch`), the positive-integer
check (:func:`check_positive_int`), and every library-independent check of an attention
mask, including "no NaN or +inf in a float mask" (:func:`check_mask`).
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, Tuple

Shape = Tuple[int, ...]

#: Floating dtypes attention accepts, by name (NumPy and torch spell them alike).
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")

#: The accepted values of ``causal``; ``True`` means ``"top_left"``.
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


def is_torch_tensor(x: object) -> bool:
    """True for a ``torch.Tensor`` or a subclass of it, checked without importing torch."""
    return any(c.__module__.split(".")[0] == "torch" for c in type(x).__mro__)


def uses_torch(**arrays: object) -> bool:
    """True when every argument is a torch tensor, False when none is; a mix is a TypeError.

    The one statement of "all NumPy or all torch": every function that takes both kinds
    dispatches on it. ``arrays`` maps argument names to the arguments (``None`` entries
    are ignored), e.g. ``uses_torch(q=q, k=k, v=v)``.
    """
    given = {name: x for name, x in arrays.items() if x is not None}
    kinds = {name: is_torch_tensor(x) for name, x in given.items()}
    if any(kinds.values()) and not all(kinds.values()):
        listing = ", ".join(f"{n} {'torch' if t else 'NumPy'}" for n, t in kinds.items())
        names = ", ".join(given)
        raise TypeError(f"{names} must be all NumPy arrays or all torch tensors; got a mix ({listing})")
    return bool(given) and all(kinds.values())


def check_mask_kind(mask: object, torch_like: bool) -> None:
    """A mask is of the same kind as q, k and v: a torch tensor for tensors, NumPy otherwise."""
    if mask is None or is_torch_tensor(mask) == torch_like:
        return
    if torch_like:
        raise TypeError(
            f"mask is a {type(mask).__module__}.{type(mask).__name__} but q, k, v are torch "
            "tensors; convert it with torch.as_tensor(mask, device=q.device)"
        )
    raise TypeError("mask is a torch tensor but q, k, v are NumPy arrays")


def dtype_name(x: object) -> str:
    """The dtype of an array or tensor (or a dtype itself) spelled as the checks spell it:
    ``float32`` for ``np.float32`` arrays and ``torch.float32`` tensors alike."""
    return str(getattr(x, "dtype", x)).replace("torch.", "")


def check_seed(seed: object, name: str = "seed"):
    """A ``numpy.random.Generator``: as given, fresh from an integer seed, or (None) from fresh entropy."""
    import numpy as np

    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise TypeError(f"{name} must be an integer seed, a numpy.random.Generator or None; "
                        f"got {seed!r} of type {type(seed).__name__}")
    return np.random.default_rng(None if seed is None else int(seed))


def check_rank(name: str, shape: Shape) -> None:
    """An attention operand has at least two axes: (..., L, D)."""
    if len(shape) < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions (..., L, D); got shape {tuple(shape)}"
        )


def check_float_dtypes(**dtypes: str) -> str:
    """q, k, v must share one floating dtype; returns it.

    ``dtypes`` maps argument names to dtype names, e.g. ``q="float32"``.
    """
    for name, dt in dtypes.items():
        if dt not in FLOAT_DTYPES:
            raise TypeError(
                f"{name} must be a floating tensor/array (one of {', '.join(FLOAT_DTYPES)}); "
                f"got dtype {dt}. Convert integer data first, e.g. {name}.astype(np.float32)."
            )
    seen = set(dtypes.values())
    if len(seen) > 1:
        listing = ", ".join(f"{n} {d}" for n, d in dtypes.items())
        raise TypeError(f"q, k and v must have the same dtype; got {listing}")
    return next(iter(seen))


def broadcast_shapes(a: Shape, b: Shape) -> Optional[Shape]:
    """NumPy broadcasting of two shapes, or None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def check_qkv_shapes(q: Shape, k: Shape, v: Shape, enable_gqa: bool = False) -> Tuple[Shape, int]:
    """Check (..., Lq, Dk), (..., Lk, Dk), (..., Lk, Dv); return (batch shape, gqa group size).

    Leading (batch, head) axes broadcast as in NumPy. With ``enable_gqa=True`` the
    head axis (third from the end) of q may be a multiple of that of k and v
    (grouped-query / multi-query attention); the group size is returned.
    """
    check_rank("q", q)
    check_rank("k", k)
    check_rank("v", v)
    if q[-1] != k[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d_k; got q {tuple(q)} (d_k={q[-1]}) "
            f"and k {tuple(k)} (d_k={k[-1]})"
        )
    if q[-1] < 1:
        raise ValueError(f"the head dimension d_k must be at least 1; got q {tuple(q)}")
    if k[-2] != v[-2]:
        raise ValueError(
            f"k and v must have the same length L_k (second to last axis); got k {tuple(k)} "
            f"and v {tuple(v)}"
        )
    if k[:-2] != v[:-2]:
        raise ValueError(
            f"k and v must have the same leading (batch, head) axes; got k {tuple(k)} and v {tuple(v)}"
        )
    group = 1
    qb, kb = tuple(q[:-2]), tuple(k[:-2])
    if enable_gqa:
        if len(q) < 3 or len(k) < 3:
            raise ValueError(
                "enable_gqa=True needs a head axis: q and k of shape (..., H, L, D); "
                f"got q {tuple(q)} and k {tuple(k)}"
            )
        hq, hkv = q[-3], k[-3]
        if hkv < 1 or hq % hkv != 0:
            raise ValueError(
                f"grouped-query attention needs the number of query heads to be a multiple of "
                f"the number of key/value heads; got Hq={hq} (q {tuple(q)}) and Hkv={hkv} (k {tuple(k)})"
            )
        group = hq // hkv
        qb, kb = qb[:-1], kb[:-1]
    batch = broadcast_shapes(qb, kb)
    if batch is None:
        hint = ""
        if len(q) >= 3 and len(k) >= 3 and q[-3] != k[-3] and not enable_gqa:
            hint = " (for grouped-query attention with fewer k/v heads pass enable_gqa=True)"
        raise ValueError(
            f"the leading (batch, head) axes of q and k must match or broadcast; got q {tuple(q)} "
            f"and k {tuple(k)}{hint}"
        )
    if enable_gqa:
        batch = batch + (q[-3],)
    return batch, group


def check_scale(scale: object, d_k: int) -> float:
    """``None`` gives 1/sqrt(d_k); otherwise a finite, non-zero real number."""
    if scale is None:
        return 1.0 / math.sqrt(d_k)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None; got {scale!r} of type {type(scale).__name__}")
    value = float(scale)
    if not math.isfinite(value):
        raise ValueError(f"scale must be finite; got {value}")
    if value == 0.0:
        raise ValueError(
            "scale must be non-zero (scale=0 throws the scores away and gives every key the same "
            "weight; that is almost always a bug such as integer division); got 0"
        )
    return value


def check_real(name: str, value: object, *, positive: bool = False, nonnegative: bool = False) -> float:
    """A finite real number (bools rejected); optionally > 0 or >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r} of type {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite; got {v}")
    if positive and v <= 0:
        raise ValueError(f"{name} must be > 0; got {v}")
    if nonnegative and v < 0:
        raise ValueError(f"{name} must be >= 0; got {v}")
    return v


def check_causal(causal: object) -> Optional[str]:
    """Normalise ``causal`` to None, "top_left" or "bottom_right"."""
    if causal is False or causal is None:
        return None
    if causal is True:
        return "top_left"
    if isinstance(causal, str):
        if causal in CAUSAL_ALIGNMENTS:
            return causal
        raise ValueError(
            f"causal must be False, True, 'top_left' or 'bottom_right'; got {causal!r}"
        )
    # numpy.bool_ and similar
    if type(causal).__name__ in ("bool_", "bool"):
        return "top_left" if bool(causal) else None
    raise TypeError(
        f"causal must be False, True, 'top_left' or 'bottom_right'; got {causal!r} of type "
        f"{type(causal).__name__}"
    )


def check_causal_given_once(mask_alignment: Optional[str], causal: Optional[str]) -> None:
    """A mask made by ``causal_mask`` (tagged with its alignment) plus ``causal=...`` is an error."""
    if mask_alignment is not None and causal is not None:
        raise ValueError(
            f"causal={causal!r} was given together with a mask that is already a causal mask "
            f"(alignment {mask_alignment!r}); pass one or the other, so the alignment is stated once"
        )


FLOAT_MASK_VALUES = "a float mask must not contain NaN or +inf (use 0 to allow, -inf to block)"


def check_float_mask_values(mask: object) -> None:
    """A float mask holds finite numbers and ``-inf`` only: NaN or ``+inf`` is a ValueError.

    Works on NumPy arrays and torch tensors alike (``x != x`` is true exactly for NaN).
    """
    if bool((mask != mask).any()) or bool((mask == float("inf")).any()):
        raise ValueError(FLOAT_MASK_VALUES)


def check_mask(mask: object, scores: Optional[Shape] = None, causal: Optional[str] = None) -> str:
    """Every library-independent check of an attention mask; returns "bool" or "float".

    The dtype (boolean or floating), the shape (broadcastable to ``scores`` = (..., L_q, L_k),
    when given), the values of a float mask (:func:`check_float_mask_values`) and a causal
    mask given twice: ``mask.causal_alignment`` (set on masks made by ``causal_mask``)
    together with ``causal=...``. NumPy arrays and torch tensors alike.
    """
    kind = check_mask_dtype(dtype_name(mask))
    if scores is not None:
        check_mask_shape(tuple(mask.shape), tuple(scores))
    check_causal_given_once(getattr(mask, "causal_alignment", None), causal)
    if kind == "float":
        check_float_mask_values(mask)
    return kind


def check_mask_dtype(dtype_name: str) -> str:
    """A mask is boolean (True = may attend) or floating (added to the scores)."""
    if dtype_name == "bool":
        return "bool"
    if dtype_name in FLOAT_DTYPES:
        return "float"
    raise TypeError(
        f"mask must be boolean (True = may attend) or floating (added to the scores); got dtype "
        f"{dtype_name}. A 0/1 integer mask is ambiguous: convert it with mask.astype(bool) "
        "(NumPy) or mask.bool() (torch)."
    )


def check_mask_shape(mask: Shape, scores: Shape) -> None:
    """The mask must broadcast to the scores' shape (..., Lq, Lk) without enlarging it."""
    b = broadcast_shapes(tuple(mask), tuple(scores))
    if b is None or tuple(b) != tuple(scores):
        raise ValueError(
            f"mask of shape {tuple(mask)} does not broadcast to the attention scores' shape "
            f"{tuple(scores)} (..., L_q, L_k)"
        )


def _int_at_least(name: str, value: object, minimum: int, kind: str) -> int:
    if type(value) is int and value >= minimum:  # the common case, without the ABC's isinstance
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {kind}; got {value!r} of type {type(value).__name__}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {value}")
    return int(value)


def check_positive_int(name: str, value: object) -> int:
    """A positive integer (>= 1; bools rejected): tile sizes, windows, head dimensions, counts."""
    return _int_at_least(name, value, 1, "a positive integer")


def check_length(name: str, value: object, minimum: int = 0) -> int:
    """A sequence length or a count: an integer >= ``minimum`` (0 by default; bools rejected)."""
    return _int_at_least(name, value, minimum, "an integer")


def same_devices(**devices: object) -> None:
    """All tensors on one device (torch only; NumPy has a single device)."""
    seen = set(str(d) for d in devices.values())
    if len(seen) > 1:
        listing = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"all inputs must be on the same device; got {listing}")
