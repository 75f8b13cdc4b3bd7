"""Read the headers of a safetensors checkpoint — never its tensors (I/O at the edge).

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
(`{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": …}`),
then the tensor data; offsets count from the end of the header
(https://github.com/huggingface/safetensors, "Format").  A sharded checkpoint names
each tensor's file in `model.safetensors.index.json` (`weight_map`), as vLLM reads it
(`model_executor/model_loader/weight_utils.py` `filter_duplicate_safetensors_files`).

Every inconsistency is a BudgetError naming the file and what is wrong with it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

from budget.errors import BudgetError

INDEX_FILE = "model.safetensors.index.json"
HEADER_LENGTH_BYTES = 8
# safetensors refuses headers above 100 MB (MAX_HEADER_SIZE in its Rust core).
MAX_HEADER_BYTES = 100_000_000
METADATA_KEY = "__metadata__"
# Element sizes of the safetensors dtypes (F4 packs two values in a byte).
DTYPE_ELEMENT_BYTES: dict[str, float] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
    "F4": 0.5,
}  # fmt: skip


@dataclass(frozen=True)
class TensorHeader:
    """One tensor as its file's header describes it."""

    name: str
    dtype: str  # safetensors spelling: BF16, F8_E4M3, I32, U8, …
    shape: tuple[int, ...]
    data_bytes: int  # data_offsets end − begin: the bytes it occupies in the file
    start: int = 0  # the file offset of its first data byte (header included)

    @property
    def numel(self) -> int:
        return prod(self.shape)


@dataclass(frozen=True)
class CheckpointHeaders:
    """The tensors of a checkpoint directory and the files that hold them."""

    directory: str
    files: tuple[str, ...]  # file names, in the order read
    tensors: tuple[TensorHeader, ...]
    file_bytes: int  # the files' sizes on disk, headers included

    @property
    def tensor_bytes(self) -> int:
        return sum(t.data_bytes for t in self.tensors)


def _fail(path: Path, problem: str) -> BudgetError:
    return BudgetError(f"checkpoint file {path}: {problem}")


def _read_header_json(path: Path) -> tuple[dict[str, Any], int, int]:
    """(header, data start offset, file size) of one file; only the header is read."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            raw_length = handle.read(HEADER_LENGTH_BYTES)
            if len(raw_length) < HEADER_LENGTH_BYTES:
                raise _fail(path, f"{size} bytes, shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", raw_length)
            if length > MAX_HEADER_BYTES or HEADER_LENGTH_BYTES + length > size:
                raise _fail(
                    path,
                    f"header length {length} runs past the end of the file ({size} bytes): "
                    "truncated or not safetensors",
                )
            text = handle.read(length)
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc.strerror})") from None
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(path, f"header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _fail(path, "header is not a JSON object")
    return header, HEADER_LENGTH_BYTES + length, size


def _tensor(
    path: Path, name: str, entry: Any, data_start: int, data_bytes_in_file: int
) -> TensorHeader:
    if not isinstance(entry, dict):
        raise _fail(path, f"tensor {name!r} has no dtype/shape/data_offsets object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    valid_shape = isinstance(shape, list) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    )
    valid_offsets = (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    )
    if not isinstance(dtype, str) or not valid_shape or not valid_offsets:
        raise _fail(path, f"tensor {name!r} has a malformed entry {entry!r}")
    assert isinstance(shape, list) and isinstance(offsets, list)
    if offsets[1] > data_bytes_in_file:
        raise _fail(
            path,
            f"tensor {name!r} ends at data byte {offsets[1]}, past the file's "
            f"{data_bytes_in_file} data bytes: truncated",
        )
    tensor = TensorHeader(
        name, dtype, tuple(shape), offsets[1] - offsets[0], data_start + offsets[0]
    )
    element = DTYPE_ELEMENT_BYTES.get(dtype)
    if element is not None and tensor.data_bytes != int(tensor.numel * element):
        raise _fail(
            path,
            f"tensor {name!r} is {dtype} {list(shape)} = {int(tensor.numel * element)} bytes "
            f"but its data_offsets span {tensor.data_bytes}",
        )
    return tensor


def read_file_headers(path: Path) -> tuple[tuple[TensorHeader, ...], int]:
    """The tensors of one safetensors file and the file's size on disk."""
    header, data_start, size = _read_header_json(path)
    tensors = tuple(
        _tensor(path, name, entry, data_start, size - data_start)
        for name, entry in header.items()
        if name != METADATA_KEY
    )
    return tensors, size


def _index_shards(directory: Path) -> dict[str, set[str]] | None:
    """file name → the tensor names the index puts in it (None: no index)."""
    index = directory / INDEX_FILE
    if not index.is_file():
        return None
    try:
        data = json.loads(index.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(index, f"is not readable JSON ({exc})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise _fail(index, "has no 'weight_map' object naming each tensor's file")
    shards: dict[str, set[str]] = {}
    for tensor, file_name in weight_map.items():
        shards.setdefault(str(file_name), set()).add(str(tensor))
    return shards


def _from_index(directory: Path, shards: dict[str, set[str]]) -> CheckpointHeaders:
    tensors: list[TensorHeader] = []
    file_bytes = 0
    for file_name in sorted(shards):
        path = directory / file_name
        if not path.is_file():
            raise _fail(
                directory / INDEX_FILE,
                f"names shard {file_name!r}, which is not in {directory}",
            )
        found, size = read_file_headers(path)
        missing = shards[file_name] - {t.name for t in found}
        if missing:
            raise _fail(
                path,
                f"lacks {len(missing)} tensor(s) that {INDEX_FILE} puts there, "
                f"e.g. {sorted(missing)[0]!r}",
            )
        tensors += found
        file_bytes += size
    return CheckpointHeaders(str(directory), tuple(sorted(shards)), tuple(tensors), file_bytes)


def read_checkpoint(directory: Path) -> CheckpointHeaders | None:
    """The checkpoint's tensor headers, or None when the directory holds no safetensors."""
    shards = _index_shards(directory)
    if shards is not None:
        return _from_index(directory, shards)
    paths = sorted(directory.glob("*.safetensors"))
    if not paths:
        return None
    tensors: list[TensorHeader] = []
    file_bytes = 0
    for path in paths:
        found, size = read_file_headers(path)
        tensors += found
        file_bytes += size
    return CheckpointHeaders(
        str(directory), tuple(p.name for p in paths), tuple(tensors), file_bytes
    )
