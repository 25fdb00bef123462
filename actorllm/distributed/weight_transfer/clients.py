"""Clients of the engine's weight-sync control plane (structural
:class:`~actorllm.distributed.weight_transfer.base.VLLMWeightSyncClient`s), for the
trainer side: over HTTP (a server started in dev mode, ``VLLM_SERVER_DEV_MODE=1``), to
an ``LLM`` in the same process, over a pipe to one in another process, or to ``LLM`` Ray
actors. Each call blocks until the engine answered; a refusal raises (``RuntimeError``
with the engine's message; Ray raises the actor's error)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from multiprocessing.connection import Connection
from typing import Any

from actorllm.distributed.weight_transfer.base import (
    WeightTransferInitRequest,
    WeightTransferUpdatePayload,
    WeightTransferUpdateRequest,
)


class HTTPVLLMWeightSyncClient:
    """The server's routes: ``/init_weight_transfer_engine``, ``/start_weight_update``,
    ``/update_weights``, ``/finish_weight_update``, ``/shutdown_weight_transfer_engine``."""

    def __init__(self, base_url: str, timeout: float = 300) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.base_url}/{path}",
            data=data if data is not None else b"",
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"POST /{path}: HTTP {e.code}: {e.read().decode()}") from None

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._post("init_weight_transfer_engine", {"init_info": init_info})

    def shutdown_weight_transfer_engine(self) -> None:
        self._post("shutdown_weight_transfer_engine")

    def start_weight_update(self) -> None:
        self._post("start_weight_update")

    def update_weights(self, update_info: WeightTransferUpdatePayload) -> None:
        self._post("update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        body = {"weight_version": weight_version} if weight_version is not None else None
        self._post("finish_weight_update", body)


class LLMWeightSyncClient:
    """An ``actorllm.LLM`` (or ``LLMEngine``) in this process; its calls are thread-safe,
    so the trainer engine's ``update_weights`` thread may call it."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def shutdown_weight_transfer_engine(self) -> None:
        self.llm.shutdown_weight_transfer_engine()

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: WeightTransferUpdatePayload) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)


class RayVLLMWeightSyncClient:
    """vLLM's: one or more Ray actors holding an ``LLM`` (or ``AsyncLLM``), given by their
    handles. Each call goes to every handle and blocks on all of them, so a deployment of
    several (one per data-parallel replica) is driven as one. Needs ``ray``."""

    def __init__(self, handle: Any) -> None:
        self.handles: list[Any] = handle if isinstance(handle, list) else [handle]

    def _call(self, name: str, *args: Any) -> None:
        import ray

        ray.get([getattr(h, name).remote(*args) for h in self.handles])

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._call("init_weight_transfer_engine", WeightTransferInitRequest(init_info=init_info))

    def shutdown_weight_transfer_engine(self) -> None:
        self._call("shutdown_weight_transfer_engine")

    def start_weight_update(self) -> None:
        self._call("start_weight_update")

    def update_weights(self, update_info: WeightTransferUpdatePayload) -> None:
        self._call("update_weights", WeightTransferUpdateRequest(update_info=update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        # One call: our finish_weight_update labels the tokens after the swap itself.
        self._call("finish_weight_update", weight_version)


class PipeWeightSyncClient:
    """An ``LLM`` in another process, over one end of a ``multiprocessing.Pipe``: each
    call is sent as ``(method name, args)``; the engine's process answers it with
    :func:`serve_weight_sync_calls` as ``(True, None)`` or ``(False, message)``, and a
    refusal raises ``RuntimeError`` here. (A trainer process beside an engine: the RLHF
    example and ``actorllm bench weight-sync``.)"""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def _call(self, name: str, *args: Any) -> None:
        self.conn.send((name, args))
        ok, error = self.conn.recv()
        if not ok:
            raise RuntimeError(f"the engine refused {name}: {error}")

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._call("init_weight_transfer_engine", {"init_info": init_info})

    def shutdown_weight_transfer_engine(self) -> None:
        self._call("shutdown_weight_transfer_engine")

    def start_weight_update(self) -> None:
        self._call("start_weight_update")

    def update_weights(self, update_info: WeightTransferUpdatePayload) -> None:
        self._call("update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._call("finish_weight_update", weight_version)


def serve_weight_sync_calls(
    llm: Any, rpc: Connection, until: Connection, poll_s: float = 0.005
) -> Any:
    """The engine side of :class:`PipeWeightSyncClient`: answer the calls arriving on
    ``rpc`` with ``llm``'s methods until a message arrives on ``until``; returns that
    message. An exception a call raises is relayed (its type and text), not raised."""
    while not until.poll(poll_s):
        if rpc.poll(poll_s):
            name, args = rpc.recv()
            try:
                getattr(llm, name)(*args)
                rpc.send((True, None))
            except Exception as e:  # relayed: the trainer raises it
                rpc.send((False, f"{type(e).__name__}: {e}"))
    return until.recv()
