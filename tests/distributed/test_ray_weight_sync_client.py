"""vLLM's RayVLLMWeightSyncClient drives every actor handle; vLLM's engine-side backend
registry imports and refuses by name."""

from __future__ import annotations

from typing import Any

import pytest

from actorllm.distributed.weight_transfer import (
    RayVLLMWeightSyncClient,
    WeightTransferEngine,
    WeightTransferEngineFactory,
    WeightTransferInitRequest,
    WeightTransferUpdateRequest,
)


class _Method:
    """A Ray actor method: ``.remote(*args)`` records the call (its "object ref")."""

    def __init__(self, calls: list[tuple[str, tuple[Any, ...]]], name: str) -> None:
        self.calls, self.name = calls, name

    def remote(self, *args: Any) -> tuple[str, tuple[Any, ...]]:
        self.calls.append((self.name, args))
        return (self.name, args)


class _Handle:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> _Method:
        return _Method(self.__dict__["calls"], name)


def test_each_call_reaches_every_handle_and_waits_for_all(monkeypatch):
    pytest.importorskip("ray")
    waited: list[list[Any]] = []
    monkeypatch.setattr("ray.get", waited.append)
    handles = [_Handle(), _Handle()]
    client = RayVLLMWeightSyncClient(handles)
    client.init_weight_transfer_engine({"backend": "gloo"})
    client.start_weight_update()
    client.update_weights({"names": ["w"]})
    client.finish_weight_update("v2")
    client.shutdown_weight_transfer_engine()
    expected = [
        ("init_weight_transfer_engine", (WeightTransferInitRequest({"backend": "gloo"}),)),
        ("start_weight_update", ()),
        ("update_weights", (WeightTransferUpdateRequest({"names": ["w"]}),)),
        ("finish_weight_update", ("v2",)),
        ("shutdown_weight_transfer_engine", ()),
    ]
    assert all(h.calls == expected for h in handles)
    assert [len(refs) for refs in waited] == [2] * 5
    assert RayVLLMWeightSyncClient(handles[0]).handles == [handles[0]]


def test_engine_side_backends_are_refused_by_name():
    with pytest.raises(NotImplementedError, match="register_engine\\('ipc'\\)"):
        WeightTransferEngineFactory.register_engine("ipc", "my.module", "MyEngine")
    with pytest.raises(NotImplementedError, match="WeightTransferEngine: custom"):
        WeightTransferEngine()
