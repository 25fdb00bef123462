"""``trio_send.FastSendTCPServer``: a chunk the socket takes at once is sent with no task
switch; a partial send, a busy connection and a broken one take hypercorn's path, with the
bytes in order and the close reported (trio only: it is hypercorn's trio connection)."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import hypercorn.trio.run as hypercorn_run
import pytest
import trio
import trio.testing
from hypercorn.events import Closed, Event, RawData
from hypercorn.trio.tcp_server import TCPServer

from actorllm.entrypoints.trio_send import FastSendTCPServer, install
from tests.entrypoints.conftest import start_server
from tests.entrypoints.fake_engine import FakeEngine

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]  # a lost chunk hangs a read


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


class _Protocol:
    """What hypercorn's protocol is told (only ``handle`` is called by ``protocol_send``)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def handle(self, event: Event) -> None:
        self.events.append(event)


def _connection(cls: type[TCPServer], sndbuf: int | None = None) -> tuple[Any, socket.socket]:
    """A connection object of ``cls`` over one end of a socket pair, and the other end."""
    ours, peer = socket.socketpair()
    if sndbuf is not None:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    conn = cls(None, None, None, None, stream)  # type: ignore[arg-type]  # unused by sends
    conn.protocol = _Protocol()
    peer.setblocking(False)
    return conn, peer


@contextlib.contextmanager
def _closing_on_error(peer: socket.socket) -> Iterator[None]:
    """Close the peer if the body fails, before the nursery waits for its senders: a
    shielded send to a peer nobody reads would otherwise wait forever."""
    try:
        yield
    except BaseException:
        peer.close()
        raise


async def _read(peer: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        await trio.lowlevel.wait_readable(peer)
        chunk = peer.recv(1 << 16)
        if not chunk:
            break
        got += chunk
    return bytes(got)


@pytest.mark.parametrize(("cls", "switches"), [(FastSendTCPServer, False), (TCPServer, True)])
async def test_a_chunk_goes_out_without_a_task_switch(cls: type[TCPServer], switches: bool) -> None:
    conn, peer = _connection(cls)
    ran: list[int] = []

    async def other() -> None:  # runs at the sender's first checkpoint
        ran.append(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await conn.protocol_send(RawData(data=b"data: {}\n\n"))
        assert bool(ran) is switches  # hypercorn's own path yields (twice); ours not at all
    assert await _read(peer, 10) == b"data: {}\n\n"
    assert conn.protocol.events == []
    assert not conn.send_lock.locked()
    peer.close()


async def test_a_chunk_larger_than_the_socket_buffer_arrives_whole() -> None:
    conn, peer = _connection(FastSendTCPServer, sndbuf=4096)
    data = bytes(range(256)) * 8192  # 2 MiB: the kernel takes a part, send_all the rest
    got: list[bytes] = []

    async def reader() -> None:
        got.append(await _read(peer, len(data)))

    async with trio.open_nursery() as nursery:
        with _closing_on_error(peer):
            nursery.start_soon(reader)
            await conn.protocol_send(RawData(data=data))
    assert got == [data]
    assert conn.protocol.events == []
    peer.close()


async def test_a_chunk_behind_a_busy_send_keeps_its_order() -> None:
    conn, peer = _connection(FastSendTCPServer, sndbuf=4096)
    big = b"x" * (1 << 20)
    async with trio.open_nursery() as nursery:
        with _closing_on_error(peer):
            nursery.start_soon(conn.protocol_send, RawData(data=big))
            await trio.testing.wait_all_tasks_blocked()
            assert conn.send_lock.locked()  # the big chunk waits for the reader, lock held
            nursery.start_soon(conn.protocol_send, RawData(data=b"tail"))
            await trio.testing.wait_all_tasks_blocked()
            assert await _read(peer, len(big) + 4) == big + b"tail"
    assert conn.protocol.events == []
    peer.close()


async def test_a_broken_connection_is_reported_closed() -> None:
    conn, peer = _connection(FastSendTCPServer)
    peer.close()
    await conn.protocol_send(RawData(data=b"data: 1\n\n"))
    assert [type(e) for e in conn.protocol.events] == [Closed]
    assert not conn.send_lock.locked()


async def test_a_closed_stream_is_reported_closed() -> None:
    conn, peer = _connection(FastSendTCPServer)
    await conn.stream.aclose()  # fileno() is -1 now
    await conn.protocol_send(RawData(data=b"data: 1\n\n"))
    assert [type(e) for e in conn.protocol.events] == [Closed]
    peer.close()


def test_install_swaps_hypercorn_s_connection_class_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(hypercorn_run, "TCPServer", TCPServer)
    assert install() and hypercorn_run.TCPServer is FastSendTCPServer
    assert install() and hypercorn_run.TCPServer is FastSendTCPServer  # idempotent
    monkeypatch.setattr(hypercorn_run, "TCPServer", object)  # a hypercorn we do not know
    with caplog.at_level(logging.WARNING, logger="actorllm.server"):
        assert not install()
    assert hypercorn_run.TCPServer is object
    assert "hypercorn's trio worker changed layout" in caplog.text


def _stream_text(url: str) -> str:
    body = {"model": "fake-model", "prompt": "hi", "max_tokens": 9, "stream": True}
    text = []
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=20) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                text.append(json.loads(line[6:])["choices"][0]["text"])
            elif line == "data: [DONE]":
                text.append("[DONE]")
    return "".join(text)


def test_a_trio_server_streams_through_the_fast_send(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve()`` on trio installs the class (with hypercorn's own in place before it), its
    connections send the chunks, and the stream reads as the asyncio server's does."""
    monkeypatch.setattr(hypercorn_run, "TCPServer", TCPServer)
    sends: list[int] = []
    protocol_send = FastSendTCPServer.protocol_send

    async def counted(self: FastSendTCPServer, event: Event) -> None:
        sends.append(1)
        await protocol_send(self, event)

    monkeypatch.setattr(FastSendTCPServer, "protocol_send", counted)
    engine = FakeEngine()
    streamed = {}
    for worker_class in ("trio", "asyncio"):
        srv = start_server(engine, worker_class=worker_class)
        try:
            streamed[worker_class] = _stream_text(srv.url)
        finally:
            srv.stop()
        assert srv.error is None
        if worker_class == "trio":
            assert hypercorn_run.TCPServer is FastSendTCPServer
            assert len(sends) >= 10  # the response start, nine tokens' chunks, the end
    assert streamed["trio"] == streamed["asyncio"]
    assert streamed["trio"].endswith("[DONE]") and len(streamed["trio"]) > len("[DONE]")
