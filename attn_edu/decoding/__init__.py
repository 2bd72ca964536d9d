r"""Attention at inference time (chapter 13): what a decoder does with its KV cache.

* ``roofline`` -- prefill vs. decode arithmetic intensity, the
  roofline, published GPU and model figures (``GPUS``, ``MODELS``), KV bytes per
  token for MHA / GQA / MQA / MLA;
* ``split_kv`` -- split-KV decoding (Flash-Decoding):
  :func:`split_kv_attention` and :func:`merge_partials`, built on chapter 09's merge of
  softmax statistics (NumPy and torch; the Triton kernel is
  :mod:`attn_edu.kernels.decode_triton`);
* ``paged`` -- :class:`PagedKVCache`, a vLLM-style paged cache with
  block tables, copy-on-write prefix sharing and page-by-page attention;
* ``latent`` -- multi-head latent attention (DeepSeek-V2) and its
  absorbed projections;
* ``quantize`` -- int8/int4/fp8 KV-cache quantization, per channel
  or per token, and the error it causes;
* ``ring`` -- :class:`RingKVCache`, the constant-memory cache of a
  sliding-window model.

Imports NumPy only (torch where a tensor is passed, and for fp8).
"""
from __future__ import annotations

from .latent import absorb_mla_params, init_mla_params, mla_attention, mla_cache_entries
from .paged import PagedKVCache, PoolExhaustedError, paged_vs_contiguous, parallel_sampling_pages
from .quantize import (FP8_E4M3_MAX, attention_error, dequantize, fake_quantize, quantize,
                       quantized_bytes_per_token)
from .ring import RingKVCache
from .roofline import (GPU_TABLE, GPUS, match_gpu, MODELS, GPUSpec, ModelConfig, arithmetic_intensity, attainable_flops,
                       attention_flops_bytes, decode_intensity, decode_step_time, kv_bytes_per_token,
                       kv_numbers_per_token)
from .split_kv import chunk_size, merge_partials, split_bounds, split_kv_attention, split_waves

__all__ = [
    "split_kv_attention", "merge_partials", "split_bounds", "chunk_size", "split_waves",
    "PagedKVCache", "PoolExhaustedError", "paged_vs_contiguous", "parallel_sampling_pages", "RingKVCache",
    "init_mla_params", "mla_cache_entries", "absorb_mla_params", "mla_attention",
    "quantize", "dequantize", "fake_quantize", "quantized_bytes_per_token", "attention_error",
    "FP8_E4M3_MAX",
    "GPUSpec", "GPU_TABLE", "GPUS", "match_gpu",
    "ModelConfig", "MODELS", "attention_flops_bytes", "arithmetic_intensity",
    "attainable_flops", "kv_numbers_per_token", "kv_bytes_per_token", "decode_intensity", "decode_step_time",
]


# Re-bound here with a doc comment: autodoc documents a module's data only where it is assigned.
#: The largest finite float8 e4m3 value (the "fn" variant, which has no infinities).
FP8_E4M3_MAX = FP8_E4M3_MAX
#: Published datasheet figures per GPU (:class:`GPUSpec`), H100 SXM5 and A100 SXM4 80 GB
#: bfloat16 dense tensor-core peaks, T4 float16 mixed precision.
GPUS = GPUS
#: Every GPU the book knows (:class:`GPUSpec`, datasheet figures and device-name patterns).
GPU_TABLE = GPU_TABLE
#: Published model configurations (:class:`ModelConfig`), from papers and released configurations.
MODELS = MODELS
