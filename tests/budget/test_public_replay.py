"""Replay vLLM logs that users posted publicly (fixtures/public/) under the rules of the
vLLM that wrote them: each fixture names its source, vLLM version, GPU, arguments and
the model's config.  The planner's layout must give the logged block size and padding
lines, and one whole number of blocks inside the logged pool (2-decimal GiB) must give
exactly the logged token count and concurrency (the token count alone where a fixture's
`missing` header says the concurrency line was not posted whole).  Where a log holds every
rank's lines (TP 8), each rank's pair is made from its own pool."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from budget.kv import KVCapacity, KVLayout, KVSettings, kv_capacity, kv_layout
from budget.model import model_from_config
from budget.plan import kv_model
from budget.vllm_rules import RuleChoice, choose_rules
from entrypoint.logscan import LogWatcher, Observed

FIXTURES = Path(__file__).parent / "fixtures" / "public"
GiB = 1024**3
HALF_LOGGED_GIB = 0.005 * GiB  # vLLM prints GiB with two decimals
HEADER = re.compile(r"^# ([a-z-]+): (.*)$")
BLOCK_LINE = re.compile(r"Setting attention block size to (\d+) tokens")
PADDING_LINE = re.compile(r"Padding mamba page size by [\d.]+%")
PADDING_LAYERS_LINE = re.compile(r"Add \d+ padding layers, may waste at most [\d.]+%")


@dataclass(frozen=True)
class Fixture:
    name: str
    header: dict[str, str]
    log: str

    @property
    def args(self) -> dict[str, Any]:
        return dict(json.loads(self.header["args"]))

    @property
    def vllm(self) -> RuleChoice:
        return choose_rules(self.header["vllm"])

    def observed(self) -> Observed:
        watcher = LogWatcher()
        for line in self.log.splitlines():
            watcher.feed(line)
        return watcher.snapshot()


def load(path: Path) -> Fixture:
    header: dict[str, str] = {}
    body: list[str] = []
    for line in path.read_text().splitlines():
        match = HEADER.match(line)
        if match and not body:
            header[match[1]] = match[2]
        else:
            body.append(line)
    return Fixture(path.stem, header, "\n".join(body))


FIXTURE_PATHS = sorted(FIXTURES.glob("*.log"))


def layout_for(fixture: Fixture) -> KVLayout:
    args = fixture.args
    rules = fixture.vllm.rules
    spec = model_from_config(json.loads(fixture.header["config"]), fixture.name, fixture.name)
    caching = args["prefix_caching"]
    settings = KVSettings(
        tp=args["tp"],
        device="cuda",
        kv_cache_dtype=args["kv_cache_dtype"],
        max_model_len=args["max_model_len"],
        prefix_caching=rules.hybrid_prefix_caching_default if caching is None else caching,
        mtp_k=args["mtp"],
        rules=rules,
    )
    return kv_layout(kv_model(spec, args["mtp"]), settings)


def candidate_blocks(layout: KVLayout, seen: Observed) -> range:
    """num_blocks inside the logged pool, or (no pool line) near the logged concurrency."""
    if seen.kv_cache_bytes is not None:
        low = int((seen.kv_cache_bytes - HALF_LOGGED_GIB) // layout.bytes_per_block)
        high = int((seen.kv_cache_bytes + HALF_LOGGED_GIB) // layout.bytes_per_block)
        return range(low, high + 1)
    assert seen.max_concurrency is not None
    per_request = layout.blocks_per_request
    return range(
        int((seen.max_concurrency - 0.01) * per_request),
        int((seen.max_concurrency + 0.01) * per_request) + 1,
    )


def capacities(fixture: Fixture) -> list[KVCapacity]:
    layout = layout_for(fixture)
    max_len = fixture.args["max_model_len"]
    seen = fixture.observed()
    blocks = candidate_blocks(layout, seen)
    return [kv_capacity(layout, n * layout.bytes_per_block, max_len) for n in blocks]


def family(fixture: Fixture) -> str:
    """The hybrid family: qwen3_5 for Qwen3.5/3.6 (dense `qwen3_5_text`, MoE
    `qwen3_5_moe_text`), qwen3_next for Qwen3-Next."""
    config = json.loads(fixture.header["config"])
    kind = str(config.get("text_config", config)["model_type"])
    return kind.removesuffix("_text").removesuffix("_moe")


def test_public_fixtures_cover_three_releases_two_hybrid_families_and_tp_1_2_4_8() -> None:
    """At least three vLLM versions, both hybrid model families, and TP 1, 2, 4 and 8."""
    fixtures = [load(path) for path in FIXTURE_PATHS]
    versions = {fixture.header["vllm"] for fixture in fixtures}
    assert len(versions) >= 3, versions
    assert {family(fixture) for fixture in fixtures} >= {"qwen3_5", "qwen3_next"}
    assert {fixture.args["tp"] for fixture in fixtures} >= {1, 2, 4, 8}


TP8 = FIXTURES / "ai-platform_qwen3-235b-a22b-fp8_v0.10.2_tp8.log"
RANK_POOL = re.compile(r"\(Worker_TP(\d+)_EP\d+ .*Available KV cache memory: ([\d.]+) GiB")
RANK_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
RANK_CONCURRENCY = re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x")


def test_each_rank_of_the_tp8_log_from_its_own_pool() -> None:
    """vLLM 0.10.2 logs all eight ranks: each rank's pair (tokens, concurrency) comes from
    a whole number of its own pool's blocks, with one replicated KV head a rank."""
    fixture = load(TP8)
    layout = layout_for(fixture)
    assert layout.bytes_per_block == 16 * 94 * 2 * 128 * 2  # block 16, one head a rank
    pools = {int(m[1]): float(m[2]) for m in RANK_POOL.finditer(fixture.log)}
    tokens = [int(m[1].replace(",", "")) for m in RANK_TOKENS.finditer(fixture.log)]
    concurrency = RANK_CONCURRENCY.findall(fixture.log)
    assert sorted(pools) == list(range(8)) and len(tokens) == len(concurrency) == 8
    for rank, pool_gib in pools.items():
        low = int((pool_gib * GiB - HALF_LOGGED_GIB) // layout.bytes_per_block)
        high = int((pool_gib * GiB + HALF_LOGGED_GIB) // layout.bytes_per_block)
        made = [
            kv_capacity(layout, n * layout.bytes_per_block, fixture.args["max_model_len"])
            for n in range(low, high + 1)
        ]
        assert any(
            c.kv_cache_tokens == tokens[rank] and f"{c.max_concurrency:.2f}" == concurrency[rank]
            for c in made
        ), (rank, pool_gib, tokens[rank])


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=lambda p: p.stem)
def test_fixture_names_source_version_and_config(path: Path) -> None:
    header = load(path).header
    assert header["source"].startswith("https://github.com/")
    for key in ("vllm", "args", "config", "config-source", "gpu", "model"):
        assert header.get(key), key


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=lambda p: p.stem)
def test_block_size_and_padding_lines_as_logged(path: Path) -> None:
    fixture = load(path)
    layout = layout_for(fixture)
    if logged := BLOCK_LINE.search(fixture.log):
        assert layout.block_size == int(logged[1])
    padded = any(PADDING_LINE.search(line) for line in layout.log_lines)
    assert padded == bool(PADDING_LINE.search(fixture.log)) or not BLOCK_LINE.search(fixture.log)
    if logged := PADDING_LAYERS_LINE.search(fixture.log):
        assert logged[0] in [
            m[0] for line in layout.log_lines if (m := PADDING_LAYERS_LINE.search(line))
        ]


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=lambda p: p.stem)
def test_logged_tokens_and_concurrency_from_a_whole_number_of_blocks(path: Path) -> None:
    fixture = load(path)
    seen = fixture.observed()
    assert seen.kv_cache_tokens is not None
    if seen.max_concurrency is None:  # only with a pool line, and said in the header
        assert fixture.header.get("missing") and seen.kv_cache_bytes is not None
    concurrency = None if seen.max_concurrency is None else f"{seen.max_concurrency:.2f}"
    exact = [
        c
        for c in capacities(fixture)
        if c.kv_cache_tokens == seen.kv_cache_tokens
        and concurrency in (None, f"{c.max_concurrency:.2f}")
    ]
    assert exact, [(c.num_blocks, c.kv_cache_tokens) for c in capacities(fixture)]


