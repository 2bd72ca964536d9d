#!/usr/bin/env bash
# Run every GPU measurement the book plots, on a machine with a CUDA GPU, and write the
# results as JSON (device name, versions, commit, date) into attn_edu/data/bench/.
# Commit those files: chapters 08, 10, 11 and 13 plot them, labelled with the device.
#
#   bash scripts/gpu-bench.sh            # about 10-15 minutes on an H100
#
# Nothing here runs without a GPU; CPU numbers are never written under a GPU name.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python}
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU: nothing to measure')"
gpu=$("$PY" -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
out=attn_edu/data/bench
mkdir -p "$out"
echo "==> kernels on $gpu: correctness first (larger shapes and bf16 run on CUDA)"
"$PY" -m pytest -q tests/test_triton_flash.py tests/test_block_sparse_triton.py tests/test_flash.py tests/test_reference_torch.py \
  tests/test_triton_decode.py
echo "==> goals (ratios measured side by side)"
"$PY" -m attn_edu.bench --goals | tee "$out/goals_${gpu}.txt"
for D in 64 128; do
  "$PY" -m attn_edu.bench --device cuda --dtype bfloat16 --batch 4 --heads 16 --d "$D" \
    --n 1024 2048 4096 8192 16384 --impl triton torch_sdpa_flash torch_sdpa_efficient \
    torch_sdpa_math torch_naive torch_flash --block-q 128 --block-k 128 --memory --repeat 10 --warmup 2 \
    --out "$out/gpu_${gpu}_d${D}_bf16.json"
done
"$PY" -m attn_edu.bench --device cuda --dtype bfloat16 --batch 4 --heads 16 --d 64 --causal \
  --n 4096 8192 16384 --impl triton torch_sdpa_flash --repeat 10 --warmup 2 \
  --out "$out/gpu_${gpu}_d64_bf16_causal.json"
echo "==> block-sparse kernel vs dense and FlexAttention"
"$PY" -m attn_edu.bench --block-sparse --n 8192 16384 --out "$out/block_sparse_${gpu}.json"
echo "==> decoding (L_q = 1): split-KV Triton kernel vs SDPA over the KV-cache length"
dtype=$("$PY" -c "import torch; print('bfloat16' if torch.cuda.get_device_capability() >= (8, 0) else 'float16')")
mkdir -p "$out/decode"
"$PY" -c "from attn_edu import bench; bench.save_results(bench.decode_sweep(dtype='$dtype'), '$out/decode/decode_${gpu}.json')"
echo "==> done: git add $out && git commit"
