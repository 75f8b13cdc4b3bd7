"""Pure helpers of the suite: percentiles, metric parsing, SSE judging, mixes, docs, deps."""

from __future__ import annotations

import math
import random

import pytest

from reliability import promtext
from reliability.cases_hostile import compare_digest_sites, derived_salts, secret_hits
from reliability.cases_load import RampTally, arrival_spread, max_overlap, mix_plan
from reliability.client import StreamOutcome
from reliability.deps import findings, read_ignore_list, stage_users
from reliability.docs import BEGIN, END, DocsError, replace_block
from reliability.events import StreamTally, is_openai_error
from reliability.stack import ROOT
from reliability.stats import Spread, percentile


def test_percentile_interpolates_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert math.isnan(percentile([], 50))


def test_percentile_refuses_q_outside_0_100():
    with pytest.raises(ValueError, match="q=101; must be within 0..100"):
        percentile([1.0], 101)


def test_spread_in_milliseconds():
    assert Spread.of([0.010, 0.020, 0.030]).ms() == "20/29/30 ms"
    assert Spread.of([]).ms() == "none"


METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
gateway_prompt_tokens_total{tenant="bob"} 12.0
"""


def test_promtext_sums_over_label_sets_and_filters_by_label():
    assert promtext.total(METRICS, "vllm:num_requests_running") == 4.0
    assert promtext.total(METRICS, "vllm:num_requests_running", engine="1") == 1.0
    assert promtext.total(METRICS, "vllm:kv_cache_usage_perc") == 0.25
    assert math.isnan(promtext.total(METRICS, "vllm:num_requests_waiting"))


def chunk(payload: str) -> bytes:
    return f"data: {payload}\n\n".encode()


def test_tally_counts_tokens_usage_and_done_across_split_chunks():
    tally = StreamTally()
    stream = (
        chunk('{"choices": [{"text": "a", "token_ids": [5]}]}')
        + chunk('{"choices": [{"text": "bc", "token_ids": [6, 7], "finish_reason": "length"}]}')
        + chunk('{"choices": [], "usage": {"completion_tokens": 3}}')
        + chunk("[DONE]")
    )
    for start in range(0, len(stream), 7):  # events span network reads
        tally.feed(stream[start : start + 7], float(start))
    assert (tally.tokens, tally.done, tally.malformed) == (3, True, 0)
    assert tally.usage == {"completion_tokens": 3} and tally.finish_reason == "length"
    assert len(tally.token_times) == 2 and not tally.truncated_event


def test_tally_flags_malformed_events_errors_and_a_cut_fragment():
    tally = StreamTally()
    tally.feed(chunk("{not json") + b"event: x\n\n" + chunk('{"error": {"message": "m"}}'), 0.0)
    tally.feed(b'data: {"choi', 1.0)
    assert tally.malformed == 2
    assert tally.error == {"message": "m"}
    assert tally.truncated_event and not tally.done


def test_tally_counts_events_after_done():
    tally = StreamTally()
    tally.feed(chunk("[DONE]") + chunk('{"choices": []}'), 0.0)
    assert tally.after_done == 1


TOKEN = '{"choices": [{"text": "a", "token_ids": [5]}]}'


def _outcome(status: int = 200, feed: bytes = b"", **fields: object) -> StreamOutcome:
    outcome = StreamOutcome(started=0.0, status=status, **fields)  # type: ignore[arg-type]
    outcome.tally.feed(feed, 1.0)
    return outcome


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (_outcome(feed=chunk('{"choices": [{"text": "a"}]}') + chunk("[DONE]")), None),
        (_outcome(hung=True), "no end within the client's timeout"),
        (_outcome(transport_error="ReadTimeout"), "transport error ReadTimeout"),
        (_outcome(503, body=b'{"error": {"message": "down"}}'), 'status 503: {"error"'),
        (_outcome(feed=chunk('{"error": {"message": "boom"}}')), "error event: {'message'"),
        (_outcome(feed=chunk("{oops") + chunk("[DONE]")), "1 malformed events"),
        (_outcome(feed=b'data: {"choi'), "ended inside an event"),
        (_outcome(feed=chunk(TOKEN)), "ended without [DONE] after 1 tokens"),
        (_outcome(feed=chunk("[DONE]") + chunk("[DONE]")), "1 events after [DONE]"),
    ],
)
def test_stream_outcome_says_why_it_failed(outcome, reason):
    assert (outcome.failure() is None) == outcome.complete
    if reason is None:
        assert outcome.failure() is None
    else:
        assert reason in (outcome.failure() or "")


def test_ramp_tally_counts_failures_by_reason():
    tally = RampTally([], [])
    for outcome in (_outcome(hung=True), _outcome(hung=True), _outcome(502, body=b"bad")):
        tally.add(outcome)
    assert tally.errors == 3
    assert tally.reasons == {"no end within the client's timeout": 2, "status 502: bad": 1}


@pytest.mark.parametrize(
    ("body", "shaped"),
    [
        ({"error": {"message": "bad", "type": "invalid_request_error"}}, True),
        ({"error": {"message": "", "type": "x"}}, False),
        ({"detail": "Not Found"}, False),
        ("Internal Server Error", False),
        (None, False),
    ],
)
def test_openai_error_shape(body, shaped):
    assert is_openai_error(body) is shaped


def test_mix_plan_keeps_the_30_50_20_split():
    kinds = mix_plan(20, random.Random(1))
    assert (kinds.count("short"), kinds.count("medium"), kinds.count("long")) == (6, 10, 4)
    assert len(mix_plan(7, random.Random(1))) == 7


def test_docs_block_is_replaced_between_markers_only():
    text = f"intro\n{BEGIN}\nold\n{END}\noutro\n"
    assert replace_block(text, "new table\n") == f"intro\n{BEGIN}\nnew table\n{END}\noutro\n"
    with pytest.raises(DocsError, match="no"):
        replace_block("no markers", "t")


def test_stage_users_reads_each_stage_and_defaults_to_root():
    dockerfile = "FROM a AS base\nUSER 10001\nFROM b AS gateway\nRUN x\nUSER app\nFROM c AS vllm\n"
    assert stage_users(dockerfile) == {"base": "10001", "gateway": "app", "vllm": "root"}


def test_pip_audit_findings_from_its_json():
    report = (
        '{"dependencies": [{"name": "a", "version": "1", "vulns": [{"id": "GHSA-1"}]},'
        ' {"name": "b", "version": "2", "vulns": []}]}'
    )
    assert findings(report) == ["a 1: GHSA-1"]


def test_ignore_list_is_comment_tolerant(tmp_path):
    path = tmp_path / "ignore.txt"
    path.write_text("# header\nGHSA-aaaa  # why\n\nPYSEC-1\n")
    assert read_ignore_list(path) == ["GHSA-aaaa", "PYSEC-1"]
    assert isinstance(read_ignore_list(), list)  # the shipped list parses


def test_secret_hits_names_the_log_and_the_secret():
    hits = secret_hits({"gateway": "ok", "entrypoint": "key sk-1 leaked"}, {"alice key": "sk-1"})
    assert hits == {"gateway": [], "entrypoint": ["alice key"]}


def test_derived_salts_match_the_gateways_salt_maker():
    from gateway.core.tenancy import SaltMaker

    maker = SaltMaker(b"s3cret", {})
    salts = derived_salts("s3cret", ["alice"], "mine")
    assert salts == [maker.salt_for("alice"), maker.salt_for("alice", "mine")]


def test_the_gateway_compares_keys_with_compare_digest():
    assert any(
        site.startswith("gateway/core/tenancy.py:")
        for site in compare_digest_sites(ROOT / "gateway")
    )


def _span(head: float, end: float, status: int = 200) -> StreamOutcome:
    return StreamOutcome(started=0.0, status=status, head_at=head, ended=end)


def test_max_overlap_counts_streams_streaming_at_once():
    spans = [_span(0.0, 1.0), _span(0.5, 2.0), _span(0.9, 1.5), _span(1.0, 3.0)]
    assert max_overlap(spans) == 3  # 0.9-1.0; the first ends as the fourth begins
    assert max_overlap([*spans, _span(1.2, 1.3, status=429)]) == 3  # refusals do not stream
    assert max_overlap([_span(0.0, 1.0), _span(1.0, 2.0)]) == 1  # back to back
    assert max_overlap([]) == 0


def test_arrival_spread_is_first_to_last_head():
    assert arrival_spread([_span(2.0, 3.0), _span(0.5, 1.0), _span(1.0, 1.0, 429)]) == 1.5
    assert arrival_spread([]) == 0.0
