"""The sans-I/O scheduler: continuous batching, chunked prefill, prefix caching, preemption."""

from actorllm.core.scheduler.config import Policy, SchedulerConfig
from actorllm.core.scheduler.kv_connector import KVConnectorBase, KVConnectorMetadata
from actorllm.core.scheduler.scheduler import Scheduler

__all__ = ["KVConnectorBase", "KVConnectorMetadata", "Policy", "Scheduler", "SchedulerConfig"]
