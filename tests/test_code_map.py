"""docs/code-map.md names only files and folders that exist, and its table of typical
changes has the five rows a new contributor looks for."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "code-map.md"
# `budget/settings.py`, `core/`, `make tiny-model`: backticked names with a path look.
NAMED = re.compile(r"`([A-Za-z0-9_.*/<>-]+(?:/|\.py|\.md|\.json|\.toml|\.yaml))`")
SECTION = re.compile(r"^## .*\(`([a-z_]+)/`")


def named_paths() -> list[tuple[str, str]]:
    """(section's package or "", name) for each path-like name in the map."""
    found, package = [], ""
    for line in MAP.read_text().splitlines():
        if line.startswith("## "):
            match = SECTION.match(line)
            package = match.group(1) if match else ""
        found += [(package, name) for name in NAMED.findall(line)]
    return found


def exists(package: str, name: str) -> bool:
    """At the root, in docs/, or in the section's package; `<dashboard>` and `*` match
    any name."""
    pattern = re.sub(r"<[a-z]+>", "*", name)
    bases = [ROOT, ROOT / "docs"]
    if package:
        bases += [ROOT / package, *(d for d in (ROOT / package).iterdir() if d.is_dir())]
    return any(any(base.glob(pattern)) for base in bases)


def test_every_name_in_the_map_exists() -> None:
    names = named_paths()
    assert len(names) > 40
    missing = [f"{package}: {name}" for package, name in names if not exists(package, name)]
    assert not missing


def test_the_five_typical_changes_are_there() -> None:
    text = MAP.read_text()
    table = text[text.index("## Five typical changes") :].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| a new")]
    wanted = ["planner setting", "gateway header rule", "dashboard panel", "entrypoint phase"]
    assert len(rows) == 5
    for topic in [*wanted, "vLLM release"]:
        assert any(topic in row for row in rows), topic
