#!/usr/bin/env bash
# Base images for `make up-cpu` and `make test-docker`, built once per machine and reused:
#   sparkserve/debian:bookworm       Debian bookworm + Python 3.11 (the gateway's base here);
#   sparkserve/vllm-cpu:0.32.0-ray2.60.0  + the pinned vllm-cpu and CPU torch in /opt/venv, and Ray;
#   sparkserve/prometheus:debian-bookworm  Prometheus from Debian's package.
# The Debian base comes from debian:bookworm where a registry answers, else from
# `debootstrap --variant=minbase` (root, Debian's debootstrap) and `docker import`.
# pip inside the builds gets the host's CA bundle as a build secret (SPARKSERVE_BUILD_CA,
# default the system bundle) and the folders of PIP_FIND_LINKS as a wheels context, so a
# machine's local CPU torch wheel is used; neither is kept in an image.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_IMAGE=${SPARKSERVE_DEBIAN_IMAGE:-sparkserve/debian:bookworm}
VLLM_CPU_IMAGE=${SPARKSERVE_VLLM_CPU_IMAGE:-sparkserve/vllm-cpu:0.32.0-ray2.60.0}
PROMETHEUS_IMAGE=${SPARKSERVE_PROMETHEUS_IMAGE:-sparkserve/prometheus:debian-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export SPARKSERVE_DEBIAN_IMAGE=$DEBIAN_IMAGE SPARKSERVE_VLLM_CPU_IMAGE=$VLLM_CPU_IMAGE \
  SPARKSERVE_PROMETHEUS_IMAGE=$PROMETHEUS_IMAGE

say() { printf 'docker-bases: %s\n' "$*" >&2; }
have() { docker image inspect "$1" >/dev/null 2>&1; }

debian_by_debootstrap() {
  if [ "$(id -u)" -ne 0 ]; then
    say "debian:bookworm cannot be pulled and debootstrap needs root: run as root, or"
    say "  set SPARKSERVE_DEBIAN_IMAGE to a Debian bookworm image with python3 and python3-venv"
    exit 1
  fi
  command -v debootstrap >/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
  }
  local root log
  root=$(mktemp -d)
  log=$(mktemp)
  say "debootstrap bookworm (minbase + python3, python3-venv) from $DEBIAN_MIRROR"
  debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root" "$DEBIAN_MIRROR" \
    >"$log" 2>&1 || { tail -n 20 "$log" >&2; rm -rf "$root" "$log"; exit 1; }
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$DEBIAN_IMAGE" >/dev/null
  rm -rf "$root" "$log"
}

build_debian() {
  if timeout 60 docker pull -q debian:bookworm >/dev/null 2>&1; then
    say "building $DEBIAN_IMAGE from debian:bookworm"
    docker compose -f docker/bases.yaml build debian
  else
    debian_by_debootstrap
  fi
}

wheels_dir() {
  local dir
  for dir in ${PIP_FIND_LINKS:-}; do
    [ -d "$dir" ] && { printf '%s\n' "$dir"; return; }
  done
  mkdir -p run/no-wheels
  printf '%s\n' "$PWD/run/no-wheels"
}

export SPARKSERVE_WHEELS_DIR=${SPARKSERVE_WHEELS_DIR:-$(wheels_dir)}
if compgen -G "$SPARKSERVE_WHEELS_DIR/torch-*+cpu-*.whl" >/dev/null; then
  export SPARKSERVE_TORCH_INDEX_URL=${SPARKSERVE_TORCH_INDEX_URL-}  # the wheel is at hand
fi
have "$DEBIAN_IMAGE" || build_debian
missing=()
have "$VLLM_CPU_IMAGE" || missing+=(vllm-cpu)
have "$PROMETHEUS_IMAGE" || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
  say "building ${missing[*]} (once per machine; vllm-cpu takes minutes)"
  docker compose -f docker/bases.yaml build "${missing[@]}"
fi
say "bases: $DEBIAN_IMAGE, $VLLM_CPU_IMAGE, $PROMETHEUS_IMAGE"
