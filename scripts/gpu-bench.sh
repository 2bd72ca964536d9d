#!/usr/bin/env bash
# Run every GPU measurement the book plots, on a machine with a CUDA GPU, and write the
# results as JSON (schema attn_edu.bench/1: device name, versions, commit, date) into
# attn_edu/data/bench/ (or OUTDIR; decode sweeps in its decode/). Commit those files:
# chapters 08, 10, 11 and 13 plot them, labelled with the device.
#
#   bash scripts/gpu-bench.sh --check               # first: is this machine ready? (minutes)
#   bash scripts/gpu-bench.sh [OUTDIR]              # then the measurements (README: how long)
#   bash scripts/gpu-bench.sh --dry-run OUTDIR      # every step on the CPU, tiny sizes
#
# --check looks for what Triton needs at run time (a C compiler and Python's headers: it
# builds its kernel launcher on the first launch), the NVIDIA driver, the GPU's compute
# capability and free memory, then runs the GPU tests (pytest -m "triton or cuda"); each failure is
# printed with a fix. Without a GPU it says so and exits 1.
# The run never stops early: a missed goal, a point that runs out of memory or a step
# that fails is recorded (in the JSON, with its reason; the exit code of every step in
# OUTDIR/gpu-bench.log) and the next step runs. The exit code is 1 when any step failed.
# Every GPU step runs in the GPU's half type (bfloat16 from compute capability 8.0,
# float16 before: a T4), never float32, and compares with SDPA's best backend there.
# --dry-run runs the same pipeline on the CPU (Triton's interpreter, float32, n <= 128)
# and marks every document "dry_run": true: it checks the pipeline, its numbers are
# CPU numbers. CI runs it and builds the chapters' figures from its output
# (tests/test_gpu_pipeline.py); ATTN_EDU_BENCH_DATA=OUTDIR makes the chapters read it.
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
  local torch_v
  if torch_v=$("$PY" -c "import torch; print(torch.__version__, 'CUDA', torch.version.cuda)" 2>/dev/null); then
    ok "torch $torch_v"
    [[ $torch_v == *"CUDA None" ]] && fail "this torch is a CPU-only build" \
      "install a CUDA build of torch (pytorch.org/get-started/locally)"
  else
    fail "torch is not importable by $PY" "pip install -r requirements.txt (or set PYTHON to the python that has torch)"
  fi
  if "$PY" -c "import triton" 2>/dev/null; then
    ok "triton $("$PY" -c "import triton; print(triton.__version__)")"
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
  if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
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
DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then
  DRY=1
  out=${2:?"usage: bash scripts/gpu-bench.sh --dry-run OUTDIR"}
  export TRITON_INTERPRET=1   # before anything imports triton
else
  out=${1:-attn_edu/data/bench}
fi
mkdir -p "$out"
log="$out/gpu-bench.log"
: > "$log"
failed=0
# A lease or a Colab session may end before the whole run does. GPU_BENCH_DEADLINE=S ends
# the run S seconds after it starts, GPU_BENCH_STEP_TIMEOUT=S ends any one step after S
# seconds: a step that is stopped writes no JSON, and the log records it as "exit=124"
# (stopped) or "skipped: out of time"; the steps come most-needed first.
start_s=$SECONDS
step() {  # step NAME COMMAND...: run it, record its exit code, never abort
  local name=$1; shift
  local limit=${GPU_BENCH_STEP_TIMEOUT:-0}
  if [[ -n "${GPU_BENCH_DEADLINE:-}" ]]; then
    local left=$(( GPU_BENCH_DEADLINE - (SECONDS - start_s) ))
    if (( left < 10 )); then
      echo "==> $name: skipped, out of time"; echo "$name skipped: out of time" >> "$log"
      failed=1; return 0
    fi
    (( limit == 0 || left < limit )) && limit=$left
  fi
  echo "==> $name"
  local t0=$SECONDS
  if (( limit > 0 )); then timeout "$limit" "$@"; else "$@"; fi
  local rc=$?
  local lim=""; (( limit > 0 )) && lim="limit ${limit}s, "
  echo "$name exit=$rc (${lim}took $(( SECONDS - t0 ))s)" >> "$log"
  [[ $rc -eq 0 ]] || { echo "    ($name exited with $rc: recorded, going on)"; failed=1; }
  return 0
}

