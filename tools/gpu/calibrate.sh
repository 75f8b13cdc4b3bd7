#!/bin/bash
# GPU calibration runs: one factor at a time against the default profile's settings
# (the tuning article's: max seqs 4, chunk 2,048, FULL_DECODE_ONLY).
# usage: calibrate.sh SET   (SET = a | b | c; each set takes under 10 minutes on an H200)
# Needs vLLM installed on the GPU host (as tools/gpu/entrypoint_h200.sh installs it) and
# OUT_DIR set to the folder for the results (tools/gpu/exp.sh writes there).
set -u
: "${OUT_DIR:?set OUT_DIR to the folder for the results}"
here=$(cd "$(dirname "$0")" && pwd)
models=/tmp/gpumodels
[ -d $models ] || python3 -m tools.gpu.make_models $models > /dev/null
article="--max-num-seqs 4 --max-num-batched-tokens 2048 --enable-prompt-tokens-details"
fdo() { echo "{\"cudagraph_mode\":\"FULL_DECODE_ONLY\",\"cudagraph_capture_sizes\":[$1]}"; }
python3 -c "import vllm; print('vllm', vllm.__version__)" | tee -a "$OUT_DIR/summary.txt"
case "$1" in
  a)
    bash "$here/exp.sh" dense_seeds $models/dense 280 $article --compilation-config "$(fdo 1,2,3,4)"
    bash "$here/exp.sh" dense_chunk8192 $models/dense 280 --max-num-seqs 4 \
      --max-num-batched-tokens 8192 --compilation-config "$(fdo 1,2,3,4)"
    ;;
  b)
    bash "$here/exp.sh" hybrid_mtp3 $models/hybrid 330 $article --gdn-prefill-backend triton \
      --speculative-config '{"method":"mtp","num_speculative_tokens":3}' \
      --compilation-config "$(fdo 4,8,12,16)"
    bash "$here/exp.sh" moe_seeds $models/moe 240 $article --compilation-config "$(fdo 1,2,3,4)"
    ;;
  c)
    bash "$here/exp.sh" dense_vllm_default_graphs $models/dense 280 $article
    bash "$here/exp.sh" hybrid_seeds_nomtp $models/hybrid 300 $article --gdn-prefill-backend triton \
      --compilation-config "$(fdo 1,2,3,4)"
    ;;
esac
