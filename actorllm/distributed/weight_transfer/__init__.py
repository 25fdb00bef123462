"""Weight transfer from a trainer into a running engine (RLHF), with vLLM 0.32's names
(``vllm.distributed.weight_transfer``): the trainer side and the transfer group. A
training script needs only this package and torch; the engine side (receive, validate,
apply at a step boundary) is ``actorllm/worker/weight_receiver.py``. See docs/rlhf.md."""

from actorllm.distributed.weight_transfer.base import (
    ModuleSource,
    ParamMeta,
    StateDictSource,
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
    WeightTransferInitRequest,
    WeightTransferUpdateRequest,
)
from actorllm.distributed.weight_transfer.broadcast import (
    BroadcastInitInfo,
    BroadcastUpdateInfo,
    GlooTrainerInitInfo,
    GlooTrainerWeightTransferEngine,
    NCCLTrainerInitInfo,
)
from actorllm.distributed.weight_transfer.clients import (
    HTTPVLLMWeightSyncClient,
    LLMWeightSyncClient,
    PipeWeightSyncClient,
    RayVLLMWeightSyncClient,
    serve_weight_sync_calls,
)
from actorllm.distributed.weight_transfer.factory import (
    WeightTransferEngine,
    WeightTransferEngineFactory,
    WeightTransferTrainerFactory,
)
from actorllm.distributed.weight_transfer.group import TransferGroup

__all__ = [
    "BroadcastInitInfo",
    "BroadcastUpdateInfo",
    "GlooTrainerInitInfo",
    "GlooTrainerWeightTransferEngine",
    "HTTPVLLMWeightSyncClient",
    "LLMWeightSyncClient",
    "ModuleSource",
    "NCCLTrainerInitInfo",
    "ParamMeta",
    "PipeWeightSyncClient",
    "RayVLLMWeightSyncClient",
    "StateDictSource",
    "TrainerInitInfo",
    "TrainerWeightTransferEngine",
    "TransferGroup",
    "VLLMWeightSyncClient",
    "WeightSource",
    "WeightTransferEngine",
    "WeightTransferEngineFactory",
    "WeightTransferInitRequest",
    "WeightTransferTrainerFactory",
    "WeightTransferUpdateRequest",
    "serve_weight_sync_calls",
]
