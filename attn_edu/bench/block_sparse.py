"""The block-sparse Triton kernel against itself on a full layout and against FlexAttention.

:func:`bench_block_sparse` (``python -m attn_edu.bench --block-sparse``, CUDA only) times
:func:`attn_edu.kernels.block_sparse_triton.block_sparse_attention` on masks of several
densities, each with its :class:`~attn_edu.masks.TilePlan` built once, and compares the
speed-up with the ideal ``1 / tile density`` and with FlexAttention on the same mask.
Chapter 11 states the goals; ``scripts/gpu-bench.sh`` records the numbers.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

from .. import profiling
from ..masks import plan_tiles
from .env import environment, gpu_half_dtype
from .sweep import SCHEMA, save_results

__all__ = ["bench_block_sparse", "default_dtype"]

_BENCH_DEVICE = "cuda"


def _pattern_mask(pattern: str, n: int, density: float, granule: int, seed: int, device):
    """A boolean (n, n) mask of about ``density`` allowed entries.

    ``"blocks"``: each row of ``granule``-sized tiles keeps ``round(density * tiles)``
    random key tiles (always its diagonal), so every tile is full or empty and the tile
    density equals ``density``. ``"window"``: a causal sliding window of
    ``density * n`` keys, whose diagonal tiles are partial.
    """
    import torch

    if pattern == "blocks":
        nb = -(-n // granule)
        keep = max(1, round(density * nb))
        gen = torch.Generator().manual_seed(seed)
        lay = torch.zeros(nb, nb, dtype=torch.bool)
        for i in range(nb):
            others = torch.randperm(nb - 1, generator=gen)[: keep - 1]
            others = others + (others >= i).long()  # skip the diagonal, added below
            lay[i, others] = True
            lay[i, i] = True
        lay = lay.to(device)
        m = lay.repeat_interleave(granule, 0).repeat_interleave(granule, 1)
        return m[:n, :n].contiguous()
    if pattern == "window":
        w = max(1, round(density * n))
        i = torch.arange(n, device=device)
        d = i[:, None] - i[None, :]
        return (d >= 0) & (d < w)
    raise ValueError(f"pattern must be 'blocks' or 'window'; got {pattern!r}")


#: The fewest warps a configuration may have before Ampere (a T4, compute capability 7.5).
#: There Triton multiplies half types with FMAs and the tiles live in registers: compiled
#: ahead of time for sm_75 (float16, d = 64, the benchmark's 128 x 64 tile,
#: ``attn_edu.kernels.report.compile_kernel``), 4 warps spill 85,644 B, 8 warps 12,012 B.
PRE_AMPERE_MIN_WARPS = 8


def _sized_configs(configs: Sequence[Tuple[int, int]], capability: Optional[Tuple[int, int]]) -> list:
    """``configs`` (num_warps, num_stages) for a GPU of ``capability`` (None: the CPU's dry
    run, all of them): before compute capability 8.0 only those with at least
    ``PRE_AMPERE_MIN_WARPS`` warps, or that many warps at each stage given when none has."""
    configs = [tuple(c) for c in configs]
    if not configs or any(len(c) != 2 or not all(isinstance(x, int) and x >= 1 for x in c) for c in configs):
        raise ValueError(f"configs must be (num_warps, num_stages) pairs of positive ints; got {configs!r}")
    if capability is None or tuple(capability) >= (8, 0):
        return configs
    kept = [c for c in configs if c[0] >= PRE_AMPERE_MIN_WARPS]
    return kept or sorted({(PRE_AMPERE_MIN_WARPS, stages) for _, stages in configs})


def default_dtype() -> str:
    """The current GPU's half type, :func:`~attn_edu.bench.gpu_half_dtype`: ``"bfloat16"`` from
    compute capability 8.0 (A100, H100), ``"float16"`` before (a Colab T4 is 7.5)."""
    return gpu_half_dtype("cuda")


def bench_block_sparse(n_list: Sequence[int] = (8192, 16384), d: int = 64,
                       densities: Sequence[float] = (1.0, 0.5, 0.25, 0.125, 0.0625),
                       dtype: Optional[str] = None, batch: int = 1, heads: int = 16,
                       block_q: int = 128, block_k: int = 64, flex_block_q: int = 128,
                       flex_block_k: int = 128,
                       patterns: Sequence[str] = ("blocks", "window"), seed: int = 0,
                       configs: Sequence[Tuple[int, int]] = ((4, 2), (4, 3), (8, 2), (8, 3)),
                       json_path: Optional[str] = None, verbose: bool = True,
                       dry_run: bool = False, command: Optional[str] = None) -> List[dict]:
    """Time the block-sparse kernel against itself on a full layout and against FlexAttention.

    For every n, pattern and density it prints (and returns as dicts):

    * ``t_sparse`` -- ``block_sparse_attention`` with a plan built once (ms, median of
      CUDA-event times, :func:`attn_edu.profiling.time_ms`; best of ``configs`` =
      (num_warps, num_stages); before Ampere only those with 8 warps or more, since 4 spill
      seven times as much on a T4, ``PRE_AMPERE_MIN_WARPS``);
    * ``t_full`` -- the same kernel on an all-True mask: every tile full, nothing skipped;
    * ``speedup = t_full / t_sparse`` next to the ideal ``1 / tile_density``, and
      ``efficiency = speedup * tile_density`` (goal: >= 0.8 for density >= 1/8, n >= 8192);
    * ``t_flex`` -- ``torch.compile(flex_attention)`` on a BlockMask of the same boolean
      mask (``flex_block_q`` x ``flex_block_k`` tiles), and ``t_sparse / t_flex`` (goal: <= 1.25);
    * ``tflops`` -- B * H * :meth:`TilePlan.flops <attn_edu.masks.TilePlan.flops>` / t_sparse:
      the FLOPs of the tiles actually computed (two matmuls of 2 * d FLOPs per score).

    Before timing, each case checks the kernel against FlexAttention (max abs difference
    ``err_vs_flex``); a small case (n = 512) is checked against the float64 reference with
    the tolerance rule of :mod:`attn_edu.testing`. ``dtype`` defaults to bfloat16 where the
    GPU has it natively (compute capability 8.0+) and float16 elsewhere (a T4). If
    FlexAttention cannot be compiled here (old torch, or a GPU with too little shared memory
    for its kernel), that is printed and the rows carry no ``t_flex``. Needs a CUDA GPU: on
    any other machine it prints that it was skipped and returns ``[]``.

    ``dry_run=True`` runs the same steps on the CPU through Triton's interpreter
    (``TRITON_INTERPRET=1``, float32, eager FlexAttention; give tiny ``n_list``): the
    pipeline, not the numbers. ``json_path`` writes a document of kind ``"block_sparse"``
    (schema ``attn_edu.bench/1``, the environment header, ``config`` and ``rows``).
    """
    why = _cannot_run_dry() if dry_run else _cannot_run()
    if why:
        print(f"bench_block_sparse: SKIPPED, {why}. It measures GPU kernels only; "
              "no timings were taken.")
        return []
    import torch

    from ..kernels.block_sparse_triton import (LIMITS, block_sparse_attention, flex_available,
                                               flex_block_mask_from_bool, flex_reference)
    from ..kernels._targets import input_precision
    from ..testing import assert_close_to_reference, reference_pair

    dev = torch.device("cpu" if dry_run else _BENCH_DEVICE)
    if dtype is None:
        dtype = "float32" if dry_run else default_dtype()
    if dtype not in LIMITS.dtypes:
        raise ValueError(f"dtype must be one of {', '.join(LIMITS.dtypes)}; got {dtype!r}")
    dt = getattr(torch, dtype)
    have_flex = flex_available()
    granule = math.lcm(block_q, block_k, flex_block_q, flex_block_k)

    def timed(fn):
        return profiling.time_ms(fn, repeat=1 if dry_run else 50, warmup=0 if dry_run else 10,
                                 device=dev.type).median_ms

    def best_of(q, k, v, plan):
        best = None
        for nw, ns in configs[:1] if dry_run else configs:  # the interpreter ignores them
            def fn():
                return block_sparse_attention(q, k, v, plan, num_warps=nw, num_stages=ns)
            try:
                fn()
                t = timed(fn)
            except Exception as e:  # a config that does not fit (shared memory) is skipped
                if verbose:
                    print(f"  config num_warps={nw} num_stages={ns} failed: {type(e).__name__}")
                continue
            if best is None or t < best[0]:
                best = (t, nw, ns)
        if best is None:
            raise RuntimeError("no launch configuration ran")
        return best

    # correctness on a small case against the float64 reference (the tolerance rule)
    g = torch.Generator(device="cpu").manual_seed(seed)
    small = 64 if dry_run else 512
    q, k, v = (torch.randn(1, 2, small, d, generator=g).to(dev, dt) for _ in range(3))
    m = _pattern_mask("window", small, 0.25, granule, seed, dev)
    out = block_sparse_attention(q, k, v, m, block_q, block_k)
    cap = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else None
    configs = _sized_configs(configs, cap)  # best_of's
    err = assert_close_to_reference(out, *reference_pair(q, k, v, mask=m, precision=input_precision(dtype, cap)))
    if verbose:
        print(f"check n={small} {dtype} vs float64 reference: max err {err:.2e} (passes the rule)")

    meta = {"dtype": dtype, "batch": batch, "heads": heads, "d": d, "block_q": block_q,
            "block_k": block_k, "flex_block_q": flex_block_q, "flex_block_k": flex_block_k,
            "densities": list(densities), "patterns": list(patterns), "n": list(n_list),
            "configs": [list(c) for c in configs]}
    env = environment(dev.type)
    if verbose:
        print(f"{env['device']['name']}  torch {env['versions']['torch']}  triton "
              f"{env['versions']['triton']}  {dtype}  B={batch} H={heads} d={d}  tiles "
              f"{block_q}x{block_k}, flex {flex_block_q}x{flex_block_k}"
              + ("  [DRY RUN on the CPU: not GPU numbers]" if dry_run else ""))
    rows: List[dict] = []
    for n in n_list:
        q, k, v = (torch.randn(batch, heads, n, d, device=dev, dtype=dt) for _ in range(3))
        ones = torch.ones(n, n, dtype=torch.bool, device=dev)
        t_full, *_ = best_of(q, k, v, plan_tiles(ones, block_q, block_k))
        base = {"t_full": t_full}
        try:  # the dense kernel of chapter 10, for context
            from ..kernels.flash_triton import triton_attention_forward

            triton_attention_forward(q, k, v)
            base["t_dense_flash_triton"] = timed(lambda: triton_attention_forward(q, k, v))
        except Exception as e:  # noqa: BLE001 - context only
            print(f"  (flash_triton dense kernel not timed: {type(e).__name__}: {e})")
        if have_flex:
            try:  # compiling FlexAttention can fail where ours runs (e.g. shared memory)
                ones_bm = flex_block_mask_from_bool(ones, flex_block_q, flex_block_k, device=dev)
                flex_reference(q, k, v, block_mask=ones_bm, compiled=not dry_run)
                base["t_flex_full"] = timed(lambda: flex_reference(q, k, v, block_mask=ones_bm,
                                                                   compiled=not dry_run))
            except Exception as e:  # noqa: BLE001 - the comparison is optional
                have_flex = False
                print(f"  FlexAttention not compared here: {type(e).__name__}: "
                      f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}")
        if verbose:
            print(f"n={n}: dense baselines (ms): " + ", ".join(f"{a} {b:.3f}" for a, b in base.items()))
            print(f"{'n':>6} {'pattern':>7} {'density':>8} {'tiles':>6} {'t_sparse':>9} {'t_full':>8} "
                  f"{'speedup':>8} {'ideal':>6} {'effic.':>7} {'t_flex':>8} {'sp/flex':>8} "
                  f"{'TFLOP/s':>8} {'cfg':>5} {'goal':>5}")
        for pattern in patterns:
            for rho in densities:
                mask = _pattern_mask(pattern, n, rho, granule, seed, dev)
                plan = plan_tiles(mask, block_q, block_k)  # built once, reused by every call
                t_sparse, nw, ns = best_of(q, k, v, plan)
                tile_density = plan.density
                row = {"n": n, "pattern": pattern, "density": float(mask.float().mean()),
                       "tile_density": tile_density, "t_sparse": t_sparse, "t_full": t_full,
                       "speedup": t_full / t_sparse, "ideal": 1.0 / tile_density, **base,
                       "efficiency": t_full / t_sparse * tile_density, "num_warps": nw,
                       "num_stages": ns,
                       "tflops": batch * heads * plan.flops(d) / (t_sparse * 1e-3) / 1e12}
                if have_flex:
                    try:
                        bmask = flex_block_mask_from_bool(mask, flex_block_q, flex_block_k, device=dev)
                        ref = flex_reference(q, k, v, block_mask=bmask, compiled=not dry_run)
                        ours = block_sparse_attention(q, k, v, plan, num_warps=nw, num_stages=ns)
                        err_flex = float((ours.float() - ref.float()).abs().max())
                        t_flex = timed(lambda: flex_reference(q, k, v, block_mask=bmask,
                                                              compiled=not dry_run))
                        row.update(err_vs_flex=err_flex, t_flex=t_flex,
                                   sparse_over_flex=t_sparse / t_flex,
                                   flex_speedup=row["t_flex_full"] / t_flex)
                    except Exception as e:  # noqa: BLE001 - the comparison is optional
                        print(f"  FlexAttention failed on this case: {type(e).__name__}")
                goal = []
                if rho >= 1 / 8 and rho < 1 and n >= 8192:
                    goal.append(row["efficiency"] >= 0.8)
                if "sparse_over_flex" in row and not dry_run:
                    goal.append(row["sparse_over_flex"] <= 1.25)
                row["meets_goal"] = all(goal) if goal else None
                rows.append(row)
                if verbose:
                    fl = (f"{row['t_flex']:8.3f} {row['sparse_over_flex']:8.2f}" if "t_flex" in row
                          else f"{'n/a':>8} {'n/a':>8}")
                    verdict = {True: "yes", False: "NO", None: "-"}[row["meets_goal"]]
                    print(f"{n:6d} {pattern:>7} {row['density']:8.4f} {tile_density:6.3f} "
                          f"{t_sparse:9.3f} {t_full:8.3f} {row['speedup']:8.2f} {row['ideal']:6.2f} "
                          f"{row['efficiency']:7.1%} {fl} {row['tflops']:8.1f} {nw}/{ns:<3} {verdict:>5}")
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if json_path:
        save_results({"schema": SCHEMA, "kind": "block_sparse", "dry_run": dry_run, **env,
                      "command": command, "config": meta, "rows": rows}, json_path)
        if verbose:
            print(f"wrote {json_path}")
    return rows


def _cannot_run_dry() -> Optional[str]:
    """Why the dry run (the same steps on the CPU, Triton's interpreter) cannot run here."""
    import importlib.util

    from ..kernels._interpret import requested

    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
        return "torch/triton missing"
    if not requested():
        return "a dry run needs TRITON_INTERPRET=1 (set before triton is imported)"
    return None


def _cannot_run() -> Optional[str]:
    """Why the benchmark cannot run here (None when it can): it needs torch, triton and a
    CUDA GPU with compiled (not interpreted) kernels."""
    import importlib.util

    from ..kernels._interpret import requested

    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
        return "torch/triton missing"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    if requested():
        return "TRITON_INTERPRET=1 is set (interpreter timings mean nothing)"
    return None

