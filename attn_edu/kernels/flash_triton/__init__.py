r"""FlashAttention in Triton: a fused forward kernel and a recomputing backward (chapter 10).

The algorithm is FlashAttention {cite}`dao2022flashattention` in the loop order of
FlashAttention-2 {cite}`dao2023flashattention2`: one program owns a block of ``BLOCK_M``
query rows, streams the keys and values past it in blocks of ``BLOCK_N`` and keeps the
running softmax statistics in registers, so the (L_q, L_k) score matrix never exists in
memory. The forward also writes the log-sum-exp ``lse``, from which the backward
recomputes any tile of the softmax instead of storing it. Causal attention skips the key
blocks above the diagonal (never loaded) and masks only those that straddle it. The loop,
the backward's equations and both causal alignments are written out at the top of the
``kernels`` module, the file chapter 10 reads.

A package of four modules, one job each; their public names are all reached from here
(``attn_edu.kernels.flash_triton.X``):

* ``kernels`` -- the ``@triton.jit`` kernels, top to bottom like Triton's fused-attention
  tutorial (the forward ``attn_fwd`` and its loop over key blocks ``attn_fwd_inner``; the
  backward's ``attn_bwd_preprocess``, ``attn_bwd_dkdv`` and ``attn_bwd_dq``), the inputs
  they take (``LIMITS``) and what a page reads off them (:func:`kernel_source`,
  :func:`block_schedule`);
* ``launch`` -- block sizes (the autotuner's search space and its pruning,
  :func:`forward_configs`, :func:`backward_configs`), TMA descriptors
  (:func:`tma_compatible`) and the scratch memory they need, and the launchers;
* ``api`` -- the one input check (:func:`check_triton_inputs`), the autograd wrapper and
  the public functions :func:`triton_attention_forward` and :func:`triton_attention`;
* ``aot`` -- the kernels as the ahead-of-time compile report compiles them (:func:`aot_kernels`).

Where it runs: on a CUDA GPU, or on the CPU through Triton's interpreter when the
environment variable ``TRITON_INTERPRET=1`` is set. Triton 3.9 reads that variable
(``triton.knobs.runtime.interpret``) when ``@triton.jit`` *decorates* a function,
not at launch: the kernels are decorated when this package is imported, and
Triton's own library functions (``tl.max``, ``tl.sum``, ...) when ``triton`` is
first imported. So set ``TRITON_INTERPRET=1`` before anything imports triton; if it
came too late, the first CPU call raises a RuntimeError that says so. Under the
interpreter the kernels run on NumPy, one program at a time: correct, slow, good
for tests with small shapes. (bfloat16 is refused there: the interpreter's
``tl.dot`` multiplies the raw bit patterns, triton-lang/triton#11584.)

Explained in chapter 10 (FlashAttention II: PyTorch, Triton and memory on a GPU).
"""
from __future__ import annotations

import torch  # noqa: F401  (launch and api need it: without torch this says so, naming the pip install)

from . import aot, api, kernels, launch
from .aot import *  # noqa: F401,F403  (the public names of each module, listed in __all__)
from .api import *  # noqa: F401,F403
from .kernels import *  # noqa: F401,F403
from .launch import *  # noqa: F401,F403
# the launch tables chapter 10 and the tests read as ft.X (not on the API page)
from .launch import (BWD_AUTOTUNE_CONFIGS, BWD_AUTOTUNE_KEY, BWD_CONFIGS_CUDA, FWD_AUTOTUNE_KEY, FWD_CONFIGS_CUDA, FWD_CONFIGS_PRE_AMPERE,  # noqa: F401
                     FWD_CONFIGS_TF32, FWD_SPILL_CONFIGS, FWD_SPILL_TILES_D128, FWD_SPILL_TILES_D128_AMPERE,
                     FWD_SPILL_TILES_TF32_D128_AMPERE, INTERPRET_BLOCK_M, INTERPRET_BLOCK_N,
                     SHARED_MEMORY_FALLBACK, FWD_CONFIGS_WIDE, FWD_CONFIGS_WS, PERSISTENT_PROGRAMS_PER_SM,
                     persistent_programs_per_sm)

