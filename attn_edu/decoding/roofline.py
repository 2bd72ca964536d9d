r"""Prefill vs. decode on the roofline: arithmetic intensity, published GPUs and models.

For one K/V head serving a group of ``g`` query heads, ``L_q`` queries against ``L_k``
cached keys, with keys of width ``d_k`` and values of width ``d_v``:

.. math::
    \text{FLOPs} = 2\, g\, L_q L_k (d_k + d_v), \qquad
    \text{bytes} = s\,\big(L_k\, n_{kv} + g\, L_q (d_k + d_v)\big)

(two matrix products; the keys and values are read once, ``n_kv`` numbers per key, by
default ``d_k + d_v``; the queries are read and the outputs written once; ``s`` bytes
per number). Their ratio, the **arithmetic intensity**, decides whether a kernel waits
on memory or on arithmetic: below a GPU's *ridge point* (peak FLOP/s over bandwidth)
it is memory-bound. Decoding (``L_q = 1``) has intensity about ``2g / s``: one FLOP per
byte for multi-head attention in 16-bit, ``g`` for grouped-query attention -- far below
every ridge point. Prefill (``L_q = L_k = n``) grows with ``n``.

``GPUS`` and ``MODELS`` hold **published** figures (datasheets and papers, cited
in the book); nothing here is measured. Explained in chapter 13.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from .. import _checks
from ..multihead import kv_cache_bytes

__all__ = ["GPUSpec", "GPUS", "ModelConfig", "MODELS", "attention_flops_bytes", "arithmetic_intensity",
           "attainable_flops", "kv_numbers_per_token", "kv_bytes_per_token", "decode_intensity",
           "decode_step_time"]


@dataclass(frozen=True)
class GPUSpec:
    """Published peak figures of a GPU (dense 16-bit tensor-core FLOP/s, memory bandwidth)."""

    name: str
    flops_16bit: float  # dense fp16/bf16 tensor-core FLOP/s (no 2:4 sparsity)
    bandwidth: float  # bytes/s of main memory (HBM or GDDR)
    sms: int  # streaming multiprocessors
    source: str  # bibliography key

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which a kernel can be compute-bound."""
        return self.flops_16bit / self.bandwidth


#: Published datasheet figures. H100 SXM5 and A100 SXM4 80 GB, bfloat16 dense tensor-core
#: peak (the datasheets also print twice that "with sparsity"); T4: float16 mixed precision
#: (it has no bfloat16).
GPUS: Dict[str, GPUSpec] = {
    "H100 SXM": GPUSpec("H100 SXM", 989e12, 3.35e12, 132, "nvidia2022h100"),
    "A100 SXM 80GB": GPUSpec("A100 SXM 80GB", 312e12, 2.039e12, 108, "nvidia2020a100"),
    "T4": GPUSpec("T4", 65e12, 320e9, 40, "nvidia2018t4"),
}


@dataclass(frozen=True)
class ModelConfig:
    """Attention shape of a published model: what decides its KV cache.

    ``latent``/``rope`` are set for multi-head latent attention (MLA: the cache holds
    ``latent + rope`` numbers per token and layer); ``window`` for a sliding-window model.
    """

    name: str
    layers: int
    heads: int
    kv_heads: int
    d_head: int
    source: str
    latent: Optional[int] = None
    rope: Optional[int] = None
    window: Optional[int] = None

    @property
    def kind(self) -> str:
        if self.latent is not None:
            return "MLA"
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else f"GQA (groups of {self.heads // self.kv_heads})"

    @property
    def group(self) -> int:
        """Query heads that read the same cached numbers (all of them for MLA)."""
        return self.heads if self.latent is not None else self.heads // self.kv_heads


#: Published configurations (papers and released model configurations).
MODELS: Dict[str, ModelConfig] = {m.name: m for m in [
    ModelConfig("Llama-2-7B", 32, 32, 32, 128, "touvron2023llama2"),
    ModelConfig("Llama-2-70B", 80, 64, 8, 128, "touvron2023llama2"),
    ModelConfig("Llama-3-8B", 32, 32, 8, 128, "grattafiori2024llama3"),
    ModelConfig("Mistral-7B", 32, 32, 8, 128, "jiang2023mistral", window=4096),
    ModelConfig("Falcon-7B", 32, 71, 1, 64, "almazrouei2023falcon"),
    ModelConfig("DeepSeek-V2", 60, 128, 128, 128, "deepseekai2024v2", latent=512, rope=64),
]}


