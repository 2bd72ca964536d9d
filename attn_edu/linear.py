r"""Linear attention, Performer (FAVOR+) random features, and additive (Bahdanau) attention.

The reusable pieces of chapter 12 (*Linear attention, Performer and the map of variants*).

**Linear attention** {Katharopoulos et al. 2020}. Softmax attention is a normalised kernel
smoother, :math:`o_i = \sum_j \kappa(q_i, k_j) v_j / \sum_j \kappa(q_i, k_j)` with
:math:`\kappa(q, k) = \exp(q\cdot k/\sqrt{d})`. Replace the kernel by a dot product of
feature maps, :math:`\kappa(q, k) = \phi(q)\cdot\phi(k)`, and the matrix product can be
reassociated:

.. math::

    O = \frac{(\phi(Q)\phi(K)^\top)\,V}{\phi(Q)\phi(K)^\top \mathbf 1}
      = \frac{\phi(Q)\,(\phi(K)^\top V)}{\phi(Q)\,(\phi(K)^\top \mathbf 1)}

(row-wise division). The left form costs :math:`O(L_q L_k d)`; the right one
:math:`O((L_q + L_k)\, d_\phi\, d_v)`: linear in the sequence length. With a causal mask
query :math:`i` needs the *prefix* sums :math:`S_i = \sum_{j\le i}\phi(k_j) v_j^\top` and
:math:`z_i = \sum_{j\le i}\phi(k_j)`, which is an RNN with state :math:`(S_t, z_t)`.
Three functions compute the same numbers three ways (tested equal to 1e-10 in float64):

* :func:`linear_attention` -- the fast form (non-causal: associativity; causal:
  cumulative sums, memory :math:`O(L\, d_\phi d_v)`);
* :func:`linear_attention_recurrent` -- the RNN form, a loop with the state (S, z);
* :func:`linear_attention_quadratic` -- the masked quadratic form
  :math:`((\phi(Q)\phi(K)^\top) \odot M)\,V`, normalised: the reference.

**Performer / FAVOR+** {Choromanski et al. 2021}. Positive random features make the
softmax kernel itself (approximately) linear: for :math:`\omega \sim N(0, I_d)`,
:math:`E[\exp(\omega^\top q - |q|^2/2)\exp(\omega^\top k - |k|^2/2)] = \exp(q^\top k)`.
:func:`random_features` draws the :math:`\omega` (orthogonal blocks by default),
:func:`favor_features` applies :math:`\phi`, :func:`softmax_kernel_estimate` returns the
(unbiased) estimate of :math:`\exp(s\, q\cdot k)`, :func:`favor_variance` its exact
variance for i.i.d. features, and :func:`performer_attention` the attention.

**Additive attention** {Bahdanau et al. 2015}: :math:`\mathrm{score}(q, k) =
w_v^\top \tanh(W_q^\top q + W_k^\top k)`, with :func:`additive_attention`,
:func:`init_additive_params` and :func:`count_additive_params`.

Semantics shared with :func:`attn_edu.reference.scaled_dot_product_attention`: layout ``(..., L, D)``
with broadcasting leading axes, ``L_q`` may differ from ``L_k``; boolean masks with
**True = may attend**; ``causal`` in {False, True, "top_left", "bottom_right"}; a query row
with no allowed key gets an **output row of zeros**, never NaN (for linear attention: a
denominator of 0 gives output 0). NaN in unmasked inputs propagates. Every function takes
NumPy arrays or torch tensors (CPU or CUDA, differentiable) and computes in their dtype;
torch is imported only when tensors are passed.

The fast linear forms accept masks over *keys* only (shape ``(..., 1, L_k)``, e.g.
``attn_edu.masks.key_mask(valid)``) plus ``causal=...``: a mask that differs from query to
query does not factorise. :func:`linear_attention_quadratic` takes any boolean mask.

Why one file of more than 600 lines: chapter 12's three variants share one argument
handling (``_qkv``, the masks over keys) and one core (``_linear_core``, which Performer
reuses with its random features); additive attention is the short remainder, kept with
them because the chapter compares all three on the same inputs.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Tuple, Union

import numpy as np

from . import _checks, reference
from ._backend import Ops
from ._checks import is_torch_tensor
from .masks import causal_offset
from .reference import softmax

__all__ = [
    "FEATURE_MAPS",
    "elu_plus_one",
    "relu_features",
    "linear_attention",
    "linear_attention_recurrent",
    "linear_attention_quadratic",
    "linear_attention_flops",
    "random_features",
    "favor_features",
    "softmax_kernel",
    "softmax_kernel_estimate",
    "favor_variance",
    "performer_attention",
    "init_additive_params",
    "count_additive_params",
    "additive_attention",
]

Array = Any  # a NumPy array or a torch tensor
FeatureMap = Union[str, Callable[[Array], Array]]
Seed = Union[int, np.random.Generator]


# --------------------------------------------------------------------------- inputs
def _qkv(q: Array, k: Array, v: Array, *, same_dk: bool = True):
    """Validate q, k, v (all NumPy or all torch, one float dtype, (..., L, D) shapes).

    Returns (q, k, v, batch shape, torch_like). With ``same_dk=False`` (additive
    attention) q and k may have different last dimensions.
    """
    torch_like = _checks.uses_torch(q=q, k=k, v=v)
    if torch_like:
        _checks.same_devices(q=q.device, k=k.device, v=v.device)
    else:
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    _checks.check_float_dtypes(q=_checks.dtype_name(q), k=_checks.dtype_name(k), v=_checks.dtype_name(v))
    qs, ks, vs = tuple(q.shape), tuple(k.shape), tuple(v.shape)
    if not same_dk:  # check everything but the shared d_k
        _checks.check_rank("q", qs)
        _checks.check_rank("k", ks)
        qs = qs[:-1] + ks[-1:]
    batch, _ = _checks.check_qkv_shapes(qs, ks, vs)
    return q, k, v, batch, torch_like


def _bool_mask(mask: Any, torch_like: bool, device: Any, what: str) -> Any:
    """Same kind as q/k/v; boolean only (``what`` names the function for the message)."""
    if mask is None:
        return None
    _checks.check_mask_kind(mask, torch_like)
    if torch_like:
        _checks.same_devices(q=device, mask=mask.device)
    else:
        mask = np.asanyarray(mask)  # keeps a CausalMask's alignment tag
    kind = _checks.check_mask_dtype(_checks.dtype_name(mask))
    if kind != "bool":
        raise TypeError(
            f"{what} takes boolean masks only (True = may attend): there are no scores to add "
            f"a float mask to; got mask of dtype {_checks.dtype_name(mask)}. Convert an additive mask "
            "with mask == 0 (0 allows, -inf blocks)."
        )
    return mask


def _prepare_mask(mask: Any, scores_shape: Tuple[int, ...], align: Optional[str], q: Array,
                  torch_like: bool):
    """(allowed, additive) from the reference's mask logic, NumPy or torch."""
    return reference.prepare_mask(mask, scores_shape, align, q.device if torch_like else None)


