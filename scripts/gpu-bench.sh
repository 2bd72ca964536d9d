#!/usr/bin/env bash
# The GPU run: one command for a machine with a CUDA GPU (ours, or a reader's), under a
# deadline, most-needed steps first. The steps and their documents: scripts/gpu_run.py.
#
#   bash scripts/gpu-bench.sh --check               # first: is this machine ready? (minutes)
#   bash scripts/gpu-bench.sh [OUTDIR] [OPTIONS]    # the run: chapters (Run all), the T4 profile,
#                                                   # the measurements, the GPU tests, the sweeps
#   bash scripts/gpu-bench.sh --from STEP           # a second command: go on where one stopped
#   bash scripts/gpu-bench.sh --dry-run OUTDIR      # every step on the CPU, tiny sizes
#   bash scripts/gpu-bench.sh --list                # the steps, in order
#
# OPTIONS (python scripts/gpu_run.py --help): --deadline S (default 540, or
# $GPU_BENCH_DEADLINE; 0: none), --from STEP, --only STEP..., --chapters NN..., --out DIR.
# The documents (schema attn_edu.bench/1: device, versions, commit, date) go to
# attn_edu/data/bench/ (or OUTDIR): the sweeps where chapters 08, 10, 11 and 13 read them,
# the run's own (run/run_GPU.json, run/chapters_GPU.json, the executed chapters as
# run/executed_GPU.zip, run/gpu_tests_GPU.json) and the measurements (measure/) beside them.
# Each is written the moment its step ends, so a deadline leaves the earlier ones.
# When the checkout carries .colab-wheels/ (python scripts/colab_wheels.py), Colab's notebook
# stack is installed from it (pip --no-index) over this machine's torch and triton first.
#
# --check looks for what Triton needs at run time (a C compiler and Python's headers: it
# builds its kernel launcher on the first launch), the NVIDIA driver, the GPU's compute
# capability and free memory, then runs the GPU tests (pytest -m "triton or cuda"); each failure is
# printed with a fix. Without a GPU it says so and exits 1.
# The run never stops early: a missed goal, a point that runs out of memory, a chapter or a
# step that fails is recorded (in the JSON, with its reason) and the next step runs. The
# exit code is 1 when any step failed, was stopped or did not run.
# Every GPU step runs in the GPU's half type (bfloat16 from compute capability 8.0,
# float16 before: a T4), never float32, and compares with SDPA's best backend there.
# --dry-run runs the same pipeline on the CPU (Triton's interpreter, float32, n <= 128, the
# first cells of one chapter in the Colab stand-in) and marks every document "dry_run": true:
# it checks the pipeline, its numbers are CPU numbers. CI runs it and builds the chapters'
# figures from its output (tests/test_gpu_pipeline.py); ATTN_EDU_BENCH_DATA=OUTDIR makes the
# chapters read it.
#
# Python: $PYTHON if set, else the active virtual environment's ($VIRTUAL_ENV), else
# this checkout's .venv, else python3 -- never a bare `python` from PATH, which may be
# another interpreter without torch. Tests and benchmarks all run with that one.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -n "${PYTHON:-}" ]]; then
  PY=$PYTHON
