"""Published GPU numbers, cited and labelled "published", and the models they are drawn against.

Nothing here is measured by this package. :data:`GPU_SPECS` holds vendor peak figures;
:data:`PUBLISHED` holds attention throughput reported in the FlashAttention-2
(``dao2023flashattention2``) and FlashAttention-3 (``shah2024flashattention3``) papers,
each with the sentence it comes from; :data:`PUBLISHED_SWEEPS` per-length numbers that
others measured side by side and published as text (the papers' per-length numbers are
printed only inside their figures, which this offline book does not transcribe). :func:`roofline_tflops` is the roofline model:
attainable TFLOP/s = min(peak, arithmetic intensity x memory bandwidth), for naive
attention (:func:`attn_edu.profiling.naive_hbm_bytes`) and an ideal tiled kernel. Chapters 08 and 10 draw them
(:func:`attn_edu.bench.landscape_figure`, :func:`attn_edu.bench.memory_model_figure`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from .. import profiling
from ..decoding import GPU_TABLE, attainable_flops, match_gpu

__all__ = ["GPU_SPECS", "gpu_spec", "PUBLISHED", "PUBLISHED_SWEEPS", "sweep_ratios", "roofline_tflops"]

# The peaks, bandwidths, memory and device names have one home, attn_edu.decoding.GPU_TABLE;
# these are the three GPUs chapters 08 and 10 draw (the A100 under a shorter name).
_DRAWN = {"H100 SXM": "H100 SXM", "A100 SXM": "A100 SXM 80GB", "T4": "T4"}


def _spec_dict(key: str) -> Dict[str, Any]:
    g = GPU_TABLE[key]
    # memory_bytes: what nvidia-smi reports where the table has it (book/notation.md), else the label
    memory_bytes = g.memory_mib * 2**20 if g.memory_mib else int(g.memory_gb * 1e9)
    return {"tflops": g.flops_16bit / 1e12, "tb_per_s": g.bandwidth / 1e12, "memory_gb": g.memory_gb,
            "memory_bytes": memory_bytes, "fp32_tflops": g.fp32_flops / 1e12, "cite": g.source,
            "name": g.name, "note": g.note}


#: Vendor peak figures (published datasheets, ``cite`` = their references.bib key; dense), bf16/fp16
#: tensor-core TFLOP/s and memory bandwidth in TB/s, the memory's label in GB (``memory_gb``, the
#: vendor's "80 GB": not a byte count) and its size in bytes (``memory_bytes``, the total
#: ``nvidia-smi`` reports; book/notation.md) and float32 (FMA) TFLOP/s, of
#: the GPUs chapters 08 and 10 draw (:data:`attn_edu.decoding.GPU_TABLE` has every GPU the book
#: knows; :func:`gpu_spec` finds a device's). The T4 has no bfloat16; its float16 tensor-core peak is 65 TFLOP/s.
GPU_SPECS: Dict[str, Dict[str, Any]] = {name: _spec_dict(key) for name, key in _DRAWN.items()}


def gpu_spec(device_name: str) -> Optional[Dict[str, Any]]:
    """The datasheet figures (as in :data:`GPU_SPECS`) of a device name such as
    ``"NVIDIA H100 80GB HBM3"`` or ``"Tesla T4"`` (:func:`attn_edu.decoding.match_gpu`),
    or None for a GPU the table does not know."""
    key = match_gpu(device_name)
    return None if key is None else _spec_dict(key)


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


#: Throughput per sequence length, each entry several implementations timed side by side in
#: one run on one GPU and published as text (a pull request's test plan or description, an
#: issue); copied from the cited page, not measured here. ``pass``: forward or backward (the
#: backward's TFLOP/s as the source reports them); ``tflops`` maps an implementation to one
#: value per ``n``; ``gpu`` is what the source says of the machine, ``roofline_gpu`` the
#: datasheet it is drawn against; ``quote`` what the source says of the setup. The Triton
#: TLX kernel is a Triton extension's warp-specialized kernel, not Triton 3.9.
PUBLISHED_SWEEPS: List[Dict[str, Any]] = [
    {"source": "pytorch/benchmark pull request 2391 (commit ff65cb6), its test plan", "pass": "forward",
     "cite": "maher2024fa3benchmark", "gpu": "a Hopper GPU (not named; FlashAttention-3 runs on Hopper only)",
     "roofline_gpu": "H100 SXM", "d": 128, "heads": 16, "batch_times_n": 16384, "causal": "not stated",
     "dtype": "16-bit (not stated)",
     "quote": "the FA3 paper sizes inputs such that B*S=16k and H*Dhead=2048",
     "n": [512, 1024, 2048, 4096, 8192, 16384],
     "tflops": {"Triton tutorial": [328.882, 389.723, 433.721, 458.359, 470.732, 476.753],
                "FlashAttention-3": [430.32, 517.099, 565.544, 590.233, 614.234, 620.73]}},
    {"source": "meta-pytorch/tritonbench issue 141, first run", "cite": "zhao2025tritonbench141", "pass": "forward",
     "gpu": "an H100 development machine (the thread: FlashAttention-3's number is low on that machine)",
     "roofline_gpu": "H100 SXM", "d": 128, "heads": 16, "batch": 8, "causal": "not stated", "dtype": "float16",
     "quote": "flash_v3 performance is slower than cudnn and triton_tutorial_flash_v2 on certain input and H100",
     "n": [8192],
     "tflops": {"cuDNN": [581.868], "Triton tutorial": [469.105], "FlashAttention-3": [465.518]}},
    {"source": "meta-pytorch/tritonbench pull request 1256 (open), its description", "cite": "yu2026tlxfa",
     "pass": "backward", "gpu": "an H100", "roofline_gpu": "H100 SXM", "d": 128, "heads": 48, "batch": 4,
     "causal": "not stated", "dtype": "bfloat16",
     "quote": "Backward performance on H100, BF16, head dimension 128",
     "n": [1024, 2048, 4096, 8192],
     "tflops": {"Triton TLX kernel": [327.853, 433.905, 503.016, 527.083],
                "FlashAttention-3": [313.324, 434.825, 519.827, 561.410]}},
]


def sweep_ratios(sweep: Dict[str, Any], numerator: str, denominator: str) -> List[float]:
    """``numerator / denominator`` throughput at each ``n`` of one :data:`PUBLISHED_SWEEPS`
    entry: a ratio from one run on one machine (comparing across entries would mix machines)."""
    for name in (numerator, denominator):
        if name not in sweep["tflops"]:
            raise ValueError(f"sweep {sweep['source']!r} has no {name!r}; it has {', '.join(sweep['tflops'])}")
    return [a / b for a, b in zip(sweep["tflops"][numerator], sweep["tflops"][denominator])]


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
    peaks = GPU_TABLE[_DRAWN.get(gpu, gpu)]
    flops = profiling.attention_flops(1, 1, n, n, d)
    moved = 4 * n * d * itemsize if tiled else profiling.naive_hbm_bytes(n, d, itemsize=itemsize)
    return attainable_flops(flops / moved, peaks) / 1e12  # chapter 13's roofline, in TFLOP/s
