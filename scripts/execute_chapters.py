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
stale record: the cache is emptied whenever attn_edu, its data, requirements.txt or
pyproject.toml change (a hash of them is kept beside it, :data:`STAMP`).

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


def sources_hash() -> str:
    """What a chapter's outputs depend on beside its own code: the package and the pins."""
    h = hashlib.sha256()
    files = [p for p in sorted((ROOT / "attn_edu").rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    for p in files + [ROOT / "requirements.txt", ROOT / "pyproject.toml"]:
        h.update(str(p.relative_to(ROOT)).encode())
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
    result = single_nb_execution(nb, cwd=str(Path(path).parent), timeout=timeout,
                                 allow_errors=allow_errors, meta_override=True)
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
