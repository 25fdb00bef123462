"""The memory this process may still take: MemAvailable and cgroup headroom, read from
fake /proc/meminfo files and fake cgroup trees under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorllm.worker import host_memory as hm

MiB = 2**20


def _meminfo(tmp_path: Path, available_kb: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(
        "MemTotal:       24683584 kB\n"
        "MemFree:         1234567 kB\n"
        f"MemAvailable:   {available_kb:>8} kB\n"
        "Buffers:          123456 kB\n"
    )
    return path


def _files(d: Path, **files: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("_", ".", 1)).write_text(text)
    return d


def test_mem_available_is_read_in_bytes(tmp_path: Path) -> None:
    assert hm.meminfo_available(_meminfo(tmp_path, 2048)) == 2 * MiB
    assert hm.meminfo_available(tmp_path / "missing") is None
    (tmp_path / "old").write_text("MemTotal: 1 kB\nMemFree: 1 kB\n")  # kernels before 3.14
    assert hm.meminfo_available(tmp_path / "old") is None


def test_cgroup_v2_headroom_is_the_limit_less_the_working_set(tmp_path: Path) -> None:
    """memory.max 1 GiB, memory.current 600 MiB of which 100 MiB inactive file pages
    (reclaimed before the limit bites): 524 MiB left."""
    _files(
        tmp_path,
        memory_max=f"{1024 * MiB}\n",
        memory_current=f"{600 * MiB}\n",
        memory_stat=f"anon 1\ninactive_file {100 * MiB}\nactive_file 5\n",
    )
    assert hm.cgroup_memory_headroom(tmp_path) == 524 * MiB


def test_cgroup_v2_max_and_no_files_mean_no_limit(tmp_path: Path) -> None:
    assert hm.cgroup_memory_headroom(tmp_path) is None
    _files(tmp_path, memory_max="max\n", memory_current=f"{600 * MiB}\n")
    assert hm.cgroup_memory_headroom(tmp_path) is None


def test_cgroup_v1_headroom_and_its_no_limit_value(tmp_path: Path) -> None:
    d = _files(
        tmp_path / "memory",
        memory_limit_in_bytes=f"{2048 * MiB}\n",
        memory_usage_in_bytes=f"{1536 * MiB}\n",
        memory_stat=f"inactive_file 7\ntotal_inactive_file {512 * MiB}\n",
    )
    assert hm.cgroup_memory_headroom(tmp_path) == 1024 * MiB
    (d / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "unlimited"
    assert hm.cgroup_memory_headroom(tmp_path) is None


def test_an_enclosing_groups_tighter_limit_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process's own group has room, its parent less: the parent's limit applies."""
    own = tmp_path / "machine.slice" / "engine.scope"
    _files(own, memory_max=f"{4096 * MiB}\n", memory_current=f"{100 * MiB}\n")
    _files(own.parent, memory_max=f"{1024 * MiB}\n", memory_current=f"{800 * MiB}\n")
    monkeypatch.setattr(hm, "own_cgroup_dirs", lambda root, controller, mounts: [own])
    assert hm.cgroup_memory_headroom(tmp_path) == 224 * MiB


def test_host_memory_takes_the_smaller_bound(tmp_path: Path) -> None:
    meminfo = _meminfo(tmp_path, 4096 * 1024)  # 4 GiB available on the host
    cgroups = tmp_path / "cgroup"
    cgroups.mkdir()
    mem = hm.host_memory(meminfo, cgroups)
    assert mem == hm.HostMemory(
        available=4096 * MiB, mem_available=4096 * MiB, cgroup_headroom=None
    )
    assert mem.describe() == "MemAvailable"
    _files(cgroups, memory_max=f"{1024 * MiB}\n", memory_current=f"{24 * MiB}\n")
    mem = hm.host_memory(meminfo, cgroups)
    assert mem is not None and mem.available == 1000 * MiB
    assert mem.describe() == "the cgroup memory limit's headroom"
    assert hm.host_memory(tmp_path / "missing", tmp_path / "none") is None
