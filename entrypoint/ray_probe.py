"""`python -m entrypoint.ray_probe ADDRESS`: the live nodes of a Ray cluster, as JSON.

Run in its own process so the entrypoint (PID 1) never imports Ray or becomes a Ray
driver itself: `ray.init(address)` + `ray.nodes()` (Ray's public API), then
`ray.shutdown()`. Prints `[{"address": "10.0.0.1", "gpus": 1.0}, …]` for alive nodes;
exit 1 with Ray's complaint on stderr when the cluster cannot be reached.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any


def live_nodes(address: str) -> list[dict[str, Any]]:
    ray = importlib.import_module("ray")
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        return [
            {
                "address": str(node["NodeManagerAddress"]),
                "gpus": float(node["Resources"].get("GPU", 0)),
            }
            for node in ray.nodes()
            if node.get("Alive")
        ]
    finally:
        ray.shutdown()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m entrypoint.ray_probe HOST:PORT", file=sys.stderr)
        return 2
    try:
        nodes = live_nodes(argv[0])
    except Exception as exc:  # whatever Ray raises: the caller retries
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
