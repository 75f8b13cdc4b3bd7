"""vLLM's verdict on the serve flags, kept per installed vLLM build (pre-flight on a restart).

The flag check builds vLLM's own serve parser, which imports vLLM: about 10 s on a GPU
host, every start. Its verdict depends only on the installed vLLM and the arguments, so
with a cache directory (`SPARKSERVE_CACHE_DIR`) the entrypoint keeps it in
`CACHE_DIR/sparkserve/vllm-flags-<build>.json`:

- the build is the vLLM distribution's name, version and a hash of its `RECORD` file (the
  list of installed files with their hashes: any reinstall, even of the same version, is
  another build); a vLLM without `RECORD` (an editable install) is never cached;
- the file holds the flags vLLM's parser knows and the argument lists it accepted, each
  as a hash of the arguments and the `VLLM_*` environment variables.

A restart with the same vLLM and the same arguments reads the verdict instead of importing
vLLM. A flag the cached parser does not know is refused at once, without vLLM; any other
new argument list goes through vLLM's parser and joins the cache once accepted. Rejected
lists are never cached. A missing, unreadable or foreign file counts as no cache; a
cache directory that cannot be written costs a warning, never the start.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from entrypoint.vllm_version import DISTRIBUTIONS

FORMAT = 1
KEEP_ACCEPTED = 64  # argument lists remembered per build (the newest)
SUBDIR = "sparkserve"


@dataclass(frozen=True)
class Build:
    """One installed vLLM: distribution, version and a hash of its RECORD."""

    distribution: str
    version: str
    record_sha256: str

    @property
    def key(self) -> str:
        return f"{self.distribution}-{self.version}-{self.record_sha256[:16]}"


def installed_build(distributions: Sequence[str] = DISTRIBUTIONS) -> Build | None:
    """The installed vLLM's build, read from its metadata (no vLLM import); None when no
    vLLM is installed or its distribution has no RECORD."""
    for name in distributions:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        record = dist.read_text("RECORD")
        if not record:
            return None
        return Build(name, dist.version, hashlib.sha256(record.encode()).hexdigest())
    return None


def argv_key(argv: Sequence[str], environ: Mapping[str, str]) -> str:
    """The hash one verdict is kept under: the arguments and vLLM's own variables."""
    vllm_env = sorted((k, v) for k, v in environ.items() if k.startswith("VLLM_"))
    text = json.dumps({"argv": list(argv), "env": vllm_env}, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Verdicts:
    """What one build's parser said: its version, its flags, the argument lists it took."""

    version: str
    known: frozenset[str]
    accepted: tuple[str, ...]


class FlagCache:
    """The verdict file of one build under a cache directory."""

    def __init__(self, cache_dir: str | os.PathLike[str], build: Build) -> None:
        self.build = build
        self.path = Path(cache_dir) / SUBDIR / f"vllm-flags-{build.key}.json"

    def load(self) -> Verdicts | None:
        """The cached verdicts, or None (no file, unreadable, or not this build's)."""
        try:
            data: Any = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return None
        if data.get("build") != self.build.record_sha256:
            return None
        version, known, accepted = data.get("version"), data.get("known"), data.get("accepted")
        if not isinstance(version, str) or not _strings(known) or not _strings(accepted):
            return None
        return Verdicts(
            version, frozenset(cast(list[str], known)), tuple(cast(list[str], accepted))
        )

    def store(self, version: str, known: frozenset[str] | set[str], key: str) -> str | None:
        """Add `key` to the accepted lists; None, or why the file could not be written."""
        old = self.load()
        accepted = [k for k in (old.accepted if old else ()) if k != key][-(KEEP_ACCEPTED - 1) :]
        data = {
            "format": FORMAT,
            "distribution": self.build.distribution,
            "build": self.build.record_sha256,
            "version": version,
            "known": sorted(known),
            "accepted": [*accepted, key],
        }
        tmp: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".vllm-flags-")
            with os.fdopen(fd, "w") as out:
                json.dump(data, out)
            os.replace(tmp, self.path)
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return f"{self.path}: {exc.strerror or exc}"
        return None


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
