#!/usr/bin/env bash
# The README's test command. On a fresh Debian + Python 3.11 machine, no GPU needed:
#
#   bash scripts/test.sh           # everything, as CI runs it (.ci/run)
#   bash scripts/test.sh --fast    # the edit loop: unit tests and the Triton kernels under the
#                                  # interpreter; builds nothing, executes no chapter (-m "not slow")
#   bash scripts/test.sh ARGS...   # pytest with your arguments (a file, -k, -m ...)
#
# First it installs what is missing, as the publishing workflow does (scripts/site.sh tools):
# .venv (requirements.txt + attn_edu, with uv), a Chromium (Debian's headless shell where it
# can), a CJK font, axe-core (pinned).
# The whole suite runs on every core (pytest-xdist). Each chapter is executed once per
# environment: once in the book build, which is the publishing workflow's own build
# (tests/test_publish_workflow.py runs .github/workflows/book.yml's steps in a fresh checkout;
# its check step opens every page in headless Chromium, offline), and once in the Colab
# stand-in (tests/test_colab_standin.py: Colab's pins, no triton), whose executed chapters the
# other chapter checks read (tests/standin.py). CONTRIBUTING.md lists the markers and loops.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/site.sh tools
source scripts/setup-env.sh
# the browser the tools step found (Chromium's headless shell where it could install it) for
# every browser test, as the check step passes it to the page checks
ATTN_EDU_CHROMIUM=$(bash scripts/site.sh which-browser)
export ATTN_EDU_CHROMIUM

workers=(-n "${ATTN_EDU_TEST_WORKERS:-auto}")
if [[ "${1:-}" == "--fast" ]]; then
  shift
  exec python -m pytest "${workers[@]}" -m "not slow" "$@"
fi
if [[ $# -eq 0 ]]; then
  # the long runs first (tests/conftest.py orders them): the publishing job (one test: the book
  # build and every page's check) on one worker while the chapters run in the Colab stand-in;
  # an idle worker takes tests queued behind a long one (worksteal)
  exec python -m pytest "${workers[@]}" --dist worksteal
fi
exec python -m pytest "$@"
