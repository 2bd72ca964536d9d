"""attn_edu: the package behind *Attention, from First Principles to GPU Kernels*.

Importing ``attn_edu`` needs NumPy only. PyTorch, Triton, plotly, matplotlib and
ipywidgets are imported by the modules that use them, and these flags say what is
available (they are computed on first access, so reading them is what imports torch):

* ``attn_edu.HAS_TORCH``  -- PyTorch can be imported;
* ``attn_edu.HAS_CUDA``   -- PyTorch sees a CUDA GPU;
* ``attn_edu.HAS_TRITON`` -- Triton is installed (kernels run on a GPU, or on the CPU
  with ``TRITON_INTERPRET=1``, which must be set before triton is first imported;
  reading this flag does not import it).

The layout, one module per concern::

    reference            NumPy from scratch (softmax, scaled dot-product attention): the gold answer
    reference_torch      its PyTorch twin (devices, autograd), and the naive_T of the tolerance rule
    masks                masks (masks.build), their tiles (masks.tiles: TilePlan) and cost (masks.cost)
    flash, flash_torch   tiled attention with the online softmax, NumPy and PyTorch
    multihead, multihead_torch   multi-head / grouped-query attention, NumPy and nn.Module (+ KV cache)
    impls                the one switch impl= ("naive", "tiled", "sdpa", "triton", "auto") for torch calls
    kernels              Triton kernels: FlashAttention forward/backward, block-sparse forward
    precision, scaling, positions, linear, tiny_transformer   the topics of chapters 02-04, 07, 12
    profiling, bench     measuring: memory, time, FLOPs; sweeps, goals, the block-sparse benchmark
    testing              the tolerance rule every implementation is held to
    viz, widgets, notebook   figures, live explorers, the chapters' first cell
    alt_text             text alternatives of figures (what a screen reader says for a plot)

Conventions (one home per concept):

* **NumPy / PyTorch twins.** A concept's NumPy code lives in ``<name>.py``; where PyTorch
  needs code of its own (autograd-safe softmax, devices, ``nn.Module`` s, a KV cache), it
  lives in the twin module ``<name>_torch.py`` under the same public names
  (``reference`` / ``reference_torch``, ``flash`` / ``flash_torch``, ``multihead`` /
  ``multihead_torch``). The NumPy function accepts torch tensors too and hands them to
  its twin, so ``attn_edu.scaled_dot_product_attention(q, k, v)`` runs PyTorch on
  tensors; "all NumPy or all torch" is decided in one place
  (``attn_edu._checks.uses_torch``; a mix is a TypeError). A NumPy function whose twin is
  an ``nn.Module`` rather than a function (``multihead.multi_head_attention``) refuses
  tensors with a message naming the module. Where one body serves both kinds because
  the operations are spelled alike (``linear``, ``precision``), there is no twin module:
  the few operations NumPy and torch spell differently go through ``attn_edu._backend``.
  A builder with no array argument (``masks.causal_mask``) returns NumPy unless given
  ``device=``. Importing ``<name>_torch`` imports torch; importing ``<name>`` never does.
* **Names.** ``__all__`` of a module is its public API, the one the chapters use and the
  API page documents. Other names without a leading underscore are shared between
  attn_edu's modules; a leading underscore means "this file only", and an underscore
  module (``_checks``, ``_call``, ``_backend``, ``kernels._interpret``, ``kernels._shared``) is
  internal to the package. Python signatures and command-line flags call the tile
  ``block_q`` x ``block_k`` (``--block-q``, ``--block-k``); ``BLOCK_M`` / ``BLOCK_N`` appear
  only inside Triton kernels. The tiled loops' default tiles depend on the backend
  (``masks.default_tiles``); elsewhere the default tile is 64 x 64
  (``masks.DEFAULT_BLOCK_Q``, ``masks.DEFAULT_BLOCK_K``).
* **One front door per call.** A public attention function checks and normalises its
  arguments once (``_call.attention_call``) into a frozen ``_call.AttentionCall``, and
  everything below it trusts that value. What the NumPy and torch twins share lives one
  floor below both (``_call``), so no module imports its own twin back: the package's
  import graph has no cycle. Which implementation computes a checked torch call (the
  plain path, the tiled loop, PyTorch's SDPA, the Triton kernel) is one switch, ``impl=``
  (``impls``), the one ``MultiHeadAttention`` and the tiny Transformers take.
* **One home per rule.** Argument checks and the positive-integer check
  (``_checks.check_positive_int``), the mask checks including "no NaN or +inf in a
  float mask" (``_checks.check_mask``): ``_checks``. The causal offset ``L_k - L_q``:
  ``masks.causal_offset``. Allowed-pair counting: ``masks.allowed_pairs``. Tile plans:
  ``masks.TilePlan``. Machine epsilons: ``precision.FLOAT_LIMITS``. The tolerance rule:
  ``testing``.

Where a module or function needs a package that is missing, it raises an ``ImportError``
that names the package and the pip command (``attn_edu._optional``).
"""
from __future__ import annotations

