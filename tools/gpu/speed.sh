#!/bin/bash
# The benchmark harness's mixed-traffic and agent-loop workloads on one model, once with
# the planner's flags and once with plain `vllm serve` defaults (docs/gpu-calibration.md).
# usage: speed.sh [SCALE [TAG...]]  (TAG: planner, vllm_defaults; run from the repo root on
# the GPU host, with OUT_DIR set to the folder for the results)
set -u
: "${OUT_DIR:?set OUT_DIR to the folder for the results}"
scale=${1:-small}
models=/tmp/gpumodels
[ -d $models ] || python3 -m tools.gpu.make_models $models > /dev/null
planner=$(python3 -m budget plan --model $models/dense --hardware h200 --max-num-seqs 8 \
  --max-num-batched-tokens 2048 --cudagraph-mode FULL_DECODE_ONLY --format argv | tr '\n' ' ')
run() {
  tag=$1; shift
  log=$OUT_DIR/$tag.log
  echo "=== $tag: $*" | tee -a "$OUT_DIR/summary.txt"
  HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 setsid python3 -m vllm.entrypoints.openai.api_server \
    --model $models/dense --load-format dummy --port 8000 --served-model-name m "$@" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 150); do
    grep -q "Application startup complete" "$log" && break
    kill -0 $pid 2>/dev/null || { echo DIED | tee -a "$OUT_DIR/summary.txt"; return; }
    sleep 2
  done
  timeout ${BENCH_TIMEOUT:-110} python3 -m bench run --url http://127.0.0.1:8000 --model m \
    --workload mixed,agent-loop --scale "$scale" --no-progress --out /tmp/bench/$tag \
    --vllm-args="$*" > "/tmp/bench/$tag.out" 2>&1
  echo "bench rc=$?" | tee -a "$OUT_DIR/summary.txt"
  cp /tmp/bench/$tag/summary.json "$OUT_DIR/$tag.summary.json" 2>/dev/null
  cp /tmp/bench/$tag/report.md "$OUT_DIR/$tag.report.md" 2>/dev/null || tail -20 "/tmp/bench/$tag.out" >> "$OUT_DIR/summary.txt"
  kill -TERM -- -$pid 2>/dev/null; sleep 4; kill -KILL -- -$pid 2>/dev/null
  sleep 4
}
mkdir -p /tmp/bench
tags=${*:2}
tags=${tags:-planner vllm_defaults}
# shellcheck disable=SC2086
[[ " $tags " == *" planner "* ]] && run planner $planner
[[ " $tags " == *" vllm_defaults "* ]] && run vllm_defaults --enable-prompt-tokens-details