def _key_mask(mask: Any, scores_shape: Tuple[int, ...], align: Optional[str], what: str) -> Any:
    """A boolean mask over keys, broadcastable to (..., 1, L_k) -> shape (..., L_k, 1) for phi(K)."""
    if mask is None:
        return None
    _checks.check_mask_shape(tuple(mask.shape), scores_shape)
    _checks.check_causal_given_once(getattr(mask, "causal_alignment", None), align)
    if mask.ndim >= 2 and mask.shape[-2] != 1:
        raise ValueError(
            f"{what} accepts a mask over keys only, of shape (..., 1, L_k) such as "
            "attn_edu.masks.key_mask(valid): a mask that differs from query to query breaks "
            "the factorisation phi(Q) (phi(K)^T V). Pass causal=... for a causal mask, or use "
            f"linear_attention_quadratic for an arbitrary mask; got mask of shape {tuple(mask.shape)}"
        )
    keys = mask[..., 0, :] if mask.ndim >= 2 else mask  # (..., Lk)
    return keys[..., None]  # (..., Lk, 1)


# --------------------------------------------------------------------------- feature maps
def elu_plus_one(x: Array) -> Array:
    r"""The feature map of Katharopoulos et al. (2020): :math:`\phi(x) = \operatorname{elu}(x) + 1`.

    Elementwise: :math:`x + 1` for :math:`x > 0`, :math:`e^x` otherwise, so every feature is
    strictly positive and the denominators of linear attention are never 0 (unless no key is
    allowed). Shape and dtype are kept: (..., L, d) -> (..., L, d). NumPy or torch.
    """
    if is_torch_tensor(x):
        import torch.nn.functional as F

        return F.elu(x) + 1
    x = np.asarray(x)
    return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0))).astype(x.dtype, copy=False)


def relu_features(x: Array) -> Array:
    r""":math:`\phi(x) = \max(x, 0)`: non-negative, but a query or key can map to all zeros
    (its row then has denominator 0 and, by the package's rule, output 0)."""
    if is_torch_tensor(x):
        import torch

        return torch.relu(x)
    x = np.asarray(x)
    return np.maximum(x, x.dtype.type(0))


#: The named feature maps ``linear_attention`` accepts; any callable works too.
FEATURE_MAPS: Dict[str, Callable[[Array], Array]] = {"elu+1": elu_plus_one, "relu": relu_features}


def _resolve_feature_map(feature_map: FeatureMap) -> Callable[[Array], Array]:
    if isinstance(feature_map, str):
        if feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"feature_map must be one of {', '.join(repr(n) for n in FEATURE_MAPS)} or a "
                f"callable phi(x) -> features; got {feature_map!r}"
            )
        return FEATURE_MAPS[feature_map]
    if not callable(feature_map):
        raise TypeError(
            f"feature_map must be a name ({', '.join(repr(n) for n in FEATURE_MAPS)}) or a "
            f"callable phi(x) -> features; got {feature_map!r} of type {type(feature_map).__name__}"
        )
    return feature_map


def _apply_feature_map(phi: Callable[[Array], Array], name: str, x: Array, torch_like: bool) -> Array:
    out = phi(x)
    if is_torch_tensor(out) != torch_like:
        raise TypeError(
            f"feature_map returned a {type(out).__name__} for {name}; it must return the same "
            "kind of array as it was given (NumPy for NumPy, torch for torch)"
        )
    if not torch_like:
        out = np.asarray(out)
    if tuple(out.shape[:-1]) != tuple(x.shape[:-1]) or out.shape[-1] < 1:
        raise ValueError(
            f"feature_map must map (..., L, d) to (..., L, d_phi) with d_phi >= 1; for {name} of "
            f"shape {tuple(x.shape)} it returned shape {tuple(out.shape)}"
        )
    if _checks.dtype_name(out) != _checks.dtype_name(x):
        raise TypeError(
            f"feature_map must keep the dtype; for {name} of dtype {_checks.dtype_name(x)} it returned "
            f"{_checks.dtype_name(out)}"
        )
    return out


