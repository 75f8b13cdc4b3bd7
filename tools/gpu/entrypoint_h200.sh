#!/bin/bash
# the entrypoint with the real CUDA vLLM 0.24 on an H200 — time to ready
# cold and warm, first request vs steady, NVML telemetry, the dashboards through Prometheus.
#
# What it needs on the GPU host (ignored by git, never committed): one tar, split -b 56m
# into part00 … part03, each part in its own folder .gpu27-p0 … .gpu27-p3 of the copy of
# this repository's checkout on the host. The tar holds
#   whl/            vLLM 0.24.0 + the 84 wheels the host lacks (no FlashInfer: with
#                   --gdn-prefill-backend triton vLLM 0.24 imports it nowhere on this
#                   path), vLLM trimmed of what SM90 never loads (FA2, the Rust frontend,
#                   Blackwell/DeepGEMM headers) and xgrammar of its static library —
#                   213 MiB in all
#   prometheus.xz   Debian bookworm's prometheus 2.42.0 binary (apt-get download; dpkg -x)
# tools/gpu/build_bundle.sh builds the parts and puts them in place. The code it runs is
# a copy of this repository at .gpu27/src, and the script cds into it:
#   git archive HEAD budget entrypoint gateway bench tools tests prometheus grafana \
#       pyproject.toml | tar x -C CHECKOUT/.gpu27/src      (≈ 2 MiB without the fixtures)
#
# Steps, on one host (vLLM is installed under /tmp, the parts kept in /root/parts), from
# the checkout's root, with OUT_DIR set to the folder for the results:
#   bash .gpu27/src/tools/gpu/entrypoint_h200.sh stage      # once a part folder is there
#   bash .gpu27/src/tools/gpu/entrypoint_h200.sh cold       # installs, then a cold start
#   bash .gpu27/src/tools/gpu/entrypoint_h200.sh warm       # + the dashboards
#   bash .gpu27/src/tools/gpu/entrypoint_h200.sh nowarmup
#   (optional) … entrypoint_h200.sh cold_nowarmup
#   Diagnosis (every Triton specialization loaded after vLLM's own warm-up, two warm starts
#   without the dashboards, one archive):
#   X='--env SPARKSERVE_VLLM_EXTRA_ARGS=--jit-monitor-verbose'
#   START_ARGS=$X bash … cold && START_ARGS=$X TAG=warm_a bash … warm_only &&
#   START_ARGS=$X TAG=warm_b bash … warm_only; bash … pack
# Each measuring step leaves under OUT_DIR: summary.txt (one JSON line per start) and, per
# start TAG, TAG.log (the entrypoint's whole output, each line stamped with seconds since
# launch), TAG.first.json, TAG.control_metrics.txt (+ TAG.dashboards.json for `warm`).
set -u
: "${OUT_DIR:?set OUT_DIR to the folder for the results}"
carried=$PWD
here=$(cd "$(dirname "$0")/../.." && pwd)
parts=/root/parts
BUNDLE_SHA=${BUNDLE_SHA:-}
export PATH=/tmp/bin:$PATH

stage() {
    mkdir -p "$parts"
    if [ -z "$(ls -A "$parts")" ]; then
        {
            nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
            python3 -c 'import sys, torch; print(sys.executable, sys.version.split()[0], "torch", torch.__version__)'
            python3 -m pip --version
            python3 -m pip list 2>/dev/null | grep -i -E '^(torch|triton|transformers|tokenizers|numpy|protobuf|aiohttp|setuptools|nvidia-ml-py|prometheus.client|httpx|pyyaml|uvloop|psutil|pytest) '
            df -h /root /tmp | tail -n +2
        } | tee "$OUT_DIR/env.txt"
    fi
    cp "$carried"/.gpu27-p*/part* "$parts"/ && ls -la "$parts"
}

