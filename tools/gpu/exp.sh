#!/bin/bash
# One vLLM server start on a GPU host: start, wait for start-up, one request,
# keep the memory lines and the whole log under OUT_DIR, stop the process group.
# usage: exp.sh TAG MODEL_DIR TIMEOUT_S vllm-args...   -> OUT_DIR/TAG.log, OUT_DIR/summary.txt
: "${OUT_DIR:?set OUT_DIR to the folder for the results}"
tag=$1; model=$2; to=$3; shift 3
log=$OUT_DIR/$tag.log
echo "=== $tag $model $* ($(date -u +%FT%TZ))" | tee -a "$OUT_DIR/summary.txt"
start=$(date +%s)
HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 setsid python3 -m vllm.entrypoints.openai.api_server \
  --model "$model" --load-format dummy --port 8000 --served-model-name m "$@" > "$log" 2>&1 &
pid=$!
while true; do
  grep -q "Application startup complete" "$log" && break
  if ! kill -0 $pid 2>/dev/null; then echo "DIED" | tee -a "$OUT_DIR/summary.txt"; break; fi
  if [ $(( $(date +%s) - start )) -gt "$to" ]; then echo "TIMEOUT" | tee -a "$OUT_DIR/summary.txt"; break; fi
  sleep 2
done
echo "startup_s $(( $(date +%s) - start ))" | tee -a "$OUT_DIR/summary.txt"
if grep -q "Application startup complete" "$log"; then
  curl -s localhost:8000/v1/completions -H 'content-type: application/json' \
    -d '{"model":"m","prompt":"hello world","max_tokens":8}' | head -c 200 >> "$OUT_DIR/summary.txt"
  echo >> "$OUT_DIR/summary.txt"
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader | sed 's/^/nvidia_smi /' | tee -a "$OUT_DIR/summary.txt"
fi
grep -E "Model loading took|Available KV cache|KV cache size|Maximum concurrency|Graph capturing finished|CUDA graph pool memory|CUDA graph memory|Memory profiling|torch peak|non-torch|init engine|Setting attention block|Padding mamba|padding layers|Free memory|requested|Error|error:" "$log" \
  | grep -v Warning | sed -E 's/^\([A-Za-z]+ pid=[0-9]+\) //' | cut -c1-400 | tee -a "$OUT_DIR/summary.txt"
kill -TERM -- -$pid 2>/dev/null; sleep 5; kill -KILL -- -$pid 2>/dev/null
for _ in $(seq 1 30); do
  used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  [ "$used" -lt 2000 ] && break; sleep 2
done