def attention_flops_bytes(lq: int, lk: int, d_k: int, d_v: Optional[int] = None, group: int = 1,
                          itemsize: int = 2, kv_numbers: Optional[int] = None):
    """``(FLOPs, bytes)`` of attention for one K/V head and its ``group`` query heads (module
    docstring): ``2 g Lq Lk (d_k + d_v)`` and ``s (Lk n_kv + g Lq (d_k + d_v))``."""
    lq = _checks.check_length("lq", lq, minimum=1)
    lk = _checks.check_length("lk", lk, minimum=1)
    d_k = _checks.check_length("d_k", d_k, minimum=1)
    d_v = d_k if d_v is None else _checks.check_length("d_v", d_v, minimum=1)
    g = _checks.check_length("group", group, minimum=1)
    s = _checks.check_length("itemsize", itemsize, minimum=1)
    n_kv = d_k + d_v if kv_numbers is None else _checks.check_length("kv_numbers", kv_numbers, minimum=1)
    return 2 * g * lq * lk * (d_k + d_v), s * (lk * n_kv + g * lq * (d_k + d_v))


def arithmetic_intensity(lq: int, lk: int, d_k: int, d_v: Optional[int] = None, group: int = 1,
                         itemsize: int = 2, kv_numbers: Optional[int] = None) -> float:
    """FLOPs per byte of :func:`attention_flops_bytes`."""
    flops, nbytes = attention_flops_bytes(lq, lk, d_k, d_v, group, itemsize, kv_numbers)
    return flops / nbytes


def attainable_flops(intensity: float, gpu: GPUSpec) -> float:
    """The roofline: ``min(peak FLOP/s, intensity * bandwidth)``."""
    intensity = _checks.check_real("intensity", intensity, positive=True)
    return min(gpu.flops_16bit, intensity * gpu.bandwidth)


def kv_numbers_per_token(model: ModelConfig) -> int:
    """Numbers cached per token and layer: ``2 H_kv d_head``, or ``d_c + d_R`` for MLA."""
    if model.latent is not None:
        return model.latent + (model.rope or 0)
    return 2 * model.kv_heads * model.d_head


def kv_bytes_per_token(model: ModelConfig, itemsize: int = 2) -> int:
    """KV-cache bytes per token over all layers (16-bit by default), from
    :func:`attn_edu.multihead.kv_cache_bytes` for MHA/GQA/MQA."""
    if model.latent is not None:
        return model.layers * kv_numbers_per_token(model) * itemsize
    return kv_cache_bytes(model.layers, model.kv_heads, model.d_head, 1, bytes_per_elem=itemsize)


def _decode_shape(model: ModelConfig) -> Dict[str, int]:
    """What one decode step reads per K/V head: key and value widths, numbers per cached
    token, query heads per K/V head. MLA, absorbed: one shared head of keys ``[c, k_R]``
    (d_c + d_R) and values ``c`` (d_c), read by all H query heads."""
    if model.latent is not None:
        width = model.latent + (model.rope or 0)
        return dict(d_k=width, d_v=model.latent, kv_numbers=width, group=model.heads)
    return dict(d_k=model.d_head, d_v=model.d_head, kv_numbers=2 * model.d_head, group=model.group)


def decode_intensity(model: ModelConfig, context: int = 8192, itemsize: int = 2) -> float:
    """FLOPs per byte of one decode step's attention (``L_q = 1``) over ``context`` cached
    tokens, for a published model's attention shape (:func:`arithmetic_intensity`)."""
    return arithmetic_intensity(1, context, itemsize=itemsize, **_decode_shape(model))


def decode_step_time(model: ModelConfig, context: int, batch: int, gpu: GPUSpec, itemsize: int = 2) -> float:
    """Roofline estimate (seconds) of one decode step's attention over all layers: the
    larger of reading the whole KV cache at full bandwidth and its FLOPs at peak. A
    model, not a measurement: real kernels reach a fraction of both peaks."""
    context = _checks.check_length("context", context, minimum=1)
    batch = _checks.check_length("batch", batch, minimum=1)
    nbytes = kv_bytes_per_token(model, itemsize) * context * batch
    shape = _decode_shape(model)
    flops = 2 * model.heads * context * (shape["d_k"] + shape["d_v"]) * model.layers * batch
    return max(nbytes / gpu.bandwidth, flops / gpu.flops_16bit)
