"""Torch's thread count against the CPUs this process may really use.

torch sizes its OpenMP pool from the CPUs the affinity mask shows. Under a cgroup CPU
quota (a container started with ``--cpus=2`` on a 64-core host) the mask still shows every
core, so each parallel region wakes 63 helpers, which spin between regions (libgomp spins
long while its threads are no more than the CPUs it sees; see ``omp_spin``) on a budget of
two cores: the kernel throttles the whole process for the rest of each quota period once
the spinning has spent it. The engine sizes the pool to the quota instead, unless the user
chose a count (``OMP_NUM_THREADS``, or ``torch.set_num_threads`` below the limit).
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

from actorllm.worker.cgroup_dirs import CGROUP_ROOT, own_cgroup_dirs

logger = logging.getLogger(__name__)

# The names a cgroup v1 hierarchy holding the CPU controller may be mounted as.
CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The CPUs a cgroup quota allows (2.0 for ``--cpus=2``), or None without a quota.

    cgroup v2 ``cpu.max`` holds "QUOTA PERIOD" ("max PERIOD": none); v1 holds
    ``cpu.cfs_quota_us`` (-1: none) and ``cpu.cfs_period_us``."""
    for d in own_cgroup_dirs(root, "cpu", CPU_MOUNTS):
        try:
            quota, period = (d / "cpu.max").read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        except (OSError, ValueError):
            pass
        try:
            quota_us = int((d / "cpu.cfs_quota_us").read_text())
            period_us = int((d / "cpu.cfs_period_us").read_text())
            return None if quota_us <= 0 else quota_us / period_us
        except (OSError, ValueError):
            pass
    return None


def usable_cpus(root: Path = CGROUP_ROOT) -> int:
    """The CPUs this process may keep busy: its affinity mask, capped by a cgroup quota
    (rounded up: 1.5 CPUs of quota keep two threads busy part of the time)."""
    visible = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    visible = visible or 1
    limit = cgroup_cpu_limit(root)
    return visible if limit is None else max(1, min(visible, math.ceil(limit)))


def fit_torch_threads() -> int | None:
    """Lower torch's thread count to :func:`usable_cpus` when it is above it; the new
    count, or None when it was left alone (already within, or ``OMP_NUM_THREADS`` set:
    the user's choice)."""
    import torch

    if os.environ.get("OMP_NUM_THREADS"):
        return None
    usable, current = usable_cpus(), torch.get_num_threads()
    if current <= usable:
        return None
    torch.set_num_threads(usable)
    logger.info(
        "torch threads %d -> %d: the CPU quota of this process's cgroup allows %d CPUs "
        "(set OMP_NUM_THREADS to choose)",
        current,
        usable,
        usable,
    )
    return usable
