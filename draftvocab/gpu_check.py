"""`python -m draftvocab.gpu_check`: the reduced draft vocabulary on a real vLLM and GPU.

Three measurements, each into its own --out directory (report.json, every vLLM log) and
printed as a table; `report` prints the tables again from report.json files:

- `equality SRC DST`: SRC is a checkpoint with an MTP module and real weights, DST what
  `python -m draftvocab SRC --out DST` made of it. vLLM serves greedy completions three
  times (SRC without speculation, SRC with MTP and the full head, DST with MTP and the
  reduced head through the plugin); the two MTP runs must give the plain run's tokens,
  token for token. `--dtype` is tried first; if vLLM does not start in it or fails its
  first request, the runs use `--fallback-dtype` and the report keeps why.
- `lm-head`: the drafter's lm_head matmul (torch's F.linear, as vLLM's unquantized head
  computes it) over the full vocabulary and over the draft rows with the plugin's
  scatter back to target ids, timed with CUDA events, and the bytes each reads.
- `decode MODEL`: MODEL served with dummy weights and MTP twice, with the full head and
  with a config that asks for `--rows` draft rows (vLLM fills the head with random values
  too), the same concurrent greedy decode against each: vLLM's inter-token-latency
  histogram (one observation per engine step and request, so its mean is the decode
  step), tokens/s and the spec-decode counters. Dummy weights accept next to nothing, so
  acceptance says nothing here; the step time does. `--local-argmax` serves both heads
  with vLLM's use_local_argmax_reduction; `--profile` adds one round per head under
  vLLM's torch profiler (OUT/profile/, compared by
  `python -m entrypoint.gpu_check.traces OUT/profile --between full reduced`).

Exit codes: 0 done (and `equality` equal); 1 `equality` found a difference, or vLLM never
became ready; 2 bad input or no CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from draftvocab.plugin import ENV, installed_vllm

PROMPTS = (
    "the agent reads a file",
    "hello world",
    "write a short report of what changed",
    "the tests pass",
    "runs the tests and edits the code until every check passes",
    "why",
)
SERVED = "m"
READY_TIMEOUT_S = 900.0
REQUEST_TIMEOUT_S = 600.0
SPEC = ("drafts", "draft_tokens", "accepted_tokens")
ITL = "vllm:inter_token_latency_seconds"
# Per request: its decode phase (first token to last) and its time to first token.
HISTOGRAMS = {
    "decode": "vllm:request_decode_time_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
}
PLUGIN_LINE = "the MTP drafter proposes from"
# An exception line of a traceback, bare or behind vLLM's log prefix ("… [file.py:N] ").
ERROR_RE = re.compile(r"(?:^|\] )([A-Z]\w*(?:Error|Exception): [^\n]*)", re.MULTILINE)


class CheckError(Exception):
    """Bad input: one line for the user."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """`python -m vllm.entrypoints.openai.api_server` in its own session, its output in a
    file."""

    def __init__(
        self,
        model: Path,
        args: Sequence[str],
        log: Path,
        draft_vocab: bool,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = dict(os.environ, **(extra_env or {}), **{ENV: "on" if draft_vocab else "off"})
        self.argv = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            SERVED,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *args,
        ]
        self.started = time.monotonic()
        with log.open("w") as out:
            out.write(f"$ {ENV}={env[ENV]} {shlex.join(self.argv)}\n")
            out.flush()
            self.proc = subprocess.Popen(
                self.argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float | None:
        """Seconds to /health answering 200; None if vLLM exited or timed out first."""
        while time.monotonic() - self.started < timeout_s:
            if self.proc.poll() is not None:
                return None
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return round(time.monotonic() - self.started, 1)
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def tail(self, lines: int = 25) -> list[str]:
        """The first exception its log names (the root cause, before the engine's own
        errors), then its last lines."""
        text = self.log.read_text(errors="replace")
        first = ERROR_RE.search(text)
        return ([first.group(1)] if first else []) + text.splitlines()[-lines:]


def complete(url: str, prompt: str, max_tokens: int, logprobs: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": SERVED,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    if logprobs:
        body["logprobs"] = 2
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S)
    answer.raise_for_status()
    choice: dict[str, Any] = answer.json()["choices"][0]
    return choice


def scrape(url: str) -> dict[str, Any]:
    """The counters and the ITL histogram this check reads from vLLM's /metrics (summed
    over label sets)."""
    found: dict[str, Any] = dict.fromkeys(SPEC, 0.0)
    found.update(itl_sum=0.0, itl_count=0.0, itl_buckets={}, generation_tokens=0.0)
    found.update({f"{k}_{part}": 0.0 for k in HISTOGRAMS for part in ("sum", "count")})
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=30).text):
        for sample in family.samples:
            for name in SPEC:
                if sample.name == f"vllm:spec_decode_num_{name}_total":
                    found[name] += sample.value
            for key, metric in HISTOGRAMS.items():
                for part in ("sum", "count"):
                    if sample.name == f"{metric}_{part}":
                        found[f"{key}_{part}"] += sample.value
            if sample.name == "vllm:generation_tokens_total":
                found["generation_tokens"] += sample.value
            elif sample.name == f"{ITL}_sum":
                found["itl_sum"] += sample.value
            elif sample.name == f"{ITL}_count":
                found["itl_count"] += sample.value
            elif sample.name == f"{ITL}_bucket":
                le = sample.labels["le"]
                found["itl_buckets"][le] = found["itl_buckets"].get(le, 0.0) + sample.value
    return found


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out = {k: after[k] - before[k] for k in after if k != "itl_buckets"}
    out["itl_buckets"] = {
        le: after["itl_buckets"][le] - before["itl_buckets"].get(le, 0.0)
        for le in after["itl_buckets"]
    }
    return out


def gpu_name() -> str:
    try:
        import torch
    except ImportError as exc:
        raise CheckError(f"this check needs torch with CUDA: {exc}") from exc
    if not torch.cuda.is_available():
        raise CheckError("no CUDA GPU here: this check measures vLLM on a GPU")
    props = torch.cuda.get_device_properties(0)
    return f"{props.name}, {props.total_memory // 2**20:,} MiB"


# equality ---------------------------------------------------------------------------------


@dataclass
class Run:
    name: str
    ready_s: float | None
    tokens: list[list[str]] = field(default_factory=list)
    margins: list[list[float]] = field(default_factory=list)
    spec: dict[str, float] = field(default_factory=dict)
    plugin_line: str = ""
    error: list[str] = field(default_factory=list)


def _plugin_line(log: Path) -> str:
    for line in log.read_text(errors="replace").splitlines():
        if PLUGIN_LINE in line:
            return line[line.index("sparkserve") :]
    return ""


def serve_greedy(
    name: str, model: Path, args: Sequence[str], out: Path, draft_vocab: bool, max_tokens: int
) -> Run:
    server = Server(model, args, out / f"{name}.log", draft_vocab)
    try:
        ready = server.wait_ready()
        run = Run(name, ready)
        if ready is None:
            run.error = server.tail()
            return run
        try:
            for prompt in PROMPTS:
                logprobs = complete(server.url, prompt, max_tokens, True)["logprobs"]
                run.tokens.append(list(logprobs["tokens"]))
                margins = []
                for top in logprobs["top_logprobs"]:
                    best = sorted(top.values(), reverse=True)
                    margins.append(round(best[0] - best[1], 4) if len(best) > 1 else 99.0)
                run.margins.append(margins)
            run.spec = {k: scrape(server.url)[k] for k in SPEC}
        except httpx.HTTPError as exc:  # vLLM started but failed a request
            run.error = [*server.tail(), f"{type(exc).__name__}: {exc}".splitlines()[0]]
    finally:
        server.stop()
    run.plugin_line = _plugin_line(out / f"{name}.log")
    return run


def first_difference(plain: dict[str, Any], other: dict[str, Any]) -> str | None:
    """Where `other`'s tokens first differ from `plain`'s (runs as in report.json)."""
    if len(other["tokens"]) != len(plain["tokens"]):
        return f"{len(other['tokens'])} answers against {len(plain['tokens'])}"
    for p, (ours, theirs) in enumerate(zip(plain["tokens"], other["tokens"], strict=True)):
        for i, (x, y) in enumerate(zip(ours, theirs, strict=False)):
            if x != y:
                return (
                    f"prompt {p}, position {i}: {y!r} instead of {x!r} (the plain run's "
                    f"margin there: {plain['margins'][p][i]} nats)"
                )
        if len(ours) != len(theirs):
            return f"prompt {p}: {len(theirs)} tokens instead of {len(ours)}"
    return None


def run_equality(args: argparse.Namespace) -> dict[str, Any]:
    for path in (args.src, args.dst):
        if not (path / "config.json").is_file():
            raise CheckError(f"{path}: no config.json (a checkpoint directory is expected)")
    if '"draft_vocab_size"' not in (args.dst / "config.json").read_text():
        raise CheckError(
            f"{args.dst}: no draft_vocab_size in config.json (make it with "
            "python -m draftvocab SRC --out DST)"
        )
    report: dict[str, Any] = {
        "check": "equality",
        "gpu": gpu_name(),
        "vllm": installed_vllm(),
        "src": str(args.src),
        "dst": str(args.dst),
        "max_tokens": args.max_tokens,
        "prompts": list(PROMPTS),
    }
    spec = [
        "--speculative-config",
        json.dumps({"method": "mtp", "num_speculative_tokens": args.mtp}),
    ]
    tried: list[dict[str, Any]] = []
    for dtype in dict.fromkeys([args.dtype, args.fallback_dtype or args.dtype]):
        base = ["--load-format", "safetensors", "--dtype", dtype, *args.vllm_args]
        plain = serve_greedy(f"plain-{dtype}", args.src, base, args.out, False, args.max_tokens)
        tried.append({"dtype": dtype, "ready_s": plain.ready_s, "error": plain.error})
        if plain.error:
            continue
        full = serve_greedy(
            f"full-{dtype}", args.src, [*base, *spec], args.out, False, args.max_tokens
        )
        reduced = serve_greedy(
            f"reduced-{dtype}", args.dst, [*base, *spec], args.out, True, args.max_tokens
        )
        report.update(
            dtype=dtype, runs={r.name.split("-")[0]: asdict(r) for r in (plain, full, reduced)}
        )
        break
    report["tried"] = tried
    return report


def equality_verdicts(report: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """(what, held, detail) for each claim, computed from the runs in `report`."""
    runs = report.get("runs")
    if not runs:
        return [("vLLM started", False, f"in none of {[t['dtype'] for t in report['tried']]}")]
    out = []
    plain = runs["plain"]
    for name in ("full", "reduced"):
        run = runs[name]
        if run["error"]:
            out.append((f"{name} head: served", False, run["error"][0]))
            continue
        diff = first_difference(plain, run)
        out.append(
            (
                f"{name} head: tokens equal the plain run's",
                diff is None,
                diff or f"{sum(map(len, run['tokens']))} tokens",
            )
        )
        spec = run["spec"]
        out.append(
            (
                f"{name} head: drafts proposed and accepted",
                spec["drafts"] > 0 and spec["accepted_tokens"] > 0,
                f"{spec['accepted_tokens']:.0f} of {spec['draft_tokens']:.0f} draft tokens "
                "accepted",
            )
        )
    out.append(
        (
            "the plugin served the reduced head",
            bool(runs["reduced"]["plugin_line"]),
            runs["reduced"]["plugin_line"] or "no plugin line in its log",
        )
    )
    return out


def render_equality(report: dict[str, Any]) -> str:
    lines = [
        f"## Equality: {report['src']} vs {report['dst']}",
        "",
        f"{report['gpu']}; vLLM {report['vllm']}; dtype {report.get('dtype', '-')}; "
        f"{len(report['prompts'])} prompts × {report['max_tokens']} greedy tokens",
        "",
    ]
    for tried in report["tried"]:
        if tried["error"]:
            what = "did not start" if tried["ready_s"] is None else "failed a request"
            lines += [f"- {tried['dtype']}: vLLM {what}: `{tried['error'][0]}`", ""]
    lines += ["| check | held | detail |", "|---|---|---|"]
    for what, held, detail in equality_verdicts(report):
        lines.append(f"| {what} | {'yes' if held else '**no**'} | {detail} |")
    return "\n".join(lines) + "\n"


# lm-head ----------------------------------------------------------------------------------


def run_lm_head(args: argparse.Namespace) -> dict[str, Any]:
    gpu = gpu_name()
    import torch
    import torch.nn.functional as F

    from draftvocab.mapping import scatter_to_target, to_target_ids

    if not 0 < args.rows < args.vocab:
        raise CheckError(f"--rows {args.rows}: must be between 1 and --vocab ({args.vocab}) - 1")
    dtype = getattr(torch, args.dtype)
    device = torch.device("cuda")
    full = torch.randn(args.vocab, args.hidden, dtype=dtype, device=device)
    reduced = full[: args.rows].clone()
    d2t = torch.zeros(args.rows, dtype=torch.long, device=device)
    targets = to_target_ids(torch.arange(args.rows, device=device), d2t)
    size = full.element_size()
    rows: list[dict[str, Any]] = []

    def timed(fn: Callable[[], object]) -> float:
        for _ in range(args.warmup):
            fn()
        times: list[float] = []
        for _ in range(args.repeats):
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            for _ in range(args.inner):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000 / args.inner)  # µs per call
        return statistics.median(times)

    for tokens in args.tokens:
        x = torch.randn(tokens, args.hidden, dtype=dtype, device=device)
        full_us = timed(lambda: F.linear(x, full))  # noqa: B023
        reduced_us = timed(lambda: F.linear(x, reduced))  # noqa: B023
        scatter_us = timed(
            lambda: scatter_to_target(F.linear(x, reduced).float(), targets, args.vocab)  # noqa: B023
        )
        # The greedy draft as vLLM's proposer takes it (llm_base_proposer.py
        # `_greedy_sample`): compute_logits(...).argmax(-1), or with
        # use_local_argmax_reduction the drafter's get_top_tokens.
        full_greedy_us = timed(lambda: F.linear(x, full).argmax(-1))  # noqa: B023
        scatter_greedy_us = timed(
            lambda: scatter_to_target(F.linear(x, reduced), targets, args.vocab).argmax(-1)  # noqa: B023
        )
        local_greedy_us = timed(
            lambda: to_target_ids(F.linear(x, reduced).argmax(-1), d2t)  # noqa: B023
        )
        rows.append(
            {
                "tokens": tokens,
                "full_us": round(full_us, 2),
                "reduced_us": round(reduced_us, 2),
                "reduced_scatter_us": round(scatter_us, 2),
                "full_greedy_us": round(full_greedy_us, 2),
                "scatter_greedy_us": round(scatter_greedy_us, 2),
                "local_greedy_us": round(local_greedy_us, 2),
            }
        )
    return {
        "check": "lm-head",
        "gpu": gpu,
        "torch": torch.__version__,
        "dtype": args.dtype,
        "hidden": args.hidden,
        "vocab": args.vocab,
        "rows": args.rows,
        "mtp": args.mtp,
        "full_bytes": args.vocab * args.hidden * size,
        "reduced_bytes": args.rows * args.hidden * size,
        "repeats": args.repeats,
        "inner": args.inner,
        "results": rows,
    }


def render_lm_head(report: dict[str, Any]) -> str:
    gib = 2**30
    k = report["mtp"]
    full_b, red_b = report["full_bytes"], report["reduced_bytes"]
    lines = [
        f"## The drafter's lm_head: {report['vocab']:,} rows against {report['rows']:,}",
        "",
        f"{report['gpu']}; torch {report['torch']}; {report['dtype']}, hidden "
        f"{report['hidden']:,}; median of {report['repeats']} × {report['inner']} calls",
        "",
        f"Bytes read per MTP-{k} round: {k} × {full_b / gib:.4f} GiB = {k * full_b / gib:.3f} GiB "
        f"(full) against {k} × {red_b / gib:.4f} GiB = {k * red_b / gib:.3f} GiB (reduced): "
        f"{red_b / full_b:.1%}.",
        "",
        "| tokens | full head µs | reduced µs | reduced ÷ full | reduced + scatter µs | "
        "(reduced + scatter) ÷ full | full GB/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["results"]:
        full, red, sc = row["full_us"], row["reduced_us"], row["reduced_scatter_us"]
        lines.append(
            f"| {row['tokens']} | {full:.1f} | {red:.1f} | {red / full:.1%} | {sc:.1f} | "
            f"{sc / full:.1%} | {full_b / full / 1000:,.0f} |"
        )
    greedy = [row for row in report["results"] if "full_greedy_us" in row]
    if greedy:
        lines += [
            "",
            "The greedy draft, head and argmax, as vLLM's proposer takes it: the full head, "
            "the reduced head scattered back to the target vocabulary (the drafter's "
            "compute_logits), and the reduced head's own argmax mapped to target ids "
            "(get_top_tokens, with use_local_argmax_reduction):",
            "",
            "| tokens | full µs | scatter µs | ÷ full | local argmax µs | ÷ full |",
            "|---|---|---|---|---|---|",
        ]
        for row in greedy:
            full, sc, local = (
                row["full_greedy_us"],
                row["scatter_greedy_us"],
                row["local_greedy_us"],
            )
            lines.append(
                f"| {row['tokens']} | {full:.1f} | {sc:.1f} | {sc / full:.1%} | "
                f"{local:.1f} | {local / full:.1%} |"
            )
    return "\n".join(lines) + "\n"


# decode -----------------------------------------------------------------------------------


def reduced_copy(model: Path, rows: int, out: Path) -> Path:
    """`model`'s files linked into `out`, its config.json asking for `rows` draft rows
    (in `text_config` where the config nests the language model there)."""
    config = json.loads((model / "config.json").read_text())
    target = config.get("text_config", config)
    if rows >= int(target["vocab_size"]):
        raise CheckError(
            f"--rows {rows}: must be below the model's vocab_size ({target['vocab_size']})"
        )
    target["draft_vocab_size"] = rows
    out.mkdir(parents=True, exist_ok=True)
    for item in model.iterdir():
        if item.name != "config.json" and not (out / item.name).exists():
            (out / item.name).symlink_to(item.resolve())
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def decode_load(url: str, streams: int, max_tokens: int) -> float:
    """`streams` concurrent greedy completions of `max_tokens` tokens; seconds it took."""
    start = time.monotonic()
    with ThreadPoolExecutor(streams) as pool:
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(streams)]
        list(pool.map(lambda p: complete(url, p, max_tokens, False), prompts))
    return time.monotonic() - start


# vLLM's torch profiler (vllm/config/profiler.py, 0.24 and 0.32): --profiler-config turns
# on POST /start_profile and /stop_profile; each stop writes a gzipped Chrome trace per
# process and profiler_out_RANK.txt (torch's key_averages table) into torch_profiler_dir.
PROFILER_FLAG = "--profiler-config"
PROFILER_CONFIG = {"profiler": "torch", "torch_profiler_with_stack": False}
PROFILE_DIR = "profile"
PROFILE_TIMEOUT_S = 600.0


def profiled_round(url: str, args: argparse.Namespace, head: str, raw: Path) -> dict[str, Any]:
    """One more round of `--profile-tokens` tokens per stream under vLLM's profiler; its
    files land in OUT/profile/ as `HEAD.round1.<vLLM's name>` (the names
    `python -m entrypoint.gpu_check.traces OUT/profile --between full reduced` reads)."""
    with httpx.Client(base_url=url) as client:
        client.post("/start_profile", timeout=PROFILE_TIMEOUT_S).raise_for_status()
        seconds = decode_load(url, args.streams, args.profile_tokens)
        client.post("/stop_profile", timeout=PROFILE_TIMEOUT_S).raise_for_status()
    named = []
    for path in sorted(raw.glob("*")) if raw.is_dir() else []:
        target = raw.parent / f"{head}.round1.{path.name}"
        path.rename(target)
        named.append(target.name)
    return {"tokens": args.profile_tokens, "seconds": round(seconds, 3), "files": named}


def run_decode(args: argparse.Namespace) -> dict[str, Any]:
    if not (args.model / "config.json").is_file():
        raise CheckError(f"{args.model}: no config.json (a model directory is expected)")
    report: dict[str, Any] = {
        "check": "decode",
        "gpu": gpu_name(),
        "vllm": installed_vllm(),
        "model": str(args.model),
        "rows": args.rows,
        "mtp": args.mtp,
        "streams": args.streams,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "local_argmax": args.local_argmax,
        "vllm_args": args.vllm_args,
        "heads": {},
    }
    earlier = args.out / "report.json"
    if args.only and earlier.is_file():  # the other head, measured by an earlier --only
        kept = json.loads(earlier.read_text())
        if all(
            kept.get(k) == report[k]
            for k in (
                "check",
                "model",
                "rows",
                "mtp",
                "streams",
                "max_tokens",
                "rounds",
                "local_argmax",
                "vllm_args",
            )
        ):
            report["heads"] = kept["heads"]
    reduced = reduced_copy(args.model, args.rows, args.out / "reduced-model")
    speculative: dict[str, Any] = {"method": "mtp", "num_speculative_tokens": args.mtp}
    if args.local_argmax:
        speculative["use_local_argmax_reduction"] = True
    serve = ["--load-format", "dummy", "--speculative-config", json.dumps(speculative)]
    serve += args.vllm_args
    # vLLM's own ranges per step ("gpu_model_runner: draft", …) in the trace.
    extra_env = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"} if args.profile else {}
    for head, model in (("full", args.model), ("reduced", reduced)):
        if args.only and head != args.only:
            continue
        trace_dir = args.out / PROFILE_DIR / f"{head}-raw"
        profiler = PROFILER_CONFIG | {"torch_profiler_dir": str(trace_dir)}
        server = Server(
            model,
            [*serve, PROFILER_FLAG, json.dumps(profiler)] if args.profile else serve,
            args.out / f"decode-{head}.log",
            head == "reduced",
            extra_env,
        )
        try:
            ready = server.wait_ready()
            entry: dict[str, Any] = {"ready_s": ready}
            if ready is None:
                entry["error"] = server.tail()
            else:
                decode_load(server.url, args.streams, args.max_tokens)  # warm-up round
                before = scrape(server.url)
                rounds = [
                    round(decode_load(server.url, args.streams, args.max_tokens), 3)
                    for _ in range(args.rounds)
                ]
                entry.update(
                    seconds=round(sum(rounds), 3),
                    round_seconds=rounds,
                    **delta(scrape(server.url), before),
                )
                if args.profile:
                    entry["profile"] = profiled_round(server.url, args, head, trace_dir)
        finally:
            server.stop()
        entry["plugin_line"] = _plugin_line(args.out / f"decode-{head}.log")
        report["heads"][head] = entry
        # Each head's result lands as soon as it is measured.
        (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def render_decode(report: dict[str, Any]) -> str:
    lines = [
        f"## Decode, MTP {report['mtp']}: full head against {report['rows']:,} draft rows",
        "",
        f"{report['gpu']}; vLLM {report['vllm']}; {report['model']} with dummy weights; "
        f"{report['streams']} streams × {report['max_tokens']} tokens × {report['rounds']} "
        "rounds after one warm-up round"
        + (
            "; both heads with use_local_argmax_reduction (the drafter's get_top_tokens)"
            if report.get("local_argmax")
            else ""
        ),
        "",
        "| head | ready s | ITL mean ms (steps) | tokens/s | accepted / draft tokens |",
        "|---|---|---|---|---|",
    ]
    means = {}
    for head, e in report["heads"].items():
        if e["ready_s"] is None:
            lines.append(f"| {head} | did not start | {' / '.join(e['error'][-2:])} | | |")
            continue
        means[head] = e["itl_sum"] / e["itl_count"] * 1000
        lines.append(
            f"| {head} | {e['ready_s']} | {means[head]:.3f} ({e['itl_count']:.0f}) | "
            f"{e['generation_tokens'] / e['seconds']:,.1f} | "
            f"{e['accepted_tokens']:.0f} / {e['draft_tokens']:.0f} |"
        )
    if len(means) == 2:
        lines += [
            "",
            f"Decode step (ITL mean), reduced ÷ full: {means['reduced'] / means['full']:.3f}.",
        ]
    profiled = {h: e["profile"] for h, e in report["heads"].items() if "profile" in e}
    if profiled:
        lines += [
            "",
            "Profiled round (vLLM's torch profiler, not counted above): "
            + "; ".join(
                f"{h} {p['tokens']} tokens per stream in {p['seconds']} s, "
                f"{len(p['files'])} file(s)"
                for h, p in profiled.items()
            )
            + ".",
        ]
    heads = [h for h, e in report["heads"].items() if e["ready_s"] is not None]
    if heads:
        lines += [
            "",
            "ITL histogram (observations per bucket, upper bound in s):",
            "",
            "| le | " + " | ".join(heads) + " |",
            "|---" * (len(heads) + 1) + "|",
        ]
        bounds = sorted(report["heads"][heads[0]]["itl_buckets"], key=float)
        previous = dict.fromkeys(heads, 0.0)
        for le in bounds:
            cells = []
            for h in heads:
                cum = report["heads"][h]["itl_buckets"].get(le, 0.0)
                cells.append(f"{cum - previous[h]:.0f}")
                previous[h] = cum
            if any(c != "0" for c in cells):
                lines.append(f"| {le} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


RENDER = {"equality": render_equality, "lm-head": render_lm_head, "decode": render_decode}


# command line -----------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of integers") from exc
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be ≥ 1")
    return values


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer ≥ 1") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be ≥ 1")
    return value


def _add_vllm_args(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--vllm-args",
        type=shlex.split,
        default=[],
        metavar="'ARGS'",
        help="more vLLM flags, one shell-quoted string",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m draftvocab.gpu_check",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True)

    eq = sub.add_parser("equality", help="greedy output: plain, full head, reduced head")
    eq.add_argument("src", type=Path, help="the checkpoint with an MTP module")
    eq.add_argument("dst", type=Path, help="python -m draftvocab SRC --out DST")
    eq.add_argument("--out", type=Path, required=True)
    eq.add_argument("--dtype", default="float32", help="vLLM's --dtype, tried first")
    eq.add_argument(
        "--fallback-dtype",
        default="bfloat16",
        help="used when vLLM does not start in --dtype or fails its first request ('' for none)",
    )
    eq.add_argument("--mtp", type=_positive, default=2, help="draft tokens per step")
    eq.add_argument("--max-tokens", type=_positive, default=32)
    _add_vllm_args(eq)

    lm = sub.add_parser("lm-head", help="the drafter's lm_head matmul, full against reduced")
    lm.add_argument("--out", type=Path, required=True)
    lm.add_argument("--hidden", type=_positive, default=2560)
    lm.add_argument("--vocab", type=_positive, default=248320)
    lm.add_argument("--rows", type=_positive, default=65536)
    lm.add_argument("--tokens", type=_ints, default=[1, 4, 16], help="batch sizes (default 1,4,16)")
    lm.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    lm.add_argument("--mtp", type=_positive, default=3, help="draft tokens per round")
    lm.add_argument("--warmup", type=_positive, default=20)
    lm.add_argument("--repeats", type=_positive, default=50)
    lm.add_argument("--inner", type=_positive, default=20)

    dec = sub.add_parser("decode", help="vLLM's decode step, full head against reduced")
    dec.add_argument("model", type=Path, help="a model directory (served with dummy weights)")
    dec.add_argument("--out", type=Path, required=True)
    dec.add_argument("--rows", type=_positive, default=65536)
    dec.add_argument("--mtp", type=_positive, default=3)
    dec.add_argument("--streams", type=_positive, default=4)
    dec.add_argument("--max-tokens", type=_positive, default=256)
    dec.add_argument("--rounds", type=_positive, default=3)
    dec.add_argument(
        "--only",
        choices=("full", "reduced"),
        help="serve one head only, keeping the other's result from an earlier "
        "run with the same settings in --out",
    )
    dec.add_argument(
        "--local-argmax",
        action="store_true",
        help="both heads with vLLM's use_local_argmax_reduction: the drafter's "
        "get_top_tokens, so the reduced head proposes without the full-vocabulary scatter",
    )
    dec.add_argument(
        "--profile",
        action="store_true",
        help="after the measured rounds, one round of --profile-tokens under vLLM's torch "
        "profiler per head: traces in OUT/profile/ "
        "(python -m entrypoint.gpu_check.traces OUT/profile --between full reduced)",
    )
    dec.add_argument("--profile-tokens", type=_positive, default=64)
    _add_vllm_args(dec)

    rep = sub.add_parser("report", help="print the tables of report.json files again")
    rep.add_argument("reports", type=Path, nargs="+", help="report.json files")
    return top


def render(report: dict[str, Any]) -> str:
    check = report.get("check")
    if check not in RENDER:
        raise CheckError(
            f"not a report of this check (check = {check!r}; known: {', '.join(RENDER)})"
        )
    return RENDER[check](report)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "report":
            for path in args.reports:
                try:
                    report = json.loads(path.read_text())
                except (OSError, ValueError) as exc:
                    raise CheckError(f"{path}: not a readable report.json ({exc})") from exc
                print(render(report))
            return 0
        args.out.mkdir(parents=True, exist_ok=True)
        run = {"equality": run_equality, "lm-head": run_lm_head, "decode": run_decode}
        report = run[args.command](args)
    except CheckError as exc:
        print(f"draftvocab.gpu_check: error: {exc}", file=sys.stderr)
        return 2
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    text = render(report)
    (args.out / "report.md").write_text(text)
    print(text)
    if report["check"] == "equality":
        return 0 if all(held for _, held, _ in equality_verdicts(report)) else 1
    if report["check"] == "decode":
        return 0 if all(e["ready_s"] is not None for e in report["heads"].values()) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
