"""The header reader reads the 8-byte length and the JSON header, never tensor data."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from budget.safetensors_headers import read_checkpoint

DATA_BYTES = 4 * 1024 * 1024  # one fp32 tensor of 1M elements


class CountingReader:
    """A file whose reads are counted."""

    def __init__(self, handle: io.BufferedReader, counted: list[int]) -> None:
        self.handle, self.counted = handle, counted

    def __enter__(self) -> CountingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.counted.append(len(data))
        return data


def test_only_the_header_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_file({"w": torch.zeros(DATA_BYTES // 4)}, str(tmp_path / "model.safetensors"))
    header_length = int.from_bytes((tmp_path / "model.safetensors").read_bytes()[:8], "little")
    counted: list[int] = []
    real_open = Path.open

    def counting_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        return CountingReader(real_open(self, *args, **kwargs), counted)

    monkeypatch.setattr(Path, "open", counting_open)
    checkpoint = read_checkpoint(tmp_path)
    assert checkpoint is not None and checkpoint.tensor_bytes == DATA_BYTES
    assert sum(counted) == 8 + header_length < 1024
