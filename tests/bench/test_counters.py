import pytest

from bench.counters import delta, derived, is_server_cold, parse_metrics

BEFORE = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="tiny"} 50.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 10.0
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{engine="0",model_name="tiny"} 0.0
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 150.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 0.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 1.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 150.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 0.0
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.5
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",\
engine="0"} 1.0
"""

AFTER = """\
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 400.0
vllm:prompt_tokens_total{engine="1",model_name="tiny"} 50.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 70.0
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{engine="0",model_name="tiny"} 256.0
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 194.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 256.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 3.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 450.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 256.0
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 20.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 60.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 30.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 4.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1.0
"""


def test_parse_sums_engines_and_keeps_counters_only():
    snap = parse_metrics(BEFORE)
    assert snap.get("vllm:prompt_tokens_total") == 150.0
    assert snap.get("vllm:time_to_first_token_seconds_sum") == 0.5
    assert snap.get("vllm:time_to_first_token_seconds_count") == 2.0
    assert "vllm:num_requests_running" not in snap.values
    assert "process_cpu_seconds_total" not in snap.values
    assert not any("_bucket" in key for key in snap.values)
    assert snap.get('vllm:prompt_tokens_by_source_total{source="local_compute"}') == 150.0


def test_parse_reads_cache_config_info_labels():
    snap = parse_metrics(BEFORE)
    assert snap.info["cache_dtype"] == "auto"
    assert snap.info["enable_prefix_caching"] == "True"
    assert "engine" not in snap.info


def test_delta_counts_new_series_from_zero_and_drops_unchanged():
    d = delta(parse_metrics(BEFORE), parse_metrics(AFTER))
    assert d["vllm:prompt_tokens_total"] == 300.0
    assert d["vllm:spec_decode_num_drafts_total"] == 20.0
    assert "vllm:time_to_first_token_seconds_sum" not in d


def test_derived_rates_follow_vllm_definitions():
    out = derived(delta(parse_metrics(BEFORE), parse_metrics(AFTER)))
    assert out["prompt_tokens"] == 300.0
    assert out["generation_tokens"] == 60.0
    assert out["cached_prompt_tokens"] == 256.0
    assert out["prompt_tokens_by_source"] == {"local_compute": 44.0, "local_cache_hit": 256.0}
    assert out["prefix_cache_hit_rate"] == pytest.approx(256 / 300)
    assert out["preemptions"] == 2.0
    assert out["spec_decode_acceptance_rate"] == pytest.approx(0.5)  # accepted / draft tokens
    assert out["spec_decode_mean_acceptance_length"] == pytest.approx(2.5)  # 1 + 30/20
    assert out["requests_finished"] == 5.0


def test_derived_without_spec_decode_leaves_rates_empty():
    out = derived({})
    assert out["spec_decode_acceptance_rate"] is None
    assert out["spec_decode_mean_acceptance_length"] is None
    assert out["prefix_cache_hit_rate"] is None


def test_cold_server_has_counted_no_prompt_tokens():
    assert not is_server_cold(parse_metrics(BEFORE))
    assert is_server_cold(
        parse_metrics(
            '# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine="0"} 0.0\n'
        )
    )
