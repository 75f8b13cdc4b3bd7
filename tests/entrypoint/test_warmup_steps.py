"""Warm-up steps against a stand-in vLLM (httpx.MockTransport: no socket is needed to
check which requests the steps send)."""

import json

import httpx

from entrypoint.warmup import Shape, build_steps


def recording_client(sent: list[dict]) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append({"path": request.url.path, **body})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [ord(c) for c in body["prompt"]]})
        return httpx.Response(200, json={"choices": []})

    return httpx.Client(base_url="http://vllm", transport=httpx.MockTransport(answer))


def test_prefill_sizes_step_sends_n_and_n_plus_1_tokens_each_with_its_own_prefix():
    sent: list[dict] = []
    with recording_client(sent) as client:
        steps = build_steps(
            client, "m", Shape(262144, 4, 2048, 3, capture_sizes=(4, 8), fused_moe=True)
        )
        sent.clear()
        (step,) = [s for s in steps if s.name == "prefill_sizes"]
        step.run(client)
    prompts = [r["prompt"] for r in sent if r["path"] == "/v1/completions"]
    sizes = [24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536]
    assert [len(p) for p in prompts] == [length for n in sizes for length in (n, n + 1)]
    assert all(r["max_tokens"] == 1 for r in sent)
    assert len({tuple(p[:16]) for p in prompts}) == len(prompts)  # no shared first block
    assert [s.name for s in steps][:4] == ["chat", "stream", "long_prompt", "prefill_sizes"]
