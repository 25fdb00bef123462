"""What the nodes of a Ray placement must have before a model is loaded on them.

Theory of operation
-------------------
Every node that runs a rank imports actorllm and reads the model's files itself, from the
path the engine resolved. A node that lacks them, or runs other versions, would fail deep
inside a load (or, worse, compute something else); a cluster that has lost the capacity a
replica needs would leave its placement group pending. So before a replica's worker is
built, the driver:

* :func:`check_capacity`: refuses at once when the cluster's alive nodes could never hold
  the bundles (the placement group would wait forever), naming what each node has;
* :func:`check_nodes`: runs :func:`inspect_node`, a tiny task, in every bundle of the
  placement group and compares what each node reports with what this process has: the
  versions of Python, actorllm and torch (as installed: their distributions' metadata)
  and every file of the model directories (present, same size). One error names every
  node that falls short and what it lacks, by the node's IP.

The task is shipped by reference to this module, so a node where actorllm does not
import at all fails it with an error that is reported the same way, by IP.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import msgspec

from actorllm.distributed.ray_connect import RayClusterError

CAPACITY_WAIT_S = 10.0  # a replacement waits this long for free room (resources released)
CHECK_TIMEOUT_S = 60.0  # a worker process started on each node and the task run
VERSIONED = ("actorllm", "torch")  # distributions every node must have at the same version
MAX_FILES = 2000  # a model directory's files compared (size only: reading them is the load)


class NodeNeeds(msgspec.Struct, frozen=True, kw_only=True):
    versions: dict[str, str]  # {"python" | distribution: version}, the driver's
    files: dict[str, int]  # {absolute path: size}, the model directories' files


class NodeReport(msgspec.Struct, frozen=True, kw_only=True):
    node_ip: str
    versions: dict[str, str]
    missing: list[str]  # "path (why)", for each needed file absent or of another size


def local_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def node_needs(directories: Sequence[str]) -> NodeNeeds:
    """What a node needs, measured here: versions, and the files of every directory in
    ``directories`` that exists on this host (a hub id resolved elsewhere is skipped)."""
    files: dict[str, int] = {}
    for directory in directories:
        root = Path(directory)
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*"))[:MAX_FILES]:
            if path.is_file():
                files[str(path.resolve())] = path.stat().st_size
    return NodeNeeds(versions=local_versions(), files=files)


def inspect_node(needs: NodeNeeds) -> NodeReport:
    """Runs on the node: its versions and the needed files it lacks."""
    import ray

    missing = []
    for path, size in needs.files.items():
        try:
            here = os.stat(path).st_size
        except OSError as e:
            missing.append(f"{path} ({e.strerror or 'not readable'})")
            continue
        if here != size:
            missing.append(f"{path} ({here} bytes here, {size} on the engine's host)")
    return NodeReport(
        node_ip=ray.util.get_node_ip_address(), versions=local_versions(), missing=missing
    )


def problems(report: NodeReport, needs: NodeNeeds) -> list[str]:
    """What ``report``'s node lacks, in words (empty: nothing)."""
    found = [
        f"{name} {report.versions.get(name, 'unknown')} (the engine has {version})"
        for name, version in needs.versions.items()
        if report.versions.get(name) != version
    ]
    if report.missing:
        shown = ", ".join(report.missing[:3])
        more = f" and {len(report.missing) - 3} more" if len(report.missing) > 3 else ""
        found.append(f"the model's files: missing {shown}{more}")
    return found


def bundle_ips(ray: Any, pg: Any) -> list[str]:
    """The IP of the node holding each bundle of placement group ``pg``."""
    from ray.util.placement_group import placement_group_table

    ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    nodes = placement_group_table(pg).get("bundles_to_node_id", {})
    return [ips.get(nodes.get(i, ""), "an unknown node") for i in range(len(pg.bundle_specs))]


