"""entrypoint/gpu_check/first_request.py: how a stream is timed and how runs are summarised (the
measuring itself ran on the H200; its records are replayed in test_gpu_h200_entrypoint)."""

import dataclasses
import json
import math

import httpx
import pytest

from entrypoint.gpu_check.first_request import (
    Round,
    Run,
    Stream,
    load_run,
    render_table,
    stream,
    summarise,
)
from entrypoint.gpu_check.host import HostUse


def sse(events: list[dict]) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def client_answering(events: list[dict], seen: list[dict]) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(
            200, content=sse(events), headers={"content-type": "text/event-stream"}
        )

    return httpx.Client(base_url="http://vllm", transport=httpx.MockTransport(answer))


def test_only_events_that_add_tokens_are_timed():
    events = [
        {"choices": [{"delta": {"role": "assistant"}}], "usage": {"completion_tokens": 0}},
        {"choices": [{"text": "a"}], "usage": {"completion_tokens": 1}},
        {"choices": [{"text": ""}], "usage": {"completion_tokens": 3}},  # empty text, 2 tokens
        {"choices": [], "usage": {"completion_tokens": 3}},  # the usage-only last chunk
    ]
    seen: list[dict] = []
    with client_answering(events, seen) as client:
        timed = stream(client, "/v1/completions", {"model": "m", "prompt": [5, 6]})
    assert timed.tokens == 3 and len(timed.gaps_seconds) == 1
    assert seen[0]["stream"] and seen[0]["ignore_eos"]
    assert seen[0]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_a_stream_without_tokens_is_an_error():
    with client_answering([{"choices": [], "usage": {"completion_tokens": 0}}], []) as client:
        with pytest.raises(RuntimeError, match="no token"):
            stream(client, "/v1/completions", {"model": "m", "prompt": [5]})


def test_first_round_against_the_median_of_the_rest_worst_stream_for_concurrent():
    def one(ttft: float, gap: float) -> Stream:
        return Stream(ttft, [gap] * 10, 11)

    rounds = [
        Round("decode_x4", 0.0, [one(1.0, 0.02), one(0.5, 0.01)]),
        Round("decode_x4", 1.0, [one(0.1, 0.01), one(0.1, 0.01)]),
        Round("decode_x4", 2.0, [one(0.2, 0.01), one(0.1, 0.01)]),
        Round("decode_x4", 3.0, [one(0.3, 0.01), one(0.1, 0.01)]),
    ]
    (summary,) = summarise(Run("x", rounds))
    assert summary.first_ttft_seconds == 1.0 and summary.steady_ttft_seconds == 0.2
    assert summary.ttft_ratio == pytest.approx(5.0) and summary.gap_ratio == pytest.approx(2.0)
    table = render_table(Run("x", rounds)).splitlines()
    assert table[2].split()[:2] == ["decode_x4", "1000.0"] and "5.00x" in table[2]


def test_the_steady_rounds_own_spread_is_their_worst_ratio_to_the_median_of_the_others():
    def round_of(ttft: float, gap: float) -> Round:
        return Round("chat", 0.0, [Stream(ttft, [gap] * 8, 9)])

    # steady TTFTs 0.10, 0.20, 0.12, 0.10: the 0.20 round against the median of
    # (0.10, 0.12, 0.10) = 0.10 is 2.0×; every gap is equal, so 1.0×.
    rounds = [round_of(0.5, 0.01)] + [round_of(t, 0.01) for t in (0.10, 0.20, 0.12, 0.10)]
    (summary,) = summarise(Run("x", rounds))
    assert summary.steady_ttft_spread == pytest.approx(2.0)
    assert summary.steady_gap_spread == pytest.approx(1.0)
    assert summary.ttft_ratio == pytest.approx(0.5 / 0.11)
    row = render_table(Run("x", rounds)).splitlines()[2]
    assert "2.00x" in row and row.split()[-1] == "1.00x"


def test_one_steady_round_has_no_spread():
    rounds = [Round("chat", t, [Stream(0.1, [0.01], 2)]) for t in (0.0, 1.0)]
    (summary,) = summarise(Run("x", rounds))
    assert math.isnan(summary.steady_ttft_spread) and math.isnan(summary.steady_gap_spread)


def test_a_run_with_host_readings_comes_back_from_its_json(tmp_path):
    host = HostUse(1.5, 0.9, 12, 0.2, 0.0, None, 2400.0, {"VLLM::EngineCore": 0.7})
    run = Run("x", [Round("chat", 0.0, [Stream(0.1, [0.01, 0.02], 3)], host)])
    path = tmp_path / "run.json"
    path.write_text(json.dumps(dataclasses.asdict(run)))
    assert load_run(path) == run
    bare = {"label": "y", "rounds": [{"shape": "chat", "seconds_after_ready": 0.0,
                                      "streams": [{"ttft_seconds": 0.1, "gaps_seconds": [],
                                                   "tokens": 1}]}]}  # fmt: skip
    path.write_text(json.dumps(bare))
    assert load_run(path).rounds[0].host is None  # runs recorded before host readings
