#!/bin/bash
# Scale-out on a real GPU host: `python -m entrypoint` with SPARKSERVE_ROLE=head
# starts `ray start --head`, waits for the GPUs, plans, and launches the installed CUDA
# vLLM with `--distributed-executor-backend ray --tensor-parallel-size $TP` on a
# dummy-weight Llama-8B-shaped model; then one chat request, Ray's status, and a stop.
#
# Where: a host with two H200s (SPARKSERVE_HARDWARE=h200 below; TP 2: two Ray GPU
# workers); on a one-GPU host it runs with TP 1 (still vLLM's Ray executor, one
# worker). NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0 and the two below): the three variables are exported for the
# entrypoint, so Ray (its raylet and workers) and vLLM inherit them.
#
# Needs vLLM and Ray installed (on a host without network: tools/offline_bundle.sh DIR
# --extra ray==2.60.0 elsewhere, then DIR/install.sh there) and this checkout; the
# entrypoint runs from it (PYTHONPATH = the checkout's root).
#
# From the checkout's root, with OUT_DIR set to the folder for the results:
#   timeout 590 bash tools/ray_tp2.sh run
# `restart` instead of `run` starts it twice (cold, then warm caches; files under
# OUT_DIR/cold and OUT_DIR/warm, one line each in OUT_DIR/summary.txt).
# Files under OUT_DIR: summary.txt (the lines that matter), entrypoint.log (the whole
# output: [sparkserve], [ray] and [vllm] lines), ray_status.txt, chat.json, metrics.txt,
# ray_logs.tgz (Ray's session logs: raylet, GCS, the vLLM workers).
set -u
: "${OUT_DIR:?set OUT_DIR to the folder for the results}"
root=$(cd "$(dirname "$0")/.." && pwd)
DEADLINE_S=${DEADLINE_S:-420}   # launch → /ready; `run` ends inside 600 s of its start
summary=$OUT_DIR/summary.txt

say() { echo "$*" | tee -a "$summary"; }

# Keep NVLink multicast off everywhere; vLLM copies NCCL_* to its Ray
# workers itself, and the two others are named so it copies them too.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_RAY_EXTRA_ENV_VARS_TO_COPY=TORCH_SYMM_MEM_DISABLE_MULTICAST,NVSHMEM_DISABLE_NVLS,VLLM_USE_FLASHINFER_SAMPLER

install() {
    if python3 -c 'import vllm, ray' 2>/dev/null; then
        python3 -c 'import vllm, ray; print("vllm", vllm.__version__, "ray", ray.__version__)' | tee -a "$summary"
        return 0
    fi
    say "vLLM or Ray is not installed (tools/offline_bundle.sh DIR --extra ray==2.60.0, then DIR/install.sh)"
    return 2
}

# The head's settings (tests/entrypoint/test_gpu_ray_script.py checks them against the
# entrypoint's own config, planner and vLLM flag check).
head_settings() {
    export SPARKSERVE_ROLE=head
    export SPARKSERVE_MODEL=/tmp/gpumodels/dense
    export SPARKSERVE_HARDWARE=h200
    export SPARKSERVE_DEVICE=cuda
    export SPARKSERVE_TP=$TP
    export SPARKSERVE_MAX_MODEL_LEN=4096
    export SPARKSERVE_MAX_NUM_SEQS=4
    export SPARKSERVE_CUDAGRAPH_CAPTURE_SIZES=1,2,4
    export SPARKSERVE_SERVED_MODEL_NAME=m
    export SPARKSERVE_VLLM_EXTRA_ARGS="--load-format dummy"
    export SPARKSERVE_RAY_PORT=6379
    export SPARKSERVE_RAY_EXTRA_ARGS="--include-dashboard=false --disable-usage-stats"
    export SPARKSERVE_NODE_WAIT_TIMEOUT=120
    export SPARKSERVE_STARTUP_TIMEOUT=$DEADLINE_S
    export SPARKSERVE_CACHE_DIR=/tmp/sscache
}

ray_status() {
    echo "=== ray status ($1, $(date -u +%FT%TZ))" >> "$OUT_DIR/ray_status.txt"
    timeout 30 "$ray_bin" status --address 127.0.0.1:6379 >> "$OUT_DIR/ray_status.txt" 2>&1
}

