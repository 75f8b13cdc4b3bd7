"""Last of the container tests on the shared stack: `make down -v` leaves nothing, and
`make doctor` then says there is nothing to report."""

from __future__ import annotations

import pytest

from tests.docker import faults
from tests.docker import stack as st

pytestmark = pytest.mark.docker


def test_down_leaves_no_container_network_or_volume(stack: st.Stack) -> None:
    result = st.make("down", stack.env, "DOWN_ARGS=-v")
    assert result.returncode == 0, result.stderr
    for kind in ("container", "network", "volume"):
        assert st.project_objects(kind) == [], kind
    report = faults.doctor()
    assert report.code == 1, report.text
    assert report.text.startswith(f"no containers of compose project {st.PROJECT!r}"), report.text
