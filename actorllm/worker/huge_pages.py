"""Zeroed CPU tensors on transparent huge pages, for the KV cache (issue #17).

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

import logging
import math
import mmap
from pathlib import Path

import torch

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
