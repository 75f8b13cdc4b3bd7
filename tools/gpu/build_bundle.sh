#!/bin/bash
# Build, on a development machine, what tools/gpu/entrypoint_h200.sh installs on a GPU host:
# one tar (whl/ + prometheus.xz) split into 56 MiB parts, each in its own folder
# CHECKOUT/.gpu27-p0 … of a checkout that is then copied to the host (names in
# .git/info/exclude, never committed).
#
# usage: build_bundle.sh WORK_DIR HOST_PACKAGES CHECKOUT
#   WORK_DIR       scratch space (≈ 1 GiB)
#   HOST_PACKAGES  the GPU host's installed Python packages, one name a line
#                  (`pip list --format freeze | cut -d= -f1`); none of these is bundled
#   CHECKOUT       the checkout copied to the host: parts go to CHECKOUT/.gpu27-p0 …
#   MKSTUB (env)   a script that writes an empty wheel NAME-VERSION+stub for its one
#                  argument NAME==VERSION+stub, in the current folder
# Needs pip (any Python; wheels are picked for the host's 3.12), zip, xz, apt-get, dpkg.
# The host's own packages and the heavy optional GPU extras are pinned to empty stub
# wheels, so pip fetches only what the host lacks; FlashInfer is not bundled (with
# --gdn-prefill-backend triton vLLM 0.24 does not import it for the hybrid). vLLM is
# trimmed of what an SM90 GPU never loads, xgrammar of its static library. Resolved on
# 2026-12-03 to 85 wheels, 213 MiB; the tar's sha256 was
# 239c21b1dddee42f365453c4e56c78fbd18185b1b2571d1dbd8ab67b5f6e7cd6 (pass it as BUNDLE_SHA;
# a later resolution may pick newer releases and differ).
set -euo pipefail
work=$1 host_list=$2 checkout=$3
mkstub=$(realpath "${MKSTUB:?set MKSTUB to a script that writes a stub wheel (see the header)}")
mkdir -p "$work"/stubs "$work"/dl "$work"/set "$work"/bundle/whl
cd "$work"

# Installed on the host (versions it reports) or not wanted there: empty stubs.
stubs="torch==2.11.0 torchaudio==2.11.0 torchvision==0.26.0 triton==3.6.0 numpy==2.5.2
transformers==5.17.0 tokenizers==0.23.2 safetensors==0.8.0 sentencepiece==0.2.2
tiktoken==0.14.0 huggingface-hub==1.33.0 numba==0.65.0 flashinfer-python==0.6.12
flashinfer-cubin==0.6.12 tilelang==0.1.9 nvidia-cudnn-frontend==1.19.1 fastsafetensors==0.3.2
nvidia-cutlass-dsl==4.5.2 quack-kernels==0.3.3 tokenspeed-mla==0.1.2 humming-kernels==0.1.6
mistral-common==1.11.3"
: > constraints.txt
for spec in $stubs; do
    (cd stubs && python3 "$mkstub" "$spec+stub")
    echo "$spec+stub" >> constraints.txt
done

platforms=""
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 \
    manylinux1 manylinux_2_31 manylinux_2_34 manylinux_2_35 manylinux_2_39 linux; do
    platforms="$platforms --platform ${tag}_x86_64"
done
# The gateway's own needs (orjson, pydantic-settings, uvicorn) ride along.
# shellcheck disable=SC2086
python3 -m pip download --isolated --only-binary=:all: --python-version 3.12 \
    --implementation cp $platforms --find-links stubs -c constraints.txt -d dl \
    vllm==0.24.0 apache-tvm-ffi==0.1.9 pydantic-settings orjson 'uvicorn[standard]'

# Keep what the host lacks: no stub, nothing on its package list.
python3 - "$host_list" <<'EOF'
import os, re, shutil, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n.strip().lower())
device = {norm(n) for n in open(sys.argv[1]) if n.strip()}
for name in sorted(os.listdir("dl")):
    if "+stub" in name or norm(name.split("-")[0]) in device:
        continue
    shutil.copy(os.path.join("dl", name), os.path.join("set", name))
EOF
# vLLM: FlashAttention 2 (SM90 runs FA3), the Rust frontend (opt-in), CUTLASS headers for
# Blackwell/DeepGEMM JIT, DeepGEMM for other Pythons; xgrammar: its static library.
zip -q -d set/vllm-0.24.0-*.whl 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm-rs' \
    'vllm/third_party/*/include/*' 'vllm/third_party/fmha_sm100/cutlass/*' \
    'vllm/third_party/deep_gemm/_C.cpython-31[0134]*'
zip -q -d set/xgrammar-*.whl 'xgrammar/lib/libxgrammar.a'
cp set/*.whl bundle/whl/

# Debian bookworm's Prometheus (the tests' and the stack's), the binary alone.
(cd "$work" && apt-get download prometheus)
rm -rf prom && dpkg -x prometheus_*.deb prom
xz -9 -c prom/usr/bin/prometheus > bundle/prometheus.xz

tar cf bundle.tar -C bundle .
sha256sum bundle.tar
rm -f part0*
split -b 56m -d -a 2 bundle.tar part
for part in part0*; do
    folder=$checkout/.gpu27-p${part#part0}
    mkdir -p "$folder" && cp "$part" "$folder/"
    grep -qx "/.gpu27-p${part#part0}/" "$checkout/.git/info/exclude" 2>/dev/null \
        || echo "/.gpu27-p${part#part0}/" >> "$checkout/.git/info/exclude"
done
grep -qx "/.gpu27/" "$checkout/.git/info/exclude" || echo "/.gpu27/" >> "$checkout/.git/info/exclude"
ls -la "$checkout"/.gpu27-p*
