"""`python -m draftvocab.gpu_check`: its input errors on this machine (no CUDA GPU), and
the runs of vLLM 0.24.0 on an H100 and an H200 (fixtures/gpu_h100_vllm_0.24.0/,
fixtures/gpu_h200_vllm_0.24.0/, README in each) replayed: every claim is read again from
the runs' raw data and vLLM's own logs and profiler tables, and docs/draft-vocab.md shows
the tables those runs render."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from draftvocab import gpu_check, plugin

FIXTURES = Path(__file__).parent / "fixtures" / "gpu_h100_vllm_0.24.0"
H200 = Path(__file__).parent / "fixtures" / "gpu_h200_vllm_0.24.0"
DOC = Path(__file__).parents[2] / "docs" / "draft-vocab.md"
# The tuning article's head (docs/draft-vocab.md): 248,320 × 2,560 bf16 rows, 65,536 kept.
VOCAB, HIDDEN, ROWS = 248_320, 2_560, 65_536


def _report(name: str, fixtures: Path = FIXTURES) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((fixtures / name / "report.json").read_text())
    return report


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "draftvocab.gpu_check", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


# Input errors --------------------------------------------------------------------------


def test_a_checkpoint_that_is_not_one_is_refused_in_one_line(tmp_path):
    done = _cli("equality", str(tmp_path / "src"), str(tmp_path / "dst"), "--out", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"draftvocab.gpu_check: error: {tmp_path / 'src'}: no config.json (a checkpoint "
        "directory is expected)"
    ]


def test_a_destination_without_draft_rows_is_refused(tmp_path):
    for name in ("src", "dst"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text('{"vocab_size": 8}')
    done = _cli("equality", str(tmp_path / "src"), str(tmp_path / "dst"), "--out", str(tmp_path))
    assert done.returncode == 2
    assert "no draft_vocab_size in config.json (make it with python -m draftvocab" in done.stderr


def test_without_a_cuda_gpu_the_check_says_so(tmp_path):
    done = _cli("lm-head", "--out", str(tmp_path), "--vocab", "64", "--rows", "8")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "draftvocab.gpu_check: error: no CUDA GPU here: this check measures vLLM on a GPU"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tokens", "1,x"], "'1,x': a comma-separated list of integers"),
        (["--tokens", "0"], "'0': every value must be ≥ 1"),
        (["--rows", "-3"], "'-3': must be ≥ 1"),
    ],
)
def test_bad_numbers_are_refused_by_name(tmp_path, args, message):
    done = _cli("lm-head", "--out", str(tmp_path), *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_file_that_is_no_report_is_refused(tmp_path):
    (tmp_path / "other.json").write_text('{"check": "kv"}')
    (tmp_path / "broken.json").write_text("{")
    done = _cli("report", str(tmp_path / "other.json"))
    assert done.returncode == 2
    assert "not a report of this check (check = 'kv'; known: equality, lm-head, decode)" in (
        done.stderr
    )
    done = _cli("report", str(tmp_path / "broken.json"))
    assert done.returncode == 2 and "broken.json: not a readable report.json" in done.stderr


def test_the_decode_model_gets_its_rows_where_vllm_reads_them(tmp_path):
    """A multimodal config nests the language model under text_config: the drafter reads
    draft_vocab_size there. Rows must stay below the vocabulary."""
    model = tmp_path / "model"
    model.mkdir()
    config = json.loads((FIXTURES / "decode" / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config))
    (model / "tokenizer.json").write_text("{}")
    out = gpu_check.reduced_copy(model, ROWS, tmp_path / "reduced")
    written = json.loads((out / "config.json").read_text())
    assert written["text_config"]["draft_vocab_size"] == ROWS
    assert "draft_vocab_size" not in written
    assert (out / "tokenizer.json").resolve() == (model / "tokenizer.json").resolve()
    # The copy the run served asked for the same.
    served = json.loads((FIXTURES / "decode" / "reduced-config.json").read_text())
    assert served["text_config"]["draft_vocab_size"] == ROWS
    with pytest.raises(gpu_check.CheckError, match="--rows 248320: must be below the model's"):
        gpu_check.reduced_copy(model, VOCAB, tmp_path / "again")


def test_the_root_cause_is_found_before_the_engine_s_own_errors():
    log = (FIXTURES / "eq_qwen3_next" / "plain-float32.log").read_text()
    first = gpu_check.ERROR_RE.search(log)
    assert first is not None
    assert first.group(1) == (
        "AssertionError: ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16."
    )


# The runs on the GPU ----------------------------------------------------------------------


def _vllm_in(log: Path) -> str:
    found = re.search(r"Initializing a V1 LLM engine \(v([\d.]+)\)", log.read_text())
    assert found, log
    return found.group(1)


@pytest.mark.parametrize(
    ("run", "drafter"), [("eq_qwen3_next", "Qwen3NextMTP"), ("eq_qwen3_5_moe", "Qwen3_5MoeMTP")]
)
def test_on_vllm_0_24_the_reduced_head_gives_the_plain_greedy_output(run, drafter):
    report = _report(run)
    runs = report["runs"]
    assert report["dtype"] == "bfloat16"
    for name in ("plain", "full", "reduced"):
        assert _vllm_in(FIXTURES / run / f"{name}-bfloat16.log") == "0.24.0"
        assert len(runs[name]["tokens"]) == len(gpu_check.PROMPTS)
        assert all(len(t) == report["max_tokens"] for t in runs[name]["tokens"])
    assert runs["full"]["tokens"] == runs["plain"]["tokens"]
    assert runs["reduced"]["tokens"] == runs["plain"]["tokens"]
    # Speculation ran in both MTP runs, and the reduced head drafted from its rows only:
    # fewer of its drafts were accepted.
    full, reduced = runs["full"]["spec"], runs["reduced"]["spec"]
    assert runs["plain"]["spec"]["drafts"] == 0
    assert full["accepted_tokens"] > 0 and reduced["accepted_tokens"] > 0
    assert (
        reduced["accepted_tokens"] / reduced["draft_tokens"]
        < full["accepted_tokens"] / full["draft_tokens"]
    )
    reduced_log = (FIXTURES / run / "reduced-bfloat16.log").read_text()
    assert "the MTP drafter proposes from 512 of 1024 rows" in reduced_log
    assert "proposes from" not in (FIXTURES / run / "full-bfloat16.log").read_text()
    # What the plugin's release table says was served is what these runs served.
    assert drafter in plugin.RELEASES["0.24.0"].served
    assert all(held for _, held, _ in gpu_check.equality_verdicts(report))


def test_the_gdn_kernels_refused_float32_so_the_runs_are_bfloat16():
    tried = _report("eq_qwen3_next")["tried"]
    assert [t["dtype"] for t in tried] == ["float32", "bfloat16"]
    assert "does not support float32" in tried[0]["error"][0]
    assert tried[1]["error"] == []


def test_the_microbenchmark_read_the_article_s_head_and_the_reduced_one():
    report = _report("lm_head")
    assert (report["vocab"], report["hidden"], report["rows"]) == (VOCAB, HIDDEN, ROWS)
    assert report["full_bytes"] == VOCAB * HIDDEN * 2  # bf16
    assert report["reduced_bytes"] == ROWS * HIDDEN * 2 == 0.3125 * 2**30
    for row in report["results"]:
        # The matmul alone reads about a quarter of the bytes and takes under 35 % of the
        # time; the plugin's scatter back to target ids adds to it.
        assert row["reduced_us"] / row["full_us"] < 0.35
        assert row["reduced_scatter_us"] > row["reduced_us"]


@pytest.mark.parametrize(
    ("fixtures", "run"), [(FIXTURES, "decode"), (FIXTURES, "decode2"), (H200, "decode")]
)
def test_the_decode_runs_measured_one_itl_per_step_and_request(fixtures, run):
    """With dummy weights no draft is accepted, so each step gives each stream one token:
    vLLM's ITL histogram counts streams × rounds × (tokens − 1) observations."""
    report = _report(run, fixtures)
    for head, entry in report["heads"].items():
        assert entry["accepted_tokens"] == 0
        steps = report["streams"] * report["rounds"] * (report["max_tokens"] - 1)
        assert entry["itl_count"] == steps, head
        assert (
            entry["generation_tokens"]
            == report["streams"] * report["rounds"] * (report["max_tokens"])
        )
        log = (fixtures / run / f"decode-{head}.log").read_text()
        assert _vllm_in(fixtures / run / f"decode-{head}.log") == "0.24.0"
        assert ("proposes from 65536 of 248320 rows" in log) == (head == "reduced")


