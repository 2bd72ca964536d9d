#!/usr/bin/env bash
# Run every GPU measurement the book plots, on a machine with a CUDA GPU, and write the
# results as JSON (schema attn_edu.bench/1: device name, versions, commit, date) into
# attn_edu/data/bench/ (or OUTDIR; decode sweeps in its decode/). Commit those files:
# chapters 08, 10, 11 and 13 plot them, labelled with the device.
#
#   bash scripts/gpu-bench.sh [OUTDIR]              # about 10-15 minutes on an H100
#   bash scripts/gpu-bench.sh --dry-run OUTDIR      # every step on the CPU, tiny sizes
#
# The run never stops early: a missed goal, a point that runs out of memory or a step
# that fails is recorded (in the JSON, with its reason; the exit code of every step in
# OUTDIR/gpu-bench.log) and the next step runs. The exit code is 1 when any step failed.
# --dry-run runs the same pipeline on the CPU (Triton's interpreter, float32, n <= 128)
# and marks every document "dry_run": true: it checks the pipeline, its numbers are
# CPU numbers. CI runs it and builds the chapters' figures from its output
# (tests/test_gpu_pipeline.py); ATTN_EDU_BENCH_DATA=OUTDIR makes the chapters read it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python}
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
step() {  # step NAME COMMAND...: run it, record its exit code, never abort
  local name=$1; shift
  echo "==> $name"
  "$@"
  local rc=$?
  echo "$name exit=$rc" >> "$log"
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
  DECODE="contexts=(64,), batches=(1,), heads=2, kv_heads=1, d=16, dtype='float32', device='cpu', repeat=2, warmup=1"
else
  if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "no CUDA GPU: nothing to measure (bash scripts/gpu-bench.sh --dry-run DIR checks the pipeline)"
    exit 1
  fi
  gpu=$("$PY" -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
  dt=$("$PY" -c "from attn_edu.bench import default_dtype; print(default_dtype())")
  DEV=(--device cuda --dtype "$dt" --batch 4 --heads 16)
  NS=(1024 2048 4096 8192 16384); NS_CAUSAL=(4096 8192 16384); DS=(64 128); REP=(--repeat 20 --warmup 3)
  BLOCKS=(--block-q 128 --block-k 128)
  GOALS=(--goals)
  SPARSE=(--block-sparse --n 8192 16384)
  DRYFLAG=()
  DECODE="dtype='$dt'"
  step "correctness (larger shapes and bf16 run on CUDA)" "$PY" -m pytest -q \
    tests/test_triton_flash.py tests/test_block_sparse_triton.py tests/test_flash.py \
    tests/test_reference_torch.py tests/test_triton_decode.py
fi

step "goals (ratios measured side by side)" "$PY" -m attn_edu.bench "${GOALS[@]}" \
  --out "$out/goals_${gpu}.json"
for D in "${DS[@]}"; do
  step "sweep d=$D" "$PY" -m attn_edu.bench "${DEV[@]}" --d "$D" --n "${NS[@]}" \
    --impl triton torch_sdpa_flash torch_sdpa_efficient torch_sdpa_math torch_naive torch_flash \
    "${BLOCKS[@]}" --memory "${REP[@]}" --no-progress "${DRYFLAG[@]}" \
    --out "$out/gpu_${gpu}_d${D}.json"
done
step "causal sweep" "$PY" -m attn_edu.bench "${DEV[@]}" --d "${DS[0]}" --causal --n "${NS_CAUSAL[@]}" \
  --impl triton torch_sdpa_flash "${REP[@]}" --no-progress "${DRYFLAG[@]}" \
  --out "$out/gpu_${gpu}_d${DS[0]}_causal.json"
step "block-sparse kernel vs dense and FlexAttention" "$PY" -m attn_edu.bench "${SPARSE[@]}" \
  --out "$out/block_sparse_${gpu}.json"
mkdir -p "$out/decode"
step "decoding (L_q = 1): split-KV Triton kernel vs SDPA over the KV-cache length" "$PY" -c \
  "from attn_edu import bench; bench.save_results(bench.decode_sweep($DECODE), '$out/decode/decode_${gpu}.json')"
echo "==> done ($log):"
cat "$log"
[[ $DRY -eq 1 ]] || echo "    git add $out && git commit"
exit $failed
