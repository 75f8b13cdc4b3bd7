"""tools/doctor.py's report, from fake Docker SDK objects (no engine on these machines)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tools import doctor


@dataclass
class FakeContainer:
    name: str
    service: str
    state: dict[str, Any]
    restarts: int = 0
    log: str = ""
    labels: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.labels = {doctor.SERVICE_LABEL: self.service, doctor.PROJECT_LABEL: "sparkserve"}

    @property
    def attrs(self) -> dict[str, Any]:
        return {"State": self.state, "RestartCount": self.restarts}

    def logs(self, tail: int) -> bytes:
        return "\n".join(self.log.splitlines()[-tail:]).encode()


class FakeContainers:
    def __init__(self, containers: list[FakeContainer]) -> None:
        self._containers = containers
        self.filters: dict[str, str] | None = None

    def list(self, all: bool, filters: dict[str, str]) -> list[FakeContainer]:
        assert all is True
        self.filters = filters
        return self._containers


class FakeClient:
    def __init__(self, containers: list[FakeContainer]) -> None:
        self.containers = FakeContainers(containers)


HEALTHY = {"Status": "running", "ExitCode": 0, "Health": {"Status": "healthy", "Log": []}}
VLLM_LOG = (
    "INFO loading weights\n"
    "ERROR torch.OutOfMemoryError: CUDA out of memory\n"
    "INFO retrying\n"
    "entrypoint: vLLM exited with code 1\n"
)
UNHEALTHY = {
    "Status": "restarting",
    "ExitCode": 3,
    "Health": {"Status": "unhealthy", "Log": [{"ExitCode": 1, "Output": "HTTP Error 503\n"}]},
}


def stack() -> FakeClient:
    return FakeClient(
        [
            FakeContainer("sparkserve-vllm-1", "vllm", UNHEALTHY, restarts=4, log=VLLM_LOG),
            FakeContainer("sparkserve-gateway-1", "gateway", HEALTHY),
        ]
    )


def test_collect_asks_for_the_compose_project_only():
    client = stack()
    doctor.collect(client)
    assert client.containers.filters == {"label": "com.docker.compose.project=sparkserve"}


def test_report_per_container_sorted_by_service():
    gateway, vllm = doctor.collect(stack())
    assert (gateway.service, gateway.ok) == ("gateway", True)
    assert (vllm.state, vllm.health, vllm.restarts, vllm.exit_code) == (
        "restarting", "unhealthy", 4, 3,
    )  # fmt: skip


def test_error_lines_are_the_log_errors_then_the_failed_probe():
    vllm = doctor.collect(stack())[1]
    assert vllm.error_lines == (
        "ERROR torch.OutOfMemoryError: CUDA out of memory",
        "healthcheck failed: HTTP Error 503",
    )


def test_only_the_last_error_lines_are_kept():
    log = "\n".join(f"Traceback {i}" for i in range(20))
    assert doctor.error_lines(log) == tuple(f"Traceback {i}" for i in range(15, 20))


def test_render_is_a_table_with_errors_and_a_verdict():
    text = doctor.render(doctor.collect(stack()))
    lines = text.splitlines()
    assert lines[0].split() == ["SERVICE", "STATE", "HEALTH", "RESTARTS", "EXIT", "CONTAINER"]
    assert lines[1].split() == ["gateway", "running", "healthy", "0", "0", "sparkserve-gateway-1"]
    assert lines[2].split() == ["vllm", "restarting", "unhealthy", "4", "3", "sparkserve-vllm-1"]
    assert "vllm: last error lines" in text
    assert lines[-1] == "not ok: vllm"


def test_exit_codes(capsys):
    assert doctor.main([], client_factory=stack) == doctor.EXIT_UNHEALTHY
    healthy = [FakeContainer("sparkserve-gateway-1", "gateway", HEALTHY)]
    assert doctor.main([], client_factory=lambda: FakeClient(healthy)) == doctor.EXIT_OK
    assert capsys.readouterr().out.rstrip().endswith("all containers running and healthy")


def test_no_containers_says_how_to_start():
    assert doctor.main([], client_factory=lambda: FakeClient([])) == doctor.EXIT_UNHEALTHY


def test_no_engine_is_one_line_and_exit_2(capsys):
    def unreachable() -> Any:
        raise ConnectionError("no /var/run/docker.sock")

    assert doctor.main([], client_factory=unreachable) == doctor.EXIT_NO_ENGINE
    assert capsys.readouterr().err.strip() == (
        "doctor: cannot reach the Docker engine (no /var/run/docker.sock)"
    )


@pytest.mark.parametrize("health", [{}, {"Health": {"Status": "starting", "Log": []}}])
def test_containers_without_or_before_a_healthcheck(health):
    state = {"Status": "running", "ExitCode": 0, **health}
    report = doctor.inspect(FakeContainer("c", "grafana", state))
    assert report.ok is (health == {})
