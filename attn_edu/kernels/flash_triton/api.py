"""The front door of the FlashAttention kernels: one input check, the autograd wrapper, the
public functions :func:`triton_attention` and :func:`triton_attention_forward`.

Part of :mod:`attn_edu.kernels.flash_triton`. A public function checks and normalises its
arguments once (:func:`check_triton_inputs`, the kernels' ``LIMITS`` through
``attn_edu.kernels._targets.check_kernel_inputs``, then the causal alignment and the
scale), and hands the checked values to the launchers of ``launch``, which trust them. The
autograd wrapper saves q, k, v, the output and the log-sum-exp (O(L) memory, not O(L^2));
its backward recomputes the softmax tiles from them.

Explained in chapter 10.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from ... import _checks
from .. import _interpret, _targets
from . import kernels, launch

__all__ = ["triton_attention", "triton_attention_forward", "check_triton_inputs", "chosen_forward_config",
           "interpret_mode"]


def interpret_mode() -> bool:
    """True when ``TRITON_INTERPRET=1`` is set now (kernels then run on the CPU)."""
    return _interpret.requested()


def check_triton_inputs(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                        scale: Optional[float] = None) -> Tuple[Optional[str], float]:
    """Validate inputs for the kernels; return (causal alignment or None, scale).

    The one input check of the three kernels, ``attn_edu.kernels._targets.check_kernel_inputs``,
    with the kernels' ``LIMITS``: the reference's checks (``attn_edu._checks``, the same
    messages), then 4-D (B, H, L, D) tensors with the same B and H, dtype float16, bfloat16
    (on GPUs of compute capability >= 8.0, never in the interpreter) or float32,
    ``1 <= d_k, d_v <= 128``, and a CUDA device (or the CPU with ``TRITON_INTERPRET=1``).
    """
    _targets.check_kernel_inputs(kernels.LIMITS, q, k, v, kernels.BUILT_INTERPRETED)
    return _checks.check_causal(causal), _checks.check_scale(scale, q.shape[-1])


def chosen_forward_config(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                          precision: Optional[str] = None, config=None, variant: str = "fa2") -> Optional[dict]:
    """The configuration the forward launches with for these inputs in this process.

    A dict with ``block_m``, ``block_n``, ``num_warps``, ``num_stages`` (None under the
    interpreter), ``precision`` (what ``tl.dot`` computes float32 with) and ``how``:
    ``"interpreter"``, ``"config"`` (the caller's ``config=``), ``"ieee"`` (exact float32's
    one configuration) or ``"autotuned"`` -- the autotuner's choice for the inputs' key
    (``FWD_AUTOTUNE_KEY``), known once a call with that key has run: None before. Give it
    to a later process as ``config=`` to launch the same kernel there (JSON-friendly).
    ``variant``: the forward's variant (``FORWARD_VARIANTS``), each autotuned on its own.
    """
    align, _ = check_triton_inputs(q, k, v, causal, None)
    prec = launch.dot_precision(q, precision)
    fixed = launch.fixed_forward_config(prec, launch.check_config(config))
    if fixed is not None:
        values, how = fixed
    else:
        # the variant whose autotuner ran: "fa2"'s where the variant was left with no step
        variant = launch.launched_variant(q, k, v, _check_variant(variant), precision)
        key = launch.launch_key(q, k, v, align is not None, prec, False if variant != "fa2"
                                else launch.uses_tma(q, k, v, prec))
        values = launch.tuned_forward_config(key, variant)
        if values is None:
            return None
        how = "autotuned"
    return {**dict(zip(launch.CONFIG_KEYS, values)), "precision": prec, "how": how}


# ----------------------------------------------------------------------------
# Autograd wrapper and the public functions
# ----------------------------------------------------------------------------
class _TritonAttention(torch.autograd.Function):
    """Forward saves q, k, v, out and lse (O(L) extra memory, not O(L^2));
    backward recomputes the softmax tiles from them."""

    @staticmethod
    def forward(ctx, q, k, v, align, scale, mode, precision, config, variant="fa2"):
        out, lse = launch.forward(q, k, v, align, scale, precision=precision, config=config, variant=variant)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.align, ctx.scale, ctx.mode, ctx.precision = align, scale, mode, precision
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = launch.backward(do, q, k, v, out, lse, ctx.align, ctx.scale, ctx.mode, ctx.precision)
        return dq, dk, dv, None, None, None, None, None, None


def triton_attention_forward(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                             scale: Optional[float] = None, *, precision: Optional[str] = None,
                             config=None, variant: str = "fa2") -> Tuple[Tensor, Tensor]:
    r"""Fused attention forward: ``softmax(q k^T * scale) v`` and its log-sum-exp.

    Args:
        q: (B, H, L_q, d_k); k: (B, H, L_k, d_k); v: (B, H, L_k, d_v); one dtype out
            of float16, bfloat16, float32; ``1 <= d_k, d_v <= 128``; any lengths.
        causal: False, True/"top_left" (key j visible to query i when j <= i, like
            PyTorch's ``is_causal``) or "bottom_right" (j <= i + L_k - L_q).
        scale: multiplies the scores; default 1/sqrt(d_k).
        precision: how float32 inputs are multiplied (ignored for float16 and bfloat16, whose
            products are exact in float32 anyway): None (default) = ``"tf32"`` on GPUs of
            compute capability 8.0 and newer (tensor cores, autotuned; the float16
            tolerance rule applies), ``"ieee"`` before 8.0 (a T4 has no TF32) and in the
            interpreter; ``"ieee"``: exact float32 products (the float32 tolerance rule),
            fused multiply-adds with one fixed small configuration, ``IEEE_FORWARD_CONFIG``,
            never autotuned. The rule and the tolerances:
            ``attn_edu.kernels._targets.input_precision``.
        config: launch the forward with this (BLOCK_M, BLOCK_N, num_warps, num_stages),
            or a dict :func:`~attn_edu.kernels.flash_triton.chosen_forward_config` returned, instead of autotuning: the
            way to get the same bits in another process (the interpreter uses only the two
            block sizes). Default None: autotuned (:func:`~attn_edu.kernels.flash_triton.forward_configs`), except for
            exact float32.
        variant: one of ``FORWARD_VARIANTS``, the ladder from FlashAttention-2 to -3 that
            chapter 10 measures: ``"fa2"`` (default, ``kernels.attn_fwd``), then
            ``"host_tma"``, ``"wide_tiles"``, ``"warp_specialized"``, ``"persistent"``, each
            adding one step to the one before (``kernels.attn_fwd_fa3``); a step a launch
            cannot take (before Hopper, float32) is left out (:func:`~attn_edu.kernels.flash_triton.variant_steps`),
            and a launch left with no step runs ``"fa2"``'s kernel.

    Returns:
        ``out`` (B, H, L_q, d_v) in the input dtype and ``lse`` (B, H, L_q) float32,
        ``lse_i = log sum_j exp(s_ij)`` over the visible keys (``-inf`` for a row with
        none, whose output is zero). No gradient flows through this function; use
        :func:`triton_attention` for training.

    FLOPs (the count benchmarks quote): ``4 * B * H * L_q * L_k * d`` for the two
    matmuls, about half of it when causal.
    """
    align, s = check_triton_inputs(q, k, v, causal, scale)
    launch.dot_precision(q, precision)  # a bad value fails here, before any launch
    _check_variant(variant)
    with torch.no_grad():
        return launch.forward(q, k, v, align, s, precision=precision, config=launch.check_config(config),
                              variant=variant)


def _check_variant(variant) -> str:
    """``variant=`` of the public functions: one of ``FORWARD_VARIANTS``."""
    if not isinstance(variant, str) or variant not in launch.FORWARD_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, launch.FORWARD_VARIANTS))}; "
                         f"got {variant!r}")
    return variant


def triton_attention(q: Tensor, k: Tensor, v: Tensor, causal: Union[bool, str] = False,
                     scale: Optional[float] = None, backward: str = "two_kernels", *,
                     precision: Optional[str] = None, config=None, variant: str = "fa2") -> Tensor:
    r"""Fused attention with a backward pass: ``softmax(q k^T * scale) v``.

    Same arguments and semantics as :func:`triton_attention_forward`; returns only
    the output (B, H, L_q, d_v). ``out.backward(...)`` runs the FlashAttention-2
    backward (recomputation from the saved log-sum-exp) and gives dq, dk, dv in
    the input dtype. ``backward``: one of ``BACKWARDS``, ``"two_kernels"`` (default:
    a dK/dV kernel and a dQ kernel, no atomics, the same bits every run) or
    ``"atomic_dq"`` (one kernel, dQ added with float32 atomics: two matmuls fewer per
    tile pair, a float32 dQ buffer, and dQ's last bits may change from run to run).
    ``precision``, ``variant`` and ``config`` as in :func:`triton_attention_forward` (``config`` is the
    forward's; the ``"two_kernels"`` backward is autotuned per GPU over
    :func:`~attn_edu.kernels.flash_triton.backward_configs` where it lists more than one
    configuration, from compute capability 8.0 at d <= 64 and on Hopper; float32 gradients
    always use exact products and one configuration, ``BACKWARD_FLOAT32``).

    What is deterministic, exactly: on one GPU with one Triton version, the forward with a
    fixed configuration (``config=``, exact float32, or the interpreter) gives the same
    bits in every run and every process, and so does the ``"two_kernels"`` backward after
    it where its configuration is fixed (one entry in ``backward_configs``: before 8.0,
    float32, the interpreter). Autotuned, a configuration is chosen by timing, once per key
    and process: another process may choose another tile and get other last bits (within
    the tolerance rule); in one process the choice, and the bits, stay. For the forward
    pass ``config=chosen_forward_config(...)`` recorded by the first.
    ``"atomic_dq"``: dK and dV as deterministic as above, dQ not (atomic float32 additions
    in any order).
    """
    if backward not in launch.BACKWARDS:
        raise ValueError(f"backward must be one of {', '.join(map(repr, launch.BACKWARDS))}; got {backward!r}")
    align, s = check_triton_inputs(q, k, v, causal, scale)
    launch.dot_precision(q, precision)
    _check_variant(variant)
    return _TritonAttention.apply(q, k, v, align, s, backward, precision, launch.check_config(config), variant)


