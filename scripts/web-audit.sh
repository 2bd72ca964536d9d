#!/usr/bin/env bash
# Lighthouse audit of the built book, side by side with a fresh `jupyter-book create` page.
# A benchmark, not a test: the numbers depend on the machine (Lighthouse's simulated
# throttling still scales with the CPU it observes).
#
#   bash scripts/build-book.sh                 # first: the book in _build/html
#   bash scripts/web-audit.sh                  # every page, mobile and desktop profiles
#   bash scripts/web-audit.sh --pages 05 intro --profiles mobile   # a subset
#   bash scripts/web-audit.sh --json audit.json                    # rows as JSON too
#
# Installs Lighthouse (pinned below) from npm into .web-tools/lighthouse/ (git-ignored) when missing,
# serves _build/html from 127.0.0.1 with gzip and runs Lighthouse with the system Chromium
# (ATTN_EDU_CHROMIUM, default /usr/bin/chromium). See scripts/web_audit.py for the columns.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LIGHTHOUSE_VERSION=12.8.2
ATTN_EDU_SKIP_INSTALL="${ATTN_EDU_SKIP_INSTALL:-1}" source scripts/setup-env.sh
command -v node >/dev/null || { echo "web-audit.sh needs Node.js (20 or newer) and npm" >&2; exit 2; }
if [[ "$(node -p "try{require('./.web-tools/lighthouse/node_modules/lighthouse/package.json').version}catch(e){''}")" != "$LIGHTHOUSE_VERSION" ]]; then
  echo "==> npm install lighthouse@$LIGHTHOUSE_VERSION into .web-tools/lighthouse/"
  npm install --prefix .web-tools/lighthouse --no-audit --no-fund --loglevel=error --no-save "lighthouse@$LIGHTHOUSE_VERSION" >&2
fi
[[ -f _build/html/index.html ]] || { echo "no _build/html: run bash scripts/build-book.sh first" >&2; exit 2; }
exec python scripts/web_audit.py "$@"
