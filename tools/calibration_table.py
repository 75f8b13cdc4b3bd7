"""Planned vs observed, per term, for the recorded H200 runs (docs/gpu-calibration.md).

python -m tools.calibration_table            # print the Markdown table
python -m tools.calibration_table --write    # rewrite it in the doc
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget.kv import KVCapacity, kv_capacity
from budget.options import PlanOptions
from budget.plan import Plan
from budget.planner import build_plan
from entrypoint.calibration import planned_weights_bytes
from entrypoint.gpu_check.compare import PROFILED_REST, Figure, figures
from entrypoint.gpu_check.models import write_profile_model
from entrypoint.logscan import Observed, observed_in

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "budget" / "fixtures" / "gpu_h200"
DOC = ROOT / "docs" / "gpu-calibration.md"
GiB = 1024**3
FDO = "FULL_DECODE_ONLY"
# The runs' vLLM (summary.txt); the plans follow its rules (budget/vllm_rules.py).
ARTICLE_SETTINGS: dict[str, Any] = {
    "max_num_seqs": 4,
    "max_num_batched_tokens": 2048,
    "vllm_version": "0.24.0",
}
# The runs' models: name → (budget profile, decoder layers or None for all). The hybrid
# keeps 24 of Qwen3-Next-80B's 48 layers (18 GDN + 6 full): 80 GB in bf16, so one H200
# holds it with room for KV.
MODELS: dict[str, tuple[str, int | None]] = {
    "dense": ("llama-3.1-8b", None),
    "moe": ("qwen3-30b-a3b", None),
    "hybrid": ("qwen3-next-80b-a3b", 24),
}
# tag → (model, plan options): one factor at a time (docs/gpu-calibration.md, "Runs").
RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "dense_seeds": ("dense", {"cudagraph_mode": FDO, "cudagraph_capture_sizes": (1, 2, 3, 4)}),
    "dense_chunk8192": (
        "dense",
        {
            "cudagraph_mode": FDO,
            "cudagraph_capture_sizes": (1, 2, 3, 4),
            "max_num_batched_tokens": 8192,
        },
    ),
    "dense_vllm_default_graphs": ("dense", {}),
    "moe_seeds": ("moe", {"cudagraph_mode": FDO, "cudagraph_capture_sizes": (1, 2, 3, 4)}),
    "hybrid_seeds_nomtp": (
        "hybrid",
        {
            "cudagraph_mode": FDO,
            "cudagraph_capture_sizes": (1, 2, 3, 4),
            "gdn_prefill_backend": "triton",
        },
    ),
    "hybrid_mtp3": (
        "hybrid",
        {
            "cudagraph_mode": FDO,
            "cudagraph_capture_sizes": (4, 8, 12, 16),
            "mtp": 3,
            "gdn_prefill_backend": "triton",
        },
    ),
}
RUN_ON = "0.24.0, H200, 2026-11-29"


@dataclass(frozen=True)
class Run:
    tag: str
    plan: Plan
    observed: Observed
    log: str

    @property
    def planned_weights(self) -> int:
        return planned_weights_bytes(self.plan)

    @property
    def graph_estimate_gib(self) -> float | None:
        estimate = self.observed.cudagraph_estimate_bytes
        return None if estimate is None else estimate / GiB

    @property
    def profiled_rest(self) -> Figure:
        """The gpu_check's row: requested − weights − KV − the graph estimate vLLM applied."""
        return next(f for f in figures(self.plan, self.observed) if f.name == PROFILED_REST)


def capacity_blocks(run: Run) -> tuple[int, int, list[int]]:
    """Block size, bytes per block, and the num_blocks values consistent with the
    logged token count (under the rules of the run's vLLM, 0.24)."""
    layout = run.plan.layout
    tokens = run.observed.kv_cache_tokens
    assert tokens is not None
    max_len = run.plan.settings.max_model_len
    start = tokens * layout.blocks_per_request // max_len
    candidates = [
        n
        for n in range(max(1, start - 2), start + 3)
        if kv_capacity(layout, n * layout.bytes_per_block, max_len).kv_cache_tokens == tokens
    ]
    return layout.block_size, layout.bytes_per_block, candidates


def planned_capacity(run: Run) -> KVCapacity:
    """Tokens and concurrency the planner predicts from its own pool (0.24 rules)."""
    return run.plan.capacity


def load_runs() -> list[Run]:
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            name: write_profile_model(profile, Path(tmp) / name, layers)
            for name, (profile, layers) in MODELS.items()
        }
        runs = []
        for tag, (model, extra) in RUNS.items():
            options = {**ARTICLE_SETTINGS, **extra}
            plan = build_plan(PlanOptions(model=str(models[model]), hardware="h200", **options))
            log = (FIXTURES / f"{tag}.log").read_text()
            runs.append(Run(tag, plan, observed_in(log.splitlines()), log))
    return runs


def _row(run: Run) -> str:
    p, o = run.plan, run.observed
    assert o.kv_cache_bytes and o.weights_bytes and o.kv_cache_tokens and o.max_concurrency
    graphs = p.components.get("cudagraph_pool", 0) / GiB
    est = run.graph_estimate_gib
    took = (o.cudagraph_bytes or 0) / GiB
    block, _, _ = capacity_blocks(run)
    planned = planned_capacity(run)
    rest = run.profiled_rest
    assert rest.planned is not None and rest.observed is not None
    return (
        f"| {run.tag} | {RUN_ON} "
        f"| {run.planned_weights / GiB:.2f} / {o.weights_bytes / GiB:.2f} "
        f"| {p.components.get('activation_peak', 0) / GiB:.2f} "
        f"| {p.components.get('runtime', 0) / GiB:.2f} "
        f"| {rest.planned / GiB:.2f} / {rest.observed / GiB:.2f} "
        f"| {graphs:.2f} / {'—' if est is None else f'{est:.2f}'} / {took:.2f} "
        f"| {p.kv_cache_bytes / GiB:.2f} / {o.kv_cache_bytes / GiB:.2f} "
        f"({p.kv_cache_bytes / o.kv_cache_bytes - 1:+.1%}) "
        f"| {block} | {planned.kv_cache_tokens:,} / {o.kv_cache_tokens:,} "
        f"| {planned.max_concurrency:.2f}x / {o.max_concurrency:.2f}x |"
    )


def table() -> str:
    head = (
        "| run | vLLM, GPU, date | weights GiB planned / observed | activation GiB (est.) "
        "| runtime + non-torch GiB (est.) | profiling peak + runtime GiB planned / observed "
        "| graph pool GiB planned / vLLM est. / actual "
        "| KV GiB planned / observed | block | KV tokens planned / observed "
        "| max concurrency planned / observed |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    return "\n".join([head, *(_row(run) for run in load_runs())])


def main(argv: list[str]) -> int:
    text = table()
    if "--write" not in argv:
        print(text)
        return 0
    doc = DOC.read_text()
    begin, end = "<!-- BEGIN table -->\n", "<!-- END table -->"
    head, rest = doc.split(begin)
    DOC.write_text(head + begin + text + "\n" + end + rest.split(end, 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
