r"""Positional encodings: telling attention *where* each token is.

Self-attention without positions is permutation *equivariant*: permuting the tokens
only permutes the outputs (chapter 04 proves it). To make order matter, a model adds
or applies position information. This module holds the two classic choices:

* :func:`sinusoidal_positions` -- the fixed sinusoidal table of Vaswani et al. (2017),
  *added* to the token embeddings; :func:`sinusoidal_frequencies` and
  :func:`sinusoidal_shift_matrix` expose its structure (a shift by ``k`` positions is a
  rotation of every (sin, cos) pair, the same for every position);
* :func:`rotary` -- rotary position embedding (RoPE, Su et al., 2021), *applied* to
  queries and keys so that their dot product depends only on the offset between
  positions; with positions divided by a factor it is *position interpolation*;
* :func:`alibi_bias` (with :func:`alibi_slopes`) -- ALiBi (Press et al., 2022), no
  encoding at all but a float mask added to the scores: a penalty proportional to the
  distance, with one slope per head.

Both use the same frequencies :math:`\omega_i = \text{base}^{-2i/d}` and the same pairing
of dimensions ``(2i, 2i+1)``, so ``d`` (``d_model`` or the head dimension) must be even.
NumPy only; explained in chapter 04.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import _checks
from ._checks import is_torch_tensor

__all__ = [
    "sinusoidal_frequencies",
    "sinusoidal_positions",
    "sinusoidal_shift_matrix",
    "rotary",
    "alibi_slopes",
    "alibi_bias",
]


# --------------------------------------------------------------------------- checks
def _check_dim(name: str, value: object) -> int:
    d = _checks.check_length(name, value, 2)
    if d % 2:
        raise ValueError(
            f"{name} must be even: dimensions come in (sin, cos) pairs (2i, 2i+1), one pair "
            f"per frequency; got {d}. Use an even size (e.g. {d + 1}) or drop a column."
        )
    return d


# --------------------------------------------------------------------------- sinusoidal
def sinusoidal_frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    r"""The angular frequencies of the sinusoidal encoding, one per (sin, cos) pair.

    .. math:: \omega_i = \text{base}^{-2i/d_{\text{model}}}, \qquad i = 0, \dots, d_{\text{model}}/2 - 1

    From :math:`\omega_0 = 1` (period :math:`2\pi \approx 6.3` positions) down to nearly
    :math:`1/\text{base}` (period about :math:`2\pi \cdot \text{base}` positions).

    Args:
        d_model: the (even) model or head dimension.
        base: the wavelength base; 10000 in Vaswani et al. (2017).

    Returns:
        float64 array of shape ``(d_model // 2,)``, decreasing.

    Raises TypeError for non-integer ``d_model`` or non-real ``base``, ValueError for an odd
    or too small ``d_model`` or a non-finite or non-positive ``base``. Explained in chapter 04.
    """
    d = _check_dim("d_model", d_model)
    b = _checks.check_real("base", base, positive=True)
    return b ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # (d/2,)


def sinusoidal_positions(length: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    r"""The fixed sinusoidal positional-encoding table of Vaswani et al. (2017).

    .. math::
        \mathrm{PE}_{p,\,2i} = \sin(p\,\omega_i), \qquad
        \mathrm{PE}_{p,\,2i+1} = \cos(p\,\omega_i), \qquad
        \omega_i = \text{base}^{-2i/d_{\text{model}}}

    for positions :math:`p = 0, \dots, \text{length} - 1`. Row ``p`` is added to the
    embedding of the token at position ``p``. Every entry lies in [-1, 1], every row has
    norm :math:`\sqrt{d_{\text{model}}/2}`, and row 0 is ``(0, 1, 0, 1, ...)``.
    Shifting by ``k`` positions rotates each (sin, cos) pair by the angle
    :math:`k\,\omega_i`: ``PE[p + k] == PE[p] @ sinusoidal_shift_matrix(k, d_model)``.

    ``d_model`` must be even (one (sin, cos) pair per frequency); an odd size raises
    ValueError rather than silently dropping or padding a column.

    Args:
        length: number of positions (>= 0).
        d_model: the (even) embedding dimension.
        base: the wavelength base, 10000 by default.

    Returns:
        float64 array of shape ``(length, d_model)``.

    Raises TypeError / ValueError for bad arguments (see :func:`sinusoidal_frequencies`;
    ``length`` must be a non-negative integer). Explained in chapter 04.
    """
    n = _checks.check_length("length", length, 0)
    omega = sinusoidal_frequencies(d_model, base)          # (d/2,)
    angles = np.arange(n, dtype=np.float64)[:, None] * omega  # (L, d/2)
    pe = np.empty((n, 2 * omega.size), dtype=np.float64)   # (L, d)
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles)
    return pe


def sinusoidal_shift_matrix(offset: float, d_model: int, base: float = 10000.0) -> np.ndarray:
    r"""The linear map that moves a sinusoidal encoding ``offset`` positions along.

    Block diagonal, one 2x2 rotation per frequency:

    .. math::
        R_k = \operatorname{diag}_i \begin{pmatrix} \cos k\omega_i & -\sin k\omega_i \\
                                                \sin k\omega_i & \cos k\omega_i \end{pmatrix},
        \qquad \mathrm{PE}(p + k) = \mathrm{PE}(p)\, R_k

    (row vectors, as everywhere in the book). It does not depend on ``p``: a fixed linear
    map, so a linear layer can learn to "look ``k`` tokens back". ``R_k`` is orthogonal and
    ``R_j R_k = R_{j+k}``.

    Args:
        offset: the shift ``k`` (any finite real; negative shifts go backwards).
        d_model: the (even) embedding dimension.
        base: the wavelength base, 10000 by default.

    Returns:
        float64 array of shape ``(d_model, d_model)``.

    Raises TypeError / ValueError for bad arguments. Explained in chapter 04.
    """
    k = _checks.check_real("offset", offset)
    omega = sinusoidal_frequencies(d_model, base)           # (d/2,)
    c, s = np.cos(k * omega), np.sin(k * omega)
    r = np.zeros((2 * omega.size, 2 * omega.size))         # (d, d)
    idx = np.arange(0, 2 * omega.size, 2)
    r[idx, idx], r[idx, idx + 1] = c, -s
    r[idx + 1, idx], r[idx + 1, idx + 1] = s, c
    return r


# --------------------------------------------------------------------------- rotary
def rotary(x: object, positions: Optional[object] = None, base: float = 10000.0) -> np.ndarray:
    r"""Rotary position embedding (RoPE): rotate each pair of dimensions by a position angle.

    For a row :math:`x` at position :math:`p` and each pair :math:`(x_{2i}, x_{2i+1})`,

    .. math::
        \begin{pmatrix} x'_{2i} \\ x'_{2i+1} \end{pmatrix} =
        \begin{pmatrix} \cos p\omega_i & -\sin p\omega_i \\ \sin p\omega_i & \cos p\omega_i \end{pmatrix}
        \begin{pmatrix} x_{2i} \\ x_{2i+1} \end{pmatrix},
        \qquad \omega_i = \text{base}^{-2i/d}.

    Applied to queries and keys (not values), the score of a query at position ``m`` and a
    key at position ``n`` becomes :math:`q^\top R_{n-m} k`: it depends on the positions only
    through the offset ``n - m``, and norms are unchanged. Pairs are *interleaved*
    ``(0, 1), (2, 3), ...`` as in the RoFormer paper; implementations that pair dimension
    ``i`` with ``i + d/2`` (GPT-NeoX, Hugging Face Llama) are the same up to a fixed
    permutation of the dimensions.

    Args:
        x: floating array of shape ``(..., L, d)`` with even ``d``, e.g. ``(B, H, L, d)``.
        positions: shape ``(L,)``, the position of each row (any finite reals); default
            ``0, 1, ..., L - 1``.
        base: the wavelength base, 10000 by default.

    Returns:
        array of the same shape and dtype as ``x``.

    Raises TypeError for non-floating ``x`` or non-numeric ``positions``; ValueError for
    fewer than 2 axes, odd ``d``, ``positions`` of the wrong shape or non-finite values, and
    a bad ``base``. Explained in chapter 04.
    """
    if is_torch_tensor(x):
        raise TypeError("rotary works on NumPy arrays; convert with tensor.numpy() first")
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(
            f"x must be a floating array; got dtype {arr.dtype}. Convert first, e.g. x.astype(np.float64)."
        )
    if arr.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions (..., L, d); got shape {arr.shape}")
    length, d = arr.shape[-2:]
    if d % 2:
        raise ValueError(f"x's last dimension d must be even (pairs (2i, 2i+1) are rotated); got shape {arr.shape}")
    if d == 0:
        raise ValueError(f"x's last dimension must be at least 2; got shape {arr.shape}")
    if positions is None:
        pos = np.arange(length, dtype=np.float64)
    else:
        pos = np.asarray(positions)
        if pos.dtype == bool or not (np.issubdtype(pos.dtype, np.integer) or np.issubdtype(pos.dtype, np.floating)):
            raise TypeError(f"positions must be numeric; got dtype {pos.dtype}")
        if pos.shape != (length,):
            raise ValueError(f"positions must have shape (L,) = ({length},) to match x {arr.shape}; got {pos.shape}")
        pos = pos.astype(np.float64)
        if not np.all(np.isfinite(pos)):
            raise ValueError("positions must be finite")
    omega = sinusoidal_frequencies(d, base)             # (d/2,)
    angles = pos[:, None] * omega                       # (L, d/2)
    c, s = np.cos(angles), np.sin(angles)               # (L, d/2)
    x64 = arr.astype(np.float64)
    even, odd = x64[..., 0::2], x64[..., 1::2]          # (..., L, d/2) each
    out = np.empty_like(x64)                            # (..., L, d)
    out[..., 0::2] = even * c - odd * s
    out[..., 1::2] = even * s + odd * c
    return out.astype(arr.dtype, copy=False)


# --------------------------------------------------------------------------- ALiBi
def alibi_slopes(num_heads: int) -> np.ndarray:
    r"""The per-head slopes of ALiBi (Press et al., 2022): a geometric sequence.

    For :math:`H` a power of two, :math:`m_h = 2^{-8(h+1)/H}`, :math:`h = 0, \dots, H-1`
    (for 8 heads: 1/2, 1/4, ..., 1/256). Otherwise, as in the paper's code, the slopes of the
    largest power of two :math:`n < H` followed by every other slope of :math:`2n` heads.

    Returns float64 of shape ``(num_heads,)``, in (0, 1). Raises TypeError/ValueError for a
    ``num_heads`` that is not a positive integer. Explained in chapter 04.
    """
    h = _checks.check_positive_int("num_heads", num_heads)

    def power_of_two(n: int) -> np.ndarray:
        return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)  # (n,)

    n = 1 << (h.bit_length() - 1)  # largest power of two <= h
    if n == h:
        return power_of_two(h)
    return np.concatenate([power_of_two(n), power_of_two(2 * n)[0::2][: h - n]])


def alibi_bias(num_heads: int, length: int) -> np.ndarray:
    r"""ALiBi's causal float mask for self-attention over ``length`` tokens.

    .. math:: B_{h,i,j} = -m_h\,(i - j) \ \text{for } j \le i, \qquad B_{h,i,j} = -\infty \ \text{for } j > i,

    with :math:`m_h` from :func:`alibi_slopes`. Added to the scores (pass it as a float
    ``mask`` to :func:`attn_edu.reference.scaled_dot_product_attention`), it penalises each key by
    its distance from the query and hides the future; no encoding is added to the tokens.
    It depends on :math:`i - j` only, so the bias for a longer sequence contains the
    shorter one as its top-left block: the same rule applies at any length (the paper's
    "train short, test long").

    Returns float64 of shape ``(num_heads, length, length)``; the diagonal is 0, so no row
    is fully masked. Raises TypeError/ValueError for non-positive-integer arguments.
    Explained in chapter 04.
    """
    slopes = alibi_slopes(num_heads)                                   # (H,)
    n = _checks.check_positive_int("length", length)
    back = np.arange(n)[None, :] - np.arange(n)[:, None]               # (L, L): j - i
    bias = slopes[:, None, None] * back                               # (H, L, L); +0 on the diagonal
    return np.where(back <= 0, bias, -np.inf)