def _check_eps(eps: object) -> float:
    return _checks.check_real("eps", eps, nonnegative=True)


# --------------------------------------------------------------------------- the core
def _normalise(num: Array, den: Array, eps: float, torch_like: bool) -> Array:
    """num (..., Lq, Dv) / (den + eps) (..., Lq); a denominator of exactly 0 gives output 0."""
    den = den + eps
    zero = den == 0
    safe = den + zero.to(den.dtype) if torch_like else np.where(zero, den.dtype.type(1), den)
    return Ops(torch_like).where0(~zero[..., None], num / safe[..., None])


def _offsets(lq: int, lk: int, align: str) -> Tuple[np.ndarray, np.ndarray]:
    """For each query: the index of the last key it may see, and whether it sees any."""
    last = np.arange(lq) + causal_offset(lq, lk, align)  # (Lq,)
    return np.clip(last, 0, max(lk - 1, 0)), last >= 0


def _linear_core(phi_q: Array, phi_k: Array, v: Array, align: Optional[str], eps: float,
                 torch_like: bool) -> Array:
    """The fast form, given the features (masked keys already zeroed in phi_k)."""
    lq, lk = phi_q.shape[-2], phi_k.shape[-2]
    if align is None:
        kv = phi_k.swapaxes(-1, -2) @ v  # (..., F, Lk) @ (..., Lk, Dv) -> (..., F, Dv)
        z = phi_k.sum(-2)[..., :, None]  # (..., F, 1): phi(K)^T 1
        num = phi_q @ kv  # (..., Lq, F) @ (..., F, Dv) -> (..., Lq, Dv)
        den = (phi_q @ z)[..., 0]  # (..., Lq, F) @ (..., F, 1) -> (..., Lq)
        return _normalise(num, den, eps, torch_like)
    if lk == 0:  # no keys at all: every row is fully masked
        num = phi_q[..., :0] @ v[..., :0, :]  # (..., Lq, Dv) of zeros, broadcast batch
        return num
    # prefix sums over keys: S_j = sum_{j' <= j} phi(k_j') v_j'^T, z_j = sum_{j' <= j} phi(k_j')
    kv = (phi_k[..., :, :, None] * v[..., :, None, :]).cumsum(-3)  # (..., Lk, F, Dv)
    z = phi_k.cumsum(-2)  # (..., Lk, F)
    idx, seen = _offsets(lq, lk, align)  # (Lq,), (Lq,)
    idx, seen = Ops(torch_like).as_index(idx, phi_q), Ops(torch_like).as_index(seen, phi_q)
    num = (phi_q[..., :, None, :] @ kv[..., idx, :, :])[..., 0, :]  # (..., Lq, 1, F) @ (..., Lq, F, Dv)
    den = (phi_q * z[..., idx, :]).sum(-1)  # (..., Lq)
    num = Ops(torch_like).where0(seen[:, None], num)  # queries before the first key see nothing
    den = Ops(torch_like).where0(seen, den)
    return _normalise(num, den, eps, torch_like)


def _prepare_linear(q, k, v, feature_map, causal, mask, eps, what):
    q, k, v, batch, torch_like = _qkv(q, k, v)
    phi = _resolve_feature_map(feature_map)
    align = _checks.check_causal(causal)
    eps = _check_eps(eps)
    scores_shape = tuple(batch) + (q.shape[-2], k.shape[-2])
    mask = _bool_mask(mask, torch_like, q.device if torch_like else None, what)
    keys = _key_mask(mask, scores_shape, align, what)
    phi_q = _apply_feature_map(phi, "q", q, torch_like)  # (..., Lq, F)
    phi_k = _apply_feature_map(phi, "k", k, torch_like)  # (..., Lk, F)
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise ValueError(
            f"feature_map gave q and k different feature sizes: {tuple(phi_q.shape)} and {tuple(phi_k.shape)}"
        )
    if keys is not None:  # masked keys contribute nothing: zero features and values
        phi_k = Ops(torch_like).where0(keys, phi_k)  # (..., Lk, F)
        v = Ops(torch_like).where0(keys, v)  # (..., Lk, Dv)
    return phi_q, phi_k, v, align, eps, torch_like


def linear_attention(
    q: Array,
    k: Array,
    v: Array,
    feature_map: FeatureMap = "elu+1",
    causal: Union[bool, str] = False,
    mask: Optional[Array] = None,
    eps: float = 0.0,
) -> Array:
    r"""Linear attention (Katharopoulos et al. 2020) in :math:`O((L_q + L_k)\, d_\phi\, d_v)`.

    .. math::
        o_i = \frac{\phi(q_i)^\top \sum_{j \in A(i)} \phi(k_j) v_j^\top}
                   {\phi(q_i)^\top \sum_{j \in A(i)} \phi(k_j) + \varepsilon}

    where :math:`A(i)` is the set of keys query i may attend to (all, the causal prefix,
    minus masked keys). Non-causal: :math:`\phi(K)^\top V` (d_phi, d_v) is computed once
    (associativity). Causal: cumulative sums over keys, memory :math:`O(L_k\, d_\phi d_v)`
    (:func:`linear_attention_recurrent` is the constant-memory RNN form).

    Shapes: ``q`` (..., L_q, d_k), ``k`` (..., L_k, d_k), ``v`` (..., L_k, d_v) ->
    (..., L_q, d_v); leading axes broadcast.

    Args:
        feature_map: ``"elu+1"`` (default, :func:`elu_plus_one`), ``"relu"``, or any
            callable mapping (..., L, d) to (..., L, d_phi) in the same dtype and kind.
        causal: False, True/"top_left" or "bottom_right" (key j allowed when
            ``j <= i + L_k - L_q``).
        mask: boolean mask over keys (True = may attend), broadcastable to (..., 1, L_k),
            e.g. ``attn_edu.masks.key_mask(valid)``. Masks that differ between queries do
            not factorise: use :func:`linear_attention_quadratic` for those.
        eps: added to every denominator (Katharopoulos et al. use 1e-6); default 0.

    A query with no allowed key (or any denominator of exactly 0) gets an output row of
    zeros, never NaN. There is no ``scale``: rescaling q changes the kernel
    :math:`\phi(q)\cdot\phi(k)` in a map-specific way, not by a temperature.

    Explained in chapter 12 (the associativity trick; causal linear attention as an RNN).
    """
    phi_q, phi_k, v, align, eps, torch_like = _prepare_linear(
        q, k, v, feature_map, causal, mask, eps, "linear_attention")
    return _linear_core(phi_q, phi_k, v, align, eps, torch_like)