def test_the_reduced_head_loads_its_rows_as_more_weights():
    """vLLM's own weight line: the reduced head adds 65,536 × 2,560 × 2 B = 0.3125 GiB."""
    loaded = {}
    for head in ("full", "reduced"):
        log = (FIXTURES / "decode2" / f"decode-{head}.log").read_text()
        found = re.search(r"Model loading took ([\d.]+) GiB", log)
        assert found
        loaded[head] = float(found.group(1))
    assert loaded["reduced"] - loaded["full"] == pytest.approx(ROWS * HIDDEN * 2 / 2**30, abs=0.01)


def test_on_the_h200_the_greedy_draft_of_the_reduced_head_takes_about_a_third():
    """The head alone, and the greedy draft as vLLM's proposer takes it (head and argmax):
    scattered back to the target vocabulary, or the reduced head's own argmax mapped."""
    report = _report("lm_head", H200)
    assert report["gpu"].startswith("NVIDIA H200")
    for row in report["results"]:
        assert row["reduced_us"] / row["full_us"] < 0.30
        for way in ("scatter_greedy_us", "local_greedy_us"):
            assert row[way] / row["full_greedy_us"] < 0.36, (row["tokens"], way)
        # The argmax over 248,320 logits is a few µs beside the head's matmul.
        assert row["full_greedy_us"] - row["full_us"] < 0.05 * row["full_us"]


