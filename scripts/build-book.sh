#!/usr/bin/env bash
# Build the book: the README's "build the book" command.
#
#   bash scripts/build-book.sh           # build both editions (re-reads every page)
#   bash scripts/build-book.sh --clean   # also remove _build/html, _build/jupyter_execute, the
#                                        # Sphinx environment and the chapters' cache first
#
# On a fresh Debian / Ubuntu machine with Python 3.11 it creates .venv (scripts/setup-env.sh),
# makes sure of a CJK font (scripts/site.sh fonts: the Chinese edition's figures), then
#
#   python scripts/execute_chapters.py                   # every chapter, once, on every core,
#                                                        # into _build/.jupyter_cache
#   python scripts/zh.py site                            # the Chinese book's sources, with the
#                                                        # same outputs, in _build/zh-src
#   jupyter-book build . -W -n --keep-going --all        # the English book, from that cache,
#   jupyter-book build _build/zh-src -W -n --keep-going --all   # and, beside it on the other
#                                                        # core, the Chinese one -> _build/html/zh/
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
# a CJK font: the chapters' execution also draws every matplotlib figure with Chinese words,
# for the Chinese edition (attn_edu.i18n_outputs; Debian's fonts-wqy-microhei, installed
# with apt-get when missing and this user may)
bash scripts/site.sh fonts || echo "==> WARNING: no CJK font: the Chinese edition's matplotlib figures will show boxes for Chinese characters" >&2
# the "Results by GPU" page, both editions, from the recorded runs and every submitted folder
echo "==> python scripts/results_page.py"
"$VENV/bin/python" scripts/results_page.py
# every chapter executed once, on every core, into the build's cache (a chapter whose code and
# package did not change since the last build is not run again)
echo "==> python scripts/execute_chapters.py"
"$VENV/bin/python" scripts/execute_chapters.py
# The two editions are rendered side by side (a Sphinx build uses one core): the Chinese one
# from the chapters' cache filled above (scripts/zh.py site), so nothing is executed a second
# time. Its output goes to _build/zh-build.log and is shown after the English build's.
exec_done=$(date +%s)
echo "==> python scripts/zh.py site && jupyter-book build _build/zh-src -W -n --keep-going --all"
echo "    (the Chinese edition, beside the English one; its log: _build/zh-build.log)"
( set +e
  zh_start=$(date +%s)
  { "$VENV/bin/python" scripts/zh.py site && "$JB" build _build/zh-src -W -n --keep-going --all; } \
    > _build/zh-build.log 2>&1
  status=$?
  echo "$(( $(date +%s) - zh_start ))" > _build/zh-build.seconds
  exit "$status" ) &
zh_pid=$!
# (the last build's Chinese pages leave _build/html first: the English build's last step
# rewrites every page under its output folder)
rm -rf _build/html/zh
echo "==> jupyter-book build . -W -n --keep-going --all"
set +e
"$JB" build . -W -n --keep-going --all
status=$?
en_done=$(date +%s)
wait "$zh_pid"
zh_status=$?
set -e
echo "==> the Chinese edition's build log (_build/zh-build.log):"
cat _build/zh-build.log
elapsed=$(( en_done - start ))
if [[ $status -ne 0 ]]; then
  echo "==> book build FAILED (exit $status) after ${elapsed}s: see the warnings / notebook errors above" >&2
  exit "$status"
fi
if [[ $zh_status -ne 0 ]]; then
  echo "==> Chinese edition build FAILED (exit $zh_status): see the warnings above" >&2
  exit "$zh_status"
fi
mv _build/zh-src/_build/html _build/html/zh
echo "==> book built: English ${elapsed}s (chapters $(( exec_done - start ))s, pages $(( en_done - exec_done ))s);" \
     "the Chinese edition's pages $(cat _build/zh-build.seconds)s beside them, $(( $(date +%s) - en_done ))s after" \
     "the English ones were done; open $ROOT/_build/html/index.html"
