"""The host memory this process may still take: ``MemAvailable``, or less under a cgroup.

``/proc/meminfo``'s ``MemAvailable`` is what the kernel can hand out without swapping (free
memory plus the page cache and slabs it can reclaim). In a container with a memory limit
the process is killed at the limit long before that is used up, so the cgroup's headroom
counts too: ``limit - (usage - inactive_file)`` (inactive file pages are reclaimed before
the limit is hit; the working set is what kubelet and ``docker stats`` call it). cgroup v2
keeps ``memory.max`` ("max": none), ``memory.current`` and ``memory.stat``; v1
``memory.limit_in_bytes`` (a huge number: none), ``memory.usage_in_bytes`` and
``memory.stat``'s ``total_inactive_file``. Every enclosing group's limit applies, so the
smallest headroom of the process's group and its ancestors wins.

No torch here: the CPU KV cache is sized from it (``worker/cpu_kv_size.py``), and the
tests feed it fake files.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from actorllm.worker.cgroup_dirs import CGROUP_ROOT, own_cgroup_dirs

MEMINFO = Path("/proc/meminfo")
# cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit number.
_NO_LIMIT = 2**62


@dataclasses.dataclass(frozen=True)
class HostMemory:
    """What the host and this process's cgroups leave free, in bytes."""

    available: int  # the smaller of the two below (None counts as no bound)
    mem_available: int | None  # /proc/meminfo's MemAvailable
    cgroup_headroom: int | None  # the tightest cgroup's limit minus its working set

    def describe(self) -> str:
        """Where ``available`` comes from, for log lines and errors."""
        if self.cgroup_headroom is not None and self.cgroup_headroom == self.available:
            return "the cgroup memory limit's headroom"
        return "MemAvailable"


def meminfo_available(path: Path = MEMINFO) -> int | None:
    """``MemAvailable`` in bytes, or None where the file or the line is missing."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, rest = line.partition(":")
        if key == "MemAvailable":
            fields = rest.split()
            try:
                return int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
            except (IndexError, ValueError):
                return None
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return _NO_LIMIT
    try:
        return int(text)
    except ValueError:
        return None


def _inactive_file(path: Path) -> int:
    """``memory.stat``'s reclaimable file pages (v1 ``total_inactive_file``, the group and
    its children; v2 ``inactive_file``, already hierarchical); 0 when absent."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    stat = dict(line.split(maxsplit=1) for line in lines if " " in line)
    for key in ("total_inactive_file", "inactive_file"):
        try:
            return int(stat[key])
        except (KeyError, ValueError):
            pass
    return 0


def _headroom(d: Path) -> int | None:
    """One group's ``limit - working set``, or None where it has no limit (or no files)."""
    for limit_name, usage_name in (
        ("memory.max", "memory.current"),  # v2
        ("memory.limit_in_bytes", "memory.usage_in_bytes"),  # v1
    ):
        limit, usage = _read_int(d / limit_name), _read_int(d / usage_name)
        if limit is None or usage is None:
            continue
        if limit >= _NO_LIMIT:
            return None
        working_set = max(0, usage - _inactive_file(d / "memory.stat"))
        return max(0, limit - working_set)
    return None


def cgroup_memory_headroom(root: Path = CGROUP_ROOT) -> int | None:
    """The bytes this process's cgroups let it allocate before their limit (the smallest
    over its group and the groups above it), or None without a limit."""
    seen: set[Path] = set()
    rooms: list[int] = []
    for d in own_cgroup_dirs(root, "memory", ("memory",)):
        for group in (d, *d.parents):
            if group in seen or not group.is_relative_to(root):
                continue
            seen.add(group)
            room = _headroom(group)
            if room is not None:
                rooms.append(room)
    return min(rooms, default=None)


def host_memory(meminfo: Path = MEMINFO, root: Path = CGROUP_ROOT) -> HostMemory | None:
    """The memory this process may still take, or None where neither source can be read
    (not Linux)."""
    mem, room = meminfo_available(meminfo), cgroup_memory_headroom(root)
    bounds = [b for b in (mem, room) if b is not None]
    if not bounds:
        return None
    return HostMemory(available=min(bounds), mem_available=mem, cgroup_headroom=room)
