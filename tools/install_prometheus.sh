#!/usr/bin/env bash
# Install Prometheus and promtool (Debian's `prometheus` package) unless both are on PATH.
# Non-interactive; needs root (as in CI) or password-less sudo.  Used by `make prometheus-bin`,
# which `make test` depends on: the integration tests run a real Prometheus.
set -euo pipefail

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "install_prometheus: need root (or password-less sudo) to apt-get install prometheus;" \
       "or put prometheus and promtool on PATH yourself" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "install_prometheus: no apt-get here; install Prometheus (prometheus, promtool) and" \
       "put both on PATH" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
# The package's service is not wanted: the tests and `make demo` start their own.
"${SUDO[@]}" apt-get install -y -q --no-install-recommends prometheus
command -v prometheus >/dev/null && command -v promtool >/dev/null
