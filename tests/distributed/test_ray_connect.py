"""Where the engine finds the Ray head and which address it takes for itself."""

from __future__ import annotations

import socket
import time

import pytest

from actorllm.distributed import ray_connect
from actorllm.distributed.ray_connect import RayClusterError, head_address, host_ip, probe_head


@pytest.mark.parametrize(
    ("value", "head"),
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("[fd00::5]:6379", ("fd00::5", 6379)),
        ("head.example:1234", ("head.example", 1234)),
        ("auto", None),
        ("local", None),
        ("ray://10.0.0.5:10001", None),
        ("", None),
    ],
)
def test_head_address_reads_ray_address(
    value: str, head: tuple[str, int] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", value)
    assert head_address() == head


def test_a_ray_address_without_a_port_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5")
    with pytest.raises(RayClusterError, match=r"RAY_ADDRESS='10.0.0.5' is not host:port"):
        head_address()


def test_a_closed_port_is_named_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        started = time.monotonic()
        with pytest.raises(RayClusterError, match=f"the Ray head at 127.0.0.1:{port}") as info:
            probe_head("127.0.0.1", port)
    assert "refused" in str(info.value).lower()
    assert time.monotonic() - started < 1.0
    assert info.value.param == "distributed_executor_backend"


def test_a_listening_head_passes_the_probe() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        probe_head("127.0.0.1", s.getsockname()[1])


def test_host_ip_is_the_override_else_the_route_to_the_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ray_connect.HOST_IP_VARS:
        monkeypatch.delenv(var, raising=False)
    assert host_ip(None) is None  # no head named: Ray's own choice
    assert host_ip(("127.0.0.1", 6379)) is None  # loopback: Ray resolves it itself
    monkeypatch.setenv("VLLM_HOST_IP", "10.1.2.3")
    assert host_ip(("127.0.0.1", 6379)) == "10.1.2.3"
    monkeypatch.setenv("ACTORLLM_HOST_IP", "10.9.9.9")  # ours first
    assert host_ip(None) == "10.9.9.9"
