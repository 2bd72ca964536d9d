#!/usr/bin/env python3
"""Execute the chapters once, on every core, into the book build's cache.

    python scripts/execute_chapters.py [--jobs N]

The book build (``execute_notebooks: cache`` in ``_config.yml``) renders a chapter from
jupyter-cache's record when its code cells match, and executes it otherwise. This runs the
executions first, ``N`` chapters at a time (default: the machine's cores), as myst-nb would:
the chapter's folder as working directory, ``timeout`` and ``allow_errors`` from
``_config.yml``, the environment the build's kernels get (``ATTN_EDU_BOOK_BUILD=1``, this
checkout on ``PYTHONPATH``), and ``ATTN_EDU_RENDER_ZH=1``: each matplotlib figure is also drawn
with its words in Chinese, kept in its output's metadata for the Chinese book. Then ``jupyter-book build`` only renders, and the Chinese
edition reads the same records (scripts/zh.py ``site``).

jupyter-cache matches on code cells only, so a change to the package alone would leave a
stale record: the cache is emptied whenever what an execution reads of attn_edu (its code, its
data, the compiled catalogs), requirements.txt or pyproject.toml change (a hash of them is kept
beside it, :data:`STAMP`; :func:`sources_files` says which files). The catalogs' sources (``.po``)
are not read: gettext reads the ``.mo`` compiled from each (tests/test_i18n.py and
tests/test_i18n_outputs.py hold each ``.mo`` to its ``.po``), so an edit of a ``.po`` that leaves
its ``.mo`` as it was (``zh_outputs.py extract``'s new empty entries, a comment) re-executes nothing.
Every ``.mo`` is read: the Chinese drawings (matplotlib figures, an explorer's stand-in) look
their words up in all the output catalogs, the chapter's own first
(``attn_edu.i18n_outputs.catalog``), so a new translation in any of them re-executes the chapters.

Exits 1 naming the chapter when one fails (with its traceback); the others still run.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"
STAMP = CACHE.parent / ".jupyter_cache.sources"


#: the files of attn_edu that no execution reads: the catalogs' sources, which gettext reads
#: compiled (the ``.mo`` beside each ``.po``) and the template ``pybabel extract`` writes
NOT_READ_SUFFIXES = (".po", ".pot", ".pyc")


def sources_files(root: Path = ROOT) -> list:
    """What a chapter's outputs depend on beside its own code: the files of attn_edu an
    execution reads (all but :data:`NOT_READ_SUFFIXES`) and the pins."""
    files = [p for p in sorted((root / "attn_edu").rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts and p.suffix not in NOT_READ_SUFFIXES]
    return files + [root / "requirements.txt", root / "pyproject.toml"]


def sources_hash(root: Path = ROOT) -> str:
    """A hash of :func:`sources_files`: their paths and bytes."""
    h = hashlib.sha256()
    for p in sources_files(root):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def fresh_cache():
    """The build's jupyter-cache, emptied first when the package or the pins changed."""
    from jupyter_cache import get_cache

    want = sources_hash()
    if CACHE.exists() and (not STAMP.exists() or STAMP.read_text() != want):
        print("[execute] attn_edu or the pins changed: emptying the chapters' cache")
        shutil.rmtree(CACHE)
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    STAMP.write_text(want)
    return get_cache(str(CACHE))


def _execute(path: str, timeout: int, allow_errors: bool) -> tuple:
    """In a worker process: run one chapter as myst-nb does; return (path, notebook, seconds, error)."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    nb = nbformat.read(path, as_version=4)
    # the chapter's own catalog first in what its kernel translates (the Chinese drawings:
    # attn_edu.i18n_outputs.CHAPTER_ENV), as scripts/zh.py site does for its other outputs
    os.environ["ATTN_EDU_CHAPTER"] = Path(path).name[:2]
    # coalesce_streams: a line printed in two pieces (a busy machine's kernel may send its
    # stdout in two messages) stays one line; myst-nb's own merge ends every piece with a
    # newline ("online:" and its numbers on two lines in chapter 09, the Chinese page's
    # lookup then finding neither)
    result = single_nb_execution(nb, cwd=str(Path(path).parent), timeout=timeout,
                                 allow_errors=allow_errors, meta_override=True, coalesce_streams=True)
    return path, nb, result.time, (result.exc_string if result.err is not None else None)


def main(argv=None) -> int:
    import yaml
    from jupyter_cache.base import CacheBundleIn

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    execute = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["execute"]
    os.environ["ATTN_EDU_BOOK_BUILD"] = "1"     # what the build's extension sets for its kernels
    # every matplotlib figure also drawn with Chinese words, for the Chinese book (scripts/zh.py
    # site swaps it in; attn_edu.i18n_outputs.figure_renders): one execution serves both
    os.environ["ATTN_EDU_RENDER_ZH"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.environ.pop("MPLBACKEND", None)
    cache = fresh_cache()
    import nbformat

    todo, chapters = [], sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for path in chapters:
        try:
            cache.match_cache_notebook(nbformat.read(path, as_version=4))
        except KeyError:
            todo.append(path)
    print(f"[execute] {len(todo)} chapters to run, {args.jobs} at a time "
          f"({len(chapters) - len(todo)} already in the cache)", flush=True)
    failed, start = [], time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(_execute, str(path), int(execute.get("timeout", 300)),
                               bool(execute.get("allow_errors", False))) for path in todo]
        for fut in as_completed(futures):
            path, nb, seconds, error = fut.result()
            name = Path(path).name
            if error:
                failed.append(name)
                print(f"[execute] {name} FAILED after {seconds:.0f} s:\n{error}", flush=True)
                continue
            stage = cache.add_nb_to_project(path)
            cache.cache_notebook_bundle(CacheBundleIn(nb, stage.uri, data={"execution_seconds": seconds}),
                                        check_validity=False, overwrite=True)
            print(f"[execute] {name} in {seconds:.0f} s", flush=True)
    print(f"[execute] done in {time.perf_counter() - start:.0f} s", flush=True)
    if failed:
        print(f"[execute] failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
