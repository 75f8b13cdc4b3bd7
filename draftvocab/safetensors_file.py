"""What the tool reads of a safetensors file: its header, and the raw bytes of some rows
of one tensor. The format (8-byte little-endian header length, a JSON header of
`name → {dtype, shape, data_offsets}`, then the data) is the safetensors specification;
rows are copied as bytes, so every dtype is handled alike and no tensor is decoded.
Writing follows the same specification (the library's writers take framework tensors
or, since 0.8, raw pointers; the tool has bytes); tests read the files back with the
safetensors library."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from pathlib import Path

from budget.errors import BudgetError
from budget.safetensors_headers import (
    DTYPE_ELEMENT_BYTES,
    HEADER_LENGTH_BYTES,
    TensorHeader,
    read_file_headers,
)
from draftvocab.errors import DraftVocabError


def read_header(path: Path) -> dict[str, TensorHeader]:
    """Every tensor of `path` (not the `__metadata__` entry), checked as the planner
    checks a checkpoint (budget/safetensors_headers.py)."""
    try:
        tensors, _ = read_file_headers(path)
    except BudgetError as exc:
        raise DraftVocabError(str(exc)) from None
    return {tensor.name: tensor for tensor in tensors}


def row_bytes(info: TensorHeader) -> int:
    """The bytes of one row (the first dimension) of a row-major tensor."""
    return info.data_bytes // info.shape[0] if info.shape and info.shape[0] else 0


def read_rows(path: Path, info: TensorHeader, rows: Sequence[int]) -> bytes:
    """The bytes of `rows` (in that order) of a row-major tensor."""
    size = row_bytes(info)
    out = bytearray()
    with path.open("rb") as handle:
        for row in rows:
            handle.seek(info.start + row * size)
            out += handle.read(size)
    return bytes(out)


def write(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> int:
    """Write `name → (dtype, shape, data)`; the bytes of tensor data written."""
    header: dict[str, object] = {}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        expected = int(math.prod(shape) * DTYPE_ELEMENT_BYTES[dtype])
        if len(data) != expected:
            raise ValueError(f"{name}: {len(data)} bytes for {dtype}{list(shape)} ({expected})")
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % HEADER_LENGTH_BYTES)  # the spec's 8-byte alignment
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)) + encoded)
        for _, _, data in tensors.values():
            handle.write(data)
    return offset
