"""Cluster roles without Ray running: settings, commands, the head's vLLM launch, the wait loop."""

import pytest

from budget.options import PlanOptions
from budget.planner import build_plan
from entrypoint.config import load_config
from entrypoint.errors import ConfigError, PreflightError, RayError
from entrypoint.hardware import HostMemory, detect
from entrypoint.nvml import GpuReading
from entrypoint.planning import build_launch
from entrypoint.ray_cluster import (
    RAY_DRAIN_ENV,
    ClusterView,
    Expected,
    Node,
    drain_outlasts_grace,
    ray_launch,
    unified_gpu,
    wait_for_cluster,
)
from entrypoint.roles import check_role, expected_cluster, for_head
from entrypoint.vllm_flags import check_flags, vllm_parser

WORKER = {"SPARKSERVE_ROLE": "worker", "SPARKSERVE_HEAD_ADDRESS": "10.0.0.1"}
LINK = {"SPARKSERVE_NCCL_SOCKET_IFNAME": "enp1s0f1np1", "SPARKSERVE_GLOO_SOCKET_IFNAME": "enp1s0"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SPARKSERVE_ROLE": "worker"}, "SPARKSERVE_ROLE=worker needs SPARKSERVE_HEAD_ADDRESS"),
        ({"SPARKSERVE_NODES": "2"}, "SPARKSERVE_NODES=2 needs SPARKSERVE_ROLE=head"),
        ({"SPARKSERVE_ROLE": "boss"}, "SPARKSERVE_ROLE='boss': must be one of single|head|worker"),
    ],
)
def test_role_settings_that_cannot_work(env, message):
    with pytest.raises(ConfigError, match=message):
        load_config(env)


def test_defaults_are_one_node_and_ray_port_6379():
    config = load_config({})
    assert (config.role, config.plan.nodes, config.ray_port, config.node_wait_timeout) == (
        "single",
        None,
        6379,
        600.0,
    )


def test_worker_joins_the_head_in_the_foreground_with_the_link_settings():
    launch = ray_launch(
        load_config({**WORKER, **LINK, "SPARKSERVE_RAY_EXTRA_ARGS": "--num-cpus 1"})
    )
    assert launch.argv[1:] == ("start", "--address", "10.0.0.1:6379", "--block", "--num-cpus", "1")
    assert launch.env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert launch.env["GLOO_SOCKET_IFNAME"] == "enp1s0"


def test_head_starts_ray_on_its_port():
    launch = ray_launch(load_config({"SPARKSERVE_ROLE": "head", "SPARKSERVE_RAY_PORT": "7000"}))
    assert launch.argv[1:] == ("start", "--head", "--port", "7000", "--block")


def test_rays_drain_on_sigterm_is_off_unless_the_user_set_it():
    """Ray drains for 30 s on SIGTERM by default; with a 30 s grace that ended in SIGKILL."""
    config = load_config({**WORKER})
    assert ray_launch(config, {}).env[RAY_DRAIN_ENV] == "0"
    assert "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0" in ray_launch(config, {}).shown()
    assert RAY_DRAIN_ENV not in ray_launch(config, {RAY_DRAIN_ENV: "5"}).env  # theirs is kept


MONITOR = "RAY_memory_monitor_refresh_ms"
STORE = "--object-store-memory"


def machine(gpu: str | None):
    """What NVML reports: GB10 has no memory figures (the host's memory is the GPU's)."""
    host = HostMemory(128 * 1024**3, 100 * 1024**3, 90 * 1024**3)
    memory = None if gpu is None or "GB10" in gpu else {"total": 143771 * 1024**2}
    readings = [GpuReading(0, gpu, memory_bytes=memory)] if gpu else []
    return detect(readings, read_host=lambda: host)


@pytest.mark.parametrize(
    ("gpu", "uma"), [("NVIDIA GB10", True), ("NVIDIA H200", False), (None, False)]
)
def test_only_a_gpu_sharing_the_hosts_memory_counts_as_unified(gpu, uma):
    """GB10 shares the host's memory; a CPU-only node has no GPU allocations to misread."""
    assert unified_gpu(machine(gpu)) is uma


@pytest.mark.parametrize("role", [WORKER, {"SPARKSERVE_ROLE": "head"}])
def test_on_unified_memory_rays_memory_monitor_is_off_and_its_store_capped(role):
    """The monitor counts the GPU's KV pool as the node running out and kills vLLM's ranks."""
    launch = ray_launch(load_config(role), {}, uma=True)
    assert launch.env[MONITOR] == "0"
    assert launch.argv[launch.argv.index(STORE) + 1] == str(1024**3)
    assert launch.argv[-1] == "--block"


def test_on_discrete_memory_ray_keeps_its_monitor_and_store():
    launch = ray_launch(load_config(WORKER), {}, uma=False)
    assert MONITOR not in launch.env and STORE not in launch.argv


def test_the_users_memory_monitor_and_object_store_are_kept():
    extra = {"SPARKSERVE_RAY_EXTRA_ARGS": "--object-store-memory=500000000"}
    launch = ray_launch(load_config({**WORKER, **extra}), {MONITOR: "250"}, uma=True)
    assert MONITOR not in launch.env  # inherited as the user set it
    assert [w for w in launch.argv if w.startswith(STORE)] == ["--object-store-memory=500000000"]
    sized = ray_launch(load_config({**WORKER, "SPARKSERVE_RAY_OBJECT_STORE_MEMORY": "2G"}))
    assert sized.argv[sized.argv.index(STORE) + 1] == str(2 * 1024**3)


