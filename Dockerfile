# sparkserve images, one file (BuildKit's built-in Dockerfile frontend; nothing to pull):
#   default (last) stage `vllm`: vLLM started by `python3 -m entrypoint`
#     (budget → vLLM → warm-up → ready; control endpoint :8001 /ready, /metrics);
#   stage `gateway`: the OpenAI-compatible gateway only (`python3 -m gateway`, :8080).
# No secrets are baked in: API keys and salts come from the environment at run time.
# Behind a TLS-intercepting proxy, pip gets that network's CA bundle as the optional build
# secret `pip_ca` (compose.cpu.yaml passes the host's); it is never kept in a layer.
#
# The vLLM base image is pinned per architecture (override with --build-arg):
#   amd64: vLLM's official CUDA image (x86_64 GPU boxes: H100/H200, RTX 4090/5090/PRO 6000);
#   arm64: the same release of the same image for DGX Spark (GB10, SM 12.1): vLLM's release
#   tags are multi-arch and CUDA 13 by default since v0.20 (vllm-project/vllm#39878), so
#   both architectures run vLLM 0.32.0, the release the planner plans for by default
#   (budget/vllm_rules.py DEFAULT_VLLM_VERSION; the entrypoint plans for the installed one).
# `docker buildx build --platform linux/arm64 .` on/for a Spark picks the arm64 one.
# Where no registry answers, compose.cpu.yaml points both at a local CPU vLLM base and the
# gateway at a local Debian base (tools/docker_bases.sh builds them).
ARG VLLM_IMAGE_AMD64=vllm/vllm-openai:v0.32.0
ARG VLLM_IMAGE_ARM64=vllm/vllm-openai:v0.32.0
ARG GATEWAY_BASE_IMAGE=python:3.11.11-slim-bookworm
ARG TARGETARCH
# Both images run as this non-root user, numeric so `runAsNonRoot`-style checks can verify
# it; --build-arg SPARKSERVE_UID=… SPARKSERVE_GID=… where a policy fixes others (one the
# base image already has, e.g. Ubuntu 24.04's 1000, fails the build). The model directory
# only has to be readable by it; its caches are created for it below.
ARG SPARKSERVE_UID=10001
ARG SPARKSERVE_GID=10001

FROM ${VLLM_IMAGE_AMD64} AS vllm-base-amd64
FROM ${VLLM_IMAGE_ARM64} AS vllm-base-arm64

# --- source: the project's files, copied once, shared by both images (owned by root, so
# the run-time user cannot rewrite its own code) -----------------------------------------
# Only the product, the packages the wheel holds (pyproject.toml): bench/, reliability/,
# devtools/, tools/ and tests/ run from a checkout and stay out of both images.
FROM scratch AS source
WORKDIR /opt/sparkserve
COPY pyproject.toml ./
COPY budget ./budget
COPY entrypoint ./entrypoint
COPY gateway ./gateway
COPY draftvocab ./draftvocab

# --- gateway: small image, no GPU libraries ---------------------------------------------
# In a venv (first on PATH): Debian's own Python is externally managed, python:slim's is not.
FROM ${GATEWAY_BASE_IMAGE} AS gateway
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GATEWAY_HOST=0.0.0.0 \
    GATEWAY_PORT=8080 \
    GATEWAY_STATE_DIR=/var/lib/sparkserve-gateway
WORKDIR /opt/sparkserve
COPY --from=source /opt/sparkserve ./
ARG SPARKSERVE_UID
ARG SPARKSERVE_GID
RUN --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && python3 -m venv /opt/venv \
    && pip install --no-cache-dir . \
    && groupadd --system --gid "${SPARKSERVE_GID}" gateway \
    && useradd --system --no-log-init --uid "${SPARKSERVE_UID}" --gid "${SPARKSERVE_GID}" \
        --home-dir /var/lib/sparkserve-gateway --create-home --shell /usr/sbin/nologin gateway
USER ${SPARKSERVE_UID}:${SPARKSERVE_GID}
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["python3", "-m", "gateway"]

# --- vllm: the serving container (default target) ---------------------------------------
# The tag is pinned above (VLLM_IMAGE_*); hadolint cannot see through the stage name.
# hadolint ignore=DL3006
FROM vllm-base-${TARGETARCH} AS vllm
ARG SPARKSERVE_UID
ARG SPARKSERVE_GID
# Offline: weights come from the read-only model volume, never from a hub at run time.
ENV HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HOME=/cache/huggingface \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SPARKSERVE_CACHE_DIR=/cache/compile \
    SPARKSERVE_CONTROL_PORT=8001
WORKDIR /opt/sparkserve
COPY --from=source /opt/sparkserve ./
# The base image already has vLLM, torch, psutil and nvidia-ml-py: keep its versions.
# Editable, so the code and budget/profiles/*.toml are read from /opt/sparkserve.
# The embedded gateway (SPARKSERVE_GATEWAY=embedded) runs in vLLM's process and also needs
# orjson and pydantic-settings, which not every vLLM image has (nor a CPU base NVML's
# bindings, which the entrypoint's telemetry imports): installed when missing
# (neither pulls a newer vLLM dependency; the entrypoint's pre-flight imports the gateway).
# A stale ~/.cache/huggingface from the base image must not shadow the mounted model.
RUN --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && python3 -m pip install --no-cache-dir --no-deps --editable . \
    && python3 -m pip install --no-cache-dir "orjson>=3.9" "pydantic-settings>=2.3" \
        "nvidia-ml-py>=12.535" "psutil>=5.9" \
    && rm -rf /root/.cache/huggingface
# Run without root (GPUs need none: the NVIDIA runtime passes the device nodes in). Every
# cache the container writes lives under /cache, where compose mounts the vllm-cache volume;
# an empty named volume takes this directory's ownership from the image on first use:
#   /cache/huggingface  HF_HOME (offline: little or nothing, the model is /models);
#   /cache/compile      SPARKSERVE_CACHE_DIR: the entrypoint points VLLM_CACHE_ROOT,
#                       TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR at vllm/, triton/, inductor/;
#   /cache/cuda         CUDA's PTX JIT cache (CUDA_CACHE_PATH, default ~/.nv/ComputeCache);
#   /cache/*            whatever else follows XDG_CACHE_HOME, or hard-codes ~/.cache
#                       (FlashInfer's JIT kernels): ~/.cache is a link to /cache.
# HOME is the user's own, in the image (not on the volume).
ENV HOME=/home/sparkserve \
    XDG_CACHE_HOME=/cache \
    CUDA_CACHE_PATH=/cache/cuda
RUN groupadd --gid "${SPARKSERVE_GID}" sparkserve \
    && useradd --no-log-init --uid "${SPARKSERVE_UID}" --gid "${SPARKSERVE_GID}" \
        --home-dir "${HOME}" --create-home --shell /usr/sbin/nologin sparkserve \
    && install -d -o "${SPARKSERVE_UID}" -g "${SPARKSERVE_GID}" -m 0755 \
        /cache /cache/huggingface /cache/cuda /cache/compile \
        /cache/compile/vllm /cache/compile/triton /cache/compile/inductor \
    && ln -s /cache "${HOME}/.cache"
USER ${SPARKSERVE_UID}:${SPARKSERVE_GID}
EXPOSE 8000 8001
# Ready = warm-up done and vLLM answering (503 before); a cold start may compile for minutes.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30m --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/ready' % os.environ.get('SPARKSERVE_CONTROL_PORT', '8001'), timeout=4)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["python3", "-m", "entrypoint"]
