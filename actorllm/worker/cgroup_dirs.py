"""Where one cgroup controller's files are for this process (v1 and v2).

cgroup v2 has one hierarchy: ``/proc/self/cgroup`` says "0::/path" and the files are under
``<root>/path``. v1 mounts each controller (or a group of them) on its own directory:
"4:memory:/path" puts the memory files under ``<root>/memory/path``. A container's cgroup
namespace shows its own group at the mount's root, so the roots are tried last.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def own_cgroup_dirs(root: Path, controller: str, mounts: Sequence[str]) -> list[Path]:
    """The directories that may hold ``controller``'s files for this process, in the order
    to try them: its own cgroup first, then the mounts' roots. ``mounts``: the names a v1
    hierarchy with that controller may be mounted as (``("cpu", "cpu,cpuacct")``)."""
    dirs: list[Path] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2: "0::/path"
            dirs.append(root / rel)
        elif controller in controllers.split(","):  # v1: "4:cpu,cpuacct:/path"
            dirs += [root / mount / rel for mount in mounts]
    dirs += [root, *(root / mount for mount in mounts)]
    return dirs
