"""Is a benchmark document (or a run's folder) a valid, plausible measurement? ``validate``.

``python -m attn_edu.bench validate FILE_OR_FOLDER ...`` prints one line per problem, the
file, a JSON pointer into it and what is wrong, and exits 1 when there is any. Three layers:

1. **The schema** (``attn_edu/data/schema/bench.schema.json``, :data:`SCHEMA_FILE`, checked
   with ``jsonschema``): every kind's fields and types, row by row.
2. **Plausibility** against the GPU's datasheet (:func:`attn_edu.bench.gpu_spec`, the table
   :data:`attn_edu.decoding.GPU_TABLE`): no row's TFLOP/s above the dense 16-bit peak, no
   bandwidth above the memory's, no peak memory above the device's. A GPU the table does
   not know gets a note (its numbers are not checked), not a rejection.
3. **A measurement, not a test:** ``dry_run`` must be false (a dry run's numbers are CPU
   numbers), and the commit clean (``git_dirty`` false: the numbers belong to a commit
   anyone can check out). The maintainers' runs recorded before this rule existed are
   grandfathered by commit, in the explicit list :data:`GRANDFATHERED_DIRTY`; nothing else is.

A folder holding ``submission.json`` is a submission (one run, :mod:`attn_edu.bench.submission`):
besides every document in it, it must hold a correctness document (the kernels checked
against float64 on that GPU) whose verdict the manifest repeats, and list every document.
Any other folder: each ``*.json`` under it is checked as a document.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Union

from .published import gpu_spec

__all__ = ["SCHEMA_FILE", "GRANDFATHERED_DIRTY", "Problem", "validate_document", "validate_path",
           "validate_main"]

#: The JSON Schema of every ``attn_edu.bench/1`` document kind (package data).
SCHEMA_FILE = Path(__file__).resolve().parent.parent / "data" / "schema" / "bench.schema.json"
#: Commits whose documents may say ``git_dirty: true``, the maintainers' recordings made
#: before submissions were validated (commit -> what was recorded from it). Add nothing here.
GRANDFATHERED_DIRTY: Dict[str, str] = {
    "c2ef7af9d02510a7cf9faa63ddbd8d55aeaad730":
        "the maintainers' H100 run of 2026-11-26 (attn_edu/data/bench/), recorded from a working tree "
        "with uncommitted changes, before this rule",
}
#: How far above a datasheet figure a measurement may be (boost clocks above the rated one).
SLACK = 1.05


class Problem(NamedTuple):
    """One thing wrong: the file, a JSON pointer into it ("" for the whole) and what.
    ``fatal`` False: a note (e.g. a GPU without datasheet figures), not a rejection."""

    path: str
    pointer: str
    message: str
    fatal: bool = True

    def __str__(self) -> str:
        return f"{self.path}:{self.pointer or '/'}: {'' if self.fatal else 'note: '}{self.message}"


@lru_cache(maxsize=1)
def _validator():
    try:
        import jsonschema
    except ImportError:
        raise ImportError("validating documents needs jsonschema: pip install jsonschema") from None
    schema = json.loads(SCHEMA_FILE.read_text())
    return jsonschema.Draft202012Validator(schema)


def _pointer(parts: Iterable[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _schema_problems(doc: Any, where: str) -> List[Problem]:
    out = []
    for err in sorted(_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        leaves = [err]
        while leaves and any(e.context for e in leaves):  # allOf/if-then: report the innermost reason
            leaves = [c for e in leaves for c in (e.context or [e])]
        for e in leaves:
            out.append(Problem(where, _pointer(e.absolute_path), e.message))
    seen, unique = set(), []
    for p in out:
        if (p.pointer, p.message) not in seen:
            seen.add((p.pointer, p.message))
            unique.append(p)
    return unique


def _rows(doc: Dict[str, Any]):
    for key in ("results", "rows"):
        for i, row in enumerate(doc.get(key) or []):
            if isinstance(row, dict):
                yield f"/{key}/{i}", row


def _plausibility(doc: Dict[str, Any], where: str) -> List[Problem]:
    dev = doc.get("device") or {}
    if dev.get("kind") != "cuda" or doc.get("dry_run"):
        return []
    spec = gpu_spec(str(dev.get("name", "")))
    if spec is None:
        return [Problem(where, "/device/name", f"no datasheet figures for {dev.get('name')!r} in "
                        "attn_edu.decoding.GPU_TABLE: its numbers are not checked for plausibility", fatal=False)]
    out = []
    gpu = f"the {spec['name']}'s"
    for ptr, row in _rows(doc):
        tf = row.get("tflops")
        if isinstance(tf, (int, float)) and tf > spec["tflops"] * SLACK:
            out.append(Problem(where, ptr + "/tflops", f"{tf:.1f} TFLOP/s is above {gpu} dense 16-bit peak, "
                               f"{spec['tflops']:.0f} TFLOP/s [{spec['cite']}]: not a possible measurement"))
        bw = row.get("gb_per_s")
        if isinstance(bw, (int, float)) and bw > spec["tb_per_s"] * 1e3 * SLACK:
            out.append(Problem(where, ptr + "/gb_per_s", f"{bw:.0f} GB/s is above {gpu} memory bandwidth, "
                               f"{spec['tb_per_s'] * 1e3:.0f} GB/s [{spec['cite']}]"))
        peak = row.get("peak_bytes")
        mem = dev.get("memory_bytes") or spec["memory_gb"] * 1e9
        if isinstance(peak, int) and peak > mem:
            out.append(Problem(where, ptr + "/peak_bytes", f"{peak} bytes is more than the device's memory, "
                               f"{int(mem)} bytes"))
    return out


def validate_document(doc: Any, where: str = "<document>") -> List[Problem]:
    """Every problem of one document: schema, plausibility, dry run, dirty commit."""
    out = _schema_problems(doc, where)
    if not isinstance(doc, dict):
        return out
    if doc.get("dry_run") is True:
        out.append(Problem(where, "/dry_run", "a dry run (the pipeline on the CPU; its numbers are CPU "
                           "numbers): not a measurement to submit"))
    if doc.get("git_dirty") is True and doc.get("git_commit") not in GRANDFATHERED_DIRTY:
        out.append(Problem(where, "/git_dirty", f"measured from a working tree with uncommitted changes "
                           f"(commit {str(doc.get('git_commit'))[:12]}): commit, then run again"))
    out += _plausibility(doc, where)
    return out


def _load(path: Path) -> "tuple[Any, List[Problem]]":
    try:
        return json.loads(path.read_text()), []
    except (OSError, ValueError) as err:
        return None, [Problem(str(path), "", f"not readable JSON: {err}")]


def _submission_problems(folder: Path) -> List[Problem]:
    where = str(folder / "submission.json")
    manifest, out = _load(folder / "submission.json")
    if out or not isinstance(manifest, dict):
        return out
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.json") if p.name != "submission.json")
    listed = manifest.get("documents") if isinstance(manifest.get("documents"), list) else []
    for f in sorted(set(files) - set(listed)):
        out.append(Problem(where, "/documents", f"{f} is in the folder but not listed"))
    for f in sorted(set(listed) - set(files)):
        out.append(Problem(where, "/documents", f"{f} is listed but not in the folder"))
    checks = []
    for f in files:
        doc, _ = _load(folder / f)
        if isinstance(doc, dict) and doc.get("kind") == "correctness":
            checks.append((f, doc))
    if not checks:
        out.append(Problem(where, "", "no correctness document (kind 'correctness'): a submission must carry "
                           "the kernels' check against float64 on its GPU (python -m attn_edu.bench "
                           "--correctness --out correctness.json, the run's 'correctness' step)"))
    else:
        verdict = "passed" if all(d.get("passed") is True for _, d in checks) else "failed"
        if manifest.get("correctness") != verdict:
            out.append(Problem(where, "/correctness", f"says {manifest.get('correctness')!r}; the correctness "
                               f"document{'s' if len(checks) > 1 else ''} ({', '.join(f for f, _ in checks)}) "
                               f"say {verdict!r}"))
    return out


def validate_path(path: Union[str, Path]) -> List[Problem]:
    """Problems of a file, or of every ``*.json`` under a folder (and, for a submission
    folder, the folder's own rules). A missing path is one problem."""
    path = Path(path)
    if path.is_dir():
        out: List[Problem] = []
        for f in sorted(path.rglob("*.json")):
            out += validate_path(f)
        if (path / "submission.json").is_file():
            out += _submission_problems(path)
        elif not any(path.rglob("*.json")):
            out.append(Problem(str(path), "", "no *.json documents in this folder"))
        return out
    if not path.is_file():
        return [Problem(str(path), "", "no such file or folder")]
    doc, out = _load(path)
    return out or validate_document(doc, str(path))


def validate_main(argv: Sequence[str], stream=None) -> int:
    """``python -m attn_edu.bench validate PATH ...``: print the problems; 1 when any is fatal."""
    import sys

    stream = stream or sys.stdout
    if not argv:
        print("usage: python -m attn_edu.bench validate FILE_OR_FOLDER ...", file=stream)
        return 2
    problems = [p for a in argv for p in validate_path(a)]
    for p in problems:
        print(p, file=stream)
    fatal = sum(p.fatal for p in problems)
    print(f"{len(argv)} path(s): {'OK' if not fatal else f'{fatal} problem(s)'}"
          + (f", {len(problems) - fatal} note(s)" if len(problems) > fatal else ""), file=stream)
    return int(bool(fatal))
