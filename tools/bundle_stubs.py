"""The empty stub wheels and pip constraints of `tools/offline_bundle.sh`.

Each `NAME==VERSION` in the host's package list (`--host-packages`, `pip list --format
freeze` there) and each `--stub NAME==VERSION` becomes an empty wheel `NAME-VERSION+stub`
and the constraint `NAME==VERSION+stub` (`+cu130.stub` where the version has a local
label already), so that `pip download` resolves vLLM against
them and bundles only the rest.  Where both name one package, the `--stub` wins: a host
with numba 0.68 and a vLLM that pins `numba==0.65.0` is bundled with `--stub
numba==0.65.0` (the host keeps its own numba), where two constraints for one package
would leave pip nothing it could resolve.

    python3 tools/bundle_stubs.py STUB_DIR CONSTRAINTS [--host-packages FILE] [--stub SPEC]…
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([A-Za-z0-9_.!+-]+)$")


class StubError(ValueError):
    """A stub the script cannot make, said in words."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    source: str  # "host" or "--stub"

    @property
    def stub_version(self) -> str:
        """The version with a `stub` local label: `0.65.0+stub`, or `2.11.0+cu130.stub`
        for a host's CUDA build (one `+` only, PEP 440); either still meets `==2.11.0`."""
        return f"{self.version}.stub" if "+" in self.version else f"{self.version}+stub"

    @property
    def key(self) -> str:
        """The package's normalized name (PEP 503): numba, Numba and numba_ are one."""
        return re.sub(r"[-_.]+", "-", self.name).lower()


def parse_spec(text: str, source: str) -> Pin:
    match = SPEC.match(text.strip())
    if match is None:
        raise StubError(
            f"{source} {text!r}: expected NAME==VERSION, e.g. flashinfer-python==0.6.12"
        )
    return Pin(match[1], match[2], source)


def host_pins(text: str) -> list[Pin]:
    """The `NAME==VERSION` lines of `pip list --format freeze`; the others (editable
    installs, `NAME @ URL`, comments) pin nothing a wheel index could offer."""
    pins = []
    for line in text.splitlines():
        if SPEC.match(line.strip()):
            pins.append(parse_spec(line, "host"))
    return pins


def merge(host: list[Pin], stubs: list[Pin]) -> tuple[list[Pin], list[str]]:
    """One pin per package: a `--stub` over the host's line of the same package (with a
    note saying so); two `--stub`s of one package at different versions are an error."""
    chosen: dict[str, Pin] = {}
    for pin in stubs:
        seen = chosen.get(pin.key)
        if seen is not None and seen.version != pin.version:
            raise StubError(
                f"--stub {seen.name}=={seen.version} and --stub {pin.name}=={pin.version}: "
                "one version per package"
            )
        chosen[pin.key] = pin
    notes = []
    for pin in host:
        given = chosen.get(pin.key)
        if given is None:
            chosen[pin.key] = pin
        elif given.source == "--stub" and given.version != pin.version:
            notes.append(
                f"{pin.name}: --stub {given.version} in place of the host's {pin.version} "
                "(the host keeps its own)"
            )
    return list(chosen.values()), notes


def stub_wheel(folder: Path, pin: Pin) -> None:
    """An empty wheel `NAME-{stub_version}-py3-none-any.whl`: metadata and nothing else."""
    dist = re.sub(r"[-_.]+", "_", pin.name)
    info = f"{dist}-{pin.stub_version}.dist-info"
    files = {
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {pin.name}\nVersion: {pin.stub_version}\n"
        ),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: offline_bundle\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{dist}-{pin.stub_version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/bundle_stubs.py", description=__doc__.split("\n\n")[0])
    p.add_argument("stub_dir", type=Path, help="where the stub wheels go")
    p.add_argument("constraints", type=Path, help="the pip constraints file to write")
    p.add_argument("--host-packages", type=Path, help="the host's `pip list --format freeze`")
    p.add_argument("--stub", action="append", default=[], metavar="NAME==VERSION")
    args = p.parse_args(argv)
    try:
        stubs = [parse_spec(spec, "--stub") for spec in args.stub]
        host: list[Pin] = []
        if args.host_packages is not None:
            try:
                host = host_pins(args.host_packages.read_text())
            except OSError as exc:
                raise StubError(f"--host-packages {args.host_packages}: {exc.strerror}") from None
        pins, notes = merge(host, stubs)
    except StubError as exc:
        print(f"offline_bundle: {exc}", file=sys.stderr)
        return 2
    args.stub_dir.mkdir(parents=True, exist_ok=True)
    for pin in pins:
        stub_wheel(args.stub_dir, pin)
    args.constraints.write_text("".join(f"{pin.name}=={pin.stub_version}\n" for pin in pins))
    for note in notes:
        print(f"offline_bundle: {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
