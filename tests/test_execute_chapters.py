"""scripts/execute_chapters.py's cache key: the chapters run again when what an execution
reads changes (the package's code and data, every compiled catalog the Chinese drawings look
words up in), and not for a catalog's source (``.po``), which no execution reads."""
from __future__ import annotations

import builtins
import gettext
import shutil
from pathlib import Path

import pytest

import execute_chapters
from venvs import REPO

from attn_edu import i18n, i18n_outputs

LC = Path("attn_edu") / "locale" / "zh_CN" / "LC_MESSAGES"


def _read_at_execution(monkeypatch) -> set:
    """The files under attn_edu/locale that the lookups an English execution makes open:
    each chapter's Chinese drawings (``i18n_outputs.catalog`` with the chapter the execution
    names, as figure_renders and an explorer's stand-in use it; no chapter, as a kernel
    without one) and the package's Chinese strings (alt text, an explorer's note)."""
    opened, real_open = set(), builtins.open

    def tracing_open(file, *args, **kwargs):
        path = Path(file).resolve() if isinstance(file, (str, Path)) else None
        if path is not None and i18n.LOCALE_DIR in path.parents:
            opened.add(path)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", tracing_open)
    monkeypatch.setattr(i18n_outputs, "_merged", {})  # nothing read before counts as read now
    monkeypatch.setattr(i18n, "_catalogs", {})
    monkeypatch.setattr(gettext, "_translations", {})  # gettext.translation's own cache
    for chapter in [None] + [p.name[:2] for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))]:
        if chapter is None:
            monkeypatch.delenv(i18n_outputs.CHAPTER_ENV, raising=False)
        else:
            monkeypatch.setenv(i18n_outputs.CHAPTER_ENV, chapter)
        assert i18n_outputs.catalog("zh")
    i18n.translate("Figure", "zh")
    monkeypatch.setattr(builtins, "open", real_open)
    return opened


def test_every_catalog_an_execution_reads_is_in_the_key(monkeypatch):
    read = _read_at_execution(monkeypatch)
    mo = {p.resolve() for p in (REPO / LC).glob("*.mo")}
    assert (REPO / LC / "outputs_fig.mo").resolve() in read and read <= mo, sorted(read)
    assert read == mo  # every compiled catalog: the drawings fall back on every chapter's
    key = {p.resolve() for p in execute_chapters.sources_files()}
    assert read <= key, sorted(read - key)
    assert not any(p.suffix in (".po", ".pot") for p in key)  # never read: no reason to run again


def _tree(tmp_path: Path) -> Path:
    """A checkout's files the key reads: a module, the catalogs (source and compiled), pins."""
    root = tmp_path / "checkout"
    (root / LC).mkdir(parents=True)
    (root / "attn_edu" / "__init__.py").write_text("x = 1\n")
    for name in ("outputs_fig", "outputs_05", "outputs", "attn_edu"):
        for suffix in (".po", ".mo"):
            shutil.copy(REPO / LC / f"{name}{suffix}", root / LC / f"{name}{suffix}")
    for name in ("requirements.txt", "pyproject.toml"):
        (root / name).write_text(name)
    return root


def test_the_key_changes_with_a_compiled_catalog_and_not_with_a_source(tmp_path):
    root = _tree(tmp_path)
    first = execute_chapters.sources_hash(root)
    with open(root / LC / "outputs_05.po", "a", encoding="utf-8") as f:  # extract's new entry
        f.write('\n#. 05:abcd1234\nmsgid "a new line"\nmsgstr ""\n')
    assert execute_chapters.sources_hash(root) == first
    for name in ("outputs_fig.mo", "outputs_05.mo", "outputs.mo", "attn_edu.mo"):
        path = root / LC / name
        before = path.read_bytes()
        path.write_bytes(before + b"\0")
        assert execute_chapters.sources_hash(root) != first, name
        path.write_bytes(before)
    assert execute_chapters.sources_hash(root) == first
    (root / "attn_edu" / "__init__.py").write_text("x = 2\n")
    assert execute_chapters.sources_hash(root) != first


def test_a_line_printed_in_two_messages_stays_one_line(tmp_path):
    """The kernel sends stdout in as many messages as it flushes; the execution joins a
    cell's pieces as they were printed (myst-nb's merge would end each with a newline)."""
    nbformat = pytest.importorskip("nbformat")
    for module in ("jupyter_cache", "ipykernel"):  # the execution's own tools (not in a NumPy-only install)
        pytest.importorskip(module)

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        'import sys, time\nprint("online:", end=" ", flush=True)\ntime.sleep(0.5)\nprint("[1. 2.]  direct: [1. 2.]")')]
    path = tmp_path / "split.ipynb"
    nbformat.write(nb, path)
    _, executed, _, error = execute_chapters._execute(str(path), 60, False)
    assert error is None, error
    streams = [o for o in executed.cells[0].outputs if o["output_type"] == "stream"]
    assert [o["text"] for o in streams] == ["online: [1. 2.]  direct: [1. 2.]\n"], streams
