"""``WeightTransferTrainerFactory``: the trainer-side engine of a backend, by the
``backend`` of its init info (vLLM's registry, with our ``gloo`` and ``nccl``).

vLLM's engine-side registry, ``WeightTransferEngineFactory``, and the base class of its
engines, ``WeightTransferEngine``, import for a renamed script and refuse by name when
used: the engine side of a transfer is built in (``worker/weight_receiver.py``: gloo and
nccl), with no custom backends."""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

from actorllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
)
from actorllm.distributed.weight_transfer.broadcast import GlooTrainerWeightTransferEngine


class WeightTransferTrainerFactory:
    _registry: ClassVar[dict[str, type[TrainerWeightTransferEngine]]] = {
        "gloo": GlooTrainerWeightTransferEngine,
        "nccl": GlooTrainerWeightTransferEngine,  # the same broadcast, on NCCL
    }

    @classmethod
    def register_engine(cls, name: str, engine_cls: type[TrainerWeightTransferEngine]) -> None:
        if name in cls._registry:
            raise ValueError(f"Weight transfer trainer engine '{name}' is already registered.")
        cls._registry[name] = engine_cls

    @classmethod
    def trainer_init(
        cls,
        init_info: TrainerInitInfo,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> TrainerWeightTransferEngine:
        """A trainer engine joined to the inference engine (see ``broadcast.py``)."""
        backend = init_info.backend
        if backend not in cls._registry:
            raise ValueError(
                f"Invalid weight transfer backend: {backend}. "
                f"Available trainer engines: {list(cls._registry)}"
            )
        return cls._registry[backend].trainer_init(init_info, client=client, source=source)


_NO_CUSTOM = (
    "custom engine-side weight transfer backends are not supported (the engine receives "
    "by gloo or nccl broadcast: weight_transfer_config={'backend': ...})"
)


class WeightTransferEngine:
    """vLLM's base class of engine-side backends: refused when built."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"WeightTransferEngine: {_NO_CUSTOM}.")


class WeightTransferEngineFactory:
    """vLLM's registry of engine-side backends: refuses registration by name."""

    @classmethod
    def register_engine(cls, name: str, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"WeightTransferEngineFactory.register_engine({name!r}): {_NO_CUSTOM}."
        )
