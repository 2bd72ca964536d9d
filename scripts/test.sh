#!/usr/bin/env bash
# Runs every test on a fresh Debian + Python 3.11 machine, no GPU needed:
#   bash scripts/test.sh            # everything (about 15 minutes on 2 cores once .venv exists)
#   bash scripts/test.sh -m "not slow and not notebooks and not browser"   # the fast loop
# Installs what is missing first: .venv (requirements.txt + attn_edu) and, for the browser
# test, Debian's chromium (with apt-get when run as root). The browser test builds the book
# itself and opens every page in headless Chromium with the network cut off; the live-
# explorer test drives a representative set of chapters in JupyterLab (all of them with
# ATTN_EDU_LIVE_CHAPTERS=all).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup-env.sh

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[test] installing Debian's chromium (and a CJK font for the glossary) for the browser test"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-microhei >/dev/null
  else
    echo "[test] chromium is missing: run 'sudo apt-get install -y chromium' (the browser test will fail)" >&2
  fi
fi

exec python -m pytest "$@"
