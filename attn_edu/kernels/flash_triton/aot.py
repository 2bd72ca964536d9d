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
                     forward_configs, variant_configs, warp_specialize_applies)

__all__ = ["aot_kernels"]


def aot_kernels() -> list:
    """The kernels of ``kernels`` as ``AotKernel`` (``attn_edu/kernels/_shared.py``) records: what
    ``python -m attn_edu.kernels.report`` compiles for sm_75 / sm_80 / sm_90a without a GPU
    (the forward with the autotuner's configurations for the target and precision, or
    exact float32's one, both backward kernels with :func:`~attn_edu.kernels.flash_triton.backward_configs`, and the dK/dV kernel once more with the atomic
    dQ of ``backward="atomic_dq"``; non-causal, same d for q, k and v; the forward
    with TMA descriptors from ``TMA_MIN_CAPABILITY`` on, as the launcher picks for
    contiguous tensors); then the FlashAttention-3 kernel's steps (``launch.FORWARD_VARIANTS``),
    each compiled where it launches, in 16-bit dtypes (float32 launches ``"fa2"``'s kernel):
    ``forward_host_tma`` (host descriptors, ``"fa2"``'s tiles), ``forward_wide_tiles`` (the
    tiles ``"wide_tiles"`` adds), ``forward_warp_specialized`` (the tiles that get a
    producer warp and ``setmaxnreg``) on sm_90a, and ``forward_persistent`` everywhere (with
    host descriptors and its warp specialization on sm_90a, pointer loads before)."""
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
    def fa3_meta(d, dtype, config, precision, persistent=False, ws=False):
        return {**{k: v for k, v in meta(d, dtype, config, precision).items()},
                "PERSISTENT": persistent, "WARP_SPECIALIZE": ws and warp_specialize_applies(config)}

    def half_only(pick):  # FlashAttention-3's steps: 16-bit inputs (float32 launches "fa2")
        return lambda cap, d, dtype, prec: [] if dtype == "float32" else pick(tuple(cap), d)

    def hopper_only(pick):
        return half_only(lambda cap, d: pick(cap, d) if cap >= TMA_MIN_CAPABILITY else [])

    def descriptors(c):
        if not c.get("HOST_TMA"):
            return {}
        rows = dict(Q=c["BLOCK_M"], K=c["BLOCK_N"], V=c["BLOCK_N"], Out=c["BLOCK_M"])
        dims = dict(Q=c["BLOCK_DK"], K=c["BLOCK_DK"], V=c["BLOCK_DV"], Out=c["BLOCK_DV"])
        return {n: [1, 1, rows[n], dims[n]] for n in rows}

    def wide_only(cap, d):
        base = forward_configs(cap, d)
        return [c for c in variant_configs("wide_tiles", cap, d) if c not in base]

    def ws_only(cap, d):
        return [c for c in variant_configs("warp_specialized", cap, d) if warp_specialize_applies(c)]

    fa3_io = {**qkv, "Out": "{dtype}", "Lse": "fp32"}
    hopper_tma = lambda cap, prec: {"HOST_TMA": tuple(cap) >= TMA_MIN_CAPABILITY}  # noqa: E731

    def persistent_target(cap, prec):  # before Hopper: pointer loads, so no warp specialization
        hopper = tuple(cap) >= TMA_MIN_CAPABILITY
        return {"HOST_TMA": hopper, **({} if hopper else {"WARP_SPECIALIZE": False})}
    fa3 = [
        AotKernel("forward_host_tma", kernels.attn_fwd_fa3, fa3_io, ("qk_scale",), fa3_meta,
                  hopper_only(forward_configs), unit_strides=units, needs_tma=True, per_target=hopper_tma,
                  descriptors=descriptors),
        AotKernel("forward_wide_tiles", kernels.attn_fwd_fa3, fa3_io, ("qk_scale",), fa3_meta,
                  hopper_only(wide_only), unit_strides=units, needs_tma=True, per_target=hopper_tma,
                  descriptors=descriptors),
        AotKernel("forward_warp_specialized", kernels.attn_fwd_fa3, fa3_io, ("qk_scale",),
                  lambda d, dt, c, p: fa3_meta(d, dt, c, p, ws=True), hopper_only(ws_only), unit_strides=units,
                  needs_tma=True, per_target=hopper_tma, descriptors=descriptors),
        AotKernel("forward_persistent", kernels.attn_fwd_fa3, fa3_io, ("qk_scale",),
                  lambda d, dt, c, p: fa3_meta(d, dt, c, p, persistent=True, ws=True),
                  half_only(lambda cap, d: variant_configs("persistent", cap, d)), unit_strides=units,
                  needs_tma=True, per_target=persistent_target, descriptors=descriptors),
    ]
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
    ] + fa3