if [[ $DRY -eq 1 ]]; then
  gpu=dry-run-cpu
  DEV=(--device cpu --dtype float32 --batch 1 --heads 1)
  NS=(32 64); NS_CAUSAL=(64); DS=(16); REP=(--repeat 2 --warmup 1)
  BLOCKS=(--block-q 16 --block-k 16)
  GOALS=(--goals --dry-run --goal-n 256)
  SPARSE=(--block-sparse --dry-run --n 64 --d 16 --heads 1 --block-q 16 --block-k 16
          --flex-block-q 16 --flex-block-k 16 --densities 1.0 0.5 --patterns window)
  DRYFLAG=(--dry-run)
  SDPA_IMPLS=(torch_sdpa_flash torch_sdpa_efficient torch_sdpa_math)
  SDPA_BEST=torch_sdpa_flash
  DECODE="contexts=(64,), batches=(1,), heads=2, kv_heads=1, d=16, dtype='float32', device='cpu', repeat=2, warmup=1"
else
  if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "no CUDA GPU: nothing to measure (bash scripts/gpu-bench.sh --dry-run DIR checks the pipeline)"
    exit 1
  fi
  gpu=$("$PY" -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
  dt=$("$PY" -c "from attn_edu.bench import gpu_half_dtype; print(gpu_half_dtype())")  # never float32
  # the SDPA backends that run here in that dtype, best first (no flash on a T4)
  read -r -a SDPA_IMPLS <<< "$("$PY" -c "from attn_edu.bench import sdpa_backends
print(' '.join('torch_sdpa_' + b for b in sdpa_backends('cuda', '$dt')))")"
  [[ ${#SDPA_IMPLS[@]} -gt 0 ]] || SDPA_IMPLS=(torch_sdpa_math)  # the probe failed: the rows will say why
  SDPA_BEST=${SDPA_IMPLS[0]}
  DEV=(--device cuda --dtype "$dt" --batch 4 --heads 16)
  NS=(1024 2048 4096 8192 16384); NS_CAUSAL=(4096 8192 16384); DS=(64 128); REP=(--repeat 20 --warmup 3)
  BLOCKS=(--block-q 128 --block-k 128)
  GOALS=(--goals)
  SPARSE=(--block-sparse --n 8192 16384)
  DRYFLAG=()
  DECODE="dtype='$dt'"
fi

sweep() {  # sweep D: every implementation over NS at head dimension D, with peak memory
  step "sweep d=$1" "$PY" -m attn_edu.bench "${DEV[@]}" --d "$1" --n "${NS[@]}" \
    --impl triton "${SDPA_IMPLS[@]}" torch_naive torch_flash \
    "${BLOCKS[@]}" --memory "${REP[@]}" --no-progress "${DRYFLAG[@]}" \
    --out "$out/gpu_${gpu}_d$1.json"
}
# Most-needed first (a deadline cuts from the end): correctness, the first head dimension's
# sweep (chapters 08 and 10), the goals, causal, decode (chapter 13), block-sparse
# (chapter 11), then the other head dimensions.
step "correctness: every kernel against float64, in the GPU's half type" "$PY" -m attn_edu.bench \
  --correctness "${DRYFLAG[@]}"
sweep "${DS[0]}"
step "goals (ratios measured side by side)" "$PY" -m attn_edu.bench "${GOALS[@]}" \
  --out "$out/goals_${gpu}.json"
step "causal sweep" "$PY" -m attn_edu.bench "${DEV[@]}" --d "${DS[0]}" --causal --n "${NS_CAUSAL[@]}" \
  --impl triton "$SDPA_BEST" "${REP[@]}" --no-progress "${DRYFLAG[@]}" \
  --out "$out/gpu_${gpu}_d${DS[0]}_causal.json"
mkdir -p "$out/decode"
step "decoding (L_q = 1): split-KV Triton kernel vs SDPA over the KV-cache length" "$PY" -c \
  "from attn_edu import bench; bench.save_results(bench.decode_sweep($DECODE), '$out/decode/decode_${gpu}.json')"
step "block-sparse kernel vs dense and FlexAttention" "$PY" -m attn_edu.bench "${SPARSE[@]}" \
  --out "$out/block_sparse_${gpu}.json"
for D in "${DS[@]:1}"; do sweep "$D"; done
echo "==> done ($log):"
cat "$log"
[[ $DRY -eq 1 ]] || echo "    git add $out && git commit"
exit $failed
