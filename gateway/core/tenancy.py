"""API keys, tenants and per-tenant prefix-cache salts.

A key entry is `key` or `tenant:key`, or `tenant@model|model:key` for a key that
may use only those models (`@model|model:key`: a bare key so limited); a bare key is
its own tenant, named by a short hash of the key (never the key).  Keys are compared
in constant time.
Each tenant (or each shared cache group) gets `cache_salt = HMAC(secret, name)`,
so one tenant cannot probe another's cached prompts by timing; a client's own
`cache_salt` is folded into its tenant's, never replacing it.  The key file and
the salt secret are read by gateway/edge/secrets.py.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.core.errors import BadRequest, ConfigError, Unauthorized
from gateway.core.models import MODEL_NAME

ANONYMOUS = "anonymous"
# vllm/entrypoints/generate/base/protocol.py: validate_cache_salt
MAX_CACHE_SALT_CHARS = 128
_TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Principal:
    """Who sent a request: the tenant (a metric label), a key id (admission) and the
    models its key may use (None: any)."""

    tenant: str
    key_id: str
    models: frozenset[str] | None = None


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


def _tenant_of_bare_key(key: str) -> str:
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:10]


def parse_key_entry(entry: str) -> tuple[str, str]:
    """`key` or `tenant:key` → (tenant, key); the error never shows the key."""
    tenant, key, _ = parse_key_spec(entry)
    return tenant, key


def parse_key_spec(entry: str) -> tuple[str, str, frozenset[str] | None]:
    """`key`, `tenant:key`, `tenant@m1|m2:key` or `@m1|m2:key` → (tenant, key, the
    models the key may use or None for any); the error never shows the key."""
    head, sep, key = entry.strip().partition(":")
    if not sep:
        key, head = head, _tenant_of_bare_key(head)
    tenant, at, listed = head.partition("@")
    models: frozenset[str] | None = None
    if at:
        names = [name.strip() for name in listed.split("|")]
        bad = [name for name in names if not MODEL_NAME.match(name)]
        if bad:
            raise ConfigError(
                f"API key entry {head!r}: model name {bad[0]!r} must match {MODEL_NAME.pattern} "
                "(`tenant@model|model:key`)"
            )
        models = frozenset(names)
        if not tenant and key:
            tenant = _tenant_of_bare_key(key)
    if not key:
        raise ConfigError(f"API key entry for tenant {tenant!r} has an empty key")
    if not _TENANT_NAME.match(tenant):
        raise ConfigError(f"tenant name {tenant!r} must match {_TENANT_NAME.pattern}")
    return tenant, key, models


class KeyTable:
    """Maps API keys to principals; lookups compare every key in constant time."""

    def __init__(self, entries: Iterable[str]) -> None:
        self._keys: list[tuple[bytes, Principal]] = []
        for entry in entries:
            tenant, key, models = parse_key_spec(entry)
            digest = _digest(key)
            self._keys.append((digest, Principal(tenant, digest.hex()[:12], models)))

    def __len__(self) -> int:
        return len(self._keys)

    def lookup(self, key: str) -> Principal | None:
        given = _digest(key)
        found: Principal | None = None
        for digest, principal in self._keys:
            if hmac.compare_digest(given, digest) and found is None:
                found = principal
        return found


class Authenticator:
    """Resolves the `Authorization: Bearer …` header to a `Principal`."""

    def __init__(self, keys: KeyTable, *, required: bool) -> None:
        self._keys = keys
        self._required = required

    def authenticate(self, authorization: str | None) -> Principal:
        if not self._required:
            return Principal(ANONYMOUS, ANONYMOUS)
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
        principal = self._keys.lookup(token.strip())
        if principal is None:
            raise Unauthorized("Invalid API key.")
        return principal


def parse_cache_groups(spec: str) -> dict[str, str]:
    """`group=t1+t2,group2=t3` → {tenant: group}; a tenant is in one group at most."""
    groups: dict[str, str] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, sep, members = item.partition("=")
        if not sep or not name.strip() or not members.strip():
            raise ConfigError(f"GATEWAY_CACHE_GROUPS: {item!r} is not `group=tenant+tenant`")
        for tenant in (m.strip() for m in members.split("+") if m.strip()):
            if tenant in groups:
                raise ConfigError(f"GATEWAY_CACHE_GROUPS: tenant {tenant!r} is in two groups")
            groups[tenant] = name.strip()
    return groups


class SaltMaker:
    """Derives the `cache_salt` vLLM sees from the tenant and the client's salt."""

    def __init__(self, secret: bytes, groups: Mapping[str, str]) -> None:
        self._secret = secret
        self._groups = dict(groups)
        # A tenant's own salt, computed once: tenants are configured names, so bounded.
        self._tenant_salts: dict[str, str] = {}

    def _scope(self, tenant: str) -> str:
        return "group:" + self._groups[tenant] if tenant in self._groups else "tenant:" + tenant

    def _hmac(self, message: str) -> str:
        return hmac.new(self._secret, message.encode(), hashlib.sha256).hexdigest()

    def salt_for(self, tenant: str, client_salt: object = None) -> str:
        if client_salt is None:
            salt = self._tenant_salts.get(tenant)
            if salt is None:
                salt = self._tenant_salts[tenant] = self._hmac(self._scope(tenant))
            return salt[:MAX_CACHE_SALT_CHARS]
        scope = self._scope(tenant)
        if not isinstance(client_salt, str) or not client_salt:
            raise BadRequest("Parameter 'cache_salt' must be a non-empty string if provided.")
        return self._hmac(scope + "\0client:" + client_salt)[:MAX_CACHE_SALT_CHARS]
