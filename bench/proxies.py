"""The processes the gateway overhead benchmark races: the gateway, nginx.

`start_gateway` runs `python -m gateway` (auth off, a fixed salt) in front of an
upstream, or its spinning calibration copy (bench/spin_gateway.py), or a gateway from
another checkout; `start_nginx` runs nginx as a plain streaming reverse proxy of the
same upstream; `wait_ready` waits until one answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.launcher import free_port


def wait_ready(
    url: str,
    *paths: str,
    timeout_s: float = 60,
    proc: subprocess.Popen[bytes] | None = None,
    what: str | None = None,
) -> None:
    """Until one of `paths` answers 200; SystemExit naming them after `timeout_s`, or at
    once when `proc` (what serves `url`, called `what`) has exited."""
    deadline = time.monotonic() + timeout_s
    name = what or url
    while time.monotonic() < deadline:
        for path in paths:
            try:
                if httpx.get(url + path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
        if proc is not None and proc.poll() is not None:
            raise SystemExit(
                f"{name} exited {proc.returncode} before answering 200 on {' or '.join(paths)}"
            )
        time.sleep(0.2)
    raise SystemExit(f"{name} did not answer 200 on {' or '.join(paths)} within {timeout_s:g} s")


def start_gateway(
    upstream: str, client: str | None, source: str | None = None, spin_us: int | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "GATEWAY_UPSTREAM_URL": upstream,
        "GATEWAY_AUTH": "off",
        "GATEWAY_PORT": str(port),
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_SALT_SECRET": "bench",
        "GATEWAY_LOG_LEVEL": "warning",
    }
    if client:
        env["GATEWAY_UPSTREAM_CLIENT"] = client
    if source:  # another checkout of the gateway, e.g. a worktree of an older commit
        env["PYTHONPATH"] = source
    module = "gateway"
    if spin_us is not None:  # the calibration copy (bench/spin_gateway.py)
        module, env["BENCH_SPIN_US"] = "bench.spin_gateway", str(spin_us)
    child = subprocess.Popen([sys.executable, "-m", module], env=env, cwd=source)
    return child, f"http://127.0.0.1:{port}"


NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  upstream upstream {{ server {upstream}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://upstream;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;{extra}
    }}
  }}
}}
"""


def nginx_conf(
    directory: str, upstream_url: str, port: int, headers: dict[str, str] | None = None
) -> str:
    """A plain streaming reverse proxy (one worker, like the one gateway process):
    no buffering either way, keep-alive to the upstream, no access log; `headers`
    are added to every request sent upstream."""
    host_port = upstream_url.split("://", 1)[1].rstrip("/")
    extra = "".join(f"\n      proxy_set_header {k} {v};" for k, v in (headers or {}).items())
    return NGINX_CONF.format(dir=directory, upstream=host_port, port=port, extra=extra)


def start_nginx(
    upstream: str, directory: str, headers: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(binary):
        raise SystemExit("--nginx: no nginx binary (Debian: apt-get install nginx-light)")
    port = free_port()
    conf = Path(directory, "nginx.conf")
    conf.write_text(nginx_conf(directory, upstream, port, headers))
    child = subprocess.Popen([binary, "-p", directory, "-c", str(conf)])
    return child, f"http://127.0.0.1:{port}"
