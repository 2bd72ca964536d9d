"""validate, submissions and the GPU table (issue 44). Seconds: no GPU, no chapter run."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("jsonschema")  # validate's schema check (requirements.txt; not a package dependency)

from attn_edu.bench import document_label, gpu_spec  # noqa: E402
from attn_edu.bench.submission import SUBMISSIONS_DIR, make_submission, submitted_runs  # noqa: E402
from attn_edu.bench.sweep import DATA_DIR  # noqa: E402
from attn_edu.bench.validate import GRANDFATHERED_DIRTY, validate_document, validate_main, validate_path  # noqa: E402
from attn_edu.decoding import GPU_TABLE, match_gpu  # noqa: E402

from fake_runs import write_t4_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H100_D64 = json.loads((DATA_DIR / "gpu_NVIDIA_H100_80GB_HBM3_d64.json").read_text())


def _fatal(problems):
    return [str(p) for p in problems if p.fatal]


def test_the_recorded_h100_run_is_accepted(capsys):
    assert validate_main([str(DATA_DIR)]) == 0, capsys.readouterr().out
    # ... and only because its commit is grandfathered: the same files from another commit are not
    assert H100_D64["git_dirty"] is True and H100_D64["git_commit"] in GRANDFATHERED_DIRTY
    other = {**H100_D64, "git_commit": "f" * 40}
    assert any("/git_dirty: measured from a working tree with uncommitted changes" in p
               for p in _fatal(validate_document(other, "x.json")))


@pytest.mark.parametrize("plant, pointer, words", [
    (lambda d: d["results"][2].update(tflops=1500.0), "/results/2/tflops", "above the H100 SXM's dense 16-bit peak"),
    (lambda d: d.update(dry_run=True), "/dry_run", "a dry run"),
    (lambda d: d["results"][1].update(n="1024"), "/results/1/n", "is not of type 'integer'"),
    (lambda d: d["results"][0].pop("median_ms"), "/results/0", "'median_ms' is a required property"),
    (lambda d: d["results"][0].update(peak_bytes=10**12), "/results/0/peak_bytes", "more than the device's memory"),
])
def test_a_planted_problem_is_rejected_with_its_place_and_reason(plant, pointer, words):
    doc = copy.deepcopy(H100_D64)
    plant(doc)
    problems = _fatal(validate_document(doc, "x.json"))
    assert len(problems) == 1 and problems[0].startswith(f"x.json:{pointer}: ") and words in problems[0], problems


def test_the_peak_rule_is_the_gpus_own():
    """1500 TFLOP/s is impossible on an H100 and 100 on a T4; 60 on a T4 passes."""
    t4 = {**copy.deepcopy(H100_D64), "device": {"kind": "cuda", "name": "Tesla T4"}, "git_dirty": False}
    t4["results"] = [dict(t4["results"][0], tflops=60.0), dict(t4["results"][1], tflops=100.0)]
    problems = _fatal(validate_document(t4, "t4.json"))
    assert len(problems) == 1 and "/results/1/tflops: 100.0 TFLOP/s" in problems[0] and "T4" in problems[0]
    unknown = {**t4, "device": {"kind": "cuda", "name": "Some Future GPU"}}
    notes = validate_document(unknown, "u.json")
    assert not _fatal(notes) and any("no datasheet figures" in str(p) for p in notes)


def test_a_t4_run_becomes_a_valid_submission_folder(tmp_path):
    out = write_t4_run(tmp_path / "out")
    folder = make_submission(out, tmp_path / "subs")
    assert re.fullmatch(r"Tesla_T4_20261201T100000_1234567", folder.name)
    assert make_submission(out, tmp_path / "subs").name == folder.name + "-2"   # never over the first
    assert _fatal(validate_path(folder)) == []
    run, _ = submitted_runs(tmp_path / "subs")
    assert run["manifest"]["correctness"] == "passed" and len(run["documents"]) == 4
    assert all(d["measured_by"] == "submitted" for d in run["documents"])
    assert "submitted, not reproduced" in document_label(run["documents"][0])
    assert "读者提交" in document_label(run["documents"][0], lang="zh")


def test_a_submission_without_correctness_or_with_a_wrong_verdict_is_rejected(tmp_path):
    out = write_t4_run(tmp_path / "out", correct=False)
    folder = make_submission(out, tmp_path / "subs")
    assert json.loads((folder / "submission.json").read_text())["correctness"] == "failed"
    assert _fatal(validate_path(folder)) == []   # a failed check is a valid record, marked failed
    manifest = json.loads((folder / "submission.json").read_text())
    (folder / "submission.json").write_text(json.dumps({**manifest, "correctness": "passed"}))
    assert any("/correctness: says 'passed'" in p for p in _fatal(validate_path(folder)))
    (folder / "correctness_Tesla_T4.json").unlink()
    (folder / "submission.json").write_text(json.dumps(
        {**manifest, "documents": [d for d in manifest["documents"] if "correctness" not in d]}))
    problems = _fatal(validate_path(folder))
    assert len(problems) == 1 and "no correctness document" in problems[0], problems
    with pytest.raises(ValueError, match="no correctness document"):
        (out / "correctness_Tesla_T4.json").unlink()
        make_submission(out, tmp_path / "subs")


def test_every_submitted_folder_in_the_repository_is_valid():
    folders = sorted(p.parent for p in SUBMISSIONS_DIR.glob("*/submission.json"))
    problems = [str(p) for f in folders for p in validate_path(f) if p.fatal]
    assert problems == []
    stray = [p for p in SUBMISSIONS_DIR.iterdir() if p.is_dir() and p not in folders]
    assert stray == [], f"folders without submission.json: {stray}"


NAMES = {"NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 PCIe": "H100 PCIe", "NVIDIA H200": "H200",
         "NVIDIA A100-SXM4-80GB": "A100 SXM 80GB", "NVIDIA A100-SXM4-40GB": "A100 SXM 40GB",
         "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB", "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
         "Tesla V100-SXM2-16GB": "V100 SXM2", "Tesla V100-PCIE-32GB": "V100 PCIe", "Tesla T4": "T4",
         "NVIDIA L4": "L4", "NVIDIA A10G": "A10G", "NVIDIA GeForce RTX 4090": "RTX 4090",
         "NVIDIA GeForce RTX 3090": "RTX 3090", "NVIDIA GeForce RTX 4080": None, "AMD EPYC 7B13": None}


def test_device_names_match_their_datasheet_and_every_source_is_cited():
    assert {name: match_gpu(name) for name in NAMES} == NAMES
    bib = (ROOT / "book" / "references.bib").read_text()
    assert all(f"{{{g.source}," in bib for g in GPU_TABLE.values())
    assert gpu_spec("Tesla T4")["tflops"] == 65 and gpu_spec("NVIDIA H200")["tb_per_s"] == 4.8
    with pytest.raises(TypeError, match="device_name"):
        match_gpu(None)
