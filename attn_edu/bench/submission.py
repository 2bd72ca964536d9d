"""A reader's GPU run as one folder: ``attn_edu/data/submissions/<gpu>_<date>_<sha7>/``.

:func:`make_submission` copies every document of a run (``bash scripts/gpu-bench.sh
--submission`` calls it at the end) into a new folder named by the GPU, the run's UTC date
and time and the commit (so two runs never collide; a folder that exists gets a suffix),
marks each document ``measured_by`` (``"submitted"`` for a reader, ``"maintainers"`` for
ours) and writes the manifest ``submission.json``: the GPU, the commit, the documents and the
correctness verdict (``"passed"``/``"failed"``). A run whose correctness step failed is kept,
marked so, and never tabled as a speed (:func:`submitted_runs`). :mod:`attn_edu.bench.validate`
checks the folder; the book's "Results by GPU" page reads every folder with :func:`submitted_runs`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from .sweep import DATA_DIR, SCHEMA

__all__ = ["SUBMISSIONS_DIR", "MEASURED_BY", "submission_name", "make_submission", "submitted_runs", "measured_by"]

#: Where submitted runs live, one folder each (package data).
SUBMISSIONS_DIR = DATA_DIR.parent / "submissions"
#: Who measured a document, its ``measured_by`` field.
MEASURED_BY = ("maintainers", "submitted")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_") or "unknown"


def submission_name(doc: Dict[str, Any]) -> str:
    """``<gpu>_<YYYYMMDDTHHMMSS>_<sha7>`` of a run's document (its device, date, commit)."""
    date = re.sub(r"[^0-9T]", "", str(doc.get("date", "")))[:15] or "nodate"
    sha = str(doc.get("git_commit") or "nocommit")[:7]
    return f"{_slug(str(doc.get('device', {}).get('name', 'unknown')))}_{date}_{sha}"


def make_submission(out: Union[str, Path], root: Union[str, Path, None] = None,
                    measured_by: str = "submitted") -> Path:
    """Copy the run in ``out`` (every ``*.json`` document under it, not the logs or the
    executed notebooks' zip) into a new folder under ``root`` (default
    :data:`SUBMISSIONS_DIR`), each marked ``measured_by``; write ``submission.json``.
    Returns the folder. ValueError when ``out`` holds no documents or no correctness one
    and the run cannot be a submission."""
    if measured_by not in MEASURED_BY:
        raise ValueError(f"measured_by must be one of {', '.join(MEASURED_BY)}; got {measured_by!r}")
    out = Path(out)
    docs = {}
    for f in sorted(out.rglob("*.json")):
        try:
            doc = json.loads(f.read_text())
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("schema") == SCHEMA and doc.get("kind") != "submission":
            docs[str(f.relative_to(out))] = doc
    if not docs:
        raise ValueError(f"out: no attn_edu.bench/1 documents under {out}")
    checks = [d for d in docs.values() if d.get("kind") == "correctness"]
    if not checks:
        raise ValueError(f"out: no correctness document under {out}: run the 'correctness' step "
                         "(bash scripts/gpu-bench.sh --only correctness --submission)")
    first = next((d for d in docs.values() if d.get("device", {}).get("kind") == "cuda"), checks[0])
    root = Path(root or SUBMISSIONS_DIR)
    name = submission_name(first)
    folder, i = root / name, 2
    while folder.exists():
        folder, i = root / f"{name}-{i}", i + 1
    for rel, doc in docs.items():
        dest = folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps({**doc, "measured_by": measured_by}, indent=1) + "\n")
    keys = ("dry_run", "device", "versions", "platform", "git_commit", "git_dirty", "date")
    manifest = {"schema": SCHEMA, "kind": "submission", **{k: first.get(k) for k in keys},
                "measured_by": measured_by, "gpu": first.get("device", {}).get("name"),
                "correctness": "passed" if all(d.get("passed") is True for d in checks) else "failed",
                "documents": sorted(docs)}
    (folder / "submission.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return folder


def submitted_runs(root: Union[str, Path, None] = None) -> List[Dict[str, Any]]:
    """Every submission folder under ``root`` (default :data:`SUBMISSIONS_DIR`): a list of
    ``{"folder", "manifest", "documents"}`` (each document with ``source``, its path, and
    ``measured_by``). A run whose correctness failed has
    ``manifest["correctness"] == "failed"``: show it as such, never its speeds."""
    root = Path(root or SUBMISSIONS_DIR)
    runs = []
    for manifest_path in sorted(root.glob("*/submission.json")) if root.is_dir() else []:
        manifest = json.loads(manifest_path.read_text())
        folder = manifest_path.parent
        documents = []
        for rel in manifest.get("documents", []):
            doc = json.loads((folder / rel).read_text())
            doc.setdefault("kind", "sweep")
            documents.append({**doc, "source": str(folder / rel)})
        runs.append({"folder": str(folder), "manifest": manifest, "documents": documents})
    return runs


def measured_by(doc: Dict[str, Any]) -> Optional[str]:
    """``"maintainers"``, ``"submitted"`` or None (a document that does not say)."""
    who = doc.get("measured_by")
    return who if who in MEASURED_BY else None
