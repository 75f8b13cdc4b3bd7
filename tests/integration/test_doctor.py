"""tools/doctor.py's parts that need no engine: which log lines count as errors, and the
one error path a real engine cannot show here (no engine at all). The report itself is
tested against the real engine in tests/docker (make test-docker)."""

from __future__ import annotations

from typing import Any

from tools import doctor


def test_only_the_last_error_lines_are_kept():
    log = "\n".join(f"Traceback {i}" for i in range(20))
    assert doctor.error_lines(log) == tuple(f"Traceback {i}" for i in range(15, 20))


def test_lines_logged_below_error_are_not_errors():
    log = (
        "(APIServer pid=13) WARNING 12-03 07:04:17 [system_utils.py:255] Found ulimit of "
        "20000 and failed to automatically increase with error current limit exceeds\n"
        "(APIServer pid=13) INFO 12-03 07:04:18 [api_server.py:1] error_handler registered\n"
        "(EngineCore pid=41) ERROR 12-03 07:04:19 [core.py:1] EngineCore failed to start.\n"
        "sparkserve: error: vLLM exited (exit code 1) during starting\n"
    )
    assert doctor.error_lines(log) == (
        "(EngineCore pid=41) ERROR 12-03 07:04:19 [core.py:1] EngineCore failed to start.",
        "sparkserve: error: vLLM exited (exit code 1) during starting",
    )


def test_no_engine_is_one_line_and_exit_2(capsys):
    def unreachable() -> Any:
        raise ConnectionError("no /var/run/docker.sock")

    assert doctor.main([], client_factory=unreachable) == doctor.EXIT_NO_ENGINE
    assert capsys.readouterr().err.strip() == (
        "doctor: cannot reach the Docker engine (no /var/run/docker.sock)"
    )
