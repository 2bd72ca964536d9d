r"""Split-KV decoding (Flash-Decoding): attention over chunks of keys, merged exactly.

At decode time there is one query (or a few) per sequence and the whole KV cache to
read. A GPU kernel that gives each (batch, head) one program leaves most of the GPU
idle; Flash-Decoding {cite}`dao2023flashdecoding` also splits the *keys* into
``num_splits`` chunks, lets one program attend to each chunk, and merges the chunks'
results afterwards. Each chunk ``c`` yields a partial output and its log-sum-exp,

.. math::
    o_c = \sum_{j \in c} \frac{e^{s_j}}{\sum_{j' \in c} e^{s_{j'}}}\, v_j, \qquad
    \operatorname{lse}_c = \log \sum_{j \in c} e^{s_j},

and the exact output is the weighted average
:math:`o = \sum_c e^{\operatorname{lse}_c - \operatorname{lse}}\, o_c` with
:math:`\operatorname{lse} = \log \sum_c e^{\operatorname{lse}_c}`. That is chapter 09's
merge of softmax statistics, :func:`attn_edu.precision.merge_softmax_stats`, with each
chunk's statistics written as ``(m, l) = (lse_c, 1)``: :func:`merge_partials` calls it,
one chunk at a time. An empty or fully masked chunk has ``lse = -inf`` and contributes
nothing; a row with no allowed key in any chunk gets zeros, never NaN.

Each chunk's partial comes from :func:`attn_edu.flash.flash_attention` with
``return_lse=True`` (chapter 09's tiled loop on the chunk). NumPy arrays and torch
tensors alike (the torch path uses the PyTorch twin of everything it calls).
Explained in chapter 13.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _checks, precision
from .._call import attention_call, loop_tiles
from .._checks import is_torch_tensor
from ..flash import flash_loop
from ..masks import causal_block

__all__ = ["chunk_size", "split_bounds", "split_waves", "split_kv_attention", "merge_partials"]

Array = Any  # a NumPy array or a torch tensor


def chunk_size(lk: int, num_splits: int, multiple: int = 1) -> int:
    """Keys per chunk when ``lk`` keys are split ``num_splits`` ways: ``ceil(lk / num_splits)``
    rounded up to a multiple of ``multiple`` (at least ``multiple``)."""
    lk = _checks.check_length("lk", lk)
    num_splits = _checks.check_length("num_splits", num_splits, minimum=1)
    multiple = _checks.check_length("multiple", multiple, minimum=1)
    return _chunk_size(lk, num_splits, multiple)


def _chunk_size(lk: int, num_splits: int, multiple: int) -> int:
    chunk = -(-lk // num_splits)  # ceil
    return max(multiple, -(-chunk // multiple) * multiple)


def split_waves(programs: int, lk: int, num_splits: int, num_sms: int, multiple: int = 1) -> Tuple[int, int]:
    """The occupancy model of a split-KV decode step: ``(waves, keys per program)``.

    ``programs`` is the grid without splitting (``B * H_kv * row blocks``); with ``num_splits``
    splits there are ``programs * num_splits`` programs, each reading :func:`chunk_size` keys.
    ``num_sms`` run one program each at a time, so the programs run in
    ``ceil(programs * num_splits / num_sms)`` waves. If every busy SM reads at an equal share
    of the bandwidth, the step takes a time proportional to ``waves * keys``; a split count
    that leaves the last wave nearly empty pays a whole wave for it.

    >>> split_waves(8, 32768, 16, 132)     # 128 programs: one wave of 2048 keys each
    (1, 2048)
    >>> split_waves(8, 32768, 17, 132)     # 136 programs on 132 SMs: a second wave
    (2, 1928)
    """
    programs = _checks.check_length("programs", programs, minimum=1)
    num_sms = _checks.check_length("num_sms", num_sms, minimum=1)
    keys = chunk_size(lk, num_splits, multiple)
    return -(-programs * num_splits // num_sms), keys


def split_bounds(lk: int, num_splits: int, multiple: int = 1) -> List[Tuple[int, int]]:
    """The key ranges ``[start, stop)`` of the ``num_splits`` chunks of ``lk`` keys.

    Every chunk but the last has :func:`chunk_size` keys, ``ceil(lk / num_splits)`` rounded
    up to a multiple of ``multiple`` (a kernel's ``BLOCK_N``, so chunks start on block
    boundaries); the
    chunks left over at the end are empty, ``(lk, lk)``. Always ``num_splits`` ranges that
    cover ``0 .. lk - 1`` once, in order.

    >>> split_bounds(10, 4)
    [(0, 3), (3, 6), (6, 9), (9, 10)]
    >>> split_bounds(5, 4)          # the fourth chunk is empty
    [(0, 2), (2, 4), (4, 5), (5, 5)]
    """
    return _bounds(lk, num_splits, chunk_size(lk, num_splits, multiple))


def _bounds(lk: int, num_splits: int, chunk: int) -> List[Tuple[int, int]]:
    return [(min(i * chunk, lk), min((i + 1) * chunk, lk)) for i in range(num_splits)]


def _neg_inf_to_zero_weight(lse: Array) -> Array:
    """``l`` of a chunk whose statistics are ``(m, l) = (lse, 1)``: 0 where it is empty."""
    if is_torch_tensor(lse):
        import torch

        return (~torch.isneginf(lse)).to(lse.dtype)
    return (~np.isneginf(lse)).astype(lse.dtype)


def merge_partials(outs: Sequence[Array], lses: Sequence[Array]) -> Tuple[Array, Array]:
    r"""Merge per-chunk partial attention outputs into the exact one (Flash-Decoding's reduction).

    ``outs[c]`` is chunk ``c``'s *normalised* output (..., L_q, d_v) and ``lses[c]`` its
    log-sum-exp (..., L_q) (``-inf`` and zeros for a chunk with no allowed key). Returns
    ``(out, lse)``: :math:`\operatorname{lse} = \log \sum_c e^{\operatorname{lse}_c}` and
    :math:`o = \sum_c e^{\operatorname{lse}_c - \operatorname{lse}} o_c`, computed by folding
    :func:`attn_edu.precision.merge_softmax_stats` over the chunks with
    ``(m, l) = (lse_c, 1)``, so no exponential overflows however large the scores. Rows
    that no chunk covers get ``out = 0`` and ``lse = -inf``; NaN propagates. The order of
    the chunks does not matter (up to rounding). NumPy arrays or torch tensors, computed
    in their dtype. Explained in chapter 13.
    """
    outs, lses = list(outs), list(lses)
    if not outs or len(outs) != len(lses):
        raise ValueError(f"merge_partials needs one lse per output and at least one chunk; got "
                         f"{len(outs)} outputs and {len(lses)} lses")
    m, o = lses[0], outs[0]
    l = _neg_inf_to_zero_weight(m)
    for o_c, lse_c in zip(outs[1:], lses[1:]):
        m, l, o = precision.merge_softmax_stats(m, l, o, lse_c, _neg_inf_to_zero_weight(lse_c), o_c)
    if is_torch_tensor(m):
        import torch

        lse = m + torch.log(l)  # l = 0 only where m = -inf: -inf + -inf = -inf
    else:
        with np.errstate(divide="ignore"):
            lse = m + np.log(l)
    return o, lse


def _keys(mask: Optional[Array], c0: int, c1: int, lk: int) -> Optional[Array]:
    """The columns ``c0:c1`` of a mask (all of it when the mask broadcasts over the keys)."""
    if mask is None or (mask.shape[-1] == 1 and lk != 1):
        return mask
    return mask[..., c0:c1]


def _with_causal(mask: Optional[Array], kind: Optional[str], offset: Optional[int],
                 lq: int, lk: int, device: Any) -> Optional[Array]:
    """Fold the causal diagonal ``offset`` into the mask: a chunk of keys is neither alignment
    of its own. ``device`` is q's (None for NumPy)."""
    if offset is None:
        return mask
    tri = causal_block(0, lq, 0, lk, offset, device)  # (Lq, Lk)
    if mask is None:
        return tri
    if kind == "bool":
        return mask & tri
    if device is not None:
        return mask.masked_fill(~tri, float("-inf"))
    return np.where(tri, mask, -np.inf).astype(mask.dtype, copy=False)


def split_kv_attention(
    q: Array,
    k: Array,
    v: Array,
    num_splits: int,
    mask: Optional[Array] = None,
    causal: Union[bool, str] = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
):
    r"""Attention computed over ``num_splits`` chunks of keys and merged exactly (Flash-Decoding).

    Returns what :func:`attn_edu.reference.scaled_dot_product_attention` returns for the
    same arguments (<= 1e-10 apart in float64): the keys are cut by :func:`split_bounds`,
    each chunk's partial output and log-sum-exp come from
    :func:`attn_edu.flash.flash_attention` (``return_lse=True``), and
    :func:`merge_partials` merges them with chapter 09's
    :func:`attn_edu.precision.merge_softmax_stats`.

    Shapes: ``q`` (..., L_q, d_k), ``k`` (..., L_k, d_k), ``v`` (..., L_k, d_v) -> output
    (..., L_q, d_v) (and ``lse`` (..., L_q) with ``return_lse=True``). Any lengths: a
    split may be empty (``num_splits > L_k``) or fully masked; such chunks contribute
    nothing, and a row with no allowed key anywhere gets zeros. ``mask``, ``causal``
    (False, True/"top_left", "bottom_right" -- the one a decoder with a cache needs),
    ``scale`` and ``enable_gqa`` mean what they mean in the reference, with the same
    errors. NumPy arrays or torch tensors (any device), computed in the input dtype.
    Explained in chapter 13.
    """
    call = attention_call(q, k, v, mask, causal, scale, enable_gqa)  # every check, once
    q, k, v, mask, kind = call.q, call.k, call.v, call.mask, call.mask_kind
    torch_like, batch, s = call.torch_like, call.batch, call.scale
    num_splits = _checks.check_length("num_splits", num_splits, minimum=1)
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    mask = _with_causal(mask, kind, call.offset, lq, lk, call.device)
    kind = None if mask is None else (kind or "bool")  # causality alone folds in as a bool mask
    block_q = loop_tiles(torch_like, call.device)[0]  # flash_attention's default tile rows
    outs, lses = [], []
    for c0, c1 in _bounds(lk, num_splits, _chunk_size(lk, num_splits, 1)):  # split_bounds, checked
        if c0 == c1:  # an empty chunk: no keys, statistics (o, lse) = (0, -inf)
            o_c, lse_c = _empty_partial(q, tuple(batch) + (lq,), dv, torch_like)
        else:  # chapter 09's loop on this chunk of keys, on the checked call: (..., Lq, dv), (..., Lq)
            chunk = replace(call, k=k[..., c0:c1, :], v=v[..., c0:c1, :], mask=_keys(mask, c0, c1, lk),
                            mask_kind=kind, align=None, offset=None, block_q=block_q,
                            block_k=c1 - c0, plan=None)
            o_c, lse_c, _ = flash_loop(chunk, return_lse=True)
        outs.append(o_c)
        lses.append(lse_c)
    out, lse = merge_partials(outs, lses)
    return (out, lse) if return_lse else out


def _empty_partial(q: Array, rows: Tuple[int, ...], dv: int, torch_like: bool):
    if torch_like:
        import torch

        return (torch.zeros(rows + (dv,), dtype=q.dtype, device=q.device),
                torch.full(rows, float("-inf"), dtype=q.dtype, device=q.device))
    return np.zeros(rows + (dv,), dtype=q.dtype), np.full(rows, -np.inf, dtype=q.dtype)
