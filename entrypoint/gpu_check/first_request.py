"""First request vs steady state: TTFT and the first inter-token gaps, per request shape.

Run right after the entrypoint's `/ready` turns 200. Three shapes, each first once
(the "first request" a user of that shape meets), then `--steady N` more times:

- `chat`: a short streamed chat (the chat template path);
- `long_prompt`: a streamed completion of a prompt longer than one prefill chunk
  (2.5 chunks by default, as the warm-up's long prompt);
- `decode_xN`: N streamed completions sent together (N concurrent decodes; 4 by default).

Every prompt starts with its own random token ids, so no request hits another's
cached prefix (prefix caching is on), warm-up's included. Times come from the SSE
events as they arrive: TTFT is send → first event with a token (vLLM's continuous
usage stats count the tokens of each event), a gap is the time between two events
that added tokens. `python -m entrypoint.gpu_check` runs it after its start; alone, against
any vLLM that serves the shapes:

    python -m entrypoint.gpu_check.first_request --url http://127.0.0.1:8000 --model m --json FILE
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from entrypoint.gpu_check.host import HostMeter, HostUse, Reading

FIRST_GAPS = 8  # the inter-token gaps compared (the first ones a user sees)
CHAT_TOKENS = 32
LONG_PROMPT_TOKENS = 5_000  # > one 2,048-token chunk: three prefill chunks
LONG_TOKENS = 16
DECODE_WIDTH = 4
DECODE_PROMPT_TOKENS = 64
DECODE_TOKENS = 32
TOKEN_IDS = (3, 1000)  # inside the tiny tokenizer's vocabulary, clear of its specials
TIMEOUT_S = 300.0
# Wraps one round: (shape, round index; 0 = the first request) → a context manager.
Around = Callable[[str, int], contextlib.AbstractContextManager[None]]


@dataclass(frozen=True)
class Stream:
    """One streamed request: seconds from send to each event that added tokens."""

    ttft_seconds: float
    gaps_seconds: list[float]
    tokens: int

    def first_gaps_mean(self, n: int = FIRST_GAPS) -> float:
        gaps = self.gaps_seconds[:n]
        return statistics.fmean(gaps) if gaps else float("nan")


@dataclass(frozen=True)
class Round:
    """One request of a shape (decode_x4: its 4 streams), `seconds_after_ready` when sent;
    `host`: what the host's CPUs did meanwhile, where it was read."""

    shape: str
    seconds_after_ready: float
    streams: list[Stream]
    host: HostUse | None = None

    @property
    def ttft_seconds(self) -> float:
        """The slowest stream's TTFT (what the last of the concurrent users waits)."""
        return max(s.ttft_seconds for s in self.streams)

    @property
    def gap_seconds(self) -> float:
        """The mean of the first gaps, worst stream."""
        return max(s.first_gaps_mean() for s in self.streams)


@dataclass(frozen=True)
class Run:
    label: str
    rounds: list[Round] = field(default_factory=list)

    @property
    def shapes(self) -> list[str]:
        """The shapes in the order they were first sent."""
        return list(dict.fromkeys(r.shape for r in self.rounds))


@dataclass(frozen=True)
class ShapeSummary:
    """A shape's first round against its steady ones; `steady_*_spread`: the steady
    rounds' own worst ratio (`own_spread`), the same ratio for rounds with nothing first
    about them, so a first request's ratio reads against the host's round-to-round spread."""

    shape: str
    first_ttft_seconds: float
    steady_ttft_seconds: float
    first_gap_seconds: float
    steady_gap_seconds: float
    steady_ttft_spread: float = float("nan")
    steady_gap_spread: float = float("nan")

    @property
    def ttft_ratio(self) -> float:
        return self.first_ttft_seconds / self.steady_ttft_seconds

    @property
    def gap_ratio(self) -> float:
        return self.first_gap_seconds / self.steady_gap_seconds


def peer_ratios(values: Sequence[float]) -> list[float]:
    """Each value against the median of the others (none below two values)."""
    if len(values) < 2:
        return []
    return [v / statistics.median([*values[:i], *values[i + 1 :]]) for i, v in enumerate(values)]


