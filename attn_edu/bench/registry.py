"""The registry of implementations a sweep can time, and the inputs it hands them.

:data:`~attn_edu.bench.REGISTRY` maps a name (``numpy_naive``, ``numpy_flash``, ``torch_sdpa_flash``,
``triton``, ``block_sparse``, ...) to an :class:`Impl`: which arrays it takes (NumPy or
torch), on which devices it runs, and ``build(config)``, which returns ``fn(q, k, v)``
for one :class:`BenchConfig` or raises :class:`ImplUnavailable` saying why it cannot run
here, and, for a tiled implementation, ``tiles(config)``: the ``(block_q, block_k)`` it
runs with (the config's, else its backend's :func:`attn_edu.masks.default_tiles`), which
every row records. :func:`register_impl` adds more. ``python -m attn_edu.bench --list``
prints them.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .. import profiling
from .._checks import check_positive_int
from ..kernels._interpret import requested as interpret_requested
from ..masks import (DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q, allowed_pairs, default_tiles, plan_tiles,
                     sliding_window_mask)
from .env import SDPA_BACKENDS

__all__ = ["BenchConfig", "Impl", "ImplUnavailable", "REGISTRY", "register_impl", "impl_names",
           "build_impl", "make_inputs"]


class ImplUnavailable(RuntimeError):
    """The implementation exists in the registry but cannot run here (module, device, dtype)."""


@dataclass
class BenchConfig:
    """Everything but the length that defines one benchmark point."""

    batch: int = 1
    heads: int = 1
    d: int = 64
    dtype: str = "float32"
    causal: bool = False
    device: str = "cpu"
    block_q: Optional[int] = None  # the tile of tiled implementations (queries x keys);
    block_k: Optional[int] = None  # None: each one's default (Impl.tiles)
    window: Optional[int] = None  # sliding window for masked implementations


@dataclass
class Impl:
    """One entry of the registry: ``build(config)`` returns ``fn(q, k, v) -> out``."""

    name: str
    framework: str  # "numpy" or "torch": which arrays make_inputs hands it
    description: str
    build: Callable[[BenchConfig], Callable]
    backend: Optional[str] = None  # e.g. the pinned SDPA backend
    devices: Tuple[str, ...] = ("cpu", "cuda")
    #: ``flops(n, config)`` gives the FLOPs the row reports; None = dense attention_flops
    flops: Optional[Callable[[int, "BenchConfig"], int]] = None
    #: ``tiles(config)`` gives the (block_q, block_k) it runs with; None = not tiled
    tiles: Optional[Callable[["BenchConfig"], Tuple[int, int]]] = None


#: Every implementation a sweep can time, by name (``--list`` prints them).
REGISTRY: Dict[str, Impl] = {}


def register_impl(name: str, framework: str, build: Callable[[BenchConfig], Callable], description: str,
                  backend: Optional[str] = None, devices: Sequence[str] = ("cpu", "cuda"),
                  flops: Optional[Callable[[int, BenchConfig], int]] = None,
                  tiles: Optional[Callable[[BenchConfig], Tuple[int, int]]] = None) -> Impl:
    """Add an implementation to ``REGISTRY`` (the hook for later ones, e.g. block-sparse).

    ``build(config)`` is called once per sweep point and returns ``fn(q, k, v)``; it should
    import what it needs lazily and raise :class:`ImplUnavailable` with a reason when it
    cannot run (module missing, device or dtype unsupported). ``flops(n, config)``, when
    given, is the FLOP count its rows report (e.g. only the allowed pairs of a sparse
    mask); by default the dense :func:`attn_edu.profiling.attention_flops`. ``tiles(config)``,
    for a tiled implementation, is the ``(block_q, block_k)`` it runs with; the rows record it.
    """
    if framework not in ("numpy", "torch"):
        raise ValueError(f"framework must be 'numpy' or 'torch'; got {framework!r}")
    impl = Impl(name, framework, description, build, backend, tuple(devices), flops, tiles)
    REGISTRY[name] = impl
    return impl


def impl_names() -> List[str]:
    """The registered names, sorted."""
    return sorted(REGISTRY)


def _config_tiles(default: Callable[[BenchConfig], Tuple[int, int]]
                  ) -> Callable[[BenchConfig], Tuple[int, int]]:
    """``tiles(config)`` for :func:`register_impl`: the config's ``block_q`` / ``block_k`` where
    given, else ``default(config)`` (e.g. the backend's :func:`attn_edu.masks.default_tiles`)."""
    def tiles(cfg: BenchConfig) -> Tuple[int, int]:
        dq, dk = default(cfg)
        return (dq if cfg.block_q is None else cfg.block_q, dk if cfg.block_k is None else cfg.block_k)

    return tiles


_NUMPY_TILES = _config_tiles(lambda cfg: default_tiles("numpy"))
_TORCH_TILES = _config_tiles(lambda cfg: default_tiles("torch", cfg.device))
_KERNEL_TILES = _config_tiles(lambda cfg: (DEFAULT_BLOCK_Q, DEFAULT_BLOCK_K))  # block-sparse Triton


def _require(module: str, who: str):
    """Import ``module`` (e.g. torch, triton), or ImplUnavailable naming what is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImplUnavailable(f"{who}: needs {module} ({err})") from None


def _numpy_dtype_ok(cfg: BenchConfig, who: str) -> None:
    if cfg.device != "cpu":
        raise ImplUnavailable(f"{who}: NumPy runs on the CPU only; got --device {cfg.device}")
    if cfg.dtype not in ("float16", "float32", "float64"):
        raise ImplUnavailable(f"{who}: NumPy has no {cfg.dtype}; use float16, float32 or float64")


def _build_numpy_naive(cfg: BenchConfig) -> Callable:
    _numpy_dtype_ok(cfg, "numpy_naive")
    from ..reference import scaled_dot_product_attention as sdpa

    return lambda q, k, v: sdpa(q, k, v, causal=cfg.causal)


def _build_flash(who: str, numpy: bool) -> Callable[[BenchConfig], Callable]:
    def build(cfg: BenchConfig) -> Callable:
        if numpy:
            _numpy_dtype_ok(cfg, who)
        else:
            _require("torch", who)
        from ..flash import flash_attention

        bq, bk = (_NUMPY_TILES if numpy else _TORCH_TILES)(cfg)
        return lambda q, k, v: flash_attention(q, k, v, causal=cfg.causal, block_q=bq, block_k=bk)

    return build


def _window_flops(n: int, cfg: BenchConfig) -> int:
    """Matmul FLOPs of the window's allowed pairs only: ``2*B*H*pairs*(d + d)``."""
    if cfg.window is None:
        return profiling.attention_flops(cfg.batch, cfg.heads, n, n, cfg.d, causal=cfg.causal)
    return 2 * cfg.batch * cfg.heads * allowed_pairs("sliding_window", n, window=cfg.window,
                                                     causal=bool(cfg.causal)) * 2 * cfg.d


def _build_window(who: str, numpy: bool) -> Callable[[BenchConfig], Callable]:
    """Sparse attention on the CPU: the tiled flash_attention with a sliding-window mask.

    The boolean (n, n) mask is built once per length on the first call (the warm-up) and
    kept, so neither the timed calls nor the peak memory include building it; holding it
    costs n^2 bytes all the same. Tiles the window leaves empty are skipped, so the work
    is about ``(window + block) * n * 4d`` FLOPs; planning which tiles to skip still reads
    the whole mask once per call (O(n^2) cheap boolean operations).
    """
    def build(cfg: BenchConfig) -> Callable:
        if cfg.window is None:
            raise ImplUnavailable(f"{who}: needs --window (the sliding-window width)")
        if numpy:
            _numpy_dtype_ok(cfg, who)
        else:
            _require("torch", who)
        from ..flash import flash_attention

        bq, bk = (_NUMPY_TILES if numpy else _TORCH_TILES)(cfg)
        cache: Dict[Tuple[int, str], Any] = {}

        def run(q, k, v):
            key = (q.shape[-2], str(getattr(q, "device", "cpu")))
            if key not in cache:
                m = sliding_window_mask(q.shape[-2], cfg.window, causal=bool(cfg.causal))  # (L, L)
                if not numpy:
                    m = _require("torch", who).as_tensor(m, device=q.device)
                cache[key] = m
            return flash_attention(q, k, v, mask=cache[key], block_q=bq, block_k=bk)

        return run

    return build


def _build_torch_naive(cfg: BenchConfig) -> Callable:
    _require("torch", "torch_naive")
    from ..reference_torch import scaled_dot_product_attention as sdpa

    return lambda q, k, v: sdpa(q, k, v, causal=cfg.causal)


def _build_sdpa(backend: Optional[str]) -> Callable[[BenchConfig], Callable]:
    who = "torch_sdpa" + (f"_{backend}" if backend else "")

    def build(cfg: BenchConfig) -> Callable:
        sdpa = _require("torch.nn.functional", who).scaled_dot_product_attention
        if backend is None:  # the dispatcher picks
            return lambda q, k, v: sdpa(q, k, v, is_causal=cfg.causal)
        attention = _require("torch.nn.attention", who)
        kind = getattr(attention.SDPBackend, SDPA_BACKENDS[backend])

        def run(q, k, v):
            with attention.sdpa_kernel(kind):
                return sdpa(q, k, v, is_causal=cfg.causal)

        return run

    return build


def _build_triton(cfg: BenchConfig) -> Callable:
    if cfg.device != "cuda" and not interpret_requested():
        raise ImplUnavailable("triton: needs --device cuda (or TRITON_INTERPRET=1 for a slow CPU check)")
    _require("triton", "triton")
    from ..kernels.flash_triton import triton_attention_forward

    return lambda q, k, v: triton_attention_forward(q, k, v, causal=cfg.causal)[0]


def _build_block_sparse(cfg: BenchConfig) -> Callable:
    """Block-sparse Triton attention with a sliding-window mask of ``cfg.window``; the
    :class:`~attn_edu.masks.TilePlan` is built once per length (as a model would)."""
    if cfg.window is None:
        raise ImplUnavailable("block_sparse: needs --window (the sliding-window width)")
    torch = _require("torch", "block_sparse")
    _require("triton", "block_sparse")
    from ..kernels.block_sparse_triton import block_sparse_attention

    plans: Dict[Tuple[int, str], Any] = {}
    bq, bk = _KERNEL_TILES(cfg)

    def run(q, k, v):
        key = (q.shape[-2], str(q.device))
        if key not in plans:
            m = sliding_window_mask(q.shape[-2], cfg.window, causal=bool(cfg.causal))  # (L, L)
            plans[key] = plan_tiles(torch.as_tensor(m, device=q.device), bq, bk)
        return block_sparse_attention(q, k, v, plans[key])

    return run


register_impl("numpy_naive", "numpy", _build_numpy_naive,
              "attn_edu.scaled_dot_product_attention on NumPy arrays (materialises n x n)", devices=("cpu",))
register_impl("numpy_flash", "numpy", _build_flash("numpy_flash", True),
              "attn_edu.flash.flash_attention on NumPy arrays (tiled, block_q x block_k)", devices=("cpu",),
              tiles=_NUMPY_TILES)
register_impl("numpy_window", "numpy", _build_window("numpy_window", True),
              "attn_edu.flash.flash_attention on NumPy arrays with masks.sliding_window_mask(n, --window) "
              "(sparse: empty tiles skipped; FLOPs = allowed pairs only)",
              devices=("cpu",), flops=_window_flops, tiles=_NUMPY_TILES)
register_impl("torch_window", "torch", _build_window("torch_window", False),
              "attn_edu.flash.flash_attention on torch tensors with masks.sliding_window_mask(n, --window) "
              "(sparse: empty tiles skipped; FLOPs = allowed pairs only)",
              flops=_window_flops, tiles=_TORCH_TILES)
register_impl("torch_naive", "torch", _build_torch_naive,
              "attn_edu.reference_torch.scaled_dot_product_attention (matmul, softmax, matmul)")
register_impl("torch_flash", "torch", _build_flash("torch_flash", False),
              "attn_edu.flash.flash_attention on torch tensors (tiled PyTorch)", tiles=_TORCH_TILES)
register_impl("torch_sdpa", "torch", _build_sdpa(None),
              "torch.nn.functional.scaled_dot_product_attention, backend chosen by PyTorch", backend="auto")
for _b in SDPA_BACKENDS:
    register_impl(f"torch_sdpa_{_b}", "torch", _build_sdpa(_b),
                  f"torch.nn.functional.scaled_dot_product_attention pinned with "
                  f"sdpa_kernel(SDPBackend.{SDPA_BACKENDS[_b]})", backend=SDPA_BACKENDS[_b])
register_impl("triton", "torch", _build_triton,
              "attn_edu.kernels.triton_attention_forward (Triton FlashAttention forward)", devices=("cuda",))
register_impl("block_sparse", "torch", _build_block_sparse,
              "attn_edu.kernels.block_sparse_triton.block_sparse_attention, sliding window --window, "
              "tiles --block-q x --block-k (TFLOP/s counted as dense: an effective rate)",
              devices=("cuda",), tiles=_KERNEL_TILES)


def build_impl(name: str, config: BenchConfig) -> Tuple[Impl, Callable]:
    """Look ``name`` up and build it; ValueError for an unknown name, ImplUnavailable if it cannot run."""
    if name not in REGISTRY:
        raise ValueError(f"unknown implementation {name!r}; known: {', '.join(impl_names())}")
    impl = REGISTRY[name]
    return impl, impl.build(config)


# --------------------------------------------------------------------------- inputs
def make_inputs(framework: str, n: int, config: BenchConfig, seed: int = 0):
    """Random q, k, v of shape (batch, heads, n, d), standard normal, in config.dtype."""
    import numpy as np

    n = check_positive_int("n", n)
    shape = (config.batch, config.heads, n, config.d)  # (B, H, L, D)
    if framework == "numpy":
        rng = np.random.default_rng(seed)
        return tuple(rng.standard_normal(shape).astype(config.dtype) for _ in range(3))
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    dtype = getattr(torch, config.dtype)
    return tuple(torch.randn(shape, generator=g).to(device=config.device, dtype=dtype) for _ in range(3))
