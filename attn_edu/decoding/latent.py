r"""Multi-head latent attention (MLA, DeepSeek-V2 {cite}`deepseekai2024v2`), naive and absorbed.

MLA caches one small **latent** vector per token instead of per-head keys and values.
With ``H`` heads, row vectors and per-head blocks ``W_h`` of each up-projection:

.. math::
    c_t = x_t W_{DKV} \in \mathbb{R}^{d_c}, \qquad
    k^R_t = \operatorname{RoPE}(x_t W_{KR}) \in \mathbb{R}^{d_R} \quad\text{(cached)} \\
    k_{t,h} = [\,c_t W_{UK,h},\ k^R_t\,], \quad v_{t,h} = c_t W_{UV,h}, \quad
    q_{h} = [\,x W_{Q,h},\ \operatorname{RoPE}(x W_{QR,h})\,]

and ordinary multi-head attention on those, scaled by :math:`1/\sqrt{d_h + d_R}`. The
rotary part is *decoupled*: RoPE cannot be applied to :math:`c_t W_{UK,h}` without
breaking the absorption below, so a small shared key :math:`k^R` carries the positions.

**Absorption.** :math:`q_h^\top k_{t,h} = (x W_{Q,h} W_{UK,h}^\top)\, c_t^\top + q^R_h{}^\top k^R_t`
and :math:`\sum_t p_{t,h} v_{t,h} = (\sum_t p_{t,h} c_t)\, W_{UV,h}`: fold
:math:`W_{UK,h}` into the query projection and :math:`W_{UV,h}` into the output
projection, and every head attends directly to the cached ``[c, k^R]`` -- multi-query
attention in latent space, with keys of width ``d_c + d_R`` and values of width ``d_c``.
Same output (:func:`mla_attention` with ``absorbed=True``), and a cache of
``d_c + d_R`` numbers per token and layer instead of ``2 H d_h``.

NumPy, row-vector convention (``x @ W``) as in :mod:`attn_edu.multihead`. Explained in
chapter 13.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple, Union

import numpy as np

from .. import _checks
from ..masks import causal_offset
from ..multihead import merge_heads, split_heads
from ..positions import rotary
from ..reference import scaled_dot_product_attention

__all__ = ["init_mla_params", "mla_cache_entries", "absorb_mla_params", "mla_attention"]

Params = Dict[str, np.ndarray]

_SHAPES = {  # name -> shape in terms of (d_model, H, d_c, d_h, d_R, d_v)
    "w_dkv": lambda m, h, c, dh, r, dv: (m, c),
    "w_kr": lambda m, h, c, dh, r, dv: (m, r),
    "w_uk": lambda m, h, c, dh, r, dv: (c, h * dh),
    "w_uv": lambda m, h, c, dh, r, dv: (c, h * dv),
    "w_q": lambda m, h, c, dh, r, dv: (m, h * dh),
    "w_qr": lambda m, h, c, dh, r, dv: (m, h * r),
    "w_o": lambda m, h, c, dh, r, dv: (h * dv, m),
}


def init_mla_params(d_model: int, num_heads: int, d_latent: int, d_head: int, d_rope: int,
                    d_v: Optional[int] = None, rng: Union[np.random.Generator, int, None] = None,
                    dtype=np.float64) -> Params:
    """Random MLA weights (normal, standard deviation ``1/sqrt(fan_in)``), as a dict::

        w_dkv (d_model, d_c)     down-projection to the cached latent c
        w_kr  (d_model, d_R)     the shared rotary key (cached)
        w_uk  (d_c, H*d_h)       latent -> keys (no-RoPE part), per head
        w_uv  (d_c, H*d_v)       latent -> values, per head
        w_q   (d_model, H*d_h)   queries (no-RoPE part)
        w_qr  (d_model, H*d_R)   queries' rotary part
        w_o   (H*d_v, d_model)   output projection

    ``d_rope`` must be even (RoPE rotates pairs); ``d_v`` defaults to ``d_head``.
    DeepSeek-V2 also compresses the queries through a latent of width 1536 to save
    activation memory in training; that does not change the cache and is left out.
    """
    dims = _dims(d_model, num_heads, d_latent, d_head, d_rope, d_v)
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    out = {}
    for name, shape_of in _SHAPES.items():
        shape = shape_of(*dims)
        out[name] = (gen.standard_normal(shape) / np.sqrt(shape[0])).astype(dtype)
    return out


def _dims(d_model, num_heads, d_latent, d_head, d_rope, d_v=None) -> Tuple[int, ...]:
    m = _checks.check_length("d_model", d_model, minimum=1)
    h = _checks.check_length("num_heads", num_heads, minimum=1)
    c = _checks.check_length("d_latent", d_latent, minimum=1)
    dh = _checks.check_length("d_head", d_head, minimum=1)
    r = _checks.check_length("d_rope", d_rope, minimum=2)
    if r % 2:
        raise ValueError(f"d_rope must be even (RoPE rotates pairs of dimensions); got {r}")
    dv = dh if d_v is None else _checks.check_length("d_v", d_v, minimum=1)
    return m, h, c, dh, r, dv


def _params_dims(params: Params, num_heads: int) -> Tuple[int, ...]:
    """(d_model, H, d_c, d_h, d_R, d_v) read from the weights, with every shape checked."""
    missing = [n for n in _SHAPES if n not in params]
    if missing:
        raise ValueError(f"params is missing {missing}; make them with init_mla_params")
    h = _checks.check_length("num_heads", num_heads, minimum=1)
    m, c = params["w_dkv"].shape
    r = params["w_kr"].shape[1]
    dims = (m, h, c, params["w_uk"].shape[1] // h, r, params["w_uv"].shape[1] // h)
    for name, shape_of in _SHAPES.items():
        if params[name].shape != shape_of(*dims):
            raise ValueError(f"params[{name!r}] has shape {params[name].shape}; with num_heads={h} "
                             f"and the other weights it must be {shape_of(*dims)}")
    return dims


def mla_cache_entries(x: np.ndarray, params: Params, positions: Optional[np.ndarray] = None
                      ) -> Tuple[np.ndarray, np.ndarray]:
    """What MLA caches for tokens ``x`` (..., L, d_model): the latent ``c`` (..., L, d_c)
    and the rotary key ``k_R`` (..., L, d_R) (RoPE at ``positions``, default 0..L-1)."""
    x = np.asarray(x)
    c = x @ params["w_dkv"]  # (..., L, d_c)
    k_rope = rotary(x @ params["w_kr"], positions)  # (..., L, d_R)
    return c, k_rope


def absorb_mla_params(params: Params, num_heads: int) -> Params:
    r"""The absorbed weights: ``w_q_latent`` (H, d_model, d_c) with block
    :math:`W_{Q,h} W_{UK,h}^\top` and ``w_o_latent`` (H, d_c, d_model) with block
    :math:`W_{UV,h} W_{O,h}` (computed once, offline)."""
    m, h, c, dh, r, dv = _params_dims(params, num_heads)
    w_q = params["w_q"].reshape(m, h, dh)  # (d_model, H, d_h)
    w_uk = params["w_uk"].reshape(c, h, dh)  # (d_c, H, d_h)
    w_uv = params["w_uv"].reshape(c, h, dv)  # (d_c, H, d_v)
    w_o = params["w_o"].reshape(h, dv, m)  # (H, d_v, d_model)
    return {
        "w_q_latent": np.einsum("mhd,chd->hmc", w_q, w_uk),  # (H, d_model, d_c)
        "w_o_latent": np.einsum("chv,hvm->hcm", w_uv, w_o),  # (H, d_c, d_model)
    }


def mla_attention(x_q: np.ndarray, c: np.ndarray, k_rope: np.ndarray, params: Params, num_heads: int,
                  q_positions: Optional[np.ndarray] = None, causal: Union[bool, str] = "bottom_right",
                  absorbed: bool = False) -> np.ndarray:
    r"""MLA for queries ``x_q`` (..., L_q, d_model) over cached ``c`` (..., L, d_c) and ``k_rope`` (..., L, d_R).

    ``absorbed=False`` rebuilds per-head keys (..., H, L, d_h + d_R) and values
    (..., H, L, d_v) from the latent and runs multi-head attention (what serving systems do
    in prefill); ``absorbed=True`` attends in latent space (what they do in decode): each
    query is taken into latent space at run time, :math:`\tilde q_h = q_h W_{UK,h}^\top`,
    attends to one shared key head ``[c, k_R]`` and value head ``c`` for all H query heads
    (grouped-query attention with H_kv = 1), and its latent output is mapped back by
    :math:`W_{UV,h}`. The weights stay factored (:func:`absorb_mla_params` folds them,
    which costs more numbers than it saves when the query has its own latent). Both give
    the same (..., L_q, d_model) up to rounding.
    ``q_positions`` (default: the last L_q positions, ``L - L_q .. L - 1``) place the
    queries for RoPE; ``causal`` is ``"bottom_right"`` by default (the queries are the
    newest tokens). The scale is :math:`1/\sqrt{d_h + d_R}`.
    """
    m, h, dc, dh, r, dv = _params_dims(params, num_heads)
    x_q, c, k_rope = np.asarray(x_q), np.asarray(c), np.asarray(k_rope)
    lq, lk = x_q.shape[-2], c.shape[-2]
    if q_positions is None:
        q_positions = causal_offset(lq, lk, "bottom_right") + np.arange(lq)  # the newest L_q
    scale = 1.0 / np.sqrt(dh + r)
    q_rope = rotary(split_heads(x_q @ params["w_qr"], h), q_positions)  # (..., H, Lq, d_R)
    k_r = k_rope[..., None, :, :]  # (..., 1, L, d_R): one rotary key for every head
    if not absorbed:
        q = np.concatenate([split_heads(x_q @ params["w_q"], h), q_rope], axis=-1)  # (..., H, Lq, d_h+d_R)
        k_nope = split_heads(c @ params["w_uk"], h)  # (..., H, L, d_h)
        k = np.concatenate([k_nope, np.broadcast_to(k_r, k_nope.shape[:-1] + (r,))], axis=-1)
        v = split_heads(c @ params["w_uv"], h)  # (..., H, L, d_v)
        o = scaled_dot_product_attention(q, k, v, causal=causal, scale=scale)  # (..., H, Lq, d_v)
        return merge_heads(o) @ params["w_o"]  # (..., Lq, d_model)
    # decode's form: reassociate at run time (the weights stay factored, as servers keep them)
    q_nope = split_heads(x_q @ params["w_q"], h)  # (..., H, Lq, d_h)
    q_lat = np.einsum("...hqd,chd->...hqc", q_nope, params["w_uk"].reshape(dc, h, dh))  # q W_UK,h^T: (..., H, Lq, d_c)
    q = np.concatenate([q_lat, q_rope], axis=-1)  # (..., H, Lq, d_c+d_R)
    k = np.concatenate([c[..., None, :, :], k_r], axis=-1)  # (..., 1, L, d_c+d_R): the cache itself
    o_lat = scaled_dot_product_attention(q, k, c[..., None, :, :], causal=causal, scale=scale,
                                         enable_gqa=True)  # (..., H, Lq, d_c)
    o = np.einsum("...hqc,chv->...hqv", o_lat, params["w_uv"].reshape(dc, h, dv))  # (..., H, Lq, d_v)
    return merge_heads(o) @ params["w_o"]  # (..., Lq, d_model)
