"""`python -m gateway` settles the collector before it serves (gateway/standalone/heap.py);
`create_app`, which tests call in their own process, leaves it alone."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

from gateway.standalone import heap
from gateway.standalone.app import create_app
from tests.gateway.conftest import MakeSettings

PROBE = """
import gc, sys
import gateway.standalone.cli as cli

def report(self):
    print(gc.get_threshold()[0], gc.get_freeze_count() > 0)

cli.GracefulServer.run = report
sys.exit(cli.main([]))
"""


def test_the_cli_freezes_the_start_up_heap_and_raises_the_young_threshold(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9",
        "GATEWAY_AUTH": "off",
        "GATEWAY_STATE_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(heap.YOUNG_COLLECTION_ALLOCATIONS), "True"]


def test_building_an_app_leaves_the_collector_alone(make_settings: MakeSettings) -> None:
    before = (gc.get_threshold(), gc.get_freeze_count())
    create_app(make_settings())
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
