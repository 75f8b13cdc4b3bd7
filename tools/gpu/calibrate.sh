#!/bin/bash
# GPU calibration runs: one factor at a time against the seeds' settings.
# usage: calibrate.sh SET   (SET = a | b; each fits one ≤10-minute device call)
# Needs vLLM installed there (tools/gpu/README.md) and $OUT set by the device tool.
set -u
here=$(cd "$(dirname "$0")" && pwd)
models=/tmp/gpumodels
[ -d $models ] || python3 -m tools.gpu.make_models $models > /dev/null
seeds="--max-num-seqs 4 --max-num-batched-tokens 2048 --enable-prompt-tokens-details"
fdo() { echo "{\"cudagraph_mode\":\"FULL_DECODE_ONLY\",\"cudagraph_capture_sizes\":[$1]}"; }
python3 -c "import vllm; print('vllm', vllm.__version__)" | tee -a "$OUT/summary.txt"
case "$1" in
  a)
    bash "$here/exp.sh" dense_seeds $models/dense 280 $seeds --compilation-config "$(fdo 1,2,3,4)"
    bash "$here/exp.sh" dense_chunk8192 $models/dense 280 --max-num-seqs 4 \
      --max-num-batched-tokens 8192 --compilation-config "$(fdo 1,2,3,4)"
    ;;
  b)
    bash "$here/exp.sh" hybrid_mtp3 $models/hybrid 330 $seeds --gdn-prefill-backend triton \
      --speculative-config '{"method":"mtp","num_speculative_tokens":3}' \
      --compilation-config "$(fdo 4,8,12,16)"
    bash "$here/exp.sh" moe_seeds $models/moe 240 $seeds --compilation-config "$(fdo 1,2,3,4)"
    ;;
  c)
    bash "$here/exp.sh" dense_vllm_default_graphs $models/dense 280 $seeds
    bash "$here/exp.sh" hybrid_seeds_nomtp $models/hybrid 300 $seeds --gdn-prefill-backend triton \
      --compilation-config "$(fdo 1,2,3,4)"
    ;;
esac
