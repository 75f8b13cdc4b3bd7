#!/bin/bash
# Not yet run on a GPU.
# The bench's step 2 on an H200 with vLLM's own CUDA-graph stats: which (1+K)×S
# widths replayed a FULL graph and which fell back, as vLLM 0.24 reports them with
# --cudagraph-metrics (the harness adds the flag itself; bench/sweep_cli.py), for the
# default profile's configuration (the tuning article's) and for a capture list that
# leaves one width uncovered.
#
# What it needs on the GPU host: vLLM 0.24 installed and this repository's copy at
# .gpu27/src, as tools/gpu/entrypoint_h200.sh's `stage` and `cold` steps leave them on
# the same host (`cold` installs vLLM and fills the compile cache /tmp/sscache that these
# starts reuse).  Then, from the checkout's root, with OUT_DIR set:
#   bash .gpu27/src/tools/gpu/graph_hits_h200.sh covered
#   bash .gpu27/src/tools/gpu/graph_hits_h200.sh uncovered
# covered:   MTP 3, max seqs 4, FULL_DECODE_ONLY, capture sizes 4,8,12,16 (every width)
# uncovered: the same with 4,8,16 (UNCOVERED_SIZES to change it): width 12 has no equal
#            size; vLLM 0.24's dispatcher (v1/cudagraph_dispatcher.py) pads a step to the
#            next captured size, so the run shows whether 12 replayed the 16 graph or ran
#            eager — the prediction (budget/graphs.py decode_dispatch) says it replays 16.
# Each step leaves under OUT_DIR/TAG/: sweep.md (step 2's per-width table), sweep.json,
# sweep_state.json and mtp=3/ (server.log: the entrypoint's whole output, vLLM's
# stats tables in it; the run's records, summary and report).  The hybrid model is
# Qwen3NextForCausalLM, which vLLM 0.24 serves with its V1 model runner; its Model
# Runner V2 (the default for some dense architectures there) prints no stats
# (vllm#52728), and the report would then say "vLLM printed no CUDA-graph stats".
set -u
: "${OUT_DIR:?set OUT_DIR to the folder for the results}"
here=$(cd "$(dirname "$0")/../.." && pwd)

case "${1:-}" in
    covered) sizes=4,8,12,16 ;;
    uncovered) sizes=${UNCOVERED_SIZES:-4,8,16} ;;
    *) echo "usage: $0 covered|uncovered (see the header)" >&2; exit 2 ;;
esac
tag=$1

version=$(python3 -c 'import vllm; print(vllm.__version__)' 2> /dev/null) || {
    echo "vLLM is not installed: run entrypoint_h200.sh stage and cold first" >&2
    exit 2
}
echo "vllm $version" | tee "$OUT_DIR/$tag.version.txt"
cd "$here" || exit 2
[ -d /tmp/gpumodels/hybrid ] || python3 -m tools.gpu.make_models /tmp/gpumodels > /dev/null
# The step ends inside 600 s of its start.
PYTHONPATH=$here VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 timeout $((585 - SECONDS)) \
    python3 -m bench sweep --serve-model /tmp/gpumodels/hybrid --model m \
    --param mtp --values 3 --scale tiny --no-plots --no-progress --ready-timeout 450 \
    --out "$OUT_DIR/$tag" \
    --env SPARKSERVE_HARDWARE=h200 --env SPARKSERVE_DEVICE=cuda \
    --env SPARKSERVE_MAX_NUM_SEQS=4 --env SPARKSERVE_MAX_NUM_BATCHED_TOKENS=2048 \
    --env SPARKSERVE_CUDAGRAPH_MODE=FULL_DECODE_ONLY \
    --env SPARKSERVE_CUDAGRAPH_CAPTURE_SIZES="$sizes" \
    --env SPARKSERVE_LOAD_FORMAT=dummy --env SPARKSERVE_CACHE_DIR=/tmp/sscache
code=$?
grep -h -A12 'CUDAGraph Config Settings' "$OUT_DIR/$tag"/mtp=3/server.log | tail -40
echo "exit $code"
exit $code