def _profiled(head: str) -> dict[str, Any]:
    """vLLM's profiler table of one head's profiled round (torch's key_averages): the
    totals, and per name the self-CPU time, CUDA total and calls."""
    text = (H200 / "decode" / f"{head}.profiler_out_0.txt").read_text()
    units = {"us": 1e-3, "ms": 1.0, "s": 1e3}

    def ms(value: str) -> float:
        number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", value).groups()  # type: ignore[union-attr]
        return float(number) * units[unit]

    rows = {}
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 11 and cells[-1].isdigit():
            rows[cells[0]] = {
                "cpu_self": ms(cells[2]),
                "cuda": ms(cells[8]),
                "calls": int(cells[-1]),
            }
    totals = dict(re.findall(r"Self (CPU|CUDA) time total: ([\d.]+(?:us|ms|s))", text))
    return {"cpu": ms(totals["CPU"]), "cuda": ms(totals["CUDA"]), "rows": rows}


def test_the_h200_decode_step_was_no_slower_with_the_reduced_head():
    report = _report("decode", H200)
    full, reduced = (report["heads"][h] for h in ("full", "reduced"))
    step = {h: e["itl_sum"] / e["itl_count"] for h, e in report["heads"].items()}
    assert step["reduced"] / step["full"] <= 1.0
    assert reduced["generation_tokens"] / reduced["seconds"] > (
        full["generation_tokens"] / full["seconds"]
    )


def test_the_profile_shows_the_head_s_reads_saved_and_the_host_slower_throughout():
    """The drafter's head runs as one cuBLAS kernel, 197 calls in the profiled round (3 a
    step): 307 µs over the full vocabulary, 86 µs over the draft rows, as in the
    microbenchmark. The GPU's total falls by about that. The host, though, took longer
    for the very operators both heads run the same number of times, the scheduler's and
    the target model's among them: a slower host process, not work the head added."""
    full, reduced = _profiled("full"), _profiled("reduced")
    head = "nvjet_sm90_tst_512x8_64x3_2x1_v_bz_TNT"
    assert full["rows"][head]["calls"] == reduced["rows"][head]["calls"] == 197
    # Per call, the kernel served takes what the microbenchmark timed for each head.
    bench = next(r for r in _report("lm_head", H200)["results"] if r["tokens"] == 1)
    for profiled, key in ((full, "full_us"), (reduced, "reduced_us")):
        per_call_us = profiled["rows"][head]["cuda"] * 1000 / profiled["rows"][head]["calls"]
        assert per_call_us == pytest.approx(bench[key], rel=0.05), key
    saved = full["rows"][head]["cuda"] - reduced["rows"][head]["cuda"]
    assert full["cuda"] - reduced["cuda"] == pytest.approx(saved, rel=0.15)
    assert reduced["cpu"] / full["cpu"] > 1.3
    for name in ("aten::mm", "vllm::moe_forward_shared", "aten::copy_"):
        assert reduced["rows"][name]["calls"] == full["rows"][name]["calls"], name
        assert reduced["rows"][name]["cpu_self"] > 1.2 * full["rows"][name]["cpu_self"], name
    # What the plugin adds per proposal: the scatter into the full-vocabulary logits.
    assert "aten::_index_put_impl_" in reduced["rows"]
    assert "aten::_index_put_impl_" not in full["rows"]


def test_the_doc_shows_the_tables_of_these_runs():
    doc = DOC.read_text()
    runs = [(FIXTURES, run) for run in ("eq_qwen3_next", "eq_qwen3_5_moe", "lm_head", "decode")]
    runs += [(FIXTURES, "decode2"), (H200, "lm_head"), (H200, "decode")]
    for fixtures, run in runs:
        text = gpu_check.render(_report(run, fixtures))
        # Each table the report renders, whole (a run of lines starting with "|").
        for table in re.findall(r"(?:^\|.*\n?)+", text, re.MULTILINE):
            assert table.strip() in doc, (fixtures.name, run, table.splitlines()[0])
