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
import re
from typing import Dict, Optional, Tuple

from .. import _checks
from ..multihead import kv_cache_bytes

__all__ = ["GPUSpec", "GPU_TABLE", "GPUS", "match_gpu",
           "ModelConfig", "MODELS", "attention_flops_bytes", "arithmetic_intensity",
           "attainable_flops", "kv_numbers_per_token", "kv_bytes_per_token", "decode_intensity",
           "decode_step_time"]


@dataclass(frozen=True)
class GPUSpec:
    """Published peak figures of a GPU (dense 16-bit tensor-core FLOP/s, memory bandwidth).

    ``fp32_flops``: float32 FMA FLOP/s (no tensor cores); ``memory_gb``: its memory, the
    vendor's label ("80 GB", not a byte count); ``memory_mib``: the total ``nvidia-smi`` reports
    where the book uses it (book/notation.md: an "80 GB" H100 holds 81,559 MiB), else 0;
    ``patterns``: regular expressions (case-insensitive, searched) matching the names
    ``torch.cuda.get_device_name()`` reports for it (:func:`match_gpu`); ``note``: what the
    figure is where the datasheet prints several."""

    name: str
    flops_16bit: float  # dense fp16/bf16 tensor-core FLOP/s (no 2:4 sparsity)
    bandwidth: float  # bytes/s of main memory (HBM or GDDR)
    sms: int  # streaming multiprocessors
    source: str  # bibliography key
    fp32_flops: float = 0.0
    memory_gb: float = 0.0
    patterns: Tuple[str, ...] = ()
    note: str = ""
    memory_mib: int = 0

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which a kernel can be compute-bound."""
        return self.flops_16bit / self.bandwidth


_G = GPUSpec
#: Every GPU the book knows, from its datasheet or whitepaper (``source``, a references.bib
#: key): dense 16-bit tensor-core peak (the datasheets also print twice that "with
#: sparsity"), bandwidth, SMs, float32 peak, memory, and the device names it matches.
#: The order matters to :func:`match_gpu`: the first whose pattern matches wins.
GPU_TABLE: Dict[str, GPUSpec] = {g.name: g for g in (
    _G("H100 SXM", 989e12, 3.35e12, 132, "nvidia2022h100", 67e12, 80, (r"H100.*(SXM|HBM3)",),
       memory_mib=81_559),
    _G("H100 PCIe", 756e12, 2.0e12, 114, "nvidia2022h100", 51e12, 80, (r"H100.*PCIe",)),
    _G("H200", 989e12, 4.8e12, 132, "nvidia2024h200", 67e12, 141, (r"H200",)),
    _G("A100 SXM 80GB", 312e12, 2.039e12, 108, "nvidia2020a100", 19.5e12, 80, (r"A100.*SXM.*80\s*GB",),
       memory_mib=81_920),
    _G("A100 SXM 40GB", 312e12, 1.555e12, 108, "nvidia2020a100", 19.5e12, 40, (r"A100.*SXM.*40\s*GB",)),
    _G("A100 PCIe 80GB", 312e12, 1.935e12, 108, "nvidia2020a100", 19.5e12, 80,
       (r"A100.*80\s*GB.*PCIe", r"A100.*PCIe.*80\s*GB")),
    _G("A100 PCIe 40GB", 312e12, 1.555e12, 108, "nvidia2020a100", 19.5e12, 40,
       (r"A100.*40\s*GB.*PCIe", r"A100.*PCIe.*40\s*GB")),
    _G("V100 SXM2", 125e12, 900e9, 80, "nvidia2017v100", 15.7e12, 32, (r"V100.*SXM2",),
       "float16 tensor cores (no bfloat16); 16 or 32 GB"),
    _G("V100 PCIe", 112e12, 900e9, 80, "nvidia2017v100", 14e12, 32, (r"V100.*PCIe",),
       "float16 tensor cores (no bfloat16); 16 or 32 GB"),
    _G("T4", 65e12, 320e9, 40, "nvidia2018t4", 8.1e12, 16, (r"\bT4\b",),
       "float16 mixed precision (no bfloat16)", memory_mib=15_360),
    _G("L4", 121e12, 300e9, 58, "nvidia2023l4", 30.3e12, 24, (r"\bL4\b",)),
    _G("A10G", 125e12, 600e9, 80, "nvidia2021a10", 31.2e12, 24, (r"\bA10G\b",),
       "AWS's variant of the A10, which has no datasheet of its own: the A10's figures, an upper bound"),
    _G("A10", 125e12, 600e9, 72, "nvidia2021a10", 31.2e12, 24, (r"\bA10\b",)),
    _G("RTX 4090", 165.2e12, 1008e9, 128, "nvidia2022ada", 82.6e12, 24, (r"RTX 4090",),
       "float16 with float32 accumulation, as attention kernels accumulate (330 with float16 accumulation)"),
    _G("RTX 3090", 71e12, 936e9, 82, "nvidia2020ga102", 35.6e12, 24, (r"RTX 3090",),
       "float16 with float32 accumulation, as attention kernels accumulate (142 with float16 accumulation)"),
)}
del _G

#: The GPUs chapter 13's roofline draws, entries of :data:`GPU_TABLE`. H100 SXM5 and A100
#: SXM4 80 GB, bfloat16 dense tensor-core peak; T4, float16 mixed precision (no bfloat16).
GPUS: Dict[str, GPUSpec] = {k: GPU_TABLE[k] for k in ("H100 SXM", "A100 SXM 80GB", "T4")}


def match_gpu(device_name: str) -> Optional[str]:
    """The :data:`GPU_TABLE` key of a device name (as ``torch.cuda.get_device_name()``
    reports it, e.g. ``"NVIDIA H100 80GB HBM3"`` -> ``"H100 SXM"``, ``"Tesla T4"`` ->
    ``"T4"``), or None for a GPU the table does not know."""
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a str; got {type(device_name).__name__}")
    for key, spec in GPU_TABLE.items():
        if any(re.search(p, device_name, re.IGNORECASE) for p in spec.patterns):
            return key
    return None


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