import importlib
import importlib.util

from . import _optional

_optional.install()  # before any submodule imports an optional package

from . import flash, linear, masks, multihead, positions, precision, profiling, reference, scaling, testing
from .flash import flash_attention
from .masks import causal_mask, combine_masks, padding_mask
from .reference import scaled_dot_product_attention, softmax

__version__ = "0.1.0"

# The names a chapter reaches as ``attn_edu.X``: the gold-answer functions, and the
# modules that need NumPy only (the torch twins, kernels, bench, viz and widgets are
# imported as ``from attn_edu import reference_torch`` etc., when they are needed).
__all__ = [
    "softmax",
    "scaled_dot_product_attention",
    "flash_attention",
    "reference",
    "masks",
    "flash",
    "multihead",
    "positions",
    "precision",
    "scaling",
    "linear",
    "profiling",
    "testing",
    "causal_mask",
    "padding_mask",
    "combine_masks",
    "setup_notebook",
    "HAS_TORCH",
    "HAS_CUDA",
    "HAS_TRITON",
]


def _can_import(name: str) -> bool:
    if importlib.util.find_spec(name) is None:
        return False
    try:
        importlib.import_module(name)
    except Exception:  # a broken install counts as absent
        return False
    return True


def _has_cuda() -> bool:
    if not _can_import("torch"):
        return False
    import torch

    return bool(torch.cuda.is_available())


_FLAGS = {
    "HAS_TORCH": lambda: _can_import("torch"),
    "HAS_CUDA": _has_cuda,
    # find_spec only: importing triton here would freeze its compiled-vs-interpreted
    # choice before a notebook sets TRITON_INTERPRET=1 (Triton reads it at import).
    "HAS_TRITON": lambda: importlib.util.find_spec("triton") is not None,
}


def setup_notebook(plotly: bool = True, lang: str = "en") -> str:
    """First-cell helper for the chapters; see :func:`attn_edu.notebook.setup_notebook`."""
    from .notebook import setup_notebook as _setup

    return _setup(plotly=plotly, lang=lang)


# Why the flags are computed by a module ``__getattr__`` (PEP 562) rather than set as plain
# constants here: HAS_TORCH has to import torch to be honest (a broken install counts as
# absent) and HAS_CUDA initialises CUDA, so plain constants would make every
# ``import attn_edu`` pay for torch (seconds) even in the NumPy-only chapters. Computed on
# first access, each flag is paid for only by the code that reads it, and is then stored
# in the module's globals: from the second read on it is an ordinary attribute.
def __getattr__(name: str):  # PEP 562: computed once, on first access
    if name in _FLAGS:
        value = _FLAGS[name]()
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attn_edu' has no attribute {name!r}")
