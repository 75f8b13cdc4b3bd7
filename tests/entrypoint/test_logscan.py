from entrypoint.logscan import LogWatcher

ONE_LINE = (
    "(EngineCore pid=1) INFO 11-29 [kv_cache_utils.py:1] CPU KV cache size: 524,288 "
    "tokens, Maximum concurrency for 4,096 tokens per request: 128.00x"
)


def test_one_line_capacity():
    watcher = LogWatcher()
    phases = watcher.feed(ONE_LINE)
    seen = watcher.snapshot()
    assert (seen.kv_cache_tokens, seen.max_concurrency, seen.concurrency_model_len) == (
        524288,
        128.0,
        4096,
    )
    assert phases == ["KV cache sized: 524,288 tokens"]


def test_two_line_capacity_of_vllm_0_24():
    watcher = LogWatcher()
    watcher.feed("INFO [kv_cache_utils.py:1] GPU KV cache size: 1,282,724 tokens")
    watcher.feed(
        "INFO [kv_cache_utils.py:2] Maximum concurrency for 262,144 tokens per request: 4.89x"
    )
    seen = watcher.snapshot()
    assert (seen.kv_cache_tokens, seen.max_concurrency) == (1282724, 4.89)


def test_memory_lines():
    watcher = LogWatcher()
    assert watcher.feed("Model loading took 62.5 GiB memory and 30.1 seconds") == [
        "weights loaded (62.50 GiB)"
    ]
    watcher.feed("Available KV cache memory: 34.19 GiB")
    phases = watcher.feed("Graph capturing finished in 12 secs, took 0.45 GiB")
    seen = watcher.snapshot()
    assert seen.weights_bytes == round(62.5 * 2**30)
    assert seen.kv_cache_bytes == round(34.19 * 2**30)
    assert (seen.graph_capture_seconds, seen.cudagraph_bytes) == (12.0, round(0.45 * 2**30))
    assert phases == ["CUDA graphs captured in 12 s (0.45 GiB)"]


def test_server_and_engine_phases():
    watcher = LogWatcher()
    assert watcher.feed("init engine (profile, create kv cache, warmup model) took 3.21 s") == [
        "engine initialised in 3.21 s"
    ]
    assert watcher.feed("INFO Starting vLLM server on http://0.0.0.0:8000") == [
        "server starting on http://0.0.0.0:8000"
    ]


def test_unrelated_lines_change_nothing():
    watcher = LogWatcher()
    assert watcher.feed("INFO Loading safetensors checkpoint shards: 50% Completed") == []
    assert watcher.snapshot().kv_cache_tokens is None


def test_model_initialised_and_weights_read():
    watcher = LogWatcher()
    assert watcher.feed("[base_loader.py:82] Initializing model took 0.245516 seconds") == [
        "model initialised in 0.25 s"
    ]
    assert watcher.feed("[default_loader.py:502] Loading weights took 12.30 seconds") == [
        "weights read in 12.30 s"
    ]


COMPILED_LINE = (
    "(EngineCore pid=1) INFO [backends.py:399] Compiling a graph for compile range "
    "(1, 8192) takes 25.10 s"
)
LOADED_LINE = (
    "(EngineCore pid=1) INFO [backends.py:296] Directly load the compiled graph(s) for "
    "compile range (1, 8192) from the cache, took 3.546 s"
)


def test_a_cold_and_a_warm_compile_cache():
    """compilation/backends.py logs one line or the other per compile range; a start that
    loaded the model's graphs but compiled its drafter's is not warm."""
    cold, warm, mixed = LogWatcher(), LogWatcher(), LogWatcher()
    assert cold.feed(COMPILED_LINE) == ["torch.compile ran (graphs not in the compile cache)"]
    assert warm.feed(LOADED_LINE) == ["compiled graphs loaded from the compile cache"]
    mixed.feed(LOADED_LINE)
    mixed.feed(COMPILED_LINE)
    assert [w.snapshot().compile_cache for w in (cold, warm, mixed)] == [
        "compiled",
        "loaded",
        "compiled",
    ]
    assert LogWatcher().snapshot().compile_cache is None