def own_spread(values: Sequence[float]) -> float:
    """The largest ratio of one value to the median of the others (nan below two)."""
    return max(peer_ratios(values), default=float("nan"))


def summarise(run: Run) -> list[ShapeSummary]:
    """Per shape: its first round against the median of the later ones."""
    out = []
    for shape in run.shapes:
        rounds = [r for r in run.rounds if r.shape == shape]
        if len(rounds) < 2:
            continue
        first, steady = rounds[0], rounds[1:]
        out.append(
            ShapeSummary(
                shape,
                first.ttft_seconds,
                statistics.median(r.ttft_seconds for r in steady),
                first.gap_seconds,
                statistics.median(r.gap_seconds for r in steady),
                own_spread([r.ttft_seconds for r in steady]),
                own_spread([r.gap_seconds for r in steady]),
            )
        )
    return out


def render_table(run: Run) -> str:
    header = (
        f"{'shape':<12} {'first TTFT':>11} {'steady TTFT':>12} {'ratio':>6} {'spread':>7} "
        f"{'first gaps':>11} {'steady gaps':>12} {'ratio':>6} {'spread':>7}"
    )
    rows = [
        f"{run.label}: first request vs steady (median), gaps = mean of first 8; spread = "
        "the steady rounds' own worst ratio to the median of the others",
        header,
    ]
    for s in summarise(run):
        rows.append(
            f"{s.shape:<12} {s.first_ttft_seconds * 1000:>8.1f} ms "
            f"{s.steady_ttft_seconds * 1000:>9.1f} ms {s.ttft_ratio:>5.2f}x "
            f"{s.steady_ttft_spread:>6.2f}x "
            f"{s.first_gap_seconds * 1000:>8.2f} ms {s.steady_gap_seconds * 1000:>9.2f} ms "
            f"{s.gap_ratio:>5.2f}x {s.steady_gap_spread:>6.2f}x"
        )
    return "\n".join(rows)


def load_run(path: Path) -> Run:
    return run_from_dict(json.loads(path.read_text()))


def run_from_dict(data: dict[str, Any]) -> Run:
    """A run from its JSON form (`asdict`; report.json's `first_request`)."""
    rounds = [
        Round(
            r["shape"],
            r["seconds_after_ready"],
            [Stream(**s) for s in r["streams"]],
            HostUse(**r["host"]) if r.get("host") else None,
        )
        for r in data["rounds"]
    ]
    return Run(data["label"], rounds)


