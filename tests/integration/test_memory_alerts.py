"""The memory alerts of prometheus/rules.yml, evaluated by promtool on given series:
near the watchdog's floor, the 5 % fallback with the watchdog off, and a trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.integration.promtool import PROMETHEUS_DIR, promtool

RULES = PROMETHEUS_DIR / "rules.yml"
INSTANCE = "vllm:8001"


def _alerting(name: str) -> dict[str, Any]:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                return rule
    raise AssertionError(f"no alert {name} in {RULES}")


def _expected(name: str, **labels: str) -> list[dict[str, Any]]:
    rule = _alerting(name)
    summary = rule["annotations"]["summary"].replace("{{ $labels.instance }}", INSTANCE)
    return [
        {
            "exp_labels": {**rule["labels"], "instance": INSTANCE, **labels},
            "exp_annotations": {"summary": summary},
        }
    ]


def _memory(available: str, floor: str, total: str = "100x20") -> list[dict[str, str]]:
    def series(kind: str) -> str:
        return f'sparkserve_host_memory_bytes{{kind="{kind}",instance="{INSTANCE}"}}'

    return [
        {"series": series("available"), "values": available},
        {"series": series("floor"), "values": floor},
        {"series": series("total"), "values": total},
    ]


def _case(series: list[dict[str, str]], alert: str, at: str, fired: list[Any]) -> dict[str, Any]:
    return {
        "interval": "15s",
        "input_series": series,
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": fired}],
    }


def _run(tmp_path: Path, *cases: dict[str, Any]) -> None:
    test_file = tmp_path / "memory_alerts.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "tests": list(cases)}))
    result = promtool("test", "rules", test_file)
    assert result.returncode == 0, result.stdout + result.stderr


def test_host_memory_low_fires_near_the_floor_and_not_well_above_it(tmp_path: Path) -> None:
    low = _expected("SparkserveHostMemoryLow")
    _run(
        tmp_path,
        _case(_memory("14x20", "10x20"), "SparkserveHostMemoryLow", "2m", low),
        _case(_memory("16x20", "10x20"), "SparkserveHostMemoryLow", "2m", []),
        # 14 < 1.5 × 10, but far above 5 % of the total: the floor's rule decides.
    )


def test_with_the_watchdog_off_five_percent_of_the_total_decides(tmp_path: Path) -> None:
    low = _expected("SparkserveHostMemoryLow")
    _run(
        tmp_path,
        _case(_memory("4x20", "0x20"), "SparkserveHostMemoryLow", "2m", low),
        _case(_memory("6x20", "0x20"), "SparkserveHostMemoryLow", "2m", []),
        _case(_memory("4x20", "2x20"), "SparkserveHostMemoryLow", "2m", []),  # on: 4 > 1.5 × 2
    )


def test_a_trip_stays_visible_for_ten_minutes_across_the_restart(tmp_path: Path) -> None:
    series = [
        {"series": f'sparkserve_memory_low{{instance="{INSTANCE}"}}', "values": "0 0 1 1 _ 0x40"}
    ]
    tripped = _expected("SparkserveMemoryWatchdogTripped")
    _run(
        tmp_path,
        _case(series, "SparkserveMemoryWatchdogTripped", "5m", tripped),
        _case(series, "SparkserveMemoryWatchdogTripped", "11m", []),
    )
