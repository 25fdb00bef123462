"""PipeWeightSyncClient and serve_weight_sync_calls: each call reaches the engine's method
with its arguments, a refusal comes back as RuntimeError naming the call and the error,
and the serving side returns the message that ends it."""

from __future__ import annotations

import multiprocessing as mp
import threading
from typing import Any

import pytest

from actorllm.distributed.weight_transfer import PipeWeightSyncClient, serve_weight_sync_calls


class _Engine:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def init_weight_transfer_engine(self, request: dict[str, Any]) -> None:
        self.calls.append(("init", (request,)))

    def start_weight_update(self) -> None:
        self.calls.append(("start", ()))

    def update_weights(self, request: dict[str, Any]) -> None:
        raise ValueError(f"unknown parameter {request['update_info']['names'][0]!r}")

    def finish_weight_update(self, version: str | None) -> None:
        self.calls.append(("finish", (version,)))


def test_calls_relay_and_refusals_raise() -> None:
    engine = _Engine()
    rpc, rpc_child = mp.Pipe()
    until, until_child = mp.Pipe()
    result: list[Any] = []
    server = threading.Thread(
        target=lambda: result.append(serve_weight_sync_calls(engine, rpc, until))
    )
    server.start()
    client = PipeWeightSyncClient(rpc_child)
    client.init_weight_transfer_engine({"master_port": 1})
    client.start_weight_update()
    with pytest.raises(RuntimeError, match="update_weights: ValueError: unknown parameter 'x'"):
        client.update_weights({"names": ["x"]})
    client.finish_weight_update("v1")
    until_child.send("done")
    server.join(10)
    assert result == ["done"]
    assert engine.calls == [
        ("init", ({"init_info": {"master_port": 1}},)),
        ("start", ()),
        ("finish", ("v1",)),
    ]
