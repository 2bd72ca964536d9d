#!/usr/bin/env bash
# Build the book: the README's "build the book" command.
#
#   bash scripts/build-book.sh           # build both editions (re-reads every page)
#   bash scripts/build-book.sh --clean   # also remove _build/html, _build/jupyter_execute, the
#                                        # Sphinx environment and the chapters' cache first
#
# On a fresh Debian / Ubuntu machine with Python 3.11 it creates .venv (scripts/setup-env.sh),
# then
#
#   python scripts/execute_chapters.py                   # every chapter, once, on every core,
#                                                        # into _build/.jupyter_cache
#   jupyter-book build . -W -n --keep-going --all        # the English book, from that cache
#   python scripts/zh.py site                            # the Chinese book's sources, with the
#   jupyter-book build _build/zh-src -W -n --keep-going --all   # same outputs -> _build/html/zh/
#
# A chapter is executed again only when its code or the package changed. `--all` makes Sphinx
# re-read every page: an incremental build would skip unchanged pages, and with them their
# warnings, so a second run after a failing one would "succeed". Any Sphinx warning, broken
# reference or failing notebook cell makes this script exit non-zero. The HTML ends up in
# _build/html/ (and _build/html/zh/).
#
# Environment variables (PYTHON, VENV, ATTN_EDU_SKIP_INSTALL): see scripts/setup-env.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"

clean=0
for arg in "$@"; do
  case "$arg" in
    --clean) clean=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build-book.sh: unknown argument: $arg (use --clean)" >&2; exit 2 ;;
  esac
done

source scripts/setup-env.sh   # .venv with requirements.txt and attn_edu

JB="$VENV/bin/jupyter-book"
[[ -x "$JB" ]] || JB="$(command -v jupyter-book || true)"
[[ -n "$JB" ]] || { echo "jupyter-book not found; run without ATTN_EDU_SKIP_INSTALL" >&2; exit 1; }

if [[ "$clean" == 1 ]]; then
  echo "==> removing _build/html, _build/jupyter_execute, _build/.doctrees, _build/zh-src and the chapters' and formulas' caches"
  rm -rf _build/html _build/jupyter_execute _build/.doctrees _build/zh-src _build/.jupyter_cache _build/.jupyter_cache.sources _build/.katex_cache.json
fi

# The kernels that execute the notebooks must import the package from this checkout.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# (Do not set MPLBACKEND: the kernels need matplotlib's inline backend to emit figures.)
unset MPLBACKEND

start=$(date +%s)
# every chapter executed once, on every core, into the build's cache (a chapter whose code and
# package did not change since the last build is not run again)
echo "==> python scripts/execute_chapters.py"
"$VENV/bin/python" scripts/execute_chapters.py
echo "==> jupyter-book build . -W -n --keep-going --all"
set +e
"$JB" build . -W -n --keep-going --all
status=$?
set -e
elapsed=$(( $(date +%s) - start ))
if [[ $status -ne 0 ]]; then
  echo "==> book build FAILED (exit $status) after ${elapsed}s: see the warnings / notebook errors above" >&2
  exit "$status"
fi
echo "==> English edition built in ${elapsed}s (chapters executed, then rendered)"

# The Chinese edition, under _build/html/zh/: its chapters carry the outputs of the English
# build above (scripts/zh.py site), so nothing is executed a second time.
zh_start=$(date +%s)
"$VENV/bin/python" scripts/zh.py site >/dev/null
echo "==> jupyter-book build _build/zh-src -W -n --keep-going --all   (the Chinese edition)"
set +e
"$JB" build _build/zh-src -W -n --keep-going --all
status=$?
set -e
if [[ $status -ne 0 ]]; then
  echo "==> Chinese edition build FAILED (exit $status): see the warnings above" >&2
  exit "$status"
fi
rm -rf _build/html/zh
mv _build/zh-src/_build/html _build/html/zh
zh_elapsed=$(( $(date +%s) - zh_start ))
echo "==> book built: English ${elapsed}s, Chinese ${zh_elapsed}s; open $ROOT/_build/html/index.html"