def linear_attention_recurrent(
    q: Array,
    k: Array,
    v: Array,
    feature_map: FeatureMap = "elu+1",
    causal: Union[bool, str] = True,
    mask: Optional[Array] = None,
    eps: float = 0.0,
) -> Array:
    r"""Causal linear attention as an RNN: a loop over keys with the state :math:`(S_t, z_t)`.

    .. math::
        S_t = S_{t-1} + \phi(k_t)\, v_t^\top, \qquad z_t = z_{t-1} + \phi(k_t), \qquad
        o_t = \frac{S_t^\top \phi(q_t)}{z_t^\top \phi(q_t) + \varepsilon}

    The state has a fixed size :math:`d_\phi \times d_v + d_\phi` however long the sequence
    is: this is why a causal linear Transformer decodes in constant memory per step, where
    softmax attention needs a KV cache that grows with the sequence.

    Same arguments and result as :func:`linear_attention` (to rounding); ``causal``
    defaults to True here. With ``causal=False`` every query reads the final state.
    Slow (a Python loop): it is the readable form, for teaching and testing.
    Explained in chapter 12.
    """
    phi_q, phi_k, v, align, eps, torch_like = _prepare_linear(
        q, k, v, feature_map, causal, mask, eps, "linear_attention_recurrent")
    lq, lk = phi_q.shape[-2], phi_k.shape[-2]
    if align is None:
        upto = np.full(lq, lk)
    else:
        upto = np.clip(np.arange(lq) + causal_offset(lq, lk, align) + 1, 0, lk)  # keys 0..upto-1 are visible
    S = phi_k[..., :0, :].swapaxes(-1, -2) @ v[..., :0, :]  # zeros (..., F, Dv)
    z = phi_k[..., :0, :].sum(-2)  # zeros (..., F)
    outs, t = [], 0
    for i in range(lq):
        while t < upto[i]:  # read key t: a rank-1 update of the state
            S = S + phi_k[..., t, :, None] * v[..., t, None, :]  # (..., F, Dv)
            z = z + phi_k[..., t, :]  # (..., F)
            t += 1
        f = phi_q[..., i, :]  # (..., F)
        num = (f[..., None, :] @ S)[..., 0, :]  # (..., 1, F) @ (..., F, Dv) -> (..., Dv)
        den = (f * z).sum(-1)  # (...)
        outs.append(_normalise(num[..., None, :], den[..., None], eps, torch_like)[..., 0, :])
    if not outs:
        return phi_q[..., :0] @ v[..., :0, :]  # (..., 0, Dv)
    return Ops(torch_like).stack(outs, axis=-2)  # (..., Lq, Dv)


def linear_attention_quadratic(
    q: Array,
    k: Array,
    v: Array,
    feature_map: FeatureMap = "elu+1",
    causal: Union[bool, str] = False,
    mask: Optional[Array] = None,
    eps: float = 0.0,
    return_weights: bool = False,
):
    r"""The reference form of linear attention: the masked quadratic form, normalised.

    .. math::
        A = (\phi(Q)\phi(K)^\top) \odot M, \qquad
        W_{ij} = \frac{A_{ij}}{\sum_{j'} A_{ij'} + \varepsilon}, \qquad O = W V

    :math:`O(L_q L_k)` time and memory, like softmax attention: it is what
    :func:`linear_attention` computes without ever forming A. Accepts any boolean
    ``mask`` broadcastable to (..., L_q, L_k) (True = may attend) and ``causal``.
    ``return_weights`` also returns W (..., L_q, L_k); for a non-negative feature map
    each allowed row sums to 1 (with eps = 0). A fully masked row gives zeros.
    Explained in chapter 12.
    """
    q, k, v, batch, torch_like = _qkv(q, k, v)
    phi = _resolve_feature_map(feature_map)
    align = _checks.check_causal(causal)
    eps = _check_eps(eps)
    scores_shape = tuple(batch) + (q.shape[-2], k.shape[-2])
    mask = _bool_mask(mask, torch_like, q.device if torch_like else None, "linear_attention_quadratic")
    allowed, _ = _prepare_mask(mask, scores_shape, align, q, torch_like)
    phi_q = _apply_feature_map(phi, "q", q, torch_like)  # (..., Lq, F)
    phi_k = _apply_feature_map(phi, "k", k, torch_like)  # (..., Lk, F)
    a = phi_q @ phi_k.swapaxes(-1, -2)  # (..., Lq, F) @ (..., F, Lk) -> (..., Lq, Lk)
    if allowed is not None:
        a = Ops(torch_like).where0(allowed, a)  # (..., Lq, Lk)
    den = a.sum(-1)  # (..., Lq)
    w = _normalise(a, den, eps, torch_like)  # (..., Lq, Lk): rows divided by their sums
    out = w @ v  # (..., Lq, Lk) @ (..., Lk, Dv) -> (..., Lq, Dv)
    return (out, w) if return_weights else out


