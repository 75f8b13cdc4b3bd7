"""`python -m bench.gateway_cpu`: the gateway's CPU per streamed request against the
replay upstream, and py-spy samples put in stages. The figures themselves are the
bench's output (docs/gateway.md), never asserted; these tests check that it measures
what it says: every stream relayed whole, the stages read from real py-spy output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gateway_cpu

STREAM = Path(gateway_cpu.__file__).parent / "data" / "vllm_chat_stream.sse"


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.gateway_cpu", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def test_the_recorded_stream_is_a_whole_vllm_stream_with_usage() -> None:
    events = [line for line in STREAM.read_text().splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["usage"]["completion_tokens"] == 64
    assert chunks[-1]["system_fingerprint"].startswith("vllm-0.32.0")


def test_every_stream_is_relayed_whole_and_the_cpu_is_per_request(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    done = _run("--bursts", "6", "--streams", "16", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["requests"] == 6 * 16
    # The client asked for no usage: the gateway injects the request for it and drops the
    # usage chunk from what it relays, so each stream is the recording less one event.
    recorded = STREAM.read_text().count("data: ")
    assert result["events"] == result["requests"] * (recorded - 1)
    assert result["cpu_s"] > 0
    assert result["cpu_ms_per_request"] == pytest.approx(result["cpu_s"] * 1000 / 96)
    assert "| CPU per streamed request |" in done.stdout


def test_the_profile_puts_the_gateway_s_samples_in_stages(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    # Paced, so that the relay handles each event on its own while py-spy samples.
    done = _run(
        "--bursts", "10", "--streams", "32", "--pace-ms", "1", "--profile", "--json", str(out)
    )  # fmt: skip
    if done.returncode == 2 and "py-spy" in done.stderr and "Permission" in done.stderr:
        pytest.skip(f"py-spy may not attach here: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    stages = json.loads(out.read_text())["stages"]
    assert sum(stages.values()) > 0
    # A stream's relay and its upstream call always run in the gateway process.
    assert stages.get("upstream request", 0) > 0 and stages.get("relay events out", 0) > 0
    assert "By stage (" in done.stdout


def test_a_sample_goes_to_the_innermost_frame_a_stage_names() -> None:
    raw = "\n".join(
        [
            "run (asyncio/base_events.py:600);handle (gateway/core/tenancy.py:40);"
            "loads (json/decoder.py:337) 3",
            "run (asyncio/base_events.py:600);_run (uvicorn/server.py:10) 2",
            "serve (gateway/standalone/hot.py:80);"
            "ProxyResponse._relay_events (gateway/standalone/proxy.py:217) 4",
            "ProxyResponse._relay_events (gateway/standalone/proxy.py:227);"
            "RequestResponseCycle.send (uvicorn/protocols/http/httptools_impl.py:542) 5",
            "main (<frozen runpy>:88);idle (somewhere.py:1) 1",
            "not a sample line",
        ]
    )
    assert gateway_cpu.stage_samples(raw) == {
        "body parse and serialise": 3,
        "HTTP server (uvicorn, Starlette)": 2 + 5,
        "relay events out": 4,
        "other": 1,
    }


def test_a_paced_stream_is_relayed_whole_one_event_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    done = _run("--bursts", "2", "--streams", "8", "--pace-ms", "1", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["requests"] == 16 and result["pace_ms"] == 1.0
    assert result["events"] == 16 * (STREAM.read_bytes().count(b"data:") - 1)  # less usage
    # Each burst waits for its streams' 66 events, the last sent 65 ms after the first.
    assert result["wall_s"] >= 2 * 0.065
    assert "one event every 1 ms" in done.stdout


def test_bad_arguments_are_refused_by_name() -> None:
    done = _run("--bursts", "0")
    assert done.returncode == 2 and "'0': must be ≥ 1" in done.stderr
    done = _run("--pace-ms", "-1")
    assert done.returncode == 2 and "must be between 0 and 1000 ms" in done.stderr
    done = _run("--gateway-dir", "/nonexistent")
    assert done.returncode == 2 and "no gateway/__main__.py there" in done.stderr


def test_the_baseline_is_the_named_checkout_not_this_one(tmp_path: Path) -> None:
    """Run from this checkout's root (as `make` does), `--baseline-dir` and
    `--gateway-dir` still run the named checkout's gateway: here one that says so and
    exits, which the bench reports."""
    other = tmp_path / "other"
    (other / "gateway").mkdir(parents=True)
    (other / "gateway" / "__main__.py").write_text(
        "import sys\nprint('the other checkout')\nsys.exit(3)\n"
    )
    root = Path(gateway_cpu.__file__).resolve().parents[1]
    for option in ("--baseline-dir", "--gateway-dir"):
        done = _run("--bursts", "1", "--streams", "1", option, str(other), cwd=root)
        assert done.returncode == 2, done.stdout[-2000:]
        assert "the gateway exited 3: the other checkout" in done.stderr


def test_the_floor_runs_in_turn_as_the_baseline(tmp_path: Path) -> None:
    """The bare relay carries every stream whole (or the bench would fail) and is
    measured in turn with this checkout's gateway."""
    out = tmp_path / "result.json"
    done = _run("--bursts", "10", "--streams", "16", "--floor", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [r["requests"] for r in result["baseline_runs"]] == [160]
    # The floor passes the usage chunk on; the gateway drops it (it asked for it).
    events = STREAM.read_bytes().count(b"data:")
    assert result["baseline_runs"][0]["events"] == 160 * events
    assert result["runs"][0]["events"] == 160 * (events - 1)
    assert "| baseline (the floor, python -m bench.gateway_floor" in done.stdout
    for conflict in (["--profile"], ["--baseline-dir", str(gateway_cpu.CHECKOUT)]):
        done = _run("--floor", *conflict)
        assert done.returncode == 2 and "--floor" in done.stderr


def test_a_baseline_checkout_runs_in_turn_and_gets_a_ratio(tmp_path: Path) -> None:
    """Both gateways measured in one run; here the baseline is this checkout itself."""
    root = Path(gateway_cpu.__file__).resolve().parents[1]
    out = tmp_path / "result.json"
    done = _run("--bursts", "6", "--streams", "16", "--baseline-dir", str(root), "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert len(result["baseline_runs"]) == len(result["runs"]) == 1
    assert f"| baseline ({root}) |" in done.stdout
    assert "This checkout ÷ baseline: " in done.stdout
    done = _run("--profile", "--baseline-dir", str(root))
    assert done.returncode == 2 and "--profile measures one gateway" in done.stderr
