"""A multi-host Ray cluster on one machine: one Ray node per network namespace.

Theory of operation
-------------------
:class:`NetnsCluster` leases a subnet (:mod:`actorllm.testing.netns`: a bridge, one
namespace per host, each with its own loopback and veth address ``10.47.<n>.<10+i>``) and
starts a Ray node in each host, every node announcing its veth address
(``--node-ip-address``). So everything that crosses hosts (Ray's own traffic, the
engine's TCPStore and gloo pairs) goes over the veth network, and an address that is
wrong for another host (127.0.0.1, a root-namespace interface) fails as it would between
real machines.

The head — GCS and a raylet with no CPUs, so nothing is placed on it — runs in the root
namespace at ``.1``, the bridge's own address: the "head host", where the driver (this
process, the engine) runs too, as on a real cluster's head node (a Ray driver must attach
to a raylet on its own host). The namespaces have no route but the subnet, so the only
addresses routable between any two hosts, the head host included, are the veth ones;
and every worker host is alike, so a test may take down any of them (losing the head
is losing the cluster, which Ray without GCS fault tolerance does not survive).

``start`` exports ``RAY_ADDRESS`` (the head's address on the bridge) and connects this process
(:func:`actorllm.distributed.ray_connect.connect`, as the engine does), then waits until
every node is alive; ``stop`` disconnects, restores the environment and removes
everything, whatever state the hosts are in. It is also registered with ``atexit``, and
a session killed before either runs leaves a lease that the next one reclaims. Ray is
never stopped with ``ray stop`` (that finds Ray processes by name, machine-wide, other
sessions' included): each namespace's processes are killed by namespace, the head's
node by its process tree.

Faults, for the tests of host loss: :meth:`partition` (a host's cable out: its processes
live on, nothing reaches them), :meth:`kill_host` (the cable out, then every process in
the namespace killed and the namespace deleted: a machine gone), and :meth:`restore`
(a fresh node in a fresh namespace at the same address). Ray's GCS declares a silent
node dead after ``health_check_period_ms * health_check_failure_threshold``; the
defaults here (0.5 s x 3) keep that under the engine's collective timeout in tests.

>>> with NetnsCluster(hosts=3) as cluster:  # doctest: +SKIP
...     with LLM(model, tensor_parallel_size=2, distributed_executor_backend="ray") as llm:
...         llm.generate(prompts)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, final

import msgspec

import actorllm
from actorllm.testing.netns import Host, Subnet, exec_argv, kill_netns_processes

START_TIMEOUT_S = 90.0  # every node alive (a loaded box starts Ray slowly)
REPO_ROOT = Path(actorllm.__file__).resolve().parents[1]


class HostSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What one host offers."""

    cpus: int = 1  # Ray's logical CPUs: one per rank, so ``-tp 2`` spans two hosts
    hide: tuple[str, ...] = ()  # directories this host does not see (an empty tmpfs)
    env: Mapping[str, str] = {}  # extra environment of its Ray processes


class ClusterHost(msgspec.Struct, kw_only=True):
    """A host of the cluster and the Ray node in it."""

    host: Host
    spec: HostSpec
    temp_dir: Path
    proc: Any = None  # the node's `ray start --block` (subprocess.Popen)

    @property
    def ip(self) -> str:
        return self.host.ip

    @property
    def netns(self) -> str:
        return self.host.netns


