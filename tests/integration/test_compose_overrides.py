"""compose.replicas.yaml and compose.multinode.cpu.yaml as the real `docker compose config`
resolves them on top of the files they change (no engine needed; tests/docker runs them)."""

from __future__ import annotations

import json

from tests.integration import compose_cli

REPLICAS = ("compose.yaml", "compose.cpu.yaml", "compose.replicas.yaml")
MULTINODE_CPU = ("compose.multinode.yaml", "compose.multinode.cpu.yaml")
RDMA = ("compose.multinode.yaml", "compose.rdma.yaml")


def test_replicas_run_the_vllm_service_twice_behind_the_gateway():
    services = compose_cli.resolved(*REPLICAS)["services"]
    assert services["vllm"]["deploy"]["replicas"] == 2
    gateway = services["gateway"]["environment"]
    # compose.yaml names the project sparkserve: its containers sparkserve-vllm-1 and -2.
    assert gateway["GATEWAY_UPSTREAM_URL"] == (
        "http://sparkserve-vllm-1:8000,http://sparkserve-vllm-2:8000"
    )
    assert gateway["GATEWAY_UPSTREAM_NAMES"] == "vllm-1,vllm-2"
    assert gateway["GATEWAY_CONTROL_URL"] == ""  # /readyz from the replicas' /health


def test_replica_urls_follow_the_project_name():
    result = compose_cli.run(REPLICAS, "config", "--format", "json", env={
        "COMPOSE_PROJECT_NAME": "other"
    })  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "http://other-vllm-2:8000" in result.stdout


def test_multinode_on_cpu_resets_host_networking_and_the_gpu():
    config = compose_cli.resolved(*MULTINODE_CPU, profiles=("head", "worker"))
    addresses = {}
    for name, service in config["services"].items():
        assert service.get("network_mode") is None, name
        assert "deploy" not in service or not service["deploy"].get("resources"), name
        assert "ulimits" not in service, name  # no memlock to raise without RDMA
        assert service["image"].startswith("sparkserve/vllm-cpu-app"), name
        addresses[name] = service["networks"]["cluster"]["ipv4_address"]
    assert addresses == {"head": "10.210.0.2", "worker": "10.210.0.3"}
    assert config["networks"]["cluster"]["internal"] is True
    worker = config["services"]["worker"]["environment"]
    assert worker["SPARKSERVE_ROLE"] == "worker"
    assert worker["SPARKSERVE_HEAD_ADDRESS"] == "10.210.0.2"
    assert worker["SPARKSERVE_NODE_IP"] == "10.210.0.3"
    assert "--node-ip-address" not in worker["SPARKSERVE_RAY_EXTRA_ARGS"]  # given once
    head = config["services"]["head"]["entrypoint"]
    assert head[:3] == ["ray", "start", "--head"] and "--node-ip-address=10.210.0.2" in head


def test_rdma_override_gives_both_nodes_the_rdma_devices_and_ipc_lock():
    services = compose_cli.resolved(*RDMA, profiles=("head", "worker"))["services"]
    for name in ("head", "worker"):
        service = services[name]
        assert [(d["source"], d["target"]) for d in service["devices"]] == [
            ("/dev/infiniband", "/dev/infiniband")
        ], name
        assert service["cap_add"] == ["IPC_LOCK"], name
        assert service["ulimits"]["memlock"] == -1, name  # from compose.multinode.yaml
        assert service["ipc"] == "host" and service["network_mode"] == "host", name


def test_without_the_rdma_override_no_device_is_asked_for():
    """Docker refuses a container whose device is missing: the base file must not ask."""
    services = compose_cli.resolved("compose.multinode.yaml", profiles=("head", "worker"))
    for name, service in services["services"].items():
        assert "devices" not in service and "cap_add" not in service, name


def test_the_node_address_and_the_link_reach_head_and_worker_as_entrypoint_settings():
    link = {
        "NODE_IP": "192.168.100.11",
        "SPARKSERVE_NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "SPARKSERVE_NCCL_IB_HCA": "rocep1s0f1:1",
        "SPARKSERVE_NCCL_IB_GID_INDEX": "3",
    }
    result = compose_cli.run(
        RDMA, "--profile", "head", "--profile", "worker", "config", "--format", "json", env=link
    )
    assert result.returncode == 0, result.stderr
    for name, service in json.loads(result.stdout)["services"].items():
        env = service["environment"]
        assert env["SPARKSERVE_NODE_IP"] == "192.168.100.11", name
        assert env["SPARKSERVE_NCCL_IB_HCA"] == "rocep1s0f1:1", name
        assert env["SPARKSERVE_NCCL_IB_GID_INDEX"] == "3", name
        assert env["SPARKSERVE_NCCL_SOCKET_IFNAME"] == "enp1s0f1np1", name
        assert env["SPARKSERVE_RAY_EXTRA_ARGS"] == "", name
