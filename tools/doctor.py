"""`python -m tools.doctor` (`make doctor`): how the compose stack's containers are doing.

For each container of the compose project (label com.docker.compose.project; default
$COMPOSE_PROJECT_NAME, else sparkserve): state, health, restart count, exit code, and the
last log lines that look like errors (lines logged at INFO or WARNING are not), plus the
last failed healthcheck output.  Exit 0 when every container runs and is healthy,
1 otherwise, 2 when the Docker engine cannot be reached.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
DEFAULT_PROJECT = "sparkserve"  # compose.yaml `name:`
LOG_TAIL_LINES = 400
ERROR_LINES_KEPT = 5
ERROR_PATTERN = re.compile(
    r"\b(error|exception|traceback|fatal|critical|killed|out of memory|oom)\b", re.I
)
# A line logged at a level below ERROR is not one, whatever it mentions (vLLM's
# "WARNING … failed to automatically increase [the ulimit] with error …").
QUIET_LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|WARN)\b")
EXIT_OK, EXIT_UNHEALTHY, EXIT_NO_ENGINE = 0, 1, 2


@dataclass(frozen=True)
class ContainerReport:
    service: str
    name: str
    state: str  # running, restarting, exited, …
    health: str  # healthy, unhealthy, starting, or "-" without a healthcheck
    restarts: int
    exit_code: int
    error_lines: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.state == "running" and self.health in ("healthy", "-")


def error_lines(log_text: str, keep: int = ERROR_LINES_KEPT) -> tuple[str, ...]:
    """The last `keep` log lines that mention an error."""
    lines = [
        line.rstrip()
        for line in log_text.splitlines()
        if ERROR_PATTERN.search(line) and not QUIET_LEVEL.search(line)
    ]
    return tuple(lines[-keep:])


def _failed_probe(state: dict[str, Any]) -> tuple[str, ...]:
    probes = state.get("Health", {}).get("Log") or []
    last = probes[-1] if probes else {}
    if last.get("ExitCode", 0) == 0:
        return ()
    output = str(last.get("Output", "")).strip().splitlines()
    return (f"healthcheck failed: {output[-1] if output else 'exit ' + str(last['ExitCode'])}",)


def inspect(container: Any) -> ContainerReport:
    attrs = container.attrs
    state = attrs.get("State", {})
    logs = container.logs(tail=LOG_TAIL_LINES).decode(errors="replace")
    return ContainerReport(
        service=container.labels.get(SERVICE_LABEL, container.name),
        name=container.name,
        state=str(state.get("Status", "unknown")),
        health=str(state.get("Health", {}).get("Status", "-")),
        restarts=int(attrs.get("RestartCount", 0)),
        exit_code=int(state.get("ExitCode", 0)),
        error_lines=error_lines(logs) + _failed_probe(state),
    )


def collect(client: Any, project: str = DEFAULT_PROJECT) -> list[ContainerReport]:
    containers = client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={project}"})
    return sorted((inspect(c) for c in containers), key=lambda r: (r.service, r.name))


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()


def render(reports: Sequence[ContainerReport], project: str = DEFAULT_PROJECT) -> str:
    if not reports:
        return f"no containers of compose project {project!r}: start them with `make up`"
    rows = [("SERVICE", "STATE", "HEALTH", "RESTARTS", "EXIT", "CONTAINER")]
    rows += [
        (r.service, r.state, r.health, str(r.restarts), str(r.exit_code), r.name) for r in reports
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [_row(row, widths) for row in rows]
    for report in reports:
        if report.error_lines:
            lines.append(f"\n{report.service}: last error lines")
            lines.extend(f"  {line}" for line in report.error_lines)
    bad = [r.service for r in reports if not r.ok]
    lines.append(
        "\n" + (f"not ok: {', '.join(bad)}" if bad else "all containers running and healthy")
    )
    return "\n".join(lines)


def _docker_client() -> Any:
    import docker  # the Docker SDK (docker on PyPI)

    return docker.from_env()


def main(
    argv: Sequence[str] | None = None, client_factory: Callable[[], Any] = _docker_client
) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--project",
        default=os.environ.get("COMPOSE_PROJECT_NAME") or DEFAULT_PROJECT,
        help=f"compose project name (default: $COMPOSE_PROJECT_NAME, else {DEFAULT_PROJECT})",
    )
    args = parser.parse_args(argv)
    try:
        client = client_factory()
        reports = collect(client, args.project)
    except Exception as exc:  # docker.errors.DockerException and connection errors
        print(f"doctor: cannot reach the Docker engine ({exc})", file=sys.stderr)
        return EXIT_NO_ENGINE
    print(render(reports, args.project))
    return EXIT_OK if reports and all(r.ok for r in reports) else EXIT_UNHEALTHY


if __name__ == "__main__":
    sys.exit(main())
