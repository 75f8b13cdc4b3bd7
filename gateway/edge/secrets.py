"""The files behind the tenancy settings: the API key file and the salt secret.

`read_key_entries` joins GATEWAY_API_KEYS and the lines of GATEWAY_API_KEYS_FILE;
`load_secret` is GATEWAY_SALT_SECRET, else the secret kept in GATEWAY_STATE_DIR
(created there, atomically, on first use).  Failures are one-line `ConfigError`s.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from gateway.core.errors import ConfigError
from gateway.edge.settings import CommonSettings

SECRET_FILE = "salt_secret"
SECRET_BYTES = 32


def read_key_entries(settings: CommonSettings) -> list[str]:
    entries = [e for e in settings.api_keys.get_secret_value().split(",") if e.strip()]
    if settings.api_keys_file is not None:
        try:
            text = settings.api_keys_file.read_text()
        except OSError as exc:
            raise ConfigError(f"GATEWAY_API_KEYS_FILE: cannot read ({exc.strerror})") from None
        # One entry a line, or a comma list (what a compose secret made from
        # GATEWAY_API_KEYS holds); `#` starts a comment line.
        lines = (line.strip() for line in text.splitlines())
        entries += [
            part.strip()
            for line in lines
            if not line.startswith("#")
            for part in line.split(",")
            if part.strip()
        ]
    return entries


def load_secret(settings: CommonSettings) -> bytes:
    """The salt secret: from settings, else from (or newly into) the state dir."""
    if settings.salt_secret is not None:
        return settings.salt_secret.get_secret_value().encode()
    path = settings.state_dir / SECRET_FILE
    try:
        return _read_or_create(path)
    except OSError as exc:
        raise ConfigError(
            f"GATEWAY_STATE_DIR={str(settings.state_dir)!r}: cannot keep the salt secret "
            f"({exc.strerror}); set GATEWAY_SALT_SECRET or a writable GATEWAY_STATE_DIR"
        ) from None


def _read_or_create(path: Path) -> bytes:
    """Create the secret atomically (write a temp file, then link it into place)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_hex(SECRET_BYTES).encode())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    secret = path.read_bytes().strip()
    if not secret:
        raise ConfigError(f"salt secret file {str(path)!r} is empty")
    return secret
