"""attn_edu: the package behind *Attention, from First Principles to GPU Kernels*.

Importing ``attn_edu`` needs NumPy only. PyTorch, Triton, plotly, matplotlib and
ipywidgets are imported by the modules that use them, and these flags say what is
available (they are computed on first access, so reading them is what imports torch):

* ``attn_edu.HAS_TORCH``  -- PyTorch can be imported;
* ``attn_edu.HAS_CUDA``   -- PyTorch sees a CUDA GPU;
* ``attn_edu.HAS_TRITON`` -- Triton is installed (kernels run on a GPU, or on the CPU
  with ``TRITON_INTERPRET=1``, which must be set before triton is first imported;
  reading this flag does not import it).

The public functions work on NumPy arrays and, with the same rules, on torch tensors.
"""
from __future__ import annotations

import importlib
import importlib.util

from . import flash, linear, masks, multihead, positions, precision, scaling
from .masks import causal_mask, combine_masks, padding_mask
from .flash import flash_attention
from .reference import scaled_dot_product_attention, softmax

__version__ = "0.1.0"

__all__ = [
    "softmax",
    "scaled_dot_product_attention",
    "flash_attention",
    "flash",
    "linear",
    "masks",
    "multihead",
    "positions",
    "precision",
    "scaling",
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


def setup_notebook(plotly: bool = True) -> str:
    """First-cell helper for the chapters; see :func:`attn_edu.notebook.setup_notebook`."""
    from .notebook import setup_notebook as _setup

    return _setup(plotly=plotly)


def __getattr__(name: str):  # PEP 562: computed once, on first access
    if name in _FLAGS:
        value = _FLAGS[name]()
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attn_edu' has no attribute {name!r}")
