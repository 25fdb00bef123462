"""Transparent huge pages for the CPU: zeroed tensors for the KV cache, and the weights'
memory collapsed after a load.

Why: decode attention gathers blocks scattered over a cache of hundreds of MB; on 4 KiB
pages every block costs TLB misses. With the kernel's THP in ``madvise`` mode (a common
default) memory is only backed by 2 MiB pages where the program asks, so torch's own
allocation never gets them.

How: a private anonymous ``mmap`` (zero-filled by the OS), one huge page larger than
needed so the tensor can start on a 2 MiB boundary, ``madvise(MADV_HUGEPAGE)`` over it,
and a tensor viewing it (the tensor keeps the mapping alive). Every page is then touched
once, as ``torch.zeros`` does, so no decode step pays a page fault for a fresh block.
Detected, never assumed: Linux with THP not ``never``, Python's mmap exposing
``MADV_HUGEPAGE``; anywhere else, or on any error, plain ``torch.zeros`` (same contents,
same shape).

    >>> t = zeros_on_huge_pages((4, 8), torch.float32)
    >>> t.shape, t.dtype, float(t.abs().sum())
    (torch.Size([4, 8]), torch.float32, 0.0)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import logging
import math
import mmap
from pathlib import Path
from typing import Any

import torch
from torch import nn

logger = logging.getLogger(__name__)
HUGE_PAGE = 2 << 20  # bytes: x86-64 / arm64 (4 KiB granule) PMD size
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode(path: Path = THP_ENABLED) -> str | None:
    """The kernel's THP mode ('always', 'madvise' or 'never'); None where there is none."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def huge_pages_usable(path: Path = THP_ENABLED) -> bool:
    """Whether asking for huge pages can do anything here."""
    if not (hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS")):
        return False
    return thp_mode(path) in ("always", "madvise")


def zeros_on_huge_pages(
    shape: tuple[int, ...], dtype: torch.dtype, path: Path = THP_ENABLED
) -> torch.Tensor:
    """A zeroed contiguous CPU tensor of ``shape``, 2 MiB aligned and advised for huge
    pages where :func:`huge_pages_usable` (and it is at least one huge page); else
    ``torch.zeros``."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = math.prod(shape) * itemsize
    if nbytes < HUGE_PAGE or not huge_pages_usable(path):
        return torch.zeros(shape, dtype=dtype)
    try:
        buf = mmap.mmap(
            -1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        )  # zero-filled by the OS
        buf.madvise(mmap.MADV_HUGEPAGE)
        raw = torch.frombuffer(buf, dtype=torch.uint8)  # [nbytes + HUGE_PAGE], holds buf
    except (OSError, ValueError, AttributeError) as e:
        logger.info("KV cache on regular pages: huge-page mapping failed (%s)", e)
        return torch.zeros(shape, dtype=dtype)
    skip = -raw.data_ptr() % HUGE_PAGE  # bytes to the first 2 MiB boundary
    out = raw[skip : skip + nbytes]
    # Fault every page in now, as torch.zeros would: left to first touch, each of the
    # step's KV writes into a fresh block pays a page fault (and the kernel's zeroing of a
    # 2 MiB page) inside the timed decode step.
    out.zero_()
    return out.view(dtype).view(shape)


# -- weights: the model's own memory collapsed into huge pages after a load ---------------

# Linux 6.1+: back a range with huge pages now, synchronously (<sys/mman.h>; Python 3.11's
# mmap module does not name it)
MADV_COLLAPSE = 25
# Below this much model memory a load is not worth a pass (tests' tiny models).
MIN_COLLAPSE_BYTES = 64 << 20
# Storages smaller than this are left out: a norm's weight would pull in a 2 MiB window of
# whatever else the heap holds around it.
MIN_SPAN_BYTES = 1 << 20

Ranges = list[tuple[int, int]]


def anonymous_ranges(maps: Path = Path("/proc/self/maps")) -> Ranges:
    """The process's private read-write memory with no file behind it (the heap, malloc's
    arenas, anonymous mappings): [start, end) byte addresses. Empty where there is no
    /proc."""
    out: Ranges = []
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 5 or not parts[1].startswith("rw") or parts[1][3] != "p":
            continue
        path = parts[5].strip() if len(parts) > 5 else ""
        if path and path != "[heap]":
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        out.append((lo, hi))
    return out


def huge_windows(spans: Ranges, vmas: Ranges) -> Ranges:
    """The 2 MiB windows that hold ``spans`` ([start, end) byte ranges), each widened
    outwards to 2 MiB boundaries but kept inside the anonymous mapping (``vmas``) it lies
    in (only whole huge pages of one mapping can be collapsed); sorted, overlaps merged.
    A span outside every mapping (file-backed, e.g. mmapped safetensors) gives nothing."""
    pieces: Ranges = []
    for lo, hi in spans:
        a, b = lo // HUGE_PAGE * HUGE_PAGE, -(-hi // HUGE_PAGE) * HUGE_PAGE
        for vlo, vhi in vmas:
            if vlo >= hi or vhi <= lo:
                continue
            wa = max(a, -(-vlo // HUGE_PAGE) * HUGE_PAGE)
            wb = min(b, vhi // HUGE_PAGE * HUGE_PAGE)
            if wa < wb:
                pieces.append((wa, wb))
    out: Ranges = []
    for a, b in sorted(pieces):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def model_spans(model: nn.Module) -> Ranges:
    """[start, end) of every CPU storage of at least :data:`MIN_SPAN_BYTES` the model's
    modules hold: parameters, buffers, and other tensors kept as attributes (oneDNN's
    packed weights, models/onednn_linear.py); each storage once."""
    seen: dict[int, int] = {}
    for module in model.modules():
        tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
        tensors += [v for v in vars(module).values() if isinstance(v, torch.Tensor)]
        for t in tensors:
            if t.device.type != "cpu":
                continue
            start, size = _storage_span(t)
            if size >= MIN_SPAN_BYTES and start:
                seen[start] = max(size, seen.get(start, 0))
    return sorted((start, start + size) for start, size in seen.items())


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    """(address, bytes) of the memory behind ``t``; (0, 0) where torch does not say. A
    oneDNN tensor (a prepacked weight) is opaque: its own ops tell."""
    if not t.is_mkldnn:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    try:
        return int(torch.ops.mkldnn.data_ptr(t)), int(torch.ops.mkldnn._nbytes(t))
    except (AttributeError, RuntimeError):  # an older torch without these ops
        return 0, 0


def model_on_huge_pages(model: nn.Module) -> None:
    """Collapse the memory of the model's weights into 2 MiB pages: the 2 MiB windows its
    own storages occupy (:func:`model_spans`), wherever malloc put them, whether the load
    mapped them fresh or reused heap an earlier engine of the process freed. torch
    allocates weights and oneDNN's packed copies through malloc, which THP in ``madvise``
    mode never backs with huge pages, and a decode step streams every weight from DRAM: on
    4 KiB pages that is a TLB miss every 4 KiB. The 75M preset's linears of one decode step
    (128 rows, 2 threads, medians of 15, three process pairs): float32 96.9-103.4 ms ->
    94.4-98.9 ms.

    Detected, never assumed: Linux with THP usable and a kernel with ``MADV_COLLAPSE``
    (6.1+); elsewhere, below :data:`MIN_COLLAPSE_BYTES`, or on any error, the memory stays
    as it is (one log line). A window's other contents (heap around a weight's ends) move
    to the huge page with it, unchanged."""
    if not huge_pages_usable():
        return
    spans = model_spans(model)
    if sum(b - a for a, b in spans) < MIN_COLLAPSE_BYTES:
        return
    madvise = _libc_madvise()
    if madvise is None:
        return
    windows = huge_windows(spans, anonymous_ranges())
    huge_before, errors = anon_huge_bytes(), set()
    for a, b in windows:
        madvise(a, b - a, mmap.MADV_HUGEPAGE)  # and a later refault of the range, too
        if madvise(a, b - a, MADV_COLLAPSE) != 0:
            # A window fails as a whole when any of its 2 MiB pages could not be collapsed
            # (EINVAL: e.g. a malloc arena's never-touched tail); the rest still are.
            errors.add(errno.errorcode.get(ctypes.get_errno(), "?"))
    logger.info(
        "weights: %.0f MiB in %d huge-page windows, %.0f MiB more of the process on huge"
        " pages%s",
        sum(b - a for a, b in windows) / 2**20, len(windows),
        (anon_huge_bytes() - huge_before) / 2**20,
        f" (some windows partly: {sorted(errors)})" if errors else "",
    )  # fmt: skip


def anon_huge_bytes(rollup: Path = Path("/proc/self/smaps_rollup")) -> int:
    """The process's anonymous memory on transparent huge pages (0 where unknown)."""
    try:
        for line in rollup.read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@functools.cache
def _libc_madvise() -> Any | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn
