# Sourced by scripts/build-book.sh and scripts/test.sh: makes .venv with everything the
# book build and the tests need (requirements.txt, attn_edu in editable mode) on a fresh
# Debian + Python 3.11 machine. Reinstalls only when requirements.txt or pyproject.toml
# changed since the last install, so later runs take a second.
#   PYTHON=python3.11          interpreter used to create .venv (default: python3)
#   VENV=.venv                 where the virtual environment lives
#   ATTN_EDU_SKIP_INSTALL=1    use the environment as it is
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
if [[ "${ATTN_EDU_SKIP_INSTALL:-0}" != "1" ]]; then
  if [[ ! -x "$VENV/bin/python" ]]; then
    echo "==> creating $VENV"
    "${PYTHON:-python3}" -m venv "$VENV" || {
      echo "python3 -m venv failed; on Debian/Ubuntu: sudo apt-get install -y python3-venv" >&2
      exit 1
    }
  fi
  stamp="$VENV/.attn-edu-installed"
  want="$(cat "$ROOT/requirements.txt" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "==> installing requirements.txt and attn_edu (editable) into $VENV"
    # uv installs the rest in seconds (scripts/pyinstall.py: it also says where torch comes
    # from: its CPU build where there is no NVIDIA GPU); pip only fetches uv itself
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check uv \
      || echo "==> could not install uv: installing with pip (slower)"
    # a current pip too: the tests install attn_edu with it as a reader's first cell does
    # ("attn_edu @ git+file://..."), which the pip that venv ships (23.2) refuses
    "$VENV/bin/python" "$ROOT/scripts/pyinstall.py" --python "$VENV/bin/python" --upgrade pip
    # without what scripts/pyinstall.py's LEFT_OUT lists (rfc3987-syntax: 1.7 CPU-s of import
    # in every kernel and Jupyter process, for a format check nothing here uses)
    "$VENV/bin/python" "$ROOT/scripts/pyinstall.py" --python "$VENV/bin/python" -r "$ROOT/requirements.txt" \
      $("$VENV/bin/python" "$ROOT/scripts/pyinstall.py" --left-out)
    "$VENV/bin/python" "$ROOT/scripts/pyinstall.py" --python "$VENV/bin/python" --no-deps -e "$ROOT"
    echo "$want" > "$stamp"
  fi
fi
export PATH="$VENV/bin:$PATH"
