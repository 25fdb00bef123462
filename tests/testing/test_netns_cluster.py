"""The namespace Ray cluster cleans up after a start that fails (the working cluster is
exercised by tests/distributed/test_multihost.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actorllm.testing import netns
from actorllm.testing.netns_cluster import HostSpec, NetnsCluster

if (reason := netns.unavailable()) is not None:
    pytest.skip(reason, allow_module_level=True)
pytest.importorskip("ray", reason="the ray extra is not installed (pip install actorllm[ray])")


def _processes_under(root: str) -> list[int]:
    """Live processes whose command line names ``root`` (Ray's name their temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if root in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def test_a_node_that_fails_to_start_is_reported_and_everything_removed(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-dir")  # the host cannot mount over it: its node exits
    cluster = NetnsCluster([HostSpec(), HostSpec(hide=(missing,))])
    before = os.environ.get("RAY_ADDRESS")
    with pytest.raises(RuntimeError, match=r"the Ray node of Host\(al47-\d+-h1, .*\) exited"):
        cluster.start()
    n = int(cluster._root.name.split("-")[1])  # its subnet (others' sessions may have theirs)
    assert cluster.subnet is None and not cluster.hosts
    assert f"al47-{n}-h" not in netns.ip("netns", "list").stdout
    assert not list(netns._links(f"al47v{n}h"))
    assert not netns.ip("link", "show", f"al47b{n}", check=False).stdout
    assert not (netns.STATE_DIR / str(n)).exists()
    assert not _processes_under(str(cluster._root) + "/")
    assert not cluster._root.exists()
    assert os.environ.get("RAY_ADDRESS") == before
