"""Attention masks, all boolean with **True meaning "may attend"**; their tiles and their cost.

That is the polarity of PyTorch's ``attn_mask`` in ``scaled_dot_product_attention``.
(``key_padding_mask`` in ``torch.nn.MultiheadAttention`` is the opposite: True there
means "ignore"; :func:`from_key_padding_mask` converts.)

A mask's last two axes are (L_q, L_k): row i says which keys query i may look at.
Masks broadcast against the scores of shape (..., L_q, L_k), so a (L_q, L_k) causal
mask serves a whole batch, and a (B, 1, L_k) padding mask serves every query.

Three concerns, one module each, all reachable from here (``attn_edu.masks.X``):

* ``attn_edu.masks.build`` -- building masks: causal in both alignments (and the one
  home of the causal offset, :func:`causal_offset`), padding, combinations, and the
  sparse patterns (sliding window, strided, dilated, fixed, global, random blocks,
  BigBird);
* ``attn_edu.masks.tiles`` -- which tiles of a mask hold work: :func:`block_layout`,
  :func:`full_blocks`, :func:`causal_block_layout`, and the one tile-plan type
  :class:`TilePlan` (:func:`plan_tiles`) that tiled loops, kernels and benchmarks share;
* ``attn_edu.masks.cost`` -- what a mask costs and reaches: :func:`allowed_pairs`,
  :func:`mask_flops`, :func:`block_flops`, :func:`receptive_field`.

Chapter 01 uses causal and padding masks; chapter 05 explains both alignments; chapter 09
draws tile layouts; chapter 11 adds the sparse patterns, their cost and their reach.
"""
from __future__ import annotations

from . import build, cost, tiles
from .build import *  # noqa: F401,F403  (the public names of build, listed in __all__)
from .cost import *  # noqa: F401,F403
from .tiles import *  # noqa: F401,F403

__all__ = build.__all__ + tiles.__all__ + cost.__all__

# Data is documented where the API page reads it, the package (functions and classes
# carry their docstrings along; a constant does not).
#: The default tile rows (queries), 64, of ``plan_tiles`` and the block-sparse kernel.
DEFAULT_BLOCK_Q = tiles.DEFAULT_BLOCK_Q
#: The default tile columns (keys), 64, of ``plan_tiles`` and the block-sparse kernel.
DEFAULT_BLOCK_K = tiles.DEFAULT_BLOCK_K
#: The default ``(block_q, block_k)`` of the tiled loops by backend (``numpy``, ``torch_cpu``,
#: ``torch_gpu``): large tiles, since every tile costs Python calls (``attn_edu.masks.tiles``;
#: :func:`default_tiles` reads it).
DEFAULT_TILES = tiles.DEFAULT_TILES
