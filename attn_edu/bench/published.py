"""Published GPU numbers, cited and labelled "published", and the models they are drawn against.

Nothing here is measured by this package. :data:`GPU_SPECS` holds vendor peak figures;
:data:`PUBLISHED` holds attention throughput reported in the FlashAttention-2
(``dao2023flashattention2``) and FlashAttention-3 (``shah2024flashattention3``) papers,
each with the sentence it comes from. :func:`roofline_tflops` is the roofline model:
attainable TFLOP/s = min(peak, arithmetic intensity x memory bandwidth), for naive
attention (:func:`attn_edu.profiling.naive_hbm_bytes`) and an ideal tiled kernel. Chapters 08 and 10 draw them
(:func:`attn_edu.bench.landscape_figure`, :func:`attn_edu.bench.memory_model_figure`).
"""
from __future__ import annotations

from typing import Any, Dict, List

from .. import profiling

__all__ = ["GPU_SPECS", "PUBLISHED", "roofline_tflops"]

#: Vendor peak figures (published datasheets, ``cite`` = their references.bib key; dense): bf16/fp16 tensor-core
#: TFLOP/s, HBM bandwidth in TB/s, memory in GB. The T4 has no bfloat16; its float16
#: tensor-core peak is 65 TFLOP/s and its float32 (FMA) peak 8.1 TFLOP/s.
GPU_SPECS: Dict[str, Dict[str, Any]] = {
    "H100 SXM": {"tflops": 989.0, "tb_per_s": 3.35, "memory_gb": 80, "fp32_tflops": 67.0,
                 "cite": "nvidia2022h100"},
    "A100 SXM": {"tflops": 312.0, "tb_per_s": 2.0, "memory_gb": 80, "fp32_tflops": 19.5,
                 "cite": "nvidia2020a100"},
    "T4": {"tflops": 65.0, "tb_per_s": 0.32, "memory_gb": 16, "fp32_tflops": 8.1,
           "cite": "nvidia2018t4"},
}

#: Attention forward throughput reported by the papers (published, not measured here).
PUBLISHED: List[Dict[str, Any]] = [
    {"gpu": "A100 SXM", "impl": "FlashAttention-2", "tflops": 0.73 * 312.0, "dtype": "fp16/bf16",
     "cite": "dao2023flashattention2",
     "quote": "reaching 50-73% of the theoretical maximum FLOPs/s on A100 (the upper end drawn)"},
    {"gpu": "H100 SXM", "impl": "FlashAttention-2", "tflops": 0.35 * 989.0, "dtype": "fp16/bf16",
     "cite": "shah2024flashattention3",
     "quote": "with FlashAttention-2 achieving only 35% utilization on the H100 GPU"},
    {"gpu": "H100 SXM", "impl": "FlashAttention-3", "tflops": 740.0, "dtype": "fp16",
     "cite": "shah2024flashattention3",
     "quote": "with FP16 reaching up to 740 TFLOPs/s (75% utilization)"},
]


def roofline_tflops(n: int, d: int, gpu: str, tiled: bool = True, itemsize: int = 2) -> float:
    r"""Roofline bound of an attention forward on ``gpu`` (a key of :data:`GPU_SPECS`), TFLOP/s.

    :math:`\min(\text{peak},\; I \cdot \text{bandwidth})` with the arithmetic intensity
    :math:`I = 4n^2d / \text{bytes}`. The naive algorithm writes and reads the
    :math:`n \times n` matrices (:func:`attn_edu.profiling.naive_hbm_bytes`,
    :math:`I \approx d / s`): memory-bound on every GPU. A tiled kernel at its best reads
    Q, K, V once and writes O once, :math:`4nds` bytes (its re-reads of K and V served
    from on-chip memory and the L2 cache), so :math:`I = n / s` and it is compute-bound
    from a few hundred tokens on.
    """
    spec = GPU_SPECS[gpu]
    flops = profiling.attention_flops(1, 1, n, n, d)
    moved = 4 * n * d * itemsize if tiled else profiling.naive_hbm_bytes(n, d, itemsize=itemsize)
    return min(spec["tflops"], flops / moved * spec["tb_per_s"])
