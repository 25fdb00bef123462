"""Trainer sides for the weight-sync tests: a free port, a trainer process that dies
mid-broadcast, and a client that drives an ``AsyncEngine`` from the trainer's thread."""

from __future__ import annotations

import os
import socket
from typing import Any

import anyio.from_thread


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dying_trainer(port: int, world_size: int, tensors: dict[str, Any], send: int) -> None:
    """A spawned process: host the transfer group as rank 0, broadcast the first ``send``
    of ``tensors``, then die without a word (as a killed trainer does)."""
    from actorllm.distributed.weight_transfer import TransferGroup

    group = TransferGroup.open("gloo", "127.0.0.1", port, 0, world_size, timeout_s=30)
    for i, tensor in enumerate(tensors.values()):
        if i == send:
            os._exit(1)
        group.broadcast(tensor.contiguous())
    os._exit(0)


class AsyncEngineClient:
    """``VLLMWeightSyncClient`` over an ``AsyncEngine``, for a trainer on another thread:
    each call goes back to the engine's loop through ``portal`` (any thread)."""

    def __init__(self, engine: Any, portal: anyio.from_thread.BlockingPortal) -> None:
        self.engine = engine
        self.portal = portal

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.portal.call(self.engine.init_weight_transfer_engine, init_info)

    def start_weight_update(self) -> None:
        self.portal.call(self.engine.start_weight_update)

    def update_weights(self, update_info: Any) -> None:
        self.portal.call(self.engine.update_weights, update_info)

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.portal.call(self.engine.finish_weight_update, weight_version)
