from dataclasses import dataclass, field, fields

import pytest

from budget import parsers
from budget.options import PlanOptions, declare, settings_of
from entrypoint.config import OPTIONS, EntrypointConfig, load_config
from entrypoint.errors import EXIT_BAD_CONFIG, ConfigError


def test_every_option_is_a_config_field_and_back():
    own = [o.field for o in OPTIONS if not o.planner]
    assert own == [f.name for f in fields(EntrypointConfig) if f.name != "plan"]


def test_every_config_field_but_plan_declares_its_variable_and_help():
    """A field added without `declare` would be a setting nothing can set."""
    for f in fields(EntrypointConfig):
        if f.name == "plan":
            continue
        (setting,) = (s for s in settings_of(EntrypointConfig) if s.name == f.name)
        assert setting.env == f"SPARKSERVE_{f.name.upper()}", f.name
        assert setting.help.strip() and setting.metavar, f.name
        assert setting.default == f.default, f.name


def test_settings_of_reads_only_declared_fields_in_order():
    @dataclass(frozen=True)
    class Declared:
        zeta: int = field(default=2, metadata=declare(parsers.port, "Zeta.", "N"))
        plain: int = 0
        alpha: str | None = field(
            default=None, metadata=declare(parsers.text, "Alpha.", "KEY", secret=True)
        )

    settings = settings_of(Declared)
    assert [(s.name, s.default, s.secret) for s in settings] == [
        ("zeta", 2, False),
        ("alpha", None, True),
    ]
    assert (settings[1].env, settings[1].flag) == ("SPARKSERVE_ALPHA", "--alpha")


def test_the_entrypoint_offers_every_planner_setting_but_the_planner_only_ones():
    planner = {o.field for o in OPTIONS if o.planner}
    plan_fields = {f.name for f in fields(PlanOptions)}
    # Detected of the machine (custom hardware, the CPU), or the planner's what-ifs.
    planner_only = {
        "memory_gib",
        "bandwidth_gbs",
        "uma",
        "cpu_avx512_bf16",
        "block_size",
        "ple_hot_fraction",
        "mtp_acceptance",
    }
    assert plan_fields - planner == planner_only
    assert planner <= plan_fields


def test_design_contract_variables_exist():
    envs = {o.env for o in OPTIONS}
    for name in (
        "MODEL",
        "HARDWARE",
        "DEVICE",
        "SERVED_MODEL_NAME",
        "HOST",
        "PORT",
        "CONTROL_PORT",
        "MAX_MODEL_LEN",
        "MAX_NUM_SEQS",
        "MAX_NUM_BATCHED_TOKENS",
        "MTP",
        "KV_CACHE_MEMORY_BYTES",
        "WARMUP",
        "VLLM_EXTRA_ARGS",
    ):
        assert f"SPARKSERVE_{name}" in envs


def test_every_option_has_help_and_a_sparkserve_name():
    for option in OPTIONS:
        assert option.env.startswith("SPARKSERVE_") and option.help.strip()


def test_defaults_without_environment():
    config = load_config({})
    assert (config.port, config.control_port, config.warmup, config.force) == (
        8000,
        8001,
        True,
        False,
    )
    assert config.vllm_extra_args == ()


def test_values_are_parsed_from_the_environment():
    config = load_config(
        {
            "SPARKSERVE_KV_CACHE_MEMORY_BYTES": "40G",
            "SPARKSERVE_MAX_MODEL_LEN": "32K",
            "SPARKSERVE_WARMUP": "off",
            "SPARKSERVE_VLLM_EXTRA_ARGS": "--enforce-eager --seed '1'",
            "SPARKSERVE_CUDAGRAPH_MODE": "full_decode_only",
            "SPARKSERVE_CUDAGRAPH_CAPTURE_SIZES": "4,8",
        }
    )
    assert config.plan.kv_cache_memory_bytes == 40 * 1024**3
    assert config.plan.max_model_len == 32 * 1024
    assert config.warmup is False
    assert config.vllm_extra_args == ("--enforce-eager", "--seed", "1")
    assert config.plan.cudagraph_mode == "FULL_DECODE_ONLY"
    assert config.plan.cudagraph_capture_sizes == (4, 8)


def test_a_flag_wins_over_its_variable():
    assert load_config({"SPARKSERVE_PORT": "9000"}, {"port": "9100"}).port == 9100


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("SPARKSERVE_PORT", "abc", "SPARKSERVE_PORT='abc': must be an integer 1-65535"),
        ("SPARKSERVE_WARMUP", "maybe", "SPARKSERVE_WARMUP='maybe': must be on or off"),
        ("SPARKSERVE_DEVICE", "tpu", "SPARKSERVE_DEVICE='tpu': must be one of cuda|cpu"),
        ("SPARKSERVE_MAX_NUM_SEQS", "0", "SPARKSERVE_MAX_NUM_SEQS='0': must be ≥ 1"),
        ("SPARKSERVE_KV_CACHE_MEMORY_BYTES", "1.5G", "decimals are not allowed with G"),
        ("SPARKSERVE_VLLM_EXTRA_ARGS", "--x 'unclosed", "must be shell words"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_is_allowed(env, value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        load_config({env: value})
    assert err.value.exit_code == EXIT_BAD_CONFIG


def test_a_bad_flag_value_names_the_flag():
    with pytest.raises(ConfigError, match="^--port='x'"):
        load_config({}, {"port": "x"})


def test_a_secret_is_never_echoed():
    option = next(o for o in OPTIONS if o.field == "api_key")
    assert option.secret


def test_ports_must_differ():
    with pytest.raises(ConfigError, match="must differ"):
        load_config({"SPARKSERVE_PORT": "8001"})


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("4096", 4096),
        ("2k", 2000),
        ("2K", 2048),
        ("40G", 40 * 2**30),
        ("1.5g", 1_500_000_000),
    ],
)
def test_human_int_mirrors_vllm(raw, value):
    assert parsers.human_int(raw) == value


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"VLLM_API_KEY": "sk-v"}, "VLLM_API_KEY is set in the entrypoint's environment"),
        (
            {"VLLM_API_KEY": "sk-v", "SPARKSERVE_API_KEY": "sk-s"},
            "put the key in SPARKSERVE_API_KEY",
        ),
        (
            {"SPARKSERVE_VLLM_EXTRA_ARGS": "--enforce-eager --api-key sk-x"},
            "SPARKSERVE_VLLM_EXTRA_ARGS has --api-key",
        ),
        ({"SPARKSERVE_VLLM_EXTRA_ARGS": "--api_key=sk-x"}, "has --api-key"),
    ],
)
def test_a_key_vllm_would_take_from_elsewhere_is_refused_before_the_start(env, message):
    """vLLM also reads VLLM_API_KEY and --api-key; a key the warm-up does not send would
    fail it with a 401 only once the model has loaded."""
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(env)
    assert caught.value.exit_code == EXIT_BAD_CONFIG and "sk-" not in str(caught.value)


def test_the_same_key_in_both_places_is_fine():
    config = load_config({"VLLM_API_KEY": "sk-same", "SPARKSERVE_API_KEY": "sk-same"})
    assert config.api_key == "sk-same"
