#!/usr/bin/env bash
# tools/service_env.sh vllm|gateway ENV_FILE: write the lines of ENV_FILE one compose service
# reads (vllm: SPARKSERVE_*; gateway: GATEWAY_* but its keys and the publishing variables)
# to run/compose/, and print that file's path for compose's env_file.  Secrets never go
# there: an env_file line is container environment, which `docker inspect` shows.
set -euo pipefail
service=$1 env_file=$2
out_dir=${COMPOSE_ENV_DIR:-run/compose}
mkdir -p "$out_dir"
out="$out_dir/$(basename "$env_file").$service"
case $service in
  vllm) pattern='^SPARKSERVE_' ;;
  gateway) pattern='^GATEWAY_' ;;
  *) echo "service_env: unknown service $service (vllm|gateway)" >&2; exit 2 ;;
esac
{ [ -f "$env_file" ] && grep -E "$pattern" "$env_file" \
    | grep -vE '^(GATEWAY_API_KEYS|GATEWAY_API_KEYS_FILE|GATEWAY_PUBLISH|GATEWAY_BIND)=' \
    || true; } >"$out"
printf '%s\n' "$out"
