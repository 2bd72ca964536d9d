"""A fabricated second GPU's run for tests: a T4-like folder (float16 only, no torch_naive),
made from the recorded H100 sweeps with the T4's name and times scaled to its datasheet; and
its decode sweep (chapter 13), the H100's scaled to the T4's memory bandwidth."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from attn_edu.bench.decode import DECODE_DIR
from attn_edu.bench.sweep import DATA_DIR

T4_COMMIT = "1234567890abcdef1234567890abcdef12345678"


T4_DEVICE = {"kind": "cuda", "name": "Tesla T4", "cuda": "12.2", "memory_bytes": 15828320256}


def t4_document(src: str, scale: float = 65 / 989 / 2) -> dict:
    """A recorded H100 document as a T4 would have written it (fabricated, for tests only)."""
    doc = copy.deepcopy(json.loads((DATA_DIR / src).read_text()))
    doc.update(device=dict(T4_DEVICE), git_commit=T4_COMMIT, git_dirty=False,
               date="2026-12-01T10:00:00+00:00", measured_by="submitted")
    doc.get("config", {})["dtype"] = "float16"
    rows = [r if not (r.get("peak_bytes") or 0) > 15e9 else  # does not fit a T4's 15 GB
            {"impl": r["impl"], "n": r["n"], "error": "OutOfMemoryError: (fabricated)", "reason": "out_of_memory"}
            for r in doc.get("results", []) if r.get("impl") != "torch_naive"]
    for r in rows:
        for key in ("median_ms", "min_ms"):
            if key in r:
                r[key] /= scale
        if "times_ms" in r:
            r["times_ms"] = [t / scale for t in r["times_ms"]]
        if r.get("tflops"):
            r["tflops"] *= scale
    if "results" in doc:
        doc["results"] = rows
        doc.get("skipped", {}).pop("torch_naive", None)
    return doc


def correctness_doc(passed: bool = True) -> dict:
    doc = t4_document("gpu_NVIDIA_H100_80GB_HBM3_d64.json")
    cases = [{"case": "forward causal=False", "dtype": "float16", "max_error": 1e-3, "passed": True},
             {"case": "split-KV decode", "dtype": "float16", **({"max_error": 2e-4, "passed": True} if passed
                                                                 else {"error": "AssertionError: x", "passed": False})}]
    for key in ("config", "results", "skipped", "repeat", "warmup", "interleave", "flop_formula", "sdpa_backend"):
        doc.pop(key, None)
    doc.update(kind="correctness", command="python -m attn_edu.bench --correctness --out c.json",
               config={"batch": 2, "heads": 4, "n": 1000, "d": 64, "dtype": "float16"}, results=cases, passed=passed)
    return doc


def write_t4_run(out: Path, correct: bool = True) -> Path:
    """The T4-like run's documents in ``out`` (a run's --out folder, as gpu_run writes it)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("gpu_NVIDIA_H100_80GB_HBM3_d64.json", "gpu_NVIDIA_H100_80GB_HBM3_d128.json",
                 "gpu_NVIDIA_H100_80GB_HBM3_d64_causal.json"):
        (out / name.replace("NVIDIA_H100_80GB_HBM3", "Tesla_T4")).write_text(json.dumps(t4_document(name)))
    (out / "correctness_Tesla_T4.json").write_text(json.dumps(correctness_doc(correct)))
    return out


def t4_decode_document(scale: float = 320 / 3350) -> dict:
    """The recorded H100 decode sweep as a T4 would have written it (fabricated, for tests
    only): float16, every time divided by ``scale`` (the T4's 320 GB/s over the H100's 3.35 TB/s)."""
    (src,) = sorted(DECODE_DIR.glob("decode_*H100*.json"))
    doc = json.loads(src.read_text())
    doc.update(device=dict(T4_DEVICE), git_commit=T4_COMMIT, git_dirty=False,
               date="2026-12-01T10:05:00+00:00", measured_by="submitted")
    doc["config"]["dtype"] = "float16"
    for r in doc["results"]:
        for key in ("median_ms", "min_ms", "graph_median_ms"):   # host_median_ms: the CPU's, kept
            if r.get(key):
                r[key] /= scale
        if r.get("gb_per_s"):
            r["gb_per_s"] *= scale
    return doc


def write_t4_decode(out: Path) -> Path:
    """The T4-like decode sweep where a run writes it: ``out/decode/decode_Tesla_T4.json``."""
    path = out / "decode" / "decode_Tesla_T4.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(t4_decode_document()))
    return path
