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
from dataclasses import dataclass
from pathlib import Path

from draftvocab.errors import DraftVocabError

HEADER_LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors refuses larger headers
# safetensors dtype name → bytes per element (the specification's list).
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute file offset of its first byte
    end: int

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * DTYPE_BYTES[self.dtype]


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Every tensor of `path` (not the `__metadata__` entry)."""
    try:
        with path.open("rb") as handle:
            raw_length = handle.read(HEADER_LENGTH_BYTES)
            if len(raw_length) != HEADER_LENGTH_BYTES:
                raise DraftVocabError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (length,) = struct.unpack("<Q", raw_length)
            if length > MAX_HEADER_BYTES:
                raise DraftVocabError(f"{path}: header of {length} bytes; not safetensors")
            header = json.loads(handle.read(length))
        size = path.stat().st_size
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DraftVocabError(f"{path}: cannot read its safetensors header ({exc})") from None
    base = HEADER_LENGTH_BYTES + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, finish = entry["data_offsets"]
        info = TensorInfo(entry["dtype"], tuple(entry["shape"]), base + begin, base + finish)
        if info.end > size:
            raise DraftVocabError(f"{path}: tensor {name} ends past the end of the file")
        tensors[name] = info
    return tensors


def read_rows(path: Path, info: TensorInfo, rows: Sequence[int]) -> bytes:
    """The bytes of `rows` (in that order) of a row-major tensor."""
    out = bytearray()
    with path.open("rb") as handle:
        for row in rows:
            handle.seek(info.start + row * info.row_bytes)
            out += handle.read(info.row_bytes)
    return bytes(out)


def write(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> int:
    """Write `name → (dtype, shape, data)`; the bytes of tensor data written."""
    header: dict[str, object] = {}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        expected = math.prod(shape) * DTYPE_BYTES[dtype]
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