run() {
    mkdir -p "$OUT_DIR"
    say "=== ray_tp2 $(date -u +%FT%TZ) on $(nvidia-smi -L | wc -l) GPU(s)"
    nvidia-smi -L | tee -a "$summary"
    install || exit 2
    ray_bin="$(dirname "$(python3 -c 'import sys; print(sys.executable)')")/ray"
    local gpus
    gpus=$(nvidia-smi -L | wc -l)
    TP=${TP:-$((gpus >= 2 ? 2 : 1))}
    python3 -m entrypoint.gpu_check.models llama-3.1-8b /tmp/gpumodels/dense > /dev/null
    # The cluster link: the interface of the default route (both GPUs are on this host,
    # so NCCL only bootstraps over it; the setting's path to Ray and vLLM is what is shown).
    local iface
    iface=$(awk '$2 == "00000000" { print $1; exit }' /proc/net/route)
    head_settings
    if [ -n "$iface" ]; then
        export SPARKSERVE_NCCL_SOCKET_IFNAME=$iface SPARKSERVE_GLOO_SOCKET_IFNAME=$iface
    fi
    env | grep -E '^(SPARKSERVE_|NCCL_|TORCH_SYMM|NVSHMEM_)' | sort | tee -a "$summary"

    cd "$root" || exit 2
    export PYTHONPATH=$root PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0
    local start pid code=""
    start=$(date +%s)
    setsid python3 -m entrypoint > "$OUT_DIR/entrypoint.log" 2>&1 &
    pid=$!
    local ready=0 joined=0
    while true; do
        if [ "$joined" = 0 ] && grep -q "all joined" "$OUT_DIR/entrypoint.log"; then
            joined=1
            ray_status "cluster complete"
        fi
        if [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:8001/ready)" = 200 ]; then
            ready=1
            break
        fi
        kill -0 "$pid" 2>/dev/null || { say "ENTRYPOINT EXITED before ready"; break; }
        [ $(($(date +%s) - start)) -gt "$DEADLINE_S" ] && { say "TIMEOUT before ready"; break; }
        sleep 2
    done
    say "ready=$ready after $(($(date +%s) - start)) s"
    if [ "$ready" = 1 ]; then
        curl -s -m 60 localhost:8000/v1/chat/completions -H 'content-type: application/json' \
            -d '{"model":"m","messages":[{"role":"user","content":"Say hello."}],"max_tokens":16}' \
            > "$OUT_DIR/chat.json"
        say "chat: $(head -c 600 "$OUT_DIR/chat.json")"
        ray_status "serving"
        curl -s -m 10 localhost:8001/metrics | grep -E '^sparkserve_' > "$OUT_DIR/metrics.txt"
        nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader \
            | sed 's/^/nvidia_smi /' | tee -a "$summary"
    fi
    # Stop: SIGTERM to the entrypoint, which stops vLLM's and Ray's process groups itself.
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
        say "entrypoint still running 60 s after SIGTERM: SIGKILL, then ray stop --force"
        kill -KILL -- -"$pid" 2>/dev/null
        timeout 30 "$ray_bin" stop --force > /dev/null 2>&1
    fi
    wait "$pid"
    code=$?
    say "entrypoint exit code $code"
    grep -E '^\[sparkserve\]|^sparkserve:|cluster after|Ray pid|Ray stopped|placement.group|Placement|RayWorker|ray_executor|RayExecutor|distributed_executor_backend|tensor_parallel_size|world_size|KV cache size|Maximum concurrency|Available KV cache|Model loading took|Graph capturing|init engine|torch.compile took|FlashInfer Allreduce|Starting vLLM|Error|error:|Traceback' \
        "$OUT_DIR/entrypoint.log" | cut -c1-400 | head -200 >> "$summary"
    tar czf "$OUT_DIR/ray_logs.tgz" -C /tmp/ray/session_latest logs 2>/dev/null
    [ "$ready" = 1 ] && [ -s "$OUT_DIR/chat.json" ]
}

restart() {
    # The same launch twice on one machine: a cold start, then a warm one that finds the
    # caches the first left (vLLM's torch.compile cache under SPARKSERVE_CACHE_DIR,
    # FlashInfer's JIT kernels under ~/.cache/flashinfer), as a container restarted on
    # the compose volume would. Each run's files go to $OUT_DIR/cold and $OUT_DIR/warm.
    local base=$OUT_DIR status=0
    for phase in cold warm; do
        OUT_DIR=$base/$phase
        summary=$OUT_DIR/summary.txt
        mkdir -p "$OUT_DIR"
        ( run ) || status=1
        echo "$phase: $(grep -E '^ready=|torch.compile took|phase: ready after' "$summary" | sed 's/.*INFO/INFO/' | tr '\n' ' ')" >> "$base/summary.txt"
    done
    return $status
}

case "${1:-}" in
    run) run ;;
    restart) restart ;;
    install) mkdir -p "$OUT_DIR"; install ;;  # vLLM and Ray there? (tools/two_nodes.sh)
    *) echo "usage: $0 run|restart|install (see the header)" >&2; exit 2 ;;
esac