def _events(answer: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in answer.iter_lines():
        if line.startswith("data:") and line.strip() != "data: [DONE]":
            yield json.loads(line.removeprefix("data:"))


def stream(client: httpx.Client, path: str, body: dict[str, Any]) -> Stream:
    """Send one streamed request; time each event that brought tokens."""
    body = {
        **body,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    started = time.perf_counter()
    stamps: list[float] = []
    tokens = 0
    with client.stream("POST", path, json=body) as answer:
        answer.raise_for_status()
        for event in _events(answer):
            usage = event.get("usage") or {}
            count = int(usage.get("completion_tokens") or 0)
            if event.get("choices") and count > tokens:
                stamps.append(time.perf_counter() - started)
                tokens = count
    if not stamps:
        raise RuntimeError(f"{path}: the stream carried no token")
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return Stream(stamps[0], gaps, tokens)


def random_ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(*TOKEN_IDS) for _ in range(n)]


@dataclass(frozen=True)
class Sizes:
    """How big the long prompt is and how many decodes run together."""

    long_prompt_tokens: int = LONG_PROMPT_TOKENS
    concurrent: int = DECODE_WIDTH

    def __post_init__(self) -> None:
        if self.long_prompt_tokens < 1 or self.concurrent < 1:
            raise ValueError(f"{self}: the long prompt and the concurrency must be ≥ 1")

    @property
    def shapes(self) -> tuple[str, ...]:
        return ("chat", "long_prompt", f"decode_x{self.concurrent}")


class Shapes:
    """The three request shapes against one vLLM; fresh random prefixes each call."""

    def __init__(self, client: httpx.Client, model: str, seed: int, sizes: Sizes) -> None:
        self.client = client
        self.model = model
        self.rng = random.Random(seed)
        self.sizes = sizes

    def chat(self) -> list[Stream]:
        words = " ".join(str(i) for i in random_ids(self.rng, 6))
        body = {
            "model": self.model,
            "max_tokens": CHAT_TOKENS,
            "messages": [{"role": "user", "content": f"{words} Hello! How big is the cache?"}],
        }
        return [stream(self.client, "/v1/chat/completions", body)]

    def _completion(self, prompt_tokens: int, max_tokens: int) -> Stream:
        body = {
            "model": self.model,
            "prompt": random_ids(self.rng, prompt_tokens),
            "max_tokens": max_tokens,
        }
        return stream(self.client, "/v1/completions", body)

    def long_prompt(self) -> list[Stream]:
        return [self._completion(self.sizes.long_prompt_tokens, LONG_TOKENS)]

    def concurrent(self) -> list[Stream]:
        width = self.sizes.concurrent
        with ThreadPoolExecutor(width) as pool:
            jobs = [
                pool.submit(self._completion, DECODE_PROMPT_TOKENS, DECODE_TOKENS)
                for _ in range(width)
            ]
            return [job.result() for job in jobs]

    def send(self, shape: str) -> list[Stream]:
        if shape == "chat":
            return self.chat()
        return self.long_prompt() if shape == "long_prompt" else self.concurrent()


def measure(
    client: httpx.Client,
    model: str,
    label: str,
    steady: int,
    ready_at: float,
    seed: int = 0,
    sizes: Sizes | None = None,
    around: Around | None = None,
    host: HostMeter | None = None,
) -> Run:
    """Each shape first once (chat, long prompt, concurrent), then `steady` rounds of all
    three; `client` is vLLM's (base URL and key set). `around(shape, index)` wraps each
    round (index 0 is the first request), e.g. in vLLM's profiler; `host` reads the
    host's CPUs over each round's requests (inside `around`)."""
    sizes = sizes or Sizes()
    run = Run(label)
    shapes = Shapes(client, model, seed, sizes)
    for index in range(1 + steady):
        for shape in sizes.shapes:
            sent = time.time() - ready_at
            with around(shape, index) if around else contextlib.nullcontext():
                with host.round() if host else contextlib.nullcontext(Reading()) as reading:
                    streams = shapes.send(shape)
            run.rounds.append(Round(shape, sent, streams, reading.use))
    return run


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint.gpu_check.first_request",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="vLLM's OpenAI server")
    parser.add_argument("--model", default="m", help="served model name")
    parser.add_argument("--label", default="run", help="the run's name in the table and JSON")
    parser.add_argument("--steady", type=int, default=5, help="rounds after the first")
    parser.add_argument("--ready-at", type=float, help="epoch seconds /ready turned 200")
    parser.add_argument("--seed", type=int, default=0, help="random prompt ids")
    parser.add_argument(
        "--long-prompt-tokens", type=int, default=LONG_PROMPT_TOKENS, help="the long prompt"
    )
    parser.add_argument(
        "--concurrent", type=int, default=DECODE_WIDTH, help="decodes sent together"
    )
    parser.add_argument("--json", type=Path, help="write the run here")
    parser.add_argument(
        "--server-pid",
        type=int,
        help="read the host's CPUs over each round: this process and its descendants "
        "are the server (entrypoint/gpu_check/host.py)",
    )
    args = parser.parse_args(argv)
    if args.steady < 1:
        parser.error(f"--steady {args.steady}: must be ≥ 1")
    if args.long_prompt_tokens < 1 or args.concurrent < 1:
        parser.error("--long-prompt-tokens and --concurrent must be ≥ 1")
    if args.server_pid is not None and not psutil.pid_exists(args.server_pid):
        parser.error(f"--server-pid {args.server_pid}: no such process")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ready_at = args.ready_at if args.ready_at is not None else time.time()
    sizes = Sizes(args.long_prompt_tokens, args.concurrent)
    with httpx.Client(base_url=args.url, timeout=TIMEOUT_S) as client:
        host = HostMeter(args.server_pid) if args.server_pid is not None else None
        run = measure(
            client, args.model, args.label, args.steady, ready_at, args.seed, sizes, None, host
        )
    if args.json:
        args.json.write_text(json.dumps(asdict(run), indent=1) + "\n")
    print(render_table(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
