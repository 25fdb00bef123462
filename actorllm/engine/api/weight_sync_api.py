"""Weight transfer from a trainer (RLHF): the engine side of vLLM 0.32's calls
(``init_weight_transfer_engine``, ``start_weight_update``, ``update_weights``,
``finish_weight_update``, ``update_weight_version`` / ``get_weight_version``,
``shutdown_weight_transfer_engine``), a component of ``AsyncEngine``.

Every call reaches every live replica, as typed asks (engine/actors/messages.py):
``init`` and ``start`` are control calls on each executor's workers (all ranks);
``update_weights`` is ``ReceiveWeights`` on each executor (the tensors are received and
staged on receiving threads while steps go on); ``finish_weight_update`` is
``FinishWeightUpdate`` on each scheduler, which owns the weight version and applies the
staged weights at a step boundary. Nothing pauses generation: streams go on, and each
token is labelled with the version that produced it (``CompletionOutput.weight_versions``,
``token_weight_versions``). A failed call leaves the old weights serving (docs/rlhf.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, final

import anyio

from actorllm.actors import ActorRef, Reply
from actorllm.core.errors import InvalidRequestError
from actorllm.engine.actors.messages import (
    CollectiveRPC,
    FinishWeightUpdate,
    GetWeightVersion,
    ReceiveWeights,
    SetWeightVersion,
)
from actorllm.engine.api.engine_status import ask_each, live_replicas

if TYPE_CHECKING:
    from actorllm.engine.actors.assembly import EngineParts, Replica
    from actorllm.engine.api.engine_status import EngineStatus

NOT_CONFIGURED = (
    "Weight transfer not configured. Please set weight_transfer_config to enable weight transfer."
)


@final
class WeightSync:
    """The weight-transfer side of one ``AsyncEngine`` (event loop only)."""

    def __init__(self, parts: EngineParts, status: EngineStatus) -> None:
        self._parts = parts
        self._config = parts.ctx.config
        self._status = status
        self._lock = anyio.Lock()  # one transfer call at a time

    def _check(self) -> str:
        cfg = self._config
        backend = cfg.weight_transfer_backend
        if backend is None:
            raise InvalidRequestError(NOT_CONFIGURED, param="weight_transfer_config")
        if "ray" in (cfg.distributed_executor_backend, cfg.data_parallel_backend):
            raise InvalidRequestError(
                "weight transfer is not built for the ray backend yet (mp only).",
                param="distributed_executor_backend",
            )
        return backend

    async def _each(
        self, make: Callable[[Replica], tuple[ActorRef[Any], Callable[[Reply[Any]], Any]]]
    ) -> list[Any]:
        """Ask every live replica at once; answers in replica order (the first error is
        raised after all answered)."""
        self._status.check_open()

        async def ask(replica: Replica) -> Any:
            ref, msg = make(replica)
            return await ref.ask(msg)

        return await ask_each(live_replicas(self._parts), ask)

    async def _rpc(self, method: str, **kwargs: Any) -> None:
        await self._each(
            lambda rep: (
                rep.ctx.refs.executor,
                lambda r: CollectiveRPC(method=method, kwargs=dict(kwargs), reply=r),
            )
        )

    async def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        """Join the trainer's transfer group on every worker rank (blocks until the
        trainer and every rank joined). ``init_info``: the backend's dict
        (``master_address``, ``master_port``, ``rank_offset``, ``world_size``, ...)."""
        backend = self._check()
        if not isinstance(init_info, dict):
            raise InvalidRequestError("init_info must be a JSON object.", param="init_info")
        tp = self._config.tensor_parallel_size
        async with self._lock:
            await self._each(
                lambda rep: (
                    rep.ctx.refs.executor,
                    lambda r: CollectiveRPC(
                        method="init_weight_transfer_engine",
                        kwargs={
                            "init_info": init_info,
                            "backend": backend,
                            "rank_base": rep.index * tp,
                        },
                        reply=r,
                    ),
                )
            )

    async def shutdown_weight_transfer_engine(self) -> None:
        """Leave the transfer group; generation goes on."""
        self._check()
        async with self._lock:
            await self._rpc("shutdown_weight_transfer_engine")

    async def start_weight_update(self) -> None:
        self._check()
        async with self._lock:
            await self._rpc("start_weight_update")

    async def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Receive one batch of tensors (``names``, ``dtype_names``, ``shapes``; the tensors
        by broadcast) and stage them, checked against the model; steps go on meanwhile."""
        self._check()
        if not isinstance(update_info, dict | list):
            raise InvalidRequestError(
                "update_info must be a JSON object (or a list of them).", param="update_info"
            )
        async with self._lock:
            await self._each(
                lambda rep: (
                    rep.ctx.refs.executor,
                    lambda r: ReceiveWeights(update_info=update_info, reply=r),
                )
            )

    async def finish_weight_update(self, weight_version: str | None = None) -> None:
        """Apply the staged weights at the next step boundary (streams go on) and label the
        steps after it ``weight_version`` (None: the label stays)."""
        self._check()
        async with self._lock:
            await self._each(
                lambda rep: (
                    rep.ctx.refs.scheduler,
                    lambda r: FinishWeightUpdate(weight_version=weight_version, reply=r),
                )
            )

    async def update_weight_version(self, new_version: str) -> None:
        """Label the steps from now on ``new_version``, weights unchanged."""
        if not isinstance(new_version, str):
            raise InvalidRequestError("new_version must be a string.", param="new_version")
        await self._each(
            lambda rep: (
                rep.ctx.refs.scheduler,
                lambda r: SetWeightVersion(weight_version=new_version, reply=r),
            )
        )

    async def get_weight_version(self) -> str:
        """The version new steps run on (replica 0's; all replicas are set together)."""
        versions: list[str] = await self._each(
            lambda rep: (rep.ctx.refs.scheduler, lambda r: GetWeightVersion(reply=r))
        )
        return versions[0]

    def get_world_size(self, include_dp: bool = True) -> int:
        """The engine's worker ranks: TP x PP, times DP when ``include_dp`` (vLLM's)."""
        cfg = self._config
        size = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
        return size * cfg.data_parallel_size if include_dp else size
