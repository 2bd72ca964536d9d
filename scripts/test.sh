#!/usr/bin/env bash
# Runs every test on a fresh Debian + Python 3.11 machine, no GPU needed:
#   bash scripts/test.sh            # everything (about 15 minutes on 2 cores once .venv exists)
#   bash scripts/test.sh -m "not slow and not notebooks and not browser"   # the fast loop
# Installs what is missing first: .venv (requirements.txt + attn_edu) and, for the browser
# test, Debian's chromium (with apt-get when run as root) and the pinned axe-core (npm). The browser test builds the book
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

# axe-core for the browser test's accessibility check: pinned, from npm, into .web-tools/
# (git-ignored). Node.js and npm come with the machine (Debian: apt-get install nodejs npm).
AXE_CORE_VERSION=4.10.3
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[test] installing Debian's nodejs and npm (axe-core for the browser test)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
axe_pkg=.web-tools/axe/node_modules/axe-core/package.json
if ! grep -q "\"version\": \"$AXE_CORE_VERSION\"" "$axe_pkg" 2>/dev/null; then
  if command -v npm >/dev/null 2>&1; then
    echo "[test] npm install axe-core@$AXE_CORE_VERSION into .web-tools/axe (browser test)"
    npm install --prefix .web-tools/axe --no-audit --no-fund --loglevel=error --no-save \
      "axe-core@$AXE_CORE_VERSION" >/dev/null
  else
    echo "[test] npm is missing: install Node.js and npm (the browser test needs axe-core)" >&2
  fi
fi

# The whole suite (no arguments, as CI runs it): build the Colab tests' cached venvs (the
# stand-in took 8.5 minutes on a cold machine, Python 3.13's 2) in the background while the
# tests before them run; a test that needs one first waits for it (tests/venvs.py locks it).
if [[ $# -eq 0 ]]; then
  mkdir -p .web-tools
  echo "[test] building the Colab tests' venvs in the background (log: .web-tools/prebuild.log)"
  nice python tests/colab.py --prebuild > .web-tools/prebuild.log 2>&1 &
fi
exec python -m pytest "$@"
