"""The FlashAttention kernels as the ahead-of-time compile report compiles them.

Part of :mod:`attn_edu.kernels.flash_triton`: :func:`aot_kernels` lists each kernel with the
arguments and configurations a launch uses (``launch``'s tables), as
``attn_edu.kernels._shared.AotKernel`` records; ``python -m attn_edu.kernels.report``
(``attn_edu.kernels.report.KERNEL_MODULES``) compiles them for sm_75, sm_80 and sm_90a
without a GPU. Needs this package imported without ``TRITON_INTERPRET=1``.
"""
from __future__ import annotations

import torch  # noqa: F401  (launch's tables come with its launchers, which need torch)

from .._shared import AotKernel, padded_head_dim
from . import kernels
from .launch import (BACKWARD_FLOAT32, TMA_MIN_CAPABILITY, atomic_backward_configs, backward_configs,
                     forward_configs)

__all__ = ["aot_kernels"]


def aot_kernels() -> list:
    """The kernels of ``kernels`` as ``AotKernel`` (``attn_edu/kernels/_shared.py``) records: what
    ``python -m attn_edu.kernels.report`` compiles for sm_75 / sm_80 / sm_90a without a GPU
    (the forward with the autotuner's configurations for the target and precision, or
    exact float32's one, both backward kernels with :func:`~attn_edu.kernels.flash_triton.backward_configs`, and the dK/dV kernel once more with the atomic
    dQ of ``backward="atomic_dq"``; non-causal, same d for q, k and v; the forward
    with TMA descriptors from ``TMA_MIN_CAPABILITY`` on, as the launcher picks for
    contiguous tensors)."""
    def meta(d, dtype, config, precision):
        bd = padded_head_dim(d)
        return dict(HEAD_DK=d, HEAD_DV=d, BLOCK_DK=bd, BLOCK_DV=bd, CAUSAL=False,
                    INPUT_PRECISION=precision, BLOCK_M=config[0], BLOCK_N=config[1])

    def fwd_configs(capability, d, dtype, precision):
        return forward_configs(capability, d, dtype_bytes=4 if dtype == "float32" else 2, precision=precision)

    def bwd_configs(pick, capability, d, dtype, precision):  # float32: exact only (BACKWARD_FLOAT32)
        return [] if dtype == "float32" and precision != BACKWARD_FLOAT32 else pick(capability, d, precision)

    def dq_configs(capability, d, dtype, precision):  # the dQ launch swaps the two blocks (launch.backward)
        return [(bn, bm, w, s) for bm, bn, w, s in bwd_configs(backward_configs, capability, d, dtype, precision)]

    qkv = {"Q": "{dtype}", "K": "{dtype}", "V": "{dtype}"}
    units = ("stride_qd", "stride_kd", "stride_vd", "stride_od", "stride_dod")
    dkdv = {**qkv, "DO": "{dtype}", "DK": "{dtype}", "DV": "{dtype}", "DQ": "fp32", "Lse": "fp32",
            "Delta": "fp32"}  # both backward schedules launch the same dK/dV kernel
    return [
        AotKernel("forward", kernels.attn_fwd, {**qkv, "Out": "{dtype}", "Lse": "fp32"}, ("qk_scale",),
                  meta, fwd_configs, unit_strides=units, needs_tma=True,
                  per_target=lambda cap, prec: {"USE_TMA": tuple(cap) >= TMA_MIN_CAPABILITY and prec != "ieee"}),
        AotKernel("backward_dkdv", kernels.attn_bwd_dkdv, dkdv, ("sm_scale",), meta,
                  lambda cap, d, dtype, prec: bwd_configs(backward_configs, cap, d, dtype, prec), unit_strides=units,
                  per_target=lambda cap, prec: {"ATOMIC_DQ": False}),
        AotKernel("backward_atomic_dq", kernels.attn_bwd_dkdv, dkdv, ("sm_scale",), meta,
                  lambda cap, d, dtype, prec: bwd_configs(atomic_backward_configs, cap, d, dtype, prec),
                  unit_strides=units,
                  per_target=lambda cap, prec: {"ATOMIC_DQ": True}),
        AotKernel("backward_dq", kernels.attn_bwd_dq,
                  {**qkv, "DO": "{dtype}", "DQ": "{dtype}", "Lse": "fp32", "Delta": "fp32"},
                  ("sm_scale",), meta, dq_configs, unit_strides=units),
    ]