def check_nodes(ray: Any, pg: Any, directories: Sequence[str], who: str) -> None:
    """Run :func:`inspect_node` in every bundle of ``pg`` (created); raise
    :class:`RayClusterError` naming each node that lacks something (``who``: whose
    placement, for the message)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    needs = node_needs(directories)
    task = ray.remote(inspect_node)
    ips = bundle_ips(ray, pg)
    refs = [
        task.options(
            num_cpus=0,
            max_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=index
            ),
        ).remote(needs)
        for index in range(len(ips))
    ]
    failures: dict[str, list[str]] = {}
    for ip, ref in zip(ips, refs, strict=True):
        try:
            report: NodeReport = ray.get(ref, timeout=CHECK_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            failures.setdefault(ip, []).append(f"no answer within {CHECK_TIMEOUT_S:.0f}s")
            continue
        except Exception as e:  # actorllm does not import there, the node died, ...
            first = str(e).strip().splitlines()[-1:] or [type(e).__name__]
            failures.setdefault(ip, []).append(f"the check failed: {first[0]}")
            continue
        if found := problems(report, needs):
            failures.setdefault(report.node_ip, []).extend(found)
    if failures:
        listed = "; ".join(f"node {ip}: {', '.join(why)}" for ip, why in failures.items())
        raise RayClusterError(
            f"{who} cannot run on the Ray nodes placed for it: {listed}. Every node needs "
            "the same Python, actorllm and torch as the engine's host, and the model's "
            "files at the same path."
        )


def check_capacity(ray: Any, bundles: int, bundle: dict[str, float], who: str) -> None:
    """Raise :class:`RayClusterError` when the alive nodes together could never hold
    ``bundles`` bundles of ``bundle`` (a host lost and no other with room), naming what
    each node has; a cluster that has the room but lends it elsewhere is waited for."""
    alive = [n for n in ray.nodes() if n["Alive"]]
    fits = sum(
        min(int(n["Resources"].get(key, 0) // amount) for key, amount in bundle.items())
        for n in alive
        if all(amount > 0 for amount in bundle.values())
    )
    if fits >= bundles:
        return
    have = ", ".join(
        f"{n['NodeManagerAddress']}: {n['Resources'].get(k, 0):g} {k}"
        for n in alive
        for k in bundle
    )
    raise RayClusterError(
        f"{who} needs {bundles} bundle(s) of {bundle} and the Ray cluster's alive nodes "
        f"can hold {fits} ({have or 'no alive node'}): no capacity is left for it"
    )


def _free_fits(ray: Any, bundle: dict[str, float]) -> int:
    free = ray.available_resources()
    return min(int(free.get(key, 0) // amount) for key, amount in bundle.items())


def _describe(resources: dict[str, float], bundle: dict[str, float]) -> str:
    return ", ".join(f"{resources.get(key, 0):g} {key}" for key in bundle)


def wait_for_room(ray: Any, bundles: int, bundle: dict[str, float], who: str) -> None:
    """A replacement after a loss: raise :class:`RayClusterError` unless ``bundles``
    bundles of ``bundle`` are free within ``CAPACITY_WAIT_S`` (resources a dead worker
    held are being released). Where the room is gone — the hosts left are all taken, by
    the other replicas among others — waiting for it would leave the replica pending, its
    requests with it: better to say so and let them move."""
    import time

    check_capacity(ray, bundles, bundle, who)
    deadline = time.monotonic() + CAPACITY_WAIT_S
    while (fits := _free_fits(ray, bundle)) < bundles:
        if time.monotonic() > deadline:
            raise RayClusterError(
                f"{who} needs {bundles} bundle(s) of {bundle} and the Ray cluster has room "
                f"for {fits} (free: {_describe(ray.available_resources(), bundle)}; the "
                "rest is taken): no capacity is left for it"
            )
        time.sleep(0.2)


def lost_bundles(ray: Any, pg: Any) -> int:
    """How many bundles of placement group ``pg`` sit on nodes that are no longer alive
    (Ray reschedules them where there is room)."""
    from ray.util.placement_group import placement_group_table

    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    placed = placement_group_table(pg).get("bundles_to_node_id", {})
    return sum(1 for i in range(len(pg.bundle_specs)) if placed.get(i) not in alive)