__all__ = [
    "triton_attention",
    "triton_attention_forward",
    "check_triton_inputs",
    "block_schedule",
    "kernel_source",
    "interpret_mode",
    "forward_configs",
    "chosen_forward_config",
    "forward_shared_memory",
    "backward_configs",
    "atomic_backward_configs",
    "tma_compatible",
    "aot_kernels",
    "FORWARD_VARIANTS",
    "variant_steps",
    "variant_configs",
    "warp_specialize_applies",
    "BACKWARDS",
    "BACKWARD_FLOAT32",
    "LIMITS",
    "TMA_MIN_CAPABILITY",
    "TMA_EXTRA_SHARED",
    "IEEE_FORWARD_CONFIG",
    "IEEE_BACKWARD_CONFIG",
]

# Data is documented where the API page reads it, the package (functions carry their
# docstrings along; a constant does not), as in attn_edu.masks.
#: The backward's two schedules, chosen with ``triton_attention(..., backward=...)``.
#: ``"two_kernels"``, a dK/dV kernel and a dQ kernel, each program owning the rows it writes (7 matmuls per
#: tile pair, deterministic); ``"atomic_dq"``, FlashAttention-2's Algorithm 2: one kernel
#: over key blocks adds dQ with float32 atomics (5 matmuls, dQ's rounding order varies).
BACKWARDS = launch.BACKWARDS
#: float32 gradients are computed with exact float32 products (FMA code) and
#: ``IEEE_BACKWARD_CONFIG`` on every GPU, whatever ``precision`` the forward used: the
#: backward's TF32 tiles spilled registers on sm_80 and sm_90a in the compile report
#: (144-284 B at 32 x 64), and float32's backward is not autotuned.
BACKWARD_FLOAT32 = launch.BACKWARD_FLOAT32
#: The inputs these kernels take, checked by ``attn_edu.kernels._targets.check_kernel_inputs``:
#: float16, bfloat16 or float32; head dimensions 1 to 128 (padded inside to a power of two
#: >= 16); q, k and v with the same batch and head axes.
LIMITS = kernels.LIMITS
#: From this compute capability on (Hopper) the forward copies its Q, K and V tiles with
#: TMA tensor descriptors when :func:`tma_compatible` allows; before it, pointer loads.
TMA_MIN_CAPABILITY = launch.TMA_MIN_CAPABILITY
#: Bytes of shared memory a TMA forward needs beyond its tiles, for the copies' barriers
#: (mbarrier objects) and their alignment (at most 1 KiB in every sm_90a row of the report).
TMA_EXTRA_SHARED = launch.TMA_EXTRA_SHARED
#: Exact float32 (``precision="ieee"``, and every float32 launch before compute capability
#: 8.0): fused multiply-adds instead of tensor cores, whose tiles live in registers. One
#: fixed small configuration (BLOCK_M, BLOCK_N, num_warps, num_stages) for the forward and
#: one for both backward kernels, never autotuned: autotuning would compile several slow,
#: spilling kernels one after another on the first call.
IEEE_FORWARD_CONFIG = launch.IEEE_FORWARD_CONFIG
#: the one (BLOCK_M, BLOCK_N, num_warps, num_stages) of both backward kernels for float32,
#: which the backward always computes exactly (``BACKWARD_FLOAT32``)
IEEE_BACKWARD_CONFIG = launch.IEEE_BACKWARD_CONFIG
#: The forward's variants, a ladder from FlashAttention-2 to -3 (chapter 10), ``"fa2"``
#: (the default kernel), ``"host_tma"``, ``"wide_tiles"``, ``"warp_specialized"``,
#: ``"persistent"``, each adding one step to the one before (``triton_attention_forward(...,
#: variant=...)``; what a launch cannot take is left out, :func:`variant_steps`, and one
#: left with no step runs ``"fa2"``'s kernel).
FORWARD_VARIANTS = launch.FORWARD_VARIANTS
