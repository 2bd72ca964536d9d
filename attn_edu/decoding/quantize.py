r"""A quantized KV cache: int8 (or fewer bits) and fp8 keys and values, and what they cost.

Symmetric absmax quantization with ``b`` bits stores :math:`\hat x = \Delta \cdot
\operatorname{round}(x / \Delta)`, :math:`\Delta = \max |x| / (2^{b-1} - 1)` over a
*group* of numbers that share one scale :math:`\Delta`. The grouping is the choice:

* **per channel**: one scale per channel (feature) of a head, shared by the tokens
  (in groups of ``group_size`` tokens as they arrive) -- a channel with large values gets
  its own coarse steps and leaves the others fine;
* **per token**: one scale per token (its ``d`` channels share it) -- a token with large
  values coarsens only itself.

KIVI {cite}`liu2024kivi` observed that keys have a few outlier *channels* and values do
not, and quantizes keys per channel and values per token. The error each choice causes
in the attention output is measured in chapter 13 with :func:`attention_error`.

``fmt`` names a format: ``"int8"`` .. ``"int2"`` (``"int<b>"``), or ``"fp8_e4m3"`` (the
float8 of ``torch.float8_e4m3fn``, largest value 448, 3 mantissa bits; needs torch),
or ``None`` for no quantization. NumPy in, NumPy out; computed in float64.
"""
from __future__ import annotations

import re
from typing import Optional, Tuple

import numpy as np

from .. import _checks
from ..reference import scaled_dot_product_attention

__all__ = ["quantize", "dequantize", "fake_quantize", "quantized_bytes_per_token", "attention_error",
           "FP8_E4M3_MAX"]

#: The largest finite float8 e4m3 value (the "fn" variant, which has no infinities).
FP8_E4M3_MAX = 448.0
_PERS = ("channel", "token", "tensor")


def _bits(fmt: str) -> int:
    m = re.fullmatch(r"int([2-8])", str(fmt))
    if m is None:
        raise ValueError(f"fmt must be 'int2' .. 'int8', 'fp8_e4m3' or None; got {fmt!r}")
    return int(m.group(1))


def _check_per(per: str) -> str:
    if per not in _PERS:
        raise ValueError(f"per must be one of {', '.join(map(repr, _PERS))}; got {per!r}")
    return per


def _amax(x: np.ndarray, per: str, group_size: Optional[int]) -> np.ndarray:
    """max |x| over each group sharing a scale, broadcastable to x (..., L, d)."""
    if per == "token":
        return np.max(np.abs(x), axis=-1, keepdims=True)  # (..., L, 1)
    if per == "tensor":
        return np.max(np.abs(x), axis=(-2, -1), keepdims=True)  # (..., 1, 1)
    length = x.shape[-2]
    g = length if group_size is None else _checks.check_length("group_size", group_size, minimum=1)
    starts = np.arange(0, length, max(g, 1))
    if length == 0:
        return np.zeros(x.shape[:-2] + (0, x.shape[-1]))
    blocks = np.maximum.reduceat(np.abs(x), starts, axis=-2)  # (..., n_groups, d)
    return np.repeat(blocks, np.diff(np.append(starts, length)), axis=-2)  # (..., L, d)


def quantize(x: np.ndarray, bits: int = 8, per: str = "channel", group_size: Optional[int] = None
             ) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric absmax integer quantization of ``x`` (..., L, d) (L tokens, d channels).

    Returns ``(codes, scale)``: ``codes`` int8 in ``[-(2^(b-1) - 1), 2^(b-1) - 1]`` of the
    shape of x, and ``scale`` (float64) broadcastable to it: (..., L, d) repeated per group
    of ``group_size`` tokens for ``per="channel"`` (all L tokens by default), (..., L, 1)
    for ``per="token"``, (..., 1, 1) for ``per="tensor"``. A group of zeros gets scale 1.
    ``x ≈ codes * scale`` (:func:`dequantize`); the error per number is at most scale / 2.
    """
    bits = _checks.check_length("bits", bits, minimum=2)
    if bits > 8:
        raise ValueError(f"bits must be between 2 and 8 (codes are int8); got {bits}")
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., L, d); got {x.shape}")
    levels = 2 ** (bits - 1) - 1
    amax = _amax(x, _check_per(per), group_size)
    scale = np.where(amax > 0, amax / levels, 1.0)
    codes = np.clip(np.rint(x / scale), -levels, levels).astype(np.int8)
    return codes, scale


def dequantize(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``codes * scale`` in float64: what attention reads back from a quantized cache."""
    return np.asarray(codes, dtype=np.float64) * scale


