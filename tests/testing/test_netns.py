"""Test hosts in network namespaces (no Ray): each its own loopback, only the veth
addresses routable, a hidden directory, a pulled cable, and nothing left behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorllm.testing import netns
from actorllm.testing.netns import Subnet, exec_argv, ip, netns_pids

if (reason := netns.unavailable()) is not None:
    pytest.skip(reason, allow_module_level=True)

SERVE = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7047)); s.listen(); print("up", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"hello"); c.close()
"""
DIAL = """
import socket, sys
try:
    print(socket.create_connection((sys.argv[1], 7047), timeout=1).recv(5).decode())
except OSError as e:
    print(type(e).__name__)
"""


@pytest.fixture
def net() -> Iterator[Subnet]:
    subnet = Subnet.lease()
    try:
        yield subnet
    finally:
        subnet.destroy()


def _dial(host: netns.Host, address: str) -> str:
    argv = exec_argv(host, [sys.executable, "-c", DIAL, address])
    return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()


def test_hosts_reach_each_other_by_veth_address_only(net: Subnet, tmp_path: Path) -> None:
    a, b = net.add_host(0), net.add_host(1)
    server = subprocess.Popen(
        exec_argv(a, [sys.executable, "-c", SERVE]), stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == "up\n"
        assert _dial(b, a.ip) == "hello"
        assert _dial(b, "127.0.0.1") == "ConnectionRefusedError"  # b's own loopback
        assert _dial(b, "8.8.8.8") == "OSError"  # no route beyond the subnet
        with socket.create_connection((a.ip, 7047), timeout=5) as root:  # the head host
            assert root.recv(5) == b"hello"
        assert netns_pids(a.netns) == [server.pid]

        net.set_link(a, up=False)  # a partition: the server lives on, unreachable
        assert _dial(b, a.ip) in ("TimeoutError", "OSError")
        assert server.poll() is None
        net.set_link(a, up=True)
        assert _dial(b, a.ip) == "hello"

        net.remove_host(a)  # a host gone: its processes with it
        assert server.wait(5) == -9
    finally:
        server.kill()

    hidden = tmp_path / "model"
    hidden.mkdir()
    (hidden / "config.json").write_text("{}")
    ls = exec_argv(b, ["ls", "-A", str(hidden)], hide=[str(hidden)])
    assert subprocess.run(ls, capture_output=True, text=True, check=True).stdout == ""
    assert (hidden / "config.json").exists()  # hidden in b's mount namespace only


def test_destroy_leaves_nothing_and_a_dead_owners_subnet_is_reclaimed() -> None:
    first = Subnet.lease()
    host = first.add_host(0)
    sleeper = subprocess.Popen(exec_argv(host, ["sleep", "600"]))
    (netns.STATE_DIR / str(first.n)).write_text("999999999 0")  # its owner "died"
    second = Subnet.lease()  # reclaims the abandoned one first
    try:
        assert sleeper.wait(5) == -9
        assert host.netns not in ip("netns", "list").stdout
        assert not list(netns._links(f"al47v{first.n}h"))
        lease = (netns.STATE_DIR / str(second.n)).read_text().split()[0]
        assert lease == str(os.getpid())  # the reclaimed number may be leased again
    finally:
        second.destroy()
    deadline = time.monotonic() + 5
    while ip("link", "show", second.bridge, check=False).stdout and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not ip("link", "show", second.bridge, check=False).stdout
    assert not (netns.STATE_DIR / str(second.n)).exists()
