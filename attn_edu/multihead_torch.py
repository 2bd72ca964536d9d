"""PyTorch multi-head attention: the twin of :mod:`attn_edu.multihead`, plus a KV cache.

* :class:`MultiHeadAttention` -- ``nn.Module`` with ``q_proj``, ``k_proj``, ``v_proj``,
  ``out_proj`` (``nn.Linear``) and ``num_kv_heads``: MHA when it equals ``num_heads``,
  GQA when it divides them, MQA when it is 1. Self- or cross-attention, the package's
  masks (True = may attend) and causal alignments, optional per-head weights.
* :class:`KVCache` -- the keys and values seen so far, for step-by-step decoding.
* :func:`decode_with_cache` -- feed a sequence through the module a chunk at a time with a
  cache; equals the full causal pass (the test checks 1e-10 in float64).

The attention is, by default, :func:`attn_edu.reference_torch.scaled_dot_product_attention`
with ``enable_gqa=True``, so a fully masked query row gives zeros (and finite gradients);
``impl=`` switches it to chapter 09's tiled loop, PyTorch's SDPA or chapter 10's Triton
kernel, or lets the package choose (``impl="auto"``, :mod:`attn_edu.impls`), with the same
semantics.
:func:`attn_edu.multihead.multi_head_attention` is the NumPy twin; the weights convert
with ``W_numpy = linear.weight.T`` (:meth:`MultiHeadAttention.to_numpy_params`,
:meth:`MultiHeadAttention.from_numpy_params`). :meth:`MultiHeadAttention.from_torch_mha`
copies the weights of a ``torch.nn.MultiheadAttention``.

Importing this module imports torch; ``import attn_edu`` does not import it.
Explained in chapter 06 (heads, GQA/MQA, KV cache).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from . import _checks
from .multihead import check_heads, check_mask_rank, check_mha_params, head_dim
from ._call import attention_call
from .impls import check_impl, run

__all__ = ["KVCache", "MultiHeadAttention", "decode_with_cache", "torch_mha_reference"]


# --------------------------------------------------------------------------- KV cache
class KVCache:
    """Keys and values of the positions seen so far, each (B, H_kv, L, d_head).

    ``append(k_new, v_new)`` concatenates along the length axis and returns the whole
    cache ``(k_all, v_all)``. It stores the *projected, split* keys and values (what
    attention needs), one cache per attention layer. Plain concatenation, no
    preallocation: clear rather than fast (each append copies the cache).

    >>> cache = KVCache()
    >>> for t in range(L):                      # doctest: +SKIP
    ...     y_t = mha(x[:, t:t+1], kv_cache=cache, causal=True)
    """

    def __init__(self) -> None:
        self.k: Optional[Tensor] = None
        self.v: Optional[Tensor] = None

    def append(self, k_new: Tensor, v_new: Tensor) -> Tuple[Tensor, Tensor]:
        """Add (B, H_kv, L_new, d_head) keys and values; return all of them, (B, H_kv, L, d_head)."""
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
            if t.dim() != 4:
                raise ValueError(f"{name} must have shape (B, H_kv, L_new, d_head); got {tuple(t.shape)}")
        if k_new.shape[:3] != v_new.shape[:3]:
            raise ValueError(
                f"k_new and v_new must agree on (B, H_kv, L_new); got {tuple(k_new.shape)} and {tuple(v_new.shape)}"
            )
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            for name, new, old in (("k_new", k_new, self.k), ("v_new", v_new, self.v)):
                if new.shape[:2] != old.shape[:2] or new.shape[3] != old.shape[3]:
                    raise ValueError(
                        f"{name} of shape {tuple(new.shape)} does not fit the cache of shape "
                        f"{tuple(old.shape)} (B, H_kv and d_head must match)"
                    )
                if new.dtype != old.dtype or new.device != old.device:
                    raise TypeError(
                        f"{name} is {new.dtype} on {new.device} but the cache holds {old.dtype} on {old.device}"
                    )
            self.k = torch.cat([self.k, k_new], dim=-2)  # (B, Hkv, L_old + L_new, dh)
            self.v = torch.cat([self.v, v_new], dim=-2)  # (B, Hkv, L_old + L_new, dh)
        return self.k, self.v

    @property
    def length(self) -> int:
        """Number of cached positions (0 when empty)."""
        return 0 if self.k is None else int(self.k.shape[-2])

    @property
    def nbytes(self) -> int:
        """The bytes held by K and V together, ``2 * B * H_kv * L * d_head * element size``.

        Equals :func:`attn_edu.multihead.kv_cache_bytes` with ``num_layers=1``.
        """
        if self.k is None:
            return 0
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.k = self.v = None

    def __repr__(self) -> str:
        shape = None if self.k is None else tuple(self.k.shape)
        return f"KVCache(length={self.length}, k shape={shape}, nbytes={self.nbytes})"


# --------------------------------------------------------------------------- the module
def _as_mask(mask: object, device: torch.device) -> Optional[Tensor]:
    """A torch mask on ``device``; NumPy masks (from :mod:`attn_edu.masks`) are converted,
    keeping a causal mask's alignment tag so ``causal=...`` given twice is still caught."""
    if mask is None or isinstance(mask, torch.Tensor):
        return mask
    if isinstance(mask, np.ndarray):
        tag = getattr(mask, "causal_alignment", None)
        out = torch.as_tensor(np.asarray(mask), device=device)
        if tag is not None:
            out.causal_alignment = tag
        return out
    raise TypeError(f"mask must be a torch.Tensor or a NumPy array; got {type(mask).__name__}")


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention with ``num_kv_heads`` key/value heads (MHA, GQA, MQA).

    .. math:: \mathrm{out} = \mathrm{concat}_h\big(\operatorname{softmax}(Q_h K_{g(h)}^\top/\sqrt{d_{head}} + M)\,V_{g(h)}\big)\,W_O^\top + b_O

    with ``Q = q_proj(x_q)``, ``K = k_proj(x_kv)``, ``V = v_proj(x_kv)`` and ``g(h) = h // (H/H_kv)``
    (consecutive query heads share a key/value head).

    Args:
        d_model: model width (input and output features).
        num_heads: H, query heads.
        num_kv_heads: H_kv (default H; must divide H). H_kv = H: MHA; 1: MQA; otherwise GQA.
        d_head: per-head size (default ``d_model // num_heads``).
        bias: biases in the four projections (default True, like ``nn.MultiheadAttention``).
        device, dtype: for the parameters.
        impl: which implementation computes the attention (:mod:`attn_edu.impls`):
            ``"naive"`` (default: matmul, softmax, matmul, the path chapters 06 and 07 teach
            and whose numbers they record; the only one that returns weights), ``"tiled"``
            (chapter 09's loop), ``"sdpa"`` (PyTorch's fused attention), ``"triton"``
            (chapter 10's kernel: no mask tensor) or ``"auto"``: the Triton kernel for
            float16/bfloat16 on a GPU of compute capability 8.0 or newer, SDPA otherwise (CPU
            tensors included), the plain path when weights are asked for. Every choice
            computes the same attention within the tolerance rule of :mod:`attn_edu.testing`.
            ``module.impl`` may be changed later; ``module.last_impl`` is ``(name, reason)``
            of the latest call (None before the first).

    Layers: ``q_proj`` (d_model -> H*d_head), ``k_proj`` and ``v_proj`` (d_model -> H_kv*d_head),
    ``out_proj`` (H*d_head -> d_model). The parameter count is
    :func:`attn_edu.multihead.count_mha_params`. Explained in chapter 06.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: Optional[int] = None,
        d_head: Optional[int] = None,
        bias: bool = True,
        device=None,
        dtype=None,
        impl: str = "naive",
    ) -> None:
        super().__init__()
        self.impl = check_impl(impl)
        self.last_impl: Optional[Tuple[str, str]] = None
        d_model = _checks.check_positive_int("d_model", d_model)
        h, hkv = check_heads(num_heads, num_kv_heads)
        dh = head_dim(d_model, h, d_head)
        self.d_model, self.num_heads, self.num_kv_heads, self.d_head = d_model, h, hkv, dh
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.q_proj = nn.Linear(d_model, h * dh, **kw)
        self.k_proj = nn.Linear(d_model, hkv * dh, **kw)
        self.v_proj = nn.Linear(d_model, hkv * dh, **kw)
        self.out_proj = nn.Linear(h * dh, d_model, **kw)

    def extra_repr(self) -> str:
        kind = "MHA" if self.num_kv_heads == self.num_heads else ("MQA" if self.num_kv_heads == 1 else "GQA")
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"d_head={self.d_head} ({kind})" + ("" if self.impl == "naive" else f", impl={self.impl!r}"))

    def _check_input(self, name: str, x: object) -> Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__} "
                            "(use attn_edu.multihead.multi_head_attention for NumPy)")
        if x.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., L, d_model); got {tuple(x.shape)}")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"{name} has last dimension {x.shape[-1]} (shape {tuple(x.shape)}) but the module "
                             f"has d_model={self.d_model}")
        if x.dtype != self.q_proj.weight.dtype:
            raise TypeError(f"{name} has dtype {x.dtype} but the module's parameters are "
                            f"{self.q_proj.weight.dtype}; convert one of them (e.g. module.double())")
        return x

    def forward(
        self,
        x_q: Tensor,
        x_kv: Optional[Tensor] = None,
        mask: Optional[Tensor] = None,
        causal: Union[bool, str] = False,
        kv_cache: Optional[KVCache] = None,
        return_weights: bool = False,
    ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        """Attend from ``x_q`` (B, L_q, d_model) to ``x_kv`` (B, L_k, d_model); returns (B, L_q, d_model).

        Args:
            x_q: query inputs (B, L_q, d_model) (any leading axes (...) work).
            x_kv: key/value inputs (B, L_k, d_model); ``None`` means self-attention (``x_q``).
            mask: boolean (True = may attend) or float (added), a tensor or a NumPy array
                from :mod:`attn_edu.masks`, broadcastable to the scores (B, H, L_q, L_k): a
                (L_q, L_k) mask or a 4-D one such as ``key_mask(valid, heads=True)``
                (B, 1, 1, L_k). 3-D masks are refused as ambiguous (the batch axis would
                meet the head axis). With a cache, L_k is the cache length *after* the append.
            causal: without a cache: False, True/"top_left" or "bottom_right" as in
                :func:`attn_edu.reference_torch.scaled_dot_product_attention`. **With a cache**,
                ``causal=True`` (or "bottom_right") means bottom-right alignment: the L_q
                new queries are the *last* L_q of the L_k cached positions, so query i
                (0-based among the new ones) may attend to keys ``j <= L_k - L_q + i``:
                everything before it and itself. ``"top_left"`` with a cache is refused
                (it would hide the past from every new query).
            kv_cache: a :class:`KVCache`; the new keys and values (from ``x_kv``) are
                appended to it and attention runs over the whole cache.
            return_weights: also return the weights (B, H, L_q, L_k) (per head, for plots):
                ``impl="naive"`` (or ``"auto"``, which then picks it) only.

        A fully masked query row (e.g. a padded query) gets zero output before
        ``out_proj`` (so ``out_proj``'s bias alone after it) and finite gradients.
        """
        x_q = self._check_input("x_q", x_q)
        x_kv = x_q if x_kv is None else self._check_input("x_kv", x_kv)
        h, hkv, dh = self.num_heads, self.num_kv_heads, self.d_head
        align = _checks.check_causal(causal)
        if kv_cache is not None:
            if not isinstance(kv_cache, KVCache):
                raise TypeError(f"kv_cache must be a KVCache; got {type(kv_cache).__name__}")
            if isinstance(causal, str) and causal == "top_left":
                raise ValueError(
                    "causal='top_left' with a kv_cache would let new query i see only keys j <= i "
                    "of the whole cache; a decoder step needs causal=True (= 'bottom_right' with a cache)"
                )
            if align is not None:
                align = "bottom_right"
        mask = _as_mask(mask, x_q.device)
        check_mask_rank(mask, max(x_q.dim(), x_kv.dim()) + 1)

        # 1. projections, then split into heads
        q = self.q_proj(x_q)  # (B, Lq, d_model) -> (B, Lq, H*dh)
        k = self.k_proj(x_kv)  # (B, Lk, d_model) -> (B, Lk, Hkv*dh)
        v = self.v_proj(x_kv)  # (B, Lk, d_model) -> (B, Lk, Hkv*dh)
        q = q.unflatten(-1, (h, dh)).transpose(-3, -2)  # (B, Lq, H, dh) -> (B, H, Lq, dh)
        k = k.unflatten(-1, (hkv, dh)).transpose(-3, -2)  # (B, Lk, Hkv, dh) -> (B, Hkv, Lk, dh)
        v = v.unflatten(-1, (hkv, dh)).transpose(-3, -2)  # (B, Lk, Hkv, dh) -> (B, Hkv, Lk, dh)
        # 2. the cache: attend over everything seen so far
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (B, Hkv, L_cache, dh) each
        # 3. attention; query head i uses key/value head i // (H // Hkv)
        impl = check_impl(self.impl)  # (an attribute a reader may have changed)
        call = attention_call(q, k, v, mask, align, None, True, torch_like=True, tiled=impl == "tiled",
                              align_checked=True)  # causal was read above, the rest is checked here
        # out (B, H, Lq, dh); weights (B, H, Lq, Lk) when asked for; which impl ran, and why
        out, weights, self.last_impl = run(call, impl, need_weights=return_weights)
        # 4. merge heads, project out
        out = out.transpose(-3, -2).flatten(-2)  # (B, H, Lq, dh) -> (B, Lq, H, dh) -> (B, Lq, H*dh)
        out = self.out_proj(out)  # (B, Lq, H*dh) -> (B, Lq, d_model)
        return (out, weights) if return_weights else out

    # ----------------------------------------------------------------- weight exchange
    def to_numpy_params(self) -> Dict[str, np.ndarray]:
        """The weights in :func:`attn_edu.multihead.multi_head_attention`'s layout.

        ``w_q = q_proj.weight.T`` (nn.Linear stores (out, in); NumPy uses x @ W with W (in, out)),
        likewise ``w_k``, ``w_v``, ``w_o``; ``b_*`` from the biases when present. Copies, on the CPU,
        in the parameters' dtype.
        """
        def arr(t: Tensor) -> np.ndarray:
            return t.detach().to("cpu").numpy().copy()

        params = {}
        for key, layer in (("q", self.q_proj), ("k", self.k_proj), ("v", self.v_proj), ("o", self.out_proj)):
            params[f"w_{key}"] = arr(layer.weight.T)
            if layer.bias is not None:
                params[f"b_{key}"] = arr(layer.bias)
        return params

    @classmethod
    def from_numpy_params(
        cls,
        params: Dict[str, np.ndarray],
        num_heads: int,
        num_kv_heads: Optional[int] = None,
        device=None,
    ) -> "MultiHeadAttention":
        """A module holding exactly ``params`` (from :func:`attn_edu.multihead.init_mha_params`).

        Sizes are read from the arrays (checked as in ``multi_head_attention``); the dtype
        is the arrays' (float64 arrays give a float64 module). ``weight = W.T``.
        """
        sizes = check_mha_params(params, num_heads, num_kv_heads)
        dtype = getattr(torch, np.asarray(params["w_q"]).dtype.name)
        module = cls(sizes["d_model"], sizes["num_heads"], sizes["num_kv_heads"], d_head=sizes["d_head"],
                     bias=bool(sizes["bias"]), device=device, dtype=dtype)
        with torch.no_grad():
            for key, layer in (("q", module.q_proj), ("k", module.k_proj), ("v", module.v_proj),
                               ("o", module.out_proj)):
                layer.weight.copy_(torch.as_tensor(np.asarray(params[f"w_{key}"]).T))
                if layer.bias is not None:
                    layer.bias.copy_(torch.as_tensor(np.asarray(params[f"b_{key}"])))
        return module

    @classmethod
    def from_torch_mha(cls, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Copy the weights of a ``torch.nn.MultiheadAttention`` (so outputs can be compared).

        ``in_proj_weight`` (3E, E) is split into the q, k, v rows (and ``in_proj_bias``
        likewise); ``out_proj`` is copied. The result has ``num_kv_heads = num_heads``, the
        same dtype and device. Only plain configurations are supported: ``kdim = vdim =
        embed_dim``, no ``add_bias_kv``, no ``add_zero_attn`` (ValueError otherwise).

        Differences to keep in mind when comparing:

        * layout: ours is always batch first, (B, L, E). For ``batch_first=False`` modules
          transpose the inputs yourself (``x.transpose(0, 1)``): that is the caller's business.
        * masks: ours are True = **may attend**; ``nn.MultiheadAttention``'s boolean
          ``key_padding_mask`` *and* boolean ``attn_mask`` are True = **not allowed**.
          Convert with ``~attn_mask`` and ``attn_edu.masks.from_key_padding_mask`` (or
          ``(~key_padding_mask)[:, None, None, :]`` for a tensor).
        * a fully masked row: ours gives zeros, ``nn.MultiheadAttention`` gives NaN.
        * dropout: ours has none; compare with ``mha.eval()`` or ``dropout=0``.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha must be a torch.nn.MultiheadAttention; got {type(mha).__name__}")
        if not mha._qkv_same_embed_dim:
            raise ValueError(f"from_torch_mha needs kdim == vdim == embed_dim; got embed_dim={mha.embed_dim}, "
                             f"kdim={mha.kdim}, vdim={mha.vdim}")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("from_torch_mha does not support add_bias_kv=True or add_zero_attn=True")
        w = mha.in_proj_weight  # (3E, E): rows [W_q; W_k; W_v], each (E_out, E_in)
        bias = mha.in_proj_bias is not None
        module = cls(mha.embed_dim, mha.num_heads, bias=bias, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            w_q, w_k, w_v = w.chunk(3, dim=0)  # (E, E) each
            module.q_proj.weight.copy_(w_q)
            module.k_proj.weight.copy_(w_k)
            module.v_proj.weight.copy_(w_v)
            module.out_proj.weight.copy_(mha.out_proj.weight)
            if bias:
                b_q, b_k, b_v = mha.in_proj_bias.chunk(3)  # (E,) each
                module.q_proj.bias.copy_(b_q)
                module.k_proj.bias.copy_(b_k)
                module.v_proj.bias.copy_(b_v)
                module.out_proj.bias.copy_(mha.out_proj.bias)
        return module


# --------------------------------------------------------------------------- helpers
def decode_with_cache(
    module: MultiHeadAttention,
    x: Tensor,
    prefill: int = 0,
    cache: Optional[KVCache] = None,
    return_weights: bool = False,
) -> Union[Tensor, Tuple[Tensor, List[Tensor]]]:
    """Run ``x`` (B, L, d_model) through ``module`` as a decoder would: cache, causal, one step at a time.

    The first ``prefill`` positions go in as one chunk (the prompt), then every further
    position alone, each call ``module(x_t, kv_cache=cache, causal=True)``: the new
    queries attend to everything cached so far and to themselves (bottom-right
    alignment). The outputs, concatenated along L, equal ``module(x, causal=True)``
    up to rounding (tested to 1e-10 in float64). The recipe, spelled out::

        cache = KVCache()
        outs = [module(x[:, :P], kv_cache=cache, causal=True)]        # prefill (if P > 0)
        for t in range(P, L):
            outs.append(module(x[:, t:t+1], kv_cache=cache, causal=True))
        out = torch.cat(outs, dim=1)                                   # (B, L, d_model)

    ``cache`` defaults to a fresh :class:`KVCache` (pass one to inspect it afterwards).
    With ``return_weights`` also returns the list of per-call weights (B, H, L_step, L_cache).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must be a (B, L, d_model) tensor; got {getattr(x, 'shape', type(x).__name__)}")
    length = x.shape[1]
    prefill = _checks.check_length("prefill", prefill)
    if prefill > length:
        raise ValueError(f"prefill must be at most L={length}; got {prefill}")
    cache = KVCache() if cache is None else cache
    chunks: List[Tuple[int, int]] = ([(0, prefill)] if prefill else []) + [(t, t + 1) for t in range(prefill, length)]
    outs, weights = [], []
    for start, stop in chunks:
        out = module(x[:, start:stop], kv_cache=cache, causal=True, return_weights=return_weights)
        if return_weights:  # (the plain path: module.impl "naive" or "auto")
            out, w = out
            weights.append(w)
        outs.append(out)  # (B, stop-start, d_model)
    out = torch.cat(outs, dim=1)  # (B, L, d_model)
    return (out, weights) if return_weights else out


def torch_mha_reference(
    mha: nn.MultiheadAttention,
    x_q: Tensor,
    x_kv: Optional[Tensor] = None,
    attn_mask: Optional[Tensor] = None,
    key_valid: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Run ``torch.nn.MultiheadAttention`` with **this package's** mask polarity (True = may attend).

    ``x_q`` (B, L_q, E) and ``x_kv`` (B, L_k, E) are batch first whatever ``mha.batch_first``
    says (transposed here when it is False). ``attn_mask`` (L_q, L_k) boolean, True = may
    attend, is sent as ``attn_mask=~attn_mask``; ``key_valid`` (B, L_k) boolean, True = a
    real token, is sent as ``key_padding_mask=~key_valid``: ``nn.MultiheadAttention``'s
    boolean masks both mean True = **not allowed**. Returns (out (B, L_q, E), per-head
    weights (B, H, L_q, L_k)), comparable with
    ``MultiHeadAttention.from_torch_mha(mha)(x_q, x_kv, mask=..., return_weights=True)`` where
    the mask is ``attn_mask`` and/or ``key_valid[:, None, None, :]`` -- as long as no row is
    fully masked (``nn.MultiheadAttention`` gives NaN there, ours zeros).
    """
    x_kv = x_q if x_kv is None else x_kv
    for name, m in (("attn_mask", attn_mask), ("key_valid", key_valid)):
        if m is not None and (not isinstance(m, torch.Tensor) or m.dtype != torch.bool or m.dim() != 2):
            raise TypeError(f"{name} must be a 2-D boolean tensor (True = may attend); got "
                            f"{getattr(m, 'dtype', type(m).__name__)} {tuple(getattr(m, 'shape', ()))}")
    if not mha.batch_first:
        x_q, x_kv = x_q.transpose(0, 1), x_kv.transpose(0, 1)  # (L, B, E)
    out, weights = mha(
        x_q, x_kv, x_kv,
        key_padding_mask=None if key_valid is None else ~key_valid,  # (B, Lk), True = ignore
        attn_mask=None if attn_mask is None else ~attn_mask,  # (Lq, Lk), True = not allowed
        need_weights=True, average_attn_weights=False,
    )  # out (B, Lq, E) or (Lq, B, E); weights (B, H, Lq, Lk)
    if not mha.batch_first:
        out = out.transpose(0, 1)  # (B, Lq, E)
    return out, weights
