"""The kernels against the float64 reference in the GPU's half type: ``--correctness``.

:func:`gpu_correctness` is the first step of ``scripts/gpu-bench.sh``: the forward
(non-causal, causal, bottom-right), both backward schedules, the split-KV decode and the
block-sparse kernel, each at one shape on the GPU, in :func:`~attn_edu.bench.gpu_half_dtype`
(float16 on a T4, bfloat16 from compute capability 8.0) and never float32, whose exact
products compile slow, spilling configurations for minutes. Each is held to the
tolerance rule of :mod:`attn_edu.testing` (the backward to 3x). ``dry_run=True`` runs the
same cases at tiny shapes on the CPU through Triton's interpreter (float16).
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from .env import gpu_half_dtype

__all__ = ["gpu_correctness", "correctness_document"]


def _case(name: str, dtype: str, check: Callable[[], float]) -> Dict[str, Any]:
    try:
        return {"case": name, "dtype": dtype, "max_error": check(), "passed": True}
    except Exception as err:  # a failed check is recorded, the others still run
        return {"case": name, "dtype": dtype, "passed": False,
                "error": f"{type(err).__name__}: {str(err)[:300]}"}


def _shape(dry_run: bool) -> Tuple[int, int, int, int]:
    return (1, 2, 48, 16) if dry_run else (2, 4, 1000, 64)  # (B, H, L, d); L: not a multiple of any tile


def correctness_document(records: List[Dict[str, Any]], dry_run: bool = False,
                         command: Optional[str] = None) -> Dict[str, Any]:
    """The ``correctness`` document of :func:`gpu_correctness`'s records (``--correctness
    --out FILE``): the device, versions and commit, the shape and dtype, every case and
    ``passed`` (all of them). A submission must carry one (``attn_edu.bench.validate``)."""
    from .env import environment
    from .sweep import SCHEMA

    if not records or not all(isinstance(r, dict) and "passed" in r for r in records):
        raise ValueError(f"records must be gpu_correctness's non-empty list of cases; got {records!r:.200}")
    B, H, L, D = _shape(dry_run)
    env = environment("cpu" if dry_run else "cuda")
    return {"schema": SCHEMA, "kind": "correctness", "dry_run": bool(dry_run), **env, "command": command,
            "config": {"batch": B, "heads": H, "n": L, "d": D, "dtype": records[0]["dtype"],
                       "rule": "max|impl - float64| <= 2 max|naive - float64| + tiny (gradients 3x)"},
            "results": records, "passed": all(r["passed"] is True for r in records)}


def gpu_correctness(device: str = "cuda", dtype: Optional[str] = None, dry_run: bool = False,
                    stream=None) -> Tuple[List[Dict[str, Any]], int]:
    """Check every Triton kernel against float64 at one shape; print a line per case.

    Returns (records, exit code: 1 when a case failed). ``dtype`` defaults to
    :func:`~attn_edu.bench.gpu_half_dtype` of ``device``; ``dry_run=True`` uses the CPU
    (``TRITON_INTERPRET=1`` must be set before triton is imported) and tiny shapes.
    """
    import torch

    from .. import reference_torch
    from ..kernels import block_sparse_triton, decode_triton, flash_triton
    from ..masks import plan_tiles, sliding_window_mask
    from ..testing import assert_close_to_reference, reference_pair

    stream = stream or sys.stdout
    device = "cpu" if dry_run else device
    dtype = dtype or gpu_half_dtype(device)
    dt = getattr(torch, dtype)
    B, H, L, D = _shape(dry_run)
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device, dt)

    def ref(q, k, v, **kw):  # (float64 gold, same-dtype naive) of the reference
        return reference_pair(q, k, v, **kw)

    q, k, v = rand(B, H, L, D), rand(B, H, L + 7, D), rand(B, H, L + 7, D)
    records = []
    for causal in (False, True, "bottom_right"):
        def forward(causal=causal):
            out = flash_triton.triton_attention_forward(q, k, v, causal=causal)[0]
            return assert_close_to_reference(out, *ref(q, k, v, causal=causal))
        records.append(_case(f"forward causal={causal}", dtype, forward))
    dout = rand(B, H, L, D)
    for mode in flash_triton.BACKWARDS:
        def backward(mode=mode):
            mine = [x.clone().requires_grad_() for x in (q, k, v)]
            flash_triton.triton_attention(*mine, causal=True, backward=mode).backward(dout)
            gold = [x.double().requires_grad_() for x in (q, k, v)]
            naive = [x.clone().requires_grad_() for x in (q, k, v)]
            reference_torch.scaled_dot_product_attention(*gold, causal=True).backward(dout.double())
            reference_torch.scaled_dot_product_attention(*naive, causal=True).backward(dout)
            return max(assert_close_to_reference(a.grad, g.grad, n.grad, factor=3.0, what=name)
                       for name, a, g, n in zip(("dq", "dk", "dv"), mine, gold, naive))
        records.append(_case(f"backward {mode}", dtype, backward))

    def decode():
        qd, kd, vd = rand(B, 2 * H, 1, D), rand(B, H, 4 * L, D), rand(B, H, 4 * L, D)  # grouped heads
        out = decode_triton.split_kv_decode(qd, kd, vd, enable_gqa=True)
        return assert_close_to_reference(out, *ref(qd, kd, vd, enable_gqa=True))
    records.append(_case("split-KV decode", dtype, decode))

    def block_sparse():
        mask = torch.as_tensor(sliding_window_mask(L, L // 4, causal=True), device=device)  # (L, L)
        block = 16 if dry_run else 64
        out = block_sparse_triton.block_sparse_attention(q, k[..., :L, :], v[..., :L, :],
                                                         plan_tiles(mask, block, block))
        return assert_close_to_reference(out, *ref(q, k[..., :L, :], v[..., :L, :], mask=mask))
    records.append(_case("block-sparse (sliding window)", dtype, block_sparse))

    where = "DRY RUN on the CPU (Triton interpreter)" if dry_run else torch.cuda.get_device_name()
    print(f"kernels against float64, {dtype}, B={B} H={H} L={L} d={D}, {where}:", file=stream)
    for r in records:
        status = "PASS" if r["passed"] else "FAIL"
        got = f"max error {r['max_error']:.2e}" if r["passed"] else r["error"]
        print(f"  {status} {r['case']:30s} {got}", file=stream)
    return records, int(not all(r["passed"] for r in records))
