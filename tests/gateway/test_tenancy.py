"""Keys, tenants and cache salts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.core.errors import BadRequest, ConfigError, Unauthorized
from gateway.core.tenancy import (
    Authenticator,
    KeyTable,
    SaltMaker,
    parse_cache_groups,
    parse_key_entry,
)
from gateway.edge.secrets import load_secret, read_key_entries
from tests.gateway.conftest import MakeSettings

# vllm/entrypoints/generate/base/protocol.py: validate_cache_salt
VLLM_SALT_RULE = re.compile(r"^[^@/\\\x00]{1,128}$")


def test_bare_key_tenant_is_a_hash_never_the_key() -> None:
    tenant, key = parse_key_entry("sk-plain-key")
    assert key == "sk-plain-key"
    assert tenant.startswith("key-") and "sk-plain" not in tenant
    assert parse_key_entry("team-a:sk:with:colons") == ("team-a", "sk:with:colons")


@pytest.mark.parametrize("entry", ["alice:", "bad name:key"])
def test_bad_entries(entry: str) -> None:
    with pytest.raises(ConfigError):
        parse_key_entry(entry)


def test_lookup_and_authenticate() -> None:
    table = KeyTable(["alice:ka", "bob:kb", "alice:ka2"])
    auth = Authenticator(table, required=True)
    assert auth.authenticate("Bearer ka").tenant == "alice"
    assert auth.authenticate("bearer kb").tenant == "bob"
    assert auth.authenticate("Bearer ka2").key_id != auth.authenticate("Bearer ka").key_id
    for header in (None, "", "Bearer ", "Basic ka", "Bearer kc"):
        with pytest.raises(Unauthorized):
            auth.authenticate(header)
    assert Authenticator(KeyTable([]), required=False).authenticate(None).tenant == "anonymous"


def test_keys_file_joins_env_list(tmp_path: Path, make_settings: MakeSettings) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# comment\ncarol:kc\n\nkd\n")
    entries = read_key_entries(make_settings(api_keys="alice:ka", api_keys_file=keys))
    assert entries == ["alice:ka", "carol:kc", "kd"]


def test_keys_file_may_hold_a_comma_list(tmp_path: Path, make_settings: MakeSettings) -> None:
    keys = tmp_path / "keys"
    keys.write_text("carol:kc, dave:kd\n")  # as a compose secret made from GATEWAY_API_KEYS
    entries = read_key_entries(make_settings(api_keys="", api_keys_file=keys))
    assert entries == ["carol:kc", "dave:kd"]


def test_salts_isolate_tenants_and_respect_vllm_rules() -> None:
    salts = SaltMaker(b"secret", {})
    alice, bob = salts.salt_for("alice"), salts.salt_for("bob")
    assert alice != bob and alice == salts.salt_for("alice")
    assert VLLM_SALT_RULE.match(alice)
    assert SaltMaker(b"other", {}).salt_for("alice") != alice


def test_client_salt_is_folded_into_the_tenant_salt() -> None:
    salts = SaltMaker(b"secret", {})
    own = salts.salt_for("alice", "project-1")
    assert own not in (salts.salt_for("alice"), "project-1")
    assert own != salts.salt_for("bob", "project-1")  # the same client salt cannot cross tenants
    assert VLLM_SALT_RULE.match(salts.salt_for("alice", "@/\\" * 100))
    with pytest.raises(BadRequest):
        salts.salt_for("alice", "")


def test_shared_groups() -> None:
    groups = parse_cache_groups("team=alice+bob, solo=carol")
    salts = SaltMaker(b"secret", groups)
    assert salts.salt_for("alice") == salts.salt_for("bob") != salts.salt_for("carol")
    assert salts.salt_for("dave") != salts.salt_for("carol")
    with pytest.raises(ConfigError, match="two groups"):
        parse_cache_groups("a=x+y,b=y")
    with pytest.raises(ConfigError, match="group=tenant"):
        parse_cache_groups("nogroup")


def test_secret_generated_once_and_kept(tmp_path: Path, make_settings: MakeSettings) -> None:
    settings = make_settings(salt_secret=None, state_dir=tmp_path / "state")
    first = load_secret(settings)
    assert len(first) == 64 and load_secret(settings) == first
    assert (tmp_path / "state" / "salt_secret").stat().st_mode & 0o777 == 0o600
    assert load_secret(make_settings(salt_secret="given")) == b"given"


def test_unwritable_state_dir_is_a_config_error(make_settings: MakeSettings) -> None:
    settings = make_settings(salt_secret=None, state_dir=Path("/proc/nope"))
    with pytest.raises(ConfigError, match="GATEWAY_STATE_DIR"):
        load_secret(settings)
