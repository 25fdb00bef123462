"""Test hosts on one Linux machine: network namespaces on a private bridge.

Theory of operation
-------------------
A :class:`Subnet` is one switch (a Linux bridge in the root namespace) and the hosts
plugged into it: each host is a network namespace with its own loopback and one veth
pair, its ``eth0`` inside the namespace and the other end a port of the bridge. Addresses
are ``10.47.<n>.0/24``: the root namespace holds ``.1`` on the bridge itself (it is the
"client" host, where a test's driver runs), host ``i`` holds ``.<10 + i>``. No namespace
has a default route, so what a host can reach is exactly the subnet: its peers' veth
addresses. Loopback is per namespace, so ``127.0.0.1`` on one host is not another's.

Mount namespaces: ``ip netns exec`` runs its command in a mount namespace of its own
(mounts made there stay there), so a host can hide a directory the others see
(:func:`exec_argv` with ``hide``: a tmpfs over it) — a node without the model files.

Several test sessions may build subnets at once (parallel helpers, xdist): ``<n>`` is
leased under a file lock, one bridge per lease, and a lease whose owner process is gone
(a session killed before its cleanup) is reclaimed, its namespaces' processes killed and
its links deleted, by the next session that leases one. Nothing is ever found or killed
by name: processes are found by the namespace they live in (``ip netns pids``).

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and ``ip`` (iproute2); :func:`unavailable`
says why not, for a clean skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import final

PREFIX = "10.47"
STATE_DIR = Path("/run/actorllm-netns")  # <n>: the lease of subnet n ("pid starttime")
LOCK = STATE_DIR / "lock"
DRIVER_OCTET = 1  # the root namespace's address on the bridge
FIRST_HOST_OCTET = 10


class NetnsError(RuntimeError):
    """An ``ip`` command failed (its stderr is in the message)."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def unavailable() -> str | None:
    """Why namespaces cannot be made here (a skip reason), or None when they can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's `ip`"
    probe = f"al47probe{os.getpid()}"[:15]
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed (no CAP_NET_ADMIN?): {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/pid/stat), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


def _owner_alive(lease: Path) -> bool:
    try:
        pid, start = lease.read_text().split()
    except (OSError, ValueError):
        return False
    return _start_time(int(pid)) == start


def netns_pids(netns: str) -> list[int]:
    """Every process living in namespace ``netns``."""
    done = ip("netns", "pids", netns, check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def kill_netns_processes(netns: str, timeout_s: float = 5.0) -> None:
    """SIGKILL every process in ``netns`` and wait until none is left (a namespace is
    ours alone, so all of them are ours)."""
    deadline = time.monotonic() + timeout_s
    while pids := netns_pids(netns):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)


@final
class Host:
    """One namespace on the subnet; ``ip`` is its veth address."""

    def __init__(self, subnet: Subnet, index: int) -> None:
        self.index = index
        self.netns = f"al47-{subnet.n}-h{index}"
        self.ip = f"{subnet.prefix}.{FIRST_HOST_OCTET + index}"
        self.veth = f"al47v{subnet.n}h{index}"  # the bridge's end (root namespace)
        self.up = False  # the namespace exists and its link is up

    def __repr__(self) -> str:
        return f"Host({self.netns}, {self.ip})"


@final
class Subnet:
    """A leased ``10.47.<n>.0/24`` with its bridge; hosts are added and removed on it.

    >>> with Subnet.lease() as net:  # doctest: +SKIP
    ...     a, b = net.add_host(0), net.add_host(1)
    ...     subprocess.run(exec_argv(a, ["ping", "-c1", b.ip]))
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.prefix = f"{PREFIX}.{n}"
        self.bridge = f"al47b{n}"
        self.driver_ip = f"{self.prefix}.{DRIVER_OCTET}"
        self.hosts: dict[int, Host] = {}
        self._lease = STATE_DIR / str(n)

    @classmethod
    def lease(cls) -> Subnet:
        """Reclaim abandoned subnets, then lease a free one and make its bridge."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        with LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for stale in STATE_DIR.iterdir():
                if stale.name.isdigit() and not _owner_alive(stale):
                    cls(int(stale.name)).destroy()
            for n in range(1, 255):
                net = cls(n)
                if net._lease.exists() or ip("link", "show", net.bridge, check=False).stdout:
                    continue
                me = os.getpid()
                net._lease.write_text(f"{me} {_start_time(me)}")
                try:
                    net._make_bridge()
                except BaseException:
                    net.destroy()
                    raise
                return net
        raise NetnsError("no free 10.47.<n>.0/24 subnet to lease")

    def _make_bridge(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.driver_ip}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def __enter__(self) -> Subnet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def add_host(self, index: int) -> Host:
        """A namespace with loopback up and ``eth0`` on the bridge at ``.<10 + index>``."""
        host = self.hosts.get(index) or Host(self, index)
        self.hosts[index] = host
        peer = f"al47p{self.n}h{index}"
        ip("netns", "add", host.netns)
        ip("link", "add", host.veth, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", host.netns)
        ip("link", "set", host.veth, "master", self.bridge, "up")
        inside = ("-n", host.netns)
        ip(*inside, "link", "set", peer, "name", "eth0")
        ip(*inside, "addr", "add", f"{host.ip}/24", "dev", "eth0")
        ip(*inside, "link", "set", "eth0", "up")
        ip(*inside, "link", "set", "lo", "up")
        host.up = True
        return host

    def set_link(self, host: Host, up: bool) -> None:
        """Plug ``host``'s cable in or out (its bridge port): a partition, not a crash."""
        ip("link", "set", host.veth, "up" if up else "down")
        host.up = up

    def remove_host(self, host: Host) -> None:
        """The host is gone: its link down first (nothing more leaves it, as when a
        machine loses power), every process in it killed, its namespace and link deleted."""
        ip("link", "set", host.veth, "down", check=False)
        host.up = False
        kill_netns_processes(host.netns)
        ip("netns", "del", host.netns, check=False)
        ip("link", "del", host.veth, check=False)

    def destroy(self) -> None:
        """Remove every host of this subnet (even ones a dead owner made), the bridge and
        the lease. Idempotent, never raises."""
        names = {h.netns for h in self.hosts.values()}
        listed = ip("netns", "list", check=False).stdout.split("\n")
        names |= {line.split()[0] for line in listed if line.startswith(f"al47-{self.n}-h")}
        for netns in sorted(names):
            kill_netns_processes(netns)
            ip("netns", "del", netns, check=False)
        for link in _links(f"al47v{self.n}h"):
            ip("link", "del", link, check=False)
        ip("link", "del", self.bridge, check=False)
        self.hosts.clear()
        with contextlib.suppress(OSError):
            self._lease.unlink()


def _links(prefix: str) -> Iterable[str]:
    out = ip("-o", "link", "show", check=False).stdout
    for line in out.splitlines():
        name = line.split(":", 2)[1].strip().split("@")[0]
        if name.startswith(prefix):
            yield name


def exec_argv(host: Host, argv: Sequence[str], hide: Sequence[str] = ()) -> list[str]:
    """``argv`` run inside ``host``'s namespace; ``hide``: directories that host does not
    see (an empty tmpfs mounted over each, in the command's own mount namespace)."""
    if not hide:
        return ["ip", "netns", "exec", host.netns, *argv]
    mounts = " && ".join(f"mount -t tmpfs al47-hidden '{d}'" for d in hide)
    return ["ip", "netns", "exec", host.netns, "sh", "-c", f'{mounts} && exec "$@"', "sh", *argv]
