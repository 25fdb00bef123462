"""What a Ray node must have before a model loads there (the parts without a cluster; the
cluster's side is in test_multihost.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actorllm.distributed.ray_connect import RayClusterError
from actorllm.distributed.ray_nodes import (
    NodeReport,
    check_capacity,
    local_versions,
    node_needs,
    problems,
)


def test_needs_are_the_versions_and_every_file_of_the_local_model_dirs(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.safetensors").write_bytes(b"1234")
    needs = node_needs([str(tmp_path), "org/hub-model"])  # a hub id: each node resolves it
    assert needs.files == {
        str(tmp_path.resolve() / "config.json"): 2,
        str(tmp_path.resolve() / "sub" / "w.safetensors"): 4,
    }
    assert needs.versions == local_versions()
    assert set(needs.versions) == {"python", "actorllm", "torch"}


def test_problems_name_each_version_and_the_missing_files() -> None:
    needs = node_needs([])
    same = NodeReport(node_ip="10.0.0.2", versions=dict(needs.versions), missing=[])
    assert problems(same, needs) == []
    other = NodeReport(
        node_ip="10.0.0.3",
        versions={**needs.versions, "torch": "2.0.0"},
        missing=[f"/m/{i} (No such file or directory)" for i in range(5)],
    )
    found = problems(other, needs)
    assert found[0] == f"torch 2.0.0 (the engine has {needs.versions['torch']})"
    assert found[1].startswith("the model's files: missing /m/0 (No such file or directory)")
    assert found[1].endswith("and 2 more")


class _Ray:
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self._nodes = nodes

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes


def _node(ip: str, cpus: float, alive: bool = True) -> dict[str, Any]:
    return {"NodeManagerAddress": ip, "Alive": alive, "Resources": {"CPU": cpus}}


def test_capacity_counts_the_alive_nodes_only() -> None:
    ray = _Ray([_node("10.0.0.1", 0), _node("10.0.0.2", 1), _node("10.0.0.3", 1, alive=False)])
    check_capacity(ray, 1, {"CPU": 1}, "replica 0")
    with pytest.raises(RayClusterError) as info:
        check_capacity(ray, 2, {"CPU": 1}, "replica 0")
    assert str(info.value) == (
        "replica 0 needs 2 bundle(s) of {'CPU': 1} and the Ray cluster's alive nodes can "
        "hold 1 (10.0.0.1: 0 CPU, 10.0.0.2: 1 CPU): no capacity is left for it"
    )
