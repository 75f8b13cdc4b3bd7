import pytest

from bench import agent_loop, long_context, mixed, short_chat
from tests.bench.synthetic import records


def _of(name):
    return [r for r in records() if r.workload == name]


def test_short_chat_levels_aggregate_tokens_per_second():
    out = short_chat.summarize(_of("short-chat"))
    level = out["levels"]["c=2"]
    assert level["requests"] == 2 and level["output_tokens"] == 6
    assert level["output_tok_s"] == pytest.approx(6 / (3.401 - 3.0))
    assert level["ttft_s"]["p50"] == pytest.approx(0.2)
    assert level["itl_s"]["p50"] == pytest.approx(0.1)
    assert out["best_output_tok_s"] == pytest.approx(level["output_tok_s"])


def test_agent_loop_hit_rate_after_first_turn_per_target():
    out = agent_loop.summarize(_of("agent-loop"))
    direct = out["targets"]["direct"]
    assert [t["turn"] for t in direct["turns"]] == [0, 1, 2]
    assert direct["turns"][1]["recomputed_tokens"] == 1100 - 256
    assert direct["hit_rate_after_first"] == pytest.approx(512 / (1100 + 1200))
    assert set(out["targets"]) == {"direct", "gateway"}


def test_agent_loop_hit_rate_unknown_when_server_does_not_report_cached_tokens():
    rs = [r.__class__(**{**r.__dict__, "cached_tokens": None}) for r in _of("agent-loop")]
    assert agent_loop.summarize(rs)["targets"]["direct"]["hit_rate_after_first"] is None


def test_mixed_gaps_during_prefill_and_prefill_rate():
    out = mixed.summarize(_of("mixed"))
    assert out["prefill_window_s"] == [20.4, 20.95]
    # the 20.45 → 21.0 stall overlaps the prefill window in both streams
    assert out["gap_during_prefill_s"]["max"] == pytest.approx(0.55)
    assert out["gap_before_prefill_s"]["p50"] == pytest.approx(0.05)
    assert out["prefill_tok_s"] == pytest.approx(2000 / 0.55)
    assert out["solo_prefill_tok_s"] == pytest.approx(2000 / 0.4)
    assert out["streams_outlasted_prefill"] is True


def test_mixed_without_a_prefill_token_says_so():
    rs = [r for r in _of("mixed") if r.group != "prefill"]
    assert "error" in mixed.summarize(rs)


def test_long_context_prefill_rate():
    out = long_context.summarize(_of("long-context"))
    assert out["requests"][0]["prefill_tok_s"] == pytest.approx(3600 / 0.8)
    assert out["ttft_s"]["p50"] == pytest.approx(0.8)