def test_versions_outside_the_known_releases_say_which_rules_replayed_them() -> None:
    for path in FIXTURE_PATHS:
        fixture = load(path)
        release = tuple(int(p) for p in fixture.header["vllm"].split(".")[:2])
        assert (fixture.vllm.warning is None) == ((0, 20) <= release <= (0, 34)), path.stem


def test_the_newest_rules_would_not_replay_the_0_24_log() -> None:
    """Same log, 0.33 rules and FlashInfer's GDN path (an RTX 5090 is SM 12.0): the
    block and the blocks per request change, and the logged tokens no longer come out."""
    fixture = load(FIXTURES / "club3090-612_qwen3.6-35b-a3b_v0.24.0.log")
    old = layout_for(fixture)
    new_settings = KVSettings(
        tp=1, device="cuda", kv_cache_dtype="fp8", max_model_len=131_072,
        prefix_caching=True, mtp_k=0, flashinfer_gdn_align=True,
        rules=choose_rules("0.33.0").rules,
    )  # fmt: skip
    spec = model_from_config(json.loads(fixture.header["config"]), "m", "m")
    new = kv_layout(kv_model(spec, 0), new_settings)
    assert (old.block_size, new.block_size) == (2096, 2112)
    assert new.blocks_per_request == old.blocks_per_request + 3