def linear_attention_flops(lq: int, lk: int, d_phi: int, d_v: int, batch: int = 1, heads: int = 1) -> int:
    r"""FLOPs of the fast (non-causal) form, one multiply-add = 2 FLOPs, feature map excluded:

    :math:`2 B H (L_k d_\phi d_v + L_k d_\phi + L_q d_\phi d_v + L_q d_\phi)` for
    :math:`\phi(K)^\top V`, :math:`\phi(K)^\top \mathbf 1`, the numerators and the
    denominators. Compare :math:`4 B H L_q L_k d` for softmax attention: linear attention
    wins when :math:`L \gtrsim d_\phi` (chapter 12 measures where on this machine).
    """
    lq = _checks.check_length("lq", lq)
    lk = _checks.check_length("lk", lk)
    d_phi = _checks.check_positive_int("d_phi", d_phi)
    d_v = _checks.check_positive_int("d_v", d_v)
    b = _checks.check_positive_int("batch", batch)
    h = _checks.check_positive_int("heads", heads)
    return 2 * b * h * (lk + lq) * d_phi * (d_v + 1)


# --------------------------------------------------------------------------- FAVOR+
def random_features(d: int, num_features: int, seed: Seed = 0, orthogonal: bool = True) -> np.ndarray:
    r"""Random projections :math:`\omega_1, \dots, \omega_m \in \mathbb R^d` for FAVOR+, shape (m, d).

    * ``orthogonal=False``: i.i.d. rows :math:`\omega_i \sim N(0, I_d)`.
    * ``orthogonal=True`` (orthogonal random features, Choromanski et al. 2021): blocks of
      d exactly orthogonal directions (QR of a Gaussian matrix, signs fixed so the
      directions are uniformly distributed), independent blocks for m > d, and each row
      rescaled to a length drawn from the chi distribution with d degrees of freedom, the
      length of an N(0, I_d) vector. Every row is still marginally N(0, I_d), so the
      estimator stays unbiased; the orthogonality lowers its variance.

    ``seed``: an integer or a ``numpy.random.Generator``; the same seed gives the same
    features. float64 NumPy; :func:`performer_attention` converts them to the input's
    dtype and device. Explained in chapter 12.
    """
    d = _checks.check_positive_int("d", d)
    m = _checks.check_positive_int("num_features", num_features)
    rng = _checks.check_seed(seed)
    if not orthogonal:
        return rng.standard_normal((m, d))  # (m, d)
    blocks = []
    for _ in range(-(-m // d)):
        g = rng.standard_normal((d, d))
        qm, r = np.linalg.qr(g)  # g = qm r, qm orthogonal
        qm = qm * np.where(np.diag(r) < 0, -1.0, 1.0)  # sign fix: Haar-distributed qm
        blocks.append(qm.T)  # rows: d orthonormal directions
    directions = np.concatenate(blocks)[:m]  # (m, d), unit rows
    lengths = np.sqrt(rng.chisquare(d, size=m))  # (m,), chi(d): |N(0, I_d)|
    return directions * lengths[:, None]  # (m, d)


def _omega_like(omega: Any, x: Array, torch_like: bool) -> Array:
    if is_torch_tensor(omega) != torch_like and torch_like:
        import torch

        omega = torch.as_tensor(np.asarray(omega), dtype=x.dtype, device=x.device)
    elif torch_like:
        omega = omega.to(dtype=x.dtype, device=x.device)
    else:
        if is_torch_tensor(omega):
            raise TypeError("omega is a torch tensor but x is a NumPy array")
        omega = np.asarray(omega)
        if omega.dtype.name not in _checks.FLOAT_DTYPES:
            raise TypeError(f"omega must be a floating array; got dtype {omega.dtype}")
        omega = omega.astype(x.dtype, copy=False)
    if omega.ndim != 2 or omega.shape[1] != x.shape[-1] or omega.shape[0] < 1:
        raise ValueError(
            f"omega must have shape (num_features, d) with d = {x.shape[-1]} (the last axis of "
            f"the inputs); got {tuple(omega.shape)}"
        )
    return omega


def _favor_exponent(x: Array, omega: Array, torch_like: bool) -> Array:
    """omega_i^T x - |x|^2 / 2, shape (..., L, m)."""
    proj = x @ omega.swapaxes(0, 1)  # (..., L, d) @ (d, m) -> (..., L, m)
    return proj - (x * x).sum(-1)[..., None] / 2  # (..., L, m)


def favor_features(x: Array, omega: Array, log_offset: Optional[Array] = None) -> Array:
    r"""Positive random features :math:`\phi(x)_i = \exp(\omega_i^\top x - |x|^2/2 - c)/\sqrt m`.

    ``x`` (..., L, d), ``omega`` (m, d) from :func:`random_features` -> (..., L, m). With
    c = 0 (``log_offset=None``), :math:`E[\phi(q)\cdot\phi(k)] = \exp(q\cdot k)` exactly.
    ``log_offset`` (broadcastable to (..., L, m)) subtracts c inside the exponent, i.e.
    multiplies the features by :math:`e^{-c}`, to keep exp() from overflowing;
    :func:`performer_attention` uses one c per query (it cancels between numerator and
    denominator of that query) and one c for all keys of a sequence (it cancels in every
    row), so the stabilised attention equals the unstabilised one.

    Fold the attention scale into x: for :math:`\exp(q\cdot k/\sqrt d)` pass
    :math:`q/d^{1/4}` and :math:`k/d^{1/4}`. NumPy or torch (omega is converted).
    Explained in chapter 12.
    """
    torch_like = is_torch_tensor(x)
    if not torch_like:
        x = np.asarray(x)
    _checks.check_float_dtypes(x=_checks.dtype_name(x))
    _checks.check_rank("x", tuple(x.shape))
    omega = _omega_like(omega, x, torch_like)
    expo = _favor_exponent(x, omega, torch_like)  # (..., L, m)
    if log_offset is not None:
        expo = expo - log_offset
    return Ops(torch_like).exp(expo) / math.sqrt(omega.shape[0])


def _scaled_pair(q: Array, k: Array, scale: Optional[float]):
    """Fold the scale s into q and k: exp(s q.k) = exp(q'.k') with q' = sqrt|s| q, k' = sign(s) sqrt|s| k."""
    s = _checks.check_scale(scale, q.shape[-1])
    r = math.sqrt(abs(s))
    return q * r, k * (r if s > 0 else -r)


def softmax_kernel(q: Array, k: Array, scale: Optional[float] = None) -> Array:
    r"""The exact softmax kernel :math:`\exp(s\, q_i \cdot k_j)`, shape (..., L_q, L_k).

    ``scale`` s defaults to :math:`1/\sqrt{d}`. Softmax attention is this kernel,
    normalised row by row. NumPy or torch. Explained in chapter 12.
    """
    q, k, _, _, torch_like = _qkv(q, k, k)
    s = _checks.check_scale(scale, q.shape[-1])
    return Ops(torch_like).exp((q @ k.swapaxes(-1, -2)) * s)  # (..., Lq, Lk)


def _features_for(q, k, num_features, seed, orthogonal, omega, torch_like):
    m = _checks.check_positive_int("num_features", num_features)
    if omega is None:
        omega = random_features(q.shape[-1], m, seed=seed, orthogonal=orthogonal)
    return _omega_like(omega, q, torch_like)


def softmax_kernel_estimate(
    q: Array,
    k: Array,
    num_features: int = 256,
    seed: Seed = 0,
    orthogonal: bool = True,
    scale: Optional[float] = None,
    omega: Optional[Array] = None,
) -> Array:
    r"""The FAVOR+ estimate :math:`\phi(q_i')\cdot\phi(k_j')` of :math:`\exp(s\, q_i\cdot k_j)`.

    With :math:`q' = \sqrt s\, q` and :math:`k' = \sqrt s\, k` (for s < 0, :math:`k' =
    -\sqrt{|s|}\, k`), :math:`\exp(s\, q\cdot k) = \exp(q'\cdot k')` and the estimate is
    unbiased for every seed distribution: its mean over seeds is the exact kernel
    (:func:`softmax_kernel`); with i.i.d. features its variance is :func:`favor_variance`.
    Shapes (..., L_q, d), (..., L_k, d) -> (..., L_q, L_k). ``omega`` (m, d), if given,
    replaces the random draw (``num_features``, ``seed``, ``orthogonal`` then unused).
    Computed with per-row stabilisers that are added back in log space, so it is the
    unstabilised value without the overflow. Explained in chapter 12.
    """
    q, k, _, _, torch_like = _qkv(q, k, k)
    omega = _features_for(q, k, num_features, seed, orthogonal, omega, torch_like)
    qs, ks = _scaled_pair(q, k, scale)
    eq = _favor_exponent(qs, omega, torch_like)  # (..., Lq, m)
    ek = _favor_exponent(ks, omega, torch_like)  # (..., Lk, m)
    cq = Ops(torch_like).amax(eq, -1)  # (..., Lq, 1)
    ck = Ops(torch_like).amax(ek, -1)  # (..., Lk, 1)
    a = Ops(torch_like).exp(eq - cq) @ Ops(torch_like).exp(ek - ck).swapaxes(-1, -2)  # (..., Lq, Lk)
    ckt = ck.swapaxes(-1, -2)  # (..., 1, Lk)
    if torch_like:
        import torch

        log_a = torch.log(a)
    else:
        with np.errstate(divide="ignore"):
            log_a = np.log(a)
    return Ops(torch_like).exp(log_a + cq + ckt) / omega.shape[0]


def favor_variance(q: Array, k: Array, num_features: int, scale: Optional[float] = None) -> Array:
    r"""Exact variance of the FAVOR+ estimate with ``num_features`` i.i.d. features.

    One feature gives :math:`X = \exp(\omega^\top(q'+k') - |q'|^2/2 - |k'|^2/2)` with
    :math:`E[X] = e^{q'\cdot k'}` and :math:`E[X^2] = e^{2 q'\cdot k' + |q'+k'|^2}`, so

    .. math:: \operatorname{Var}\Big[\tfrac1m \textstyle\sum_{i=1}^m X_i\Big]
              = \frac{e^{2 q'\cdot k'}\,\big(e^{|q'+k'|^2} - 1\big)}{m}.

    The relative standard error is :math:`\sqrt{(e^{|q'+k'|^2} - 1)/m}`: it falls like
    :math:`1/\sqrt m` and grows fast with the norms of q and k. (q', k' are q, k with the
    scale folded in, as in :func:`softmax_kernel_estimate`.) Orthogonal features make
    features of one block slightly negatively correlated, which multiplies this variance by
    :math:`1 + (\min(m, d) - 1)\rho` with :math:`\rho < 0`: a constant factor for
    m >= d, not a better rate (chapter 12 measures it).
    Shapes (..., L_q, d), (..., L_k, d) -> (..., L_q, L_k). Chapter 12.
    """
    q, k, _, _, torch_like = _qkv(q, k, k)
    m = _checks.check_positive_int("num_features", num_features)
    qs, ks = _scaled_pair(q, k, scale)
    dot = qs @ ks.swapaxes(-1, -2)  # (..., Lq, Lk)
    nq = (qs * qs).sum(-1)[..., :, None]  # (..., Lq, 1)
    nk = (ks * ks).sum(-1)[..., None, :]  # (..., 1, Lk)
    sum_sq = nq + nk + 2 * dot  # |q' + k'|^2
    e1 = (Ops(torch_like).exp(sum_sq) - 1)
    return Ops(torch_like).exp(2 * dot) * e1 / m


def performer_attention(
    q: Array,
    k: Array,
    v: Array,
    num_features: int = 256,
    seed: Seed = 0,
    causal: Union[bool, str] = False,
    mask: Optional[Array] = None,
    scale: Optional[float] = None,
    orthogonal: bool = True,
    omega: Optional[Array] = None,
    eps: float = 0.0,
) -> Array:
    r"""Performer attention (FAVOR+): linear attention with positive random features.

    Approximates softmax attention :math:`\operatorname{softmax}(s\, QK^\top)V` by
    :func:`linear_attention` with :math:`\phi` = :func:`favor_features` of
    :math:`\sqrt s\, q` and :math:`\sqrt s\, k` (s = ``scale``, default
    :math:`1/\sqrt d`, i.e. q and k divided by :math:`d^{1/4}`). The kernel estimate is
    unbiased; the attention output, a ratio of two estimates, is consistent (exact as
    m -> infinity), not unbiased.

    Numerical stabilisation: query features use :math:`c = \max_i(\omega_i^\top q - |q|^2/2)`
    per query (cancels in that row's ratio); key features one c for all allowed keys of a
    sequence (per leading index; cancels in every row). Per-key constants would *not*
    cancel, so they are not used.

    Args as in :func:`linear_attention`, plus ``num_features`` m (default 256),
    ``seed`` (int or Generator; the same seed gives the same features), ``orthogonal``
    (see :func:`random_features`) and ``omega`` (an explicit (m, d) feature matrix,
    overriding the draw). Shapes (..., L_q, d), (..., L_k, d), (..., L_k, d_v) ->
    (..., L_q, d_v). Explained in chapter 12.
    """
    q, k, v, batch, torch_like = _qkv(q, k, v)
    omega = _features_for(q, k, num_features, seed, orthogonal, omega, torch_like)
    align = _checks.check_causal(causal)
    eps = _check_eps(eps)
    scores_shape = tuple(batch) + (q.shape[-2], k.shape[-2])
    mask = _bool_mask(mask, torch_like, q.device if torch_like else None, "performer_attention")
    keys = _key_mask(mask, scores_shape, align, "performer_attention")  # (..., Lk, 1) or None
    qs, ks = _scaled_pair(q, k, scale)
    eq = _favor_exponent(qs, omega, torch_like)  # (..., Lq, m)
    ek = _favor_exponent(ks, omega, torch_like)  # (..., Lk, m)
    # stabilisers: constants, so no gradient flows through them (they cancel anyway)
    eq_c, ek_c = (eq.detach(), ek.detach()) if torch_like else (eq, ek)
    cq = Ops(torch_like).amax(eq_c, -1)  # (..., Lq, 1): one constant per query
    if keys is not None:  # the key stabiliser ignores masked keys
        if torch_like:
            import torch

            ek_c = torch.where(keys, ek_c, torch.full((), -math.inf, dtype=ek.dtype, device=ek.device))
        else:
            ek_c = np.where(keys, ek_c, -np.inf)
    ck = Ops(torch_like).amax(ek_c, (-2, -1))  # (..., 1, 1): one constant per sequence
    ck = Ops(torch_like).where0(ck > -math.inf, ck)  # nothing allowed -> 0
    cq = Ops(torch_like).where0(cq > -math.inf, cq)
    phi_q = Ops(torch_like).exp(eq - cq)  # (..., Lq, m)  (1/sqrt(m) cancels in the ratio)
    phi_k = Ops(torch_like).exp(ek - ck)  # (..., Lk, m)
    if keys is not None:
        phi_k = Ops(torch_like).where0(keys, phi_k)
        v = Ops(torch_like).where0(keys, v)
    return _linear_core(phi_q, phi_k, v, align, eps, torch_like)


# --------------------------------------------------------------------------- additive
def init_additive_params(d_q: int, d_k: int, d_hidden: int, seed: Seed = 0,
                         dtype: Any = np.float64) -> Dict[str, np.ndarray]:
    r"""Random parameters for :func:`additive_attention`: a dict with

    * ``"W_q"`` (d_q, d_hidden) and ``"W_k"`` (d_k, d_hidden), entries
      :math:`N(0, 1/d_{in})` (so :math:`W^\top x` has entries of variance ~1 for unit inputs);
    * ``"w_v"`` (d_hidden,), entries :math:`N(0, 1/d_{hidden})`.

    Seeded (int or Generator); NumPy arrays of ``dtype``. For torch, wrap them with
    ``torch.nn.Parameter(torch.as_tensor(...))``. Explained in chapter 12.
    """
    d_q = _checks.check_positive_int("d_q", d_q)
    d_k = _checks.check_positive_int("d_k", d_k)
    h = _checks.check_positive_int("d_hidden", d_hidden)
    rng = _checks.check_seed(seed)
    return {
        "W_q": (rng.standard_normal((d_q, h)) / math.sqrt(d_q)).astype(dtype),
        "W_k": (rng.standard_normal((d_k, h)) / math.sqrt(d_k)).astype(dtype),
        "w_v": (rng.standard_normal(h) / math.sqrt(h)).astype(dtype),
    }


def count_additive_params(d_q: int, d_k: int, d_hidden: int) -> int:
    r"""Parameters of the additive score: :math:`d_q h + d_k h + h` (W_q, W_k, w_v).

    The dot-product score with learned projections to d_hidden has :math:`d_q h + d_k h`,
    h fewer; the difference is in the cost (a tanh of an (L_q, L_k, h) tensor vs. one
    matrix product), not in the parameter count. Chapter 12.
    """
    d_q = _checks.check_positive_int("d_q", d_q)
    d_k = _checks.check_positive_int("d_k", d_k)
    h = _checks.check_positive_int("d_hidden", d_hidden)
    return h * (d_q + d_k + 1)


def additive_attention(
    q: Array,
    k: Array,
    v: Array,
    W_q: Array,
    W_k: Array,
    w_v: Array,
    mask: Optional[Array] = None,
    causal: Union[bool, str] = False,
    return_weights: bool = False,
):
    r"""Additive attention (Bahdanau et al. 2015): scores from a one-hidden-layer MLP.

    .. math::
        e_{ij} = w_v^\top \tanh(W_q^\top q_i + W_k^\top k_j), \qquad
        P = \operatorname{softmax}(e + M), \qquad O = P V

    (row-vector code: ``tanh(q @ W_q + k @ W_k) @ w_v``). Unlike dot-product attention,
    q and k may have different sizes d_q and d_k, and there is no scale.

    Shapes: ``q`` (..., L_q, d_q), ``k`` (..., L_k, d_k), ``v`` (..., L_k, d_v), ``W_q``
    (d_q, h), ``W_k`` (d_k, h), ``w_v`` (h,) -> output (..., L_q, d_v), weights
    (..., L_q, L_k). The hidden tensor is (..., L_q, L_k, h): :math:`O(L_q L_k h)` memory
    and tanh evaluations, where dot-product attention does one matrix product.

    ``mask`` (boolean, True = may attend, or float, added to the scores) and ``causal``
    as in :func:`attn_edu.reference.scaled_dot_product_attention`; a fully masked row gives zero
    output and zero weights. NumPy or torch (differentiable). Explained in chapter 12.
    """
    q, k, v, batch, torch_like = _qkv(q, k, v, same_dk=False)
    params = {"W_q": W_q, "W_k": W_k, "w_v": w_v}
    for name, p in params.items():
        if is_torch_tensor(p) != torch_like:
            kind = "torch tensors" if torch_like else "NumPy arrays"
            raise TypeError(f"{name} must be of the same kind as q, k, v ({kind}); got {type(p).__name__}")
        if not torch_like:
            params[name] = np.asarray(p)
        if _checks.dtype_name(params[name]) != _checks.dtype_name(q):
            raise TypeError(f"{name} has dtype {_checks.dtype_name(params[name])} but q has {_checks.dtype_name(q)}")
        if torch_like:
            _checks.same_devices(q=q.device, **{name: p.device})
    W_q, W_k, w_v = params["W_q"], params["W_k"], params["w_v"]
    if w_v.ndim != 1 or w_v.shape[0] < 1:
        raise ValueError(f"w_v must have shape (d_hidden,); got {tuple(w_v.shape)}")
    h = w_v.shape[0]
    for name, p, d in (("W_q", W_q, q.shape[-1]), ("W_k", W_k, k.shape[-1])):
        if tuple(p.shape) != (d, h):
            raise ValueError(
                f"{name} must have shape ({d}, {h}) = (last axis of {name[-1]}, len(w_v)); got {tuple(p.shape)}"
            )
    align = _checks.check_causal(causal)
    lq, lk = q.shape[-2], k.shape[-2]
    scores_shape = tuple(batch) + (lq, lk)

    hq = q @ W_q  # (..., Lq, d_q) @ (d_q, h) -> (..., Lq, h)
    hk = k @ W_k  # (..., Lk, d_k) @ (d_k, h) -> (..., Lk, h)
    hidden = hq[..., :, None, :] + hk[..., None, :, :]  # (..., Lq, Lk, h)
    _checks.check_mask_kind(mask, torch_like)
    if torch_like:
        import torch

        _checks.same_devices(q=q.device, **({} if mask is None else {"mask": mask.device}))
        scores = torch.tanh(hidden) @ w_v  # (..., Lq, Lk)
    else:
        mask = None if mask is None else np.asanyarray(mask)  # keeps a CausalMask's tag
        scores = np.tanh(hidden) @ w_v  # (..., Lq, Lk)
    allowed, additive = _prepare_mask(mask, scores_shape, align, q, torch_like)
    if additive is not None:
        scores = scores + additive.to(q.dtype) if torch_like else scores + additive.astype(q.dtype)
    weights = softmax(scores, axis=-1, mask=allowed)  # (..., Lq, Lk); NumPy or torch alike
    out = weights @ v  # (..., Lq, Lk) @ (..., Lk, Dv) -> (..., Lq, Dv)
    return (out, weights) if return_weights else out