elif [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
  PY=$VIRTUAL_ENV/bin/python
elif [[ -x .venv/bin/python ]]; then
  PY=$PWD/.venv/bin/python
else
  PY=$(command -v python3 || echo python3)
fi

check_machine() {  # --check: what a GPU owner runs first
  local bad=0
  ok()   { echo "  ok    $*"; }
  fail() { echo "  FAIL  $1"; echo "        fix: $2"; bad=1; }
  echo "==> checking this machine for the GPU benchmarks"
  echo "  python: $PY"
  if ! "$PY" -c "import sys; assert sys.version_info >= (3, 9)" 2>/dev/null; then
    fail "$PY is not a Python 3.9+ interpreter" "set PYTHON=/path/to/python (the one with torch)"
    echo "==> 1 or more checks failed"; return 1
  fi
  local torch_v triton_v cuda=False
  # one interpreter for torch's version and whether it sees a GPU (importing torch takes seconds)
  if torch_v=$("$PY" -c "import torch; print(torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.is_available())" \
      2>/dev/null); then
    cuda=${torch_v##* }; torch_v=${torch_v% *}
    ok "torch $torch_v"
    [[ $torch_v == *"CUDA None" ]] && fail "this torch is a CPU-only build" \
      "install a CUDA build of torch (pytorch.org/get-started/locally)"
  else
    fail "torch is not importable by $PY" "pip install -r requirements.txt (or set PYTHON to the python that has torch)"
  fi
  if triton_v=$("$PY" -c "import triton; print(triton.__version__)" 2>/dev/null); then
    ok "triton $triton_v"
  else
    fail "triton is not importable by $PY" "pip install triton (Linux only)"
  fi
  "$PY" -c "import pytest" 2>/dev/null && ok "pytest" || fail "pytest is not importable by $PY" \
    "pip install -r requirements.txt"
  # Triton compiles its launcher with $CC, else gcc, else clang, on the first launch
  local cc=${CC:-$(command -v gcc || command -v clang || command -v cc || true)}
  if [[ -n "$cc" ]] && command -v "$cc" >/dev/null; then ok "C compiler: $cc"; else
    cc=""; fail "no C compiler (gcc, clang or \$CC): Triton builds its kernel launcher with one at run time" \
      "sudo apt-get install -y build-essential (Debian/Ubuntu), or set CC"
  fi
  local inc
  inc=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  if [[ -f "$inc/Python.h" ]]; then
    ok "Python headers: $inc/Python.h"
    if [[ -n "$cc" ]] && ! printf '#include <Python.h>\nint main(void){return 0;}\n' \
        | "$cc" -fsyntax-only -I"$inc" -x c - 2>/dev/null; then
      fail "$cc cannot compile against $inc/Python.h" "install a working gcc (build-essential)"
    fi
  else
    fail "no Python.h in $inc: Triton's launcher includes it" \
      "sudo apt-get install -y python3-dev (for this Python: python$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-dev)"
  fi
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    ok "NVIDIA driver: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  else
    fail "nvidia-smi does not run: no NVIDIA driver or no GPU" \
      "install the NVIDIA driver; on Colab: Runtime > Change runtime type > T4 GPU"
  fi
  if [[ $cuda != True ]]; then
    echo "no CUDA GPU: torch.cuda.is_available() is False on this machine, so there is nothing to"
    echo "measure here. The GPU tests and benchmarks need an NVIDIA GPU (a T4, an A100, an H100);"
    echo "bash scripts/gpu-bench.sh --dry-run DIR checks the pipeline on the CPU."
    return 1
  fi
  "$PY" - <<'PYCHECK' || bad=1
import torch
from attn_edu.bench import best_sdpa_backend, gpu_half_dtype
cc = torch.cuda.get_device_capability()
name = torch.cuda.get_device_name()
half = gpu_half_dtype()
print(f"  ok    GPU: {name}, compute capability {cc[0]}.{cc[1]}; half type {half}; "
      f"SDPA's best backend: {best_sdpa_backend('cuda', half)}")
if cc < (7, 5):
    print("  FAIL  older than the T4 (sm_75), the oldest GPU the kernels are compiled and checked for")
    print("        fix: use a T4, an A100, an H100 or newer")
    raise SystemExit(1)
free, total = torch.cuda.mem_get_info()
gib = 2**30
if free < 4 * gib:
    print(f"  FAIL  {free / gib:.1f} of {total / gib:.1f} GiB free: the sweeps need about 4 GiB")
    print("        fix: stop the processes nvidia-smi lists on this GPU")
    raise SystemExit(1)
print(f"  ok    {free / gib:.1f} of {total / gib:.1f} GiB free (naive attention's points above that "
      "are recorded as out of memory)")
PYCHECK
  if [[ $bad -ne 0 ]]; then
    echo "==> 1 or more checks failed (above, each with its fix); the GPU tests were not run"
    return 1
  fi
  echo "==> GPU tests: $PY -m pytest -m \"triton or cuda\""
  if ! "$PY" -m pytest -m "triton or cuda" -q -p no:cacheprovider tests; then
    echo "==> GPU tests failed (above). Report them with the output of: nvidia-smi; $PY -m pip list"
    return 1
  fi
  echo "==> ready: bash scripts/gpu-bench.sh records the measurements (README: how long it takes)"
}

if [[ "${1:-}" == "--check" ]]; then
  check_machine
  exit $?
fi
# the run itself: scripts/gpu_run.py (OUTDIR as the first argument, as before, is --out OUTDIR)
args=()
if [[ "${1:-}" == "--dry-run" && -n "${2:-}" && "${2:-}" != -* ]]; then
  args=(--dry-run --out "$2"); shift 2
elif [[ -n "${1:-}" && "${1:-}" != -* ]]; then
  args=(--out "$1"); shift
fi
exec "$PY" scripts/gpu_run.py --python "$PY" "${args[@]}" "$@"
