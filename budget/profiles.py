"""Load model and hardware profiles (TOML files shipped in budget/profiles/) or a
model directory holding an HF config.json.  The only file I/O of the planner."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budget.errors import BudgetError
from budget.model import ModelSpec, model_from_config
from budget.safetensors_headers import CheckpointHeaders, read_checkpoint

PROFILE_DIR = Path(__file__).parent / "profiles"
GiB = 1024**3


@dataclass(frozen=True)
class Hardware:
    name: str
    description: str
    memory_bytes: int  # what CUDA (or the CPU backend) sees, per GPU
    bandwidth_gbs: float
    bf16_tflops: float
    uma: bool
    gpus: int = 1
    sm: str = ""
    os_reserve_fraction: float = 0.0
    nodes: int = 1  # machines of this kind in the profile (a named multi-node setup)
    # Link between GPUs of one node (PCIe / NVLink) and between nodes (NIC).
    gpu_link_gbs: float = 64.0
    gpu_link_latency_us: float = 10.0
    node_link_gbs: float = 12.5
    node_link_latency_us: float = 20.0
    node_link_given: bool = False  # set by --node-link-gbs / --node-link-latency-us
    # vllm-cpu only: a CPU with AVX512-BF16 runs vLLM's accelerated GDN path, which keeps
    # the GDN SSM state in fp32 (vllm/platforms/cpu.py), doubling its share of each page.
    cpu_avx512_bf16: bool = False

    @property
    def sm100_family(self) -> bool:
        return self.sm.split(".")[0] == "10"


@dataclass(frozen=True)
class ModelProfile:
    """A model plus the serving settings and weight formats its profile prescribes."""

    spec: ModelSpec
    model_dir: str | None  # set when loaded from a directory
    serving: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, Any] = field(default_factory=dict)
    draft_vocab: dict[str, Any] = field(default_factory=dict)
    ple: dict[str, Any] = field(default_factory=dict)
    reserve: dict[str, Any] = field(default_factory=dict)
    # The directory's safetensors headers (None: a profile, or no *.safetensors there).
    checkpoint: CheckpointHeaders | None = None


def _names(kind: str) -> list[str]:
    return sorted(p.stem for p in (PROFILE_DIR / kind).glob("*.toml"))


def model_names() -> list[str]:
    return _names("models")


def hardware_names() -> list[str]:
    return [*_names("hardware"), "cpu", "custom"]


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise BudgetError(f"profile {path}: not valid TOML ({exc})") from None


def load_hardware(name: str) -> Hardware:
    path = PROFILE_DIR / "hardware" / f"{name}.toml"
    if not path.is_file():
        raise BudgetError(
            f"hardware={name!r} is not a profile; known: {', '.join(hardware_names())}"
        )
    data = _load_toml(path)
    return Hardware(
        name=data["name"],
        description=data["description"],
        memory_bytes=int(float(data["memory_gib"]) * GiB),
        bandwidth_gbs=float(data["bandwidth_gbs"]),
        bf16_tflops=float(data["bf16_tflops"]),
        uma=bool(data["uma"]),
        gpus=int(data.get("gpus", 1)),
        sm=str(data.get("sm", "")),
        os_reserve_fraction=float(data.get("os_reserve_fraction", 0.0)),
        nodes=int(data.get("nodes", 1)),
        gpu_link_gbs=float(data.get("gpu_link_gbs", 64.0)),
        gpu_link_latency_us=float(data.get("gpu_link_latency_us", 10.0)),
        node_link_gbs=float(data.get("node_link_gbs", 12.5)),
        node_link_latency_us=float(data.get("node_link_latency_us", 20.0)),
    )


def _read_config_dir(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    if not path.is_file():
        raise BudgetError(f"model={str(directory)!r}: no config.json in that directory")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BudgetError(f"model={str(directory)!r}: config.json is unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise BudgetError(f"model={str(directory)!r}: config.json is not a JSON object")
    return data


def _tokenizer_max_length(directory: Path) -> int | None:
    """tokenizer_config.json's model_max_length, which vLLM lets cap the context."""
    path = directory / "tokenizer_config.json"
    try:
        value = json.loads(path.read_text()).get("model_max_length")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None  # vLLM loads the tokenizer itself and reports a broken one
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def load_model_dir(directory: Path, read_weights: bool = True) -> ModelProfile:
    """A directory with config.json; with `read_weights`, its safetensors headers too."""
    config = _read_config_dir(directory)
    spec = model_from_config(
        config, directory.name, f"{directory}/config.json", _tokenizer_max_length(directory)
    )
    checkpoint = read_checkpoint(directory) if read_weights else None
    return ModelProfile(spec=spec, model_dir=str(directory), checkpoint=checkpoint)


def load_model(name_or_dir: str, read_weights: bool = True) -> ModelProfile:
    """A profile name (see `model_names()`) or a directory with config.json (and, unless
    `read_weights` is off, the headers of its safetensors files)."""
    profile = PROFILE_DIR / "models" / f"{name_or_dir}.toml"
    if profile.is_file():
        data = _load_toml(profile)
        config = dict(data["config"])
        config["_sparkserve_assumed"] = data.get("assumed", [])
        spec = model_from_config(config, data["name"], f"profile {data['name']}")
        return ModelProfile(
            spec=spec,
            model_dir=None,
            serving=data.get("serving", {}),
            weights=data.get("weights", {}),
            draft_vocab=data.get("draft_vocab", {}),
            ple=data.get("ple", {}),
            reserve=data.get("reserve", {}),
        )
    directory = Path(name_or_dir)
    if directory.is_dir():
        return load_model_dir(directory, read_weights)
    raise BudgetError(
        f"model={name_or_dir!r} is neither a profile nor a directory; "
        f"profiles: {', '.join(model_names())}"
    )