def test_the_node_address_goes_to_ray_and_to_vllm(tiny_plan):
    env = {"SPARKSERVE_NODE_IP": "10.0.0.2", "SPARKSERVE_NCCL_IB_HCA": "=mlx5_0:1"}
    env["SPARKSERVE_NCCL_IB_GID_INDEX"] = "3"
    launch = ray_launch(load_config({**WORKER, **env}))
    assert launch.argv[1:] == (
        "start", "--address", "10.0.0.1:6379", "--node-ip-address", "10.0.0.2", "--block"
    )  # fmt: skip
    for target in (launch.env, build_launch(load_config(env), tiny_plan).env):
        assert target["VLLM_HOST_IP"] == "10.0.0.2"
        assert (target["NCCL_IB_HCA"], target["NCCL_IB_GID_INDEX"]) == ("=mlx5_0:1", "3")


def test_the_node_address_given_twice_is_refused():
    env = {
        "SPARKSERVE_NODE_IP": "10.0.0.2",
        "SPARKSERVE_RAY_EXTRA_ARGS": "--node-ip-address 10.0.0.3",
    }
    with pytest.raises(ConfigError, match="give the address once, in SPARKSERVE_NODE_IP"):
        ray_launch(load_config({**WORKER, **env}))


@pytest.mark.parametrize(
    ("drain", "grace", "warned"),
    [
        (None, "30", False),
        ("5", "30", False),
        ("0", "1", False),
        ("30", "30", True),
        ("60", "30", True),
        ("soon", "30", True),
    ],
)
def test_a_drain_the_grace_period_cannot_cover_is_warned_about(drain, grace, warned):
    config = load_config({**WORKER, "SPARKSERVE_STOP_GRACE_SECONDS": grace})
    environ = {} if drain is None else {RAY_DRAIN_ENV: drain}
    warning = drain_outlasts_grace(config, environ)
    assert (warning is not None) == warned
    if warned:
        assert RAY_DRAIN_ENV in warning and drain in warning


@pytest.fixture(scope="module")
def two_sparks():
    return build_plan(PlanOptions(hardware="dgx-spark-x2", weights_dtype="fp8"))


def test_the_head_waits_for_every_node_and_gpu_of_the_plan(two_sparks):
    assert expected_cluster(two_sparks) == Expected(nodes=2, gpus=2)


@pytest.mark.parametrize(("tp", "gpus"), [(1, 1), (2, 2)])
def test_one_node_waits_for_a_gpu_per_rank_even_on_a_one_gpu_profile(tp, gpus):
    """vLLM's Ray placement group wants one GPU per rank: TP 2 on `h200` (gpus = 1) needs 2."""
    plan = build_plan(PlanOptions(hardware="h200", tp=tp))
    assert expected_cluster(plan) == Expected(nodes=1, gpus=gpus)


def test_a_multi_node_plan_needs_the_head_role(two_sparks):
    with pytest.raises(PreflightError, match="set SPARKSERVE_ROLE=head here"):
        check_role(load_config({}), two_sparks)
    check_role(load_config({"SPARKSERVE_ROLE": "head"}), two_sparks)


def test_vllm_on_the_head_uses_ray_and_the_link(tiny_plan):
    config = load_config({"SPARKSERVE_ROLE": "head", "SPARKSERVE_RAY_PORT": "7000", **LINK})
    launch = for_head(build_launch(config, tiny_plan), config)
    assert launch.planned_args[-2:] == ("--distributed-executor-backend", "ray")
    assert launch.env["RAY_ADDRESS"] == "127.0.0.1:7000"
    assert launch.env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert check_flags(launch.planned_args, launch.extra_args, vllm_parser())


def test_the_users_executor_backend_is_kept(tiny_plan):
    config = load_config(
        {
            "SPARKSERVE_ROLE": "head",
            "SPARKSERVE_VLLM_EXTRA_ARGS": "--distributed-executor-backend mp",
        }
    )
    launch = for_head(build_launch(config, tiny_plan), config)
    assert launch.argv.count("--distributed-executor-backend") == 1


def views(*counts):
    """Probe answers: a node count each (1 GPU per node), or a string for "Ray not up"."""
    for count in counts:
        yield (
            count
            if isinstance(count, str)
            else ClusterView(tuple(Node(f"10.0.0.{i + 1}", 1.0) for i in range(count)))
        )


def test_wait_prints_progress_until_every_node_joined(console):
    answers = views("ConnectionError: GCS not up", 1, 1, 2)
    seen = wait_for_cluster(lambda: next(answers), Expected(2, 2), 60, console, lambda s: None)
    assert len(seen.nodes) == 2
    out = console.out.getvalue()
    assert "missing 2 of 2 node(s) and 2 of 2 GPU(s) (Ray: ConnectionError: GCS not up)" in out
    assert out.count("missing 1 of 2 node(s) and 1 of 2 GPU(s)") == 1  # printed on change
    assert "2 node(s), 2 GPU(s): 10.0.0.1 (1 GPU), 10.0.0.2 (1 GPU): all joined" in out


def test_wait_times_out_naming_what_is_missing(console):
    answers = views(1)
    with pytest.raises(RayError) as failure:
        wait_for_cluster(lambda: next(answers), Expected(2, 2), 0, console, lambda s: None)
    message = str(failure.value)
    assert "1 of 2 node(s) and 1 of 2 GPU(s) are missing" in message
    assert "10.0.0.1 (1 GPU)" in message and "SPARKSERVE_ROLE=worker" in message
    assert failure.value.exit_code == 3