@final
class NetnsCluster:
    """Ray nodes, one per namespace, joined to a CPU-less head in this namespace.

    ``hosts``: how many worker hosts, or one :class:`HostSpec` each. Use as a
    context manager, or :meth:`start` / :meth:`stop`."""

    def __init__(
        self,
        hosts: int | Sequence[HostSpec] = 3,
        *,
        health_check_period_ms: int = 500,
        health_check_failure_threshold: int = 3,
        object_store_mb: int = 80,
    ) -> None:
        self.specs = [HostSpec() for _ in range(hosts)] if isinstance(hosts, int) else [*hosts]
        self.health = {
            "RAY_health_check_period_ms": str(health_check_period_ms),
            "RAY_health_check_timeout_ms": str(health_check_period_ms),
            "RAY_health_check_failure_threshold": str(health_check_failure_threshold),
            "RAY_health_check_initial_delay_ms": "0",
        }
        self.object_store_mb = object_store_mb
        self.subnet: Subnet | None = None
        self.hosts: dict[int, ClusterHost] = {}
        self.address = ""  # the head's GCS, "10.47.<n>.1:<port>"
        self._head: Any = None  # the head's `ray start --block` (root namespace)
        self._root = Path("/tmp")  # replaced by start(): a short path (unix sockets)
        self._saved_env: dict[str, str | None] = {}
        self._starts = 0  # node starts so far: each gets a temp dir of its own

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> NetnsCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Build the hosts, start the head and the nodes, connect this process; blocks
        until every node is alive (or raises with the failing node's log, cleaned up)."""
        atexit.register(self.stop)
        try:
            self.subnet = Subnet.lease()
            self._root = Path(f"/tmp/al47-{self.subnet.n}")
            shutil.rmtree(self._root, ignore_errors=True)
            self._root.mkdir()
            self._head = self._start_node(None, HostSpec(cpus=0), self._root / "head")
            self.address = self._wait_head(self._root / "head")
            for index, spec in enumerate(self.specs):
                self._start_host(index, spec)
            self._connect()
            self.wait_alive()
        except BaseException:
            self.stop()
            raise

    def _start_host(self, index: int, spec: HostSpec) -> ClusterHost:
        assert self.subnet is not None
        host = self.subnet.add_host(index)
        self._starts += 1
        node = ClusterHost(host=host, spec=spec, temp_dir=self._root / f"h{index}-{self._starts}")
        node.proc = self._start_node(host, spec, node.temp_dir)
        self.hosts[index] = node
        return node

    def _start_node(self, host: Host | None, spec: HostSpec, temp_dir: Path) -> Any:
        """`ray start --block` for one node (host None: the head, in the root namespace)."""
        assert self.subnet is not None
        temp_dir.mkdir(parents=True)
        ray = str(Path(sys.executable).with_name("ray"))
        argv = [
            ray,
            "start",
            "--block",
            f"--node-ip-address={host.ip if host else self.subnet.driver_ip}",
            f"--num-cpus={spec.cpus}",
            "--num-gpus=0",
            f"--temp-dir={temp_dir}",
            f"--object-store-memory={self.object_store_mb * 2**20}",
            "--disable-usage-stats",
            "--include-log-monitor=false",
        ]
        if host is None:  # the GCS port left to the OS: the root namespace is shared
            argv += ["--head", "--port=0", "--include-dashboard=false"]
        else:
            argv += [f"--address={self.address}"]
            argv = exec_argv(host, argv, spec.hide)
        env = {**os.environ, **self._env(), **spec.env}
        with (temp_dir / "ray-start.log").open("wb") as log:
            return subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def _wait_head(self, temp_dir: Path) -> str:
        """Block until the head has written its GCS address (the nodes join it there)."""
        address_file = temp_dir / "ray_current_cluster"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not address_file.exists() or not address_file.read_text().strip():
            if self._head.poll() is not None or time.monotonic() > deadline:
                log = (temp_dir / "ray-start.log").read_text(errors="replace")[-4000:]
                raise RuntimeError(f"the Ray head did not start:\n{log}")
            time.sleep(0.1)
        return address_file.read_text().strip()

    def _env(self) -> dict[str, str]:
        """Ray workers inherit the raylet's environment: this checkout first on their path
        (they import the code under test), fast failure detection for the GCS."""
        path = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        return {"PYTHONPATH": os.pathsep.join(path), "RAY_USAGE_STATS_ENABLED": "0", **self.health}

    def _connect(self) -> None:
        """Point this process at the cluster (``RAY_ADDRESS``) and connect it, as the
        engine will: a connection to another cluster is dropped first."""
        from actorllm.distributed.ray_connect import connect, import_ray

        ray = import_ray()
        if ray.is_initialized():
            ray.shutdown()
        for key in ("RAY_ADDRESS",):
            self._saved_env.setdefault(key, os.environ.get(key))
        os.environ["RAY_ADDRESS"] = self.address
        connect()

    def wait_alive(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Block until every host's node (and the client's) is alive in the GCS."""
        from actorllm.distributed.ray_connect import connect

        ray = connect()
        assert self.subnet is not None
        want = {h.ip for h in self.hosts.values()} | {self.subnet.driver_ip}
        deadline = time.monotonic() + timeout_s
        while (alive := self.alive_ips()) < want:
            for node in [*self.hosts.values()]:
                if node.proc.poll() is not None:
                    raise RuntimeError(f"the Ray node of {node.host} exited:\n{self.log(node)}")
            if time.monotonic() > deadline:
                missing = sorted(want - alive)
                raise RuntimeError(f"Ray nodes {missing} not alive after {timeout_s:.0f}s")
            time.sleep(0.2)
        del ray

    def alive_ips(self) -> set[str]:
        from actorllm.distributed.ray_connect import connect

        return {n["NodeManagerAddress"] for n in connect().nodes() if n["Alive"]}

    def log(self, node: ClusterHost) -> str:
        path = node.temp_dir / "ray-start.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        """Disconnect, kill every node, remove the hosts and the bridge, restore the
        environment. Idempotent, never raises."""
        with contextlib.suppress(Exception):
            import ray

            if ray.is_initialized():
                ray.shutdown()
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()
        if self._head is not None:
            _kill_tree(self._head.pid)
            self._head.wait()
            self._head = None
        for node in self.hosts.values():
            kill_netns_processes(node.netns)
            with contextlib.suppress(Exception):
                node.proc.wait(5)
        self.hosts.clear()
        if self.subnet is not None:
            self.subnet.destroy()
            self.subnet = None
        shutil.rmtree(self._root, ignore_errors=True) if self._root != Path("/tmp") else None
        atexit.unregister(self.stop)

    # -- faults -----------------------------------------------------------------------------

    def host_of(self, ip: str) -> ClusterHost:
        """The host whose veth address is ``ip``."""
        for node in self.hosts.values():
            if node.ip == ip:
                return node
        raise KeyError(f"no host at {ip}")

    def partition(self, node: ClusterHost) -> None:
        """Unplug ``node``'s link: its processes run on, nothing reaches them."""
        assert self.subnet is not None
        self.subnet.set_link(node.host, up=False)

    def kill_host(self, node: ClusterHost) -> None:
        """The host is gone: link down, every process killed, its namespace deleted."""
        assert self.subnet is not None
        self.subnet.remove_host(node.host)
        with contextlib.suppress(Exception):
            node.proc.wait(5)

    def restore(self, node: ClusterHost, spec: HostSpec | None = None) -> ClusterHost:
        """A fresh host at ``node``'s address (the old one removed first, whatever its
        state) with a new Ray node joined; blocks until it is alive."""
        assert self.subnet is not None
        self.subnet.remove_host(node.host)
        with contextlib.suppress(Exception):
            node.proc.wait(5)
        fresh = self._start_host(node.host.index, spec or node.spec)
        self.wait_alive()
        return fresh

    def add_host(self, spec: HostSpec) -> ClusterHost:
        """One more host (the next index); blocks until its node is alive."""
        fresh = self._start_host(max(self.hosts) + 1, spec)
        self.wait_alive()
        return fresh

    def remove_host(self, node: ClusterHost) -> None:
        """Take ``node`` out for good (its Ray node is declared dead by the GCS)."""
        self.kill_host(node)
        del self.hosts[node.host.index]


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (read from /proc before any dies)."""
    order, todo = [pid], [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{parent}/task").iterdir():
                children = [int(c) for c in (task / "children").read_text().split()]
                order += children
                todo += children
    for each in order:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