install() {
    if python3 -c 'import vllm' 2>/dev/null && [ -x /tmp/bin/prometheus ]; then
        echo "already installed"; return 0
    fi
    stage > /dev/null || return 2
    local have
    have=$(ls "$parts" | tr '\n' ' ')
    [ "$have" = "part00 part01 part02 part03 " ] || { echo "MISSING PARTS (have: $have)"; return 2; }
    local sha
    sha=$(cat "$parts"/part0[0-3] | sha256sum | cut -c1-64)
    echo "bundle sha256 $sha (want ${BUNDLE_SHA:-unchecked})" | tee -a "$OUT_DIR/summary.txt"
    [ -z "$BUNDLE_SHA" ] || [ "$sha" = "$BUNDLE_SHA" ] || return 2
    mkdir -p /tmp/bundle /tmp/bin
    cat "$parts"/part0[0-3] | tar xf - -C /tmp/bundle || return 2
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        /tmp/bundle/prometheus.xz /tmp/bin/prometheus && chmod +x /tmp/bin/prometheus
    local t0=$SECONDS
    python3 -m pip install --no-index --no-deps --no-compile --no-cache-dir /tmp/bundle/whl/*.whl \
        > "$OUT_DIR/install.log" 2>&1 || { tail -20 "$OUT_DIR/install.log"; return 2; }
    echo "pip install: $((SECONDS - t0)) s" | tee -a "$OUT_DIR/summary.txt"
    python3 -c 'import vllm; print("vllm", vllm.__version__)' | tee -a "$OUT_DIR/summary.txt"
    prometheus --version 2>&1 | head -1 | tee -a "$OUT_DIR/summary.txt"
}

start() {
    # start TAG WARMUP [more entrypoint_start args]
    local tag=$1 warmup=$2
    shift 2
    cd "$here" || return 2
    [ -d /tmp/gpumodels/hybrid ] || python3 -m tools.gpu.make_models /tmp/gpumodels > /dev/null
    nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed "s/^/$tag before: gpu memory used /" >> "$OUT_DIR/summary.txt"
    # Each step ends inside 600 s of its start: what is left of them, less the grep below.
    PYTHONPATH=$here timeout $((585 - SECONDS)) python3 -m tools.gpu.entrypoint_start --tag "$tag" --warmup "$warmup" \
        --out "$OUT_DIR" "$@"
    echo "cache dir: $(du -sh /tmp/sscache 2>/dev/null | cut -f1)" >> "$OUT_DIR/summary.txt"
    grep -E '^\+[0-9.]+s \[sparkserve\] (phase|launching)|torch.compile took|Initial profiling|Graph capturing finished|init engine|Directly load|Compiling a graph|Triton kernel JIT|Error|Traceback' \
        "$OUT_DIR/$tag.log" | cut -c1-220 >> "$OUT_DIR/summary.txt"
}

# START_ARGS: more tools.gpu.entrypoint_start arguments, e.g. "--env SPARKSERVE_PREFIX_CACHING=off".
# shellcheck disable=SC2086
case "${1:-}" in
    stage) stage ;;
    cold)
        install || exit 2
        rm -rf /tmp/sscache
        start cold on --deadline-s "${DEADLINE_S:-430}" ${START_ARGS:-} ;;
    warm) start warm on --deadline-s "${DEADLINE_S:-360}" --dashboards ${START_ARGS:-} ;;
    warm_only) start "${TAG:-warm_only}" on --deadline-s "${DEADLINE_S:-360}" ${START_ARGS:-} ;;
    pack)
        # Every file in one archive, plus summary.txt.
        tar czf /tmp/all.tgz -C "$OUT_DIR" . && rm -rf "${OUT_DIR:?}"/* && mv /tmp/all.tgz "$OUT_DIR"/ ;;
    nowarmup) start warm_nowarmup off --deadline-s "${DEADLINE_S:-400}" ${START_ARGS:-} ;;
    cold_nowarmup)
        rm -rf /tmp/sscache
        start cold_nowarmup off --deadline-s "${DEADLINE_S:-430}" ${START_ARGS:-} ;;
    *) echo "usage: $0 stage|cold|warm|warm_only|nowarmup|cold_nowarmup|pack (see the header)" >&2; exit 2 ;;
esac
