"""NVML → metrics with a fake NVML module (the real one needs a driver)."""

from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from entrypoint.hardware import HostMemory, detect
from entrypoint.nvml import read_gpus
from entrypoint.telemetry import GpuCollector, HostMemoryCollector

GiB = 1024**3
HOST = HostMemory(total_bytes=128 * GiB, available_bytes=100 * GiB, free_bytes=60 * GiB)


class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """The pynvml calls the entrypoint makes; `memory=None` answers Not Supported (GB10)."""

    NVMLError = FakeNVMLError
    NVML_TEMPERATURE_GPU, NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 0, 1, 2

    def __init__(self, names, memory=(80 * GiB, 10 * GiB), power_supported=True):
        self.names, self.memory, self.power_supported = names, memory, power_supported

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.names[handle].encode()

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 60 + handle

    def nvmlDeviceGetPowerUsage(self, handle):
        if not self.power_supported:
            raise FakeNVMLError("Not Supported")
        return 250_500  # milliwatts

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return {0: 1980, 1: 1980, 2: 2619}[clock]

    def nvmlDeviceGetMemoryInfo(self, handle):
        if self.memory is None:
            raise FakeNVMLError("Not Supported")
        total, used = self.memory
        return SimpleNamespace(total=total, used=used, free=total - used)


def _registry(nvml):
    registry = CollectorRegistry()
    registry.register(GpuCollector(lambda: read_gpus(nvml), lambda: HOST))
    registry.register(HostMemoryCollector(lambda: HOST))
    return registry


def test_nvml_units_become_base_units():
    registry = _registry(FakeNVML(["NVIDIA H200"]))
    value = registry.get_sample_value
    assert value("sparkserve_gpu_temperature_celsius", {"gpu": "0"}) == 60
    assert value("sparkserve_gpu_power_watts", {"gpu": "0"}) == 250.5
    assert value("sparkserve_gpu_utilization_ratio", {"gpu": "0"}) == 0.87
    assert value("sparkserve_gpu_clock_hertz", {"gpu": "0", "clock": "memory"}) == 2619e6
    assert value("sparkserve_gpu_memory_bytes", {"gpu": "0", "kind": "used"}) == 10 * GiB
    assert value("sparkserve_gpu_info", {"gpu": "0", "name": "NVIDIA H200"}) == 1


def test_each_gpu_gets_its_own_series():
    registry = _registry(FakeNVML(["NVIDIA H200", "NVIDIA H200"]))
    assert registry.get_sample_value("sparkserve_gpu_temperature_celsius", {"gpu": "1"}) == 61


def test_gb10_memory_comes_from_meminfo():
    registry = _registry(FakeNVML(["NVIDIA GB10"], memory=None))
    value = registry.get_sample_value
    assert value("sparkserve_gpu_memory_bytes", {"gpu": "0", "kind": "total"}) == 128 * GiB
    assert value("sparkserve_gpu_memory_bytes", {"gpu": "0", "kind": "free"}) == 100 * GiB


def test_an_unsupported_reading_is_absent_not_zero():
    registry = _registry(FakeNVML(["NVIDIA GB10"], power_supported=False))
    assert registry.get_sample_value("sparkserve_gpu_power_watts", {"gpu": "0"}) is None
    assert registry.get_sample_value("sparkserve_gpu_temperature_celsius", {"gpu": "0"}) == 60


def test_without_nvml_there_are_no_gpu_series():
    registry = _registry(None)
    names = {m.name for m in registry.collect()}
    assert not any(name.startswith("sparkserve_gpu") for name in names)
    value = registry.get_sample_value
    assert value("sparkserve_host_memory_bytes", {"kind": "available"}) == 100 * GiB


def test_detection_maps_names_to_profiles_and_gb10_to_uma():
    spark = detect(read_gpus(FakeNVML(["NVIDIA GB10"], memory=None)), lambda: HOST)
    assert (spark.device, spark.profile, spark.uma, spark.memory_gib) == (
        "cuda",
        "dgx-spark",
        True,
        128.0,
    )
    h200 = detect(read_gpus(FakeNVML(["NVIDIA H200"])), lambda: HOST)
    assert (h200.profile, h200.uma, h200.memory_gib) == ("h200", False, 80.0)
    unknown = detect(read_gpus(FakeNVML(["NVIDIA A10"])), lambda: HOST)
    assert unknown.profile is None


def test_no_gpu_means_cpu():
    machine = detect([], lambda: HOST)
    assert (machine.device, machine.gpu_count, machine.memory_gib) == ("cpu", 0, 128.0)
