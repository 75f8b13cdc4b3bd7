#!/usr/bin/env bash
# tools/stack_secret.sh NAME ENV_FILE FILE: print the secret NAME (e.g. GATEWAY_API_KEYS) for
# compose, from the environment, else ENV_FILE's NAME= line, else FILE; when none has it,
# generate one into FILE (mode 0600, in a 0700 folder) and say where on stderr.
# The value goes only to stdout: `make up` hands it to compose as an environment-sourced
# secret, so it never shows in `docker inspect`, a log or a command line.
set -euo pipefail
name=$1 env_file=$2 file=$3

from_env_file() {
  [ -f "$env_file" ] || return 1
  local line
  line=$(grep -E "^${name}=" "$env_file" | tail -n 1) || return 1
  line=${line#*=}
  line=${line%\"}; line=${line#\"}; line=${line%\'}; line=${line#\'}
  [ -n "$line" ] && printf '%s\n' "$line"
}

if [ -n "${!name:-}" ]; then
  printf '%s\n' "${!name}"
elif from_env_file; then
  :
elif [ -s "$file" ]; then
  cat "$file"
else
  mkdir -p "$(dirname "$file")"
  chmod 0700 "$(dirname "$file")"
  umask 077
  case $name in
    GATEWAY_API_KEYS) value="default:sk-$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" ;;
    *) value=$(od -An -N18 -tx1 /dev/urandom | tr -d ' \n') ;;
  esac
  printf '%s\n' "$value" >"$file"
  printf 'generated %s into %s (only you can read it)\n' "$name" "$file" >&2
  cat "$file"
fi
