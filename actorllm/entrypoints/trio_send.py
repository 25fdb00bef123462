"""A send that does not yield: hypercorn's trio connections, written to without two task
switches per chunk.

hypercorn's trio ``TCPServer.protocol_send`` takes a ``trio.Lock`` and then calls
``SocketStream.send_all``. Both are trio checkpoints even when nothing waits: the lock's
``acquire`` and the socket's send each end in ``cancel_shielded_checkpoint()``, so every
chunk of every response sends its task to the back of the run queue twice. A streamed
completion writes one chunk per token of every request, so under trio that was three task
steps a token where asyncio (a buffered ``transport.write``) takes one. Measured
(``actorllm bench serve``, 1024 streamed requests on ``llama-1l-128``, 2-core CPU): trio
served 14-30 % fewer tokens a second than asyncio.

:class:`FastSendTCPServer` sends a chunk synchronously when the connection's lock is free:
it takes the lock without waiting, writes what the kernel accepts now, and returns with no
task switch when that was everything. The rest (a full socket buffer), a lock another chunk
holds, TLS streams and any error take hypercorn's own path, unchanged, so chunks stay in
order and a broken connection is reported as hypercorn reports it. A task still checkpoints
once per token where it waits for the next output (``RequestStream``).

:func:`install` puts the class where ``hypercorn.trio.serve`` builds its connections, so
every hypercorn trio server of the process gets it (an application embedding ``serve()``
beside a hypercorn server of its own too: the same bytes, in the same order, sooner); it
leaves hypercorn alone (and says so) when its layout is not the one this was written for.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import trio
from hypercorn.events import Closed, Event, RawData
from hypercorn.trio.tcp_server import TCPServer

logger = logging.getLogger("actorllm.server")


class FastSendTCPServer(TCPServer):
    """hypercorn's trio connection with a synchronous fast path for response bytes."""

    async def protocol_send(self, event: Event) -> None:
        lock = self.send_lock
        # hypercorn's own path for close and idle events, TLS streams, and a chunk behind
        # another one that is mid-send (it queues on the lock, in order)
        if (
            type(event) is not RawData
            or type(self.stream) is not trio.SocketStream
            or lock.locked()
        ):
            await super().protocol_send(event)
            return
        data = event.data
        lock.acquire_nowait()  # free, and nothing runs between the check and this
        try:
            try:
                sent = os.write(self.stream.socket.fileno(), data)
            except BlockingIOError:  # the socket buffer is full
                sent = 0
            except OSError:  # closed or reset: hypercorn's send maps it and reports Closed
                sent = 0
            if sent == len(data):
                return
            rest = memoryview(data)[sent:]
            try:
                with trio.CancelScope(shield=True):
                    await self.stream.send_all(rest)
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        finally:
            lock.release()
        await self.protocol.handle(Closed())


def install() -> bool:
    """Make ``hypercorn.trio.serve`` build :class:`FastSendTCPServer` connections (once per
    process; idempotent). False, with a warning, where hypercorn's trio worker does not
    build its connections from ``hypercorn.trio.run.TCPServer`` as it does in 0.17-0.18."""
    import hypercorn.trio.run as run

    current: Any = getattr(run, "TCPServer", None)
    if current is FastSendTCPServer:
        return True
    if current is not TCPServer or not hasattr(TCPServer, "protocol_send"):
        logger.warning(
            "hypercorn's trio worker changed layout: serving with its own send path (a task "
            "switch more per streamed chunk)"
        )
        return False
    run.TCPServer = FastSendTCPServer  # type: ignore[misc]
    return True