def _fp8_roundtrip(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is in requirements.txt
        raise ImportError("fp8_e4m3 needs torch (torch.float8_e4m3fn)") from None
    if not hasattr(torch, "float8_e4m3fn"):  # pragma: no cover - torch < 2.1
        raise TypeError(f"this torch ({torch.__version__}) has no float8_e4m3fn dtype")
    t = torch.from_numpy(np.ascontiguousarray(x / scale))
    return t.to(torch.float8_e4m3fn).to(torch.float64).numpy() * scale


def fake_quantize(x: np.ndarray, fmt: Optional[str], per: str = "channel",
                  group_size: Optional[int] = None) -> np.ndarray:
    """``x`` (..., L, d) stored in format ``fmt`` and read back, in float64.

    ``fmt``: ``None`` (unchanged), ``"int8"`` .. ``"int2"`` (:func:`quantize` with that
    many bits) or ``"fp8_e4m3"`` (scaled so the group's largest magnitude maps to 448, cast to
    ``torch.float8_e4m3fn`` and back; the scaling ``per`` and ``group_size`` as for ints).
    """
    x = np.asarray(x, dtype=np.float64)
    if fmt is None:
        return x.copy()
    if fmt == "fp8_e4m3":
        amax = _amax(x, _check_per(per), group_size)
        return _fp8_roundtrip(x, np.where(amax > 0, amax / FP8_E4M3_MAX, 1.0))
    return dequantize(*quantize(x, _bits(fmt), per, group_size))


def quantized_bytes_per_token(d: int, fmt: Optional[str], per: str = "channel",
                              group_size: Optional[int] = None, scale_bytes: int = 2) -> float:
    """Bytes per token of one head's keys (or values) of width ``d`` in format ``fmt``.

    ``None`` is 16-bit (2 bytes a number). Integers pack ``b`` bits a number, fp8 one
    byte, plus the scales (``scale_bytes`` each, fp16 by default): one per token for
    ``per="token"``, ``d`` per group of ``group_size`` tokens for ``per="channel"``
    (nothing per token without groups, like ``per="tensor"``).
    """
    d = _checks.check_length("d", d, minimum=1)
    if fmt is None:
        return 2.0 * d
    payload = d * (1.0 if fmt == "fp8_e4m3" else _bits(fmt) / 8)
    if _check_per(per) == "token":
        return payload + scale_bytes
    if per == "channel" and group_size is not None:
        return payload + d * scale_bytes / _checks.check_length("group_size", group_size, minimum=1)
    return payload


def attention_error(q: np.ndarray, k: np.ndarray, v: np.ndarray, k_fmt: Optional[str] = None,
                    v_fmt: Optional[str] = None, k_per: str = "channel", v_per: str = "token",
                    group_size: Optional[int] = None, causal=False) -> float:
    r"""Relative error of attention over a quantized cache: :math:`\|o_q - o\|_F / \|o\|_F`.

    ``o`` is the float64 reference over ``k``, ``v`` (..., L, d); ``o_q`` the same with
    keys stored as ``k_fmt`` (scaled ``k_per``) and values as ``v_fmt`` (``v_per``) via
    :func:`fake_quantize`. ``None`` leaves that tensor exact, so the error of quantizing
    keys only, values only, or both can be measured apart.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    gold = scaled_dot_product_attention(q, k, v, causal=causal)
    got = scaled_dot_product_attention(q, fake_quantize(k, k_fmt, k_per, group_size),
                                       fake_quantize(v, v_fmt, v_per, group_size), causal=causal)
    return float(np.linalg.norm(got - gold) / np.linalg.norm(gold))
