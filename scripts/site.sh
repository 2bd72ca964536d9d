#!/usr/bin/env bash
# The site's steps, one copy for everyone: the publishing workflow (.github/workflows/book.yml)
# calls them step by step, scripts/test.sh (CI, the README's test command) installs its tools
# with them, and tests/test_publish_workflow.py runs the workflow's steps as written.
#
#   bash scripts/site.sh tools      # = venv + browser + fonts + axe (each below)
#   bash scripts/site.sh venv       # .venv with requirements.txt and attn_edu (scripts/setup-env.sh)
#   bash scripts/site.sh browser    # a Chromium the browser tests can drive (prints its path)
#   bash scripts/site.sh which-browser  # only its path (scripts/test.sh passes it to the tests)
#   bash scripts/site.sh fonts      # a CJK font (the glossary's Chinese column, and the Chinese pages)
#   bash scripts/site.sh axe        # axe-core, pinned, from npm into .web-tools/axe
#   bash scripts/site.sh build      # the book (scripts/build-book.sh: executes every chapter, -W -n)
#   bash scripts/site.sh check      # the built site: repository URLs, every page offline in Chromium
#   bash scripts/site.sh package    # _build/html is a complete site: index.html and every page of _toc.yml
#
# The same commands on a fresh Debian machine as root (apt-get) and on GitHub's Ubuntu runner
# (sudo apt-get; its image ships Google Chrome, which the browser step finds). A tool that is
# already there is not installed again. Each step exits non-zero with the reason when it
# cannot do its job.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

AXE_CORE_VERSION=4.10.3
AXE_JS=.web-tools/axe/node_modules/axe-core/axe.min.js

say() { echo "[site] $*"; }
die() { echo "[site] $*" >&2; exit 1; }

# apt-get as root, or through sudo without a password (GitHub's runner); else say what to run.
apt_install() {
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=(sudo); else
      die "need root to install $*: run 'sudo apt-get install -y $*'"
    fi
  fi
  command -v apt-get >/dev/null 2>&1 || die "no apt-get here: install $* with this system's package manager"
  if [[ -z "${_SITE_APT_UPDATED:-}" ]]; then
    "${sudo[@]}" apt-get update -qq
    _SITE_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
}

# The browser the tests drive: $ATTN_EDU_CHROMIUM, else Chromium's headless shell, else
# Chromium, else Google Chrome (GitHub's Ubuntu image ships it; Ubuntu's "chromium" package is
# only a snap wrapper). The headless shell is the same Chromium (same Blink and V8) without the
# windowing layer of the full browser: what Playwright itself runs headless, and ~15% less CPU
# for the page checks (bash scripts/site.sh check: 356 against 421 busy CPU-s, 2 cores).
find_browser() {
  local b
  for b in "${ATTN_EDU_CHROMIUM:-}" chromium-headless-shell chromium chromium-browser google-chrome google-chrome-stable; do
    [[ -n "$b" ]] || continue
    b=$(command -v "$b" 2>/dev/null) || continue
    "$b" --version >/dev/null 2>&1 && { echo "$b"; return 0; }
  done
  return 1
}

step_venv() {
  source scripts/setup-env.sh
  say "venv: $VENV ($("$VENV/bin/python" --version))"
}

step_browser() {
  local b=""
  b=$(find_browser) || b=""
  # on Debian: its chromium-headless-shell package (also beside a full Chromium, when this user
  # may install; else the browser found is used as it is)
  if [[ -z "${ATTN_EDU_CHROMIUM:-}" && "$b" != *chromium-headless-shell ]] \
      && grep -qi '^ID=debian' /etc/os-release 2>/dev/null \
      && { [[ "$(id -u)" == 0 ]] || sudo -n true 2>/dev/null; }; then
    say "installing Debian's chromium-headless-shell"
    if apt_install chromium-headless-shell; then b=$(find_browser) || b=""; else say "could not install it"; fi
  fi
  if [[ -z "$b" ]]; then
    grep -qi '^ID=debian' /etc/os-release 2>/dev/null \
      && die "no browser: apt-get install -y chromium-headless-shell (or chromium) as root" \
      || die "no Chromium or Google Chrome found: install one, or set ATTN_EDU_CHROMIUM to its path"
  fi
  say "browser: $b ($("$b" --version 2>/dev/null))"
}

step_fonts() {
  if command -v fc-list >/dev/null 2>&1 && [[ -n "$(fc-list :lang=zh family 2>/dev/null)" ]]; then
    say "CJK font: $(fc-list :lang=zh family | head -1)"
    return 0
  fi
  say "installing a CJK font (fonts-wqy-microhei)"
  apt_install fonts-wqy-microhei fontconfig
  [[ -n "$(fc-list :lang=zh family 2>/dev/null)" ]] || die "no CJK font after installing fonts-wqy-microhei"
}

step_axe() {
  if grep -q "\"version\": \"$AXE_CORE_VERSION\"" .web-tools/axe/node_modules/axe-core/package.json 2>/dev/null; then
    say "axe-core $AXE_CORE_VERSION: $AXE_JS"
    return 0
  fi
  if ! command -v npm >/dev/null 2>&1; then
    say "installing Node.js and npm (for axe-core)"
    apt_install nodejs npm
  fi
  say "npm install axe-core@$AXE_CORE_VERSION into .web-tools/axe"
  npm install --prefix .web-tools/axe --no-audit --no-fund --loglevel=error --no-save \
    "axe-core@$AXE_CORE_VERSION" >/dev/null
  [[ -f "$AXE_JS" ]] || die "npm did not install $AXE_JS"
}

step_build() {
  bash scripts/build-book.sh "$@"
}

step_check() {
  source scripts/setup-env.sh
  local b
  b=$(find_browser) || die "no browser: run 'bash scripts/site.sh browser' first"
  [[ -f "$AXE_JS" ]] || die "axe-core is missing ($AXE_JS): run 'bash scripts/site.sh axe' first"
  [[ -f _build/html/index.html ]] || die "_build/html/index.html is missing: run 'bash scripts/site.sh build' first"
  say "repository URL is the same everywhere"
  "$VENV/bin/python" scripts/set_repo_url.py --check
  say "every page, offline, in $b"
  ATTN_EDU_BOOK_BUILT=1 ATTN_EDU_CHROMIUM="$b" ATTN_EDU_AXE="$ROOT/$AXE_JS" \
    "$VENV/bin/python" -m pytest -p no:cacheprovider -n "${ATTN_EDU_CHECK_WORKERS:-auto}" \
      -m pages tests/test_book_browser.py tests/test_zh_site.py "$@"
}

step_package() {
  source scripts/setup-env.sh
  "$VENV/bin/python" scripts/site_pages.py _build/html
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
case "$cmd" in
  tools) step_venv; step_browser; step_fonts; step_axe ;;
  venv|browser|fonts|axe|build|check|package) "step_$cmd" "$@" ;;
  which-browser) find_browser || die "no browser: run 'bash scripts/site.sh browser' first" ;;
  *) sed -n '2,17p' "$0"; [[ -z "$cmd" || "$cmd" == -h || "$cmd" == --help ]] && exit 0; exit 2 ;;
esac
