"""torch's thread count fitted to a cgroup CPU quota (fake cgroup trees under tmp_path)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from actorllm.worker import cpu_threads


@pytest.fixture
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _v2(root: Path, text: str) -> Path:
    (root / "cpu.max").write_text(text)
    return root


def _v1(root: Path, quota: int, period: int = 100000) -> Path:
    d = root / "cpu,cpuacct"
    d.mkdir()
    (d / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (d / "cpu.cfs_period_us").write_text(f"{period}\n")
    return root


def test_v2_and_v1_quotas_read_as_cpus(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert cpu_threads.cgroup_cpu_limit(_v2(tmp_path / "a", "150000 100000\n")) == 1.5
    assert cpu_threads.cgroup_cpu_limit(_v2(tmp_path / "b", "max 100000\n")) is None
    assert cpu_threads.cgroup_cpu_limit(_v1(tmp_path, 200000)) == 2.0


def test_no_quota_or_unlimited_v1(tmp_path: Path) -> None:
    assert cpu_threads.cgroup_cpu_limit(tmp_path) is None
    assert cpu_threads.cgroup_cpu_limit(_v1(tmp_path, -1)) is None


@pytest.fixture(name="a")
def _a(tmp_path: Path) -> Path:
    (tmp_path / "a").mkdir()
    return tmp_path / "a"


def test_usable_cpus_is_the_mask_capped_by_the_quota_rounded_up(a: Path) -> None:
    visible = len(os.sched_getaffinity(0))
    assert cpu_threads.usable_cpus(a) == visible  # no quota
    assert cpu_threads.usable_cpus(_v2(a, "50000 100000")) == 1
    assert cpu_threads.usable_cpus(_v2(a, f"{visible * 400000} 100000")) == visible


def test_fit_lowers_torch_threads_to_the_quota_unless_the_user_chose(
    threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_threads, "usable_cpus", lambda: 1)
    torch.set_num_threads(3)
    assert cpu_threads.fit_torch_threads() == 1
    assert torch.get_num_threads() == 1
    assert cpu_threads.fit_torch_threads() is None  # already within
    torch.set_num_threads(3)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads.fit_torch_threads() is None
    assert torch.get_num_threads() == 3
