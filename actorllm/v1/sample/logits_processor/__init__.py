"""Custom logits processors, where vLLM keeps their interface
(``vllm.v1.sample.logits_processor``): subclass :class:`LogitsProcessor` (or
:class:`AdapterLogitsProcessor` for per-request functions) and name the class with
``--logits-processors module:Class`` / ``LLM(logits_processors=[...])``.

    from actorllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

The definitions live in :mod:`actorllm.worker.logitsprocs.interface`.
"""

from actorllm.worker.logitsprocs.interface import (
    AdapterLogitsProcessor,
    AddedRequest,
    BatchUpdate,
    LogitsProcessor,
    MoveDirectionality,
    MovedRequest,
    RemovedRequest,
    RequestLogitsProcessor,
    process_dict_updates,
)

__all__ = [
    "AdapterLogitsProcessor",
    "AddedRequest",
    "BatchUpdate",
    "LogitsProcessor",
    "MoveDirectionality",
    "MovedRequest",
    "RemovedRequest",
    "RequestLogitsProcessor",
    "process_dict_updates",
]
