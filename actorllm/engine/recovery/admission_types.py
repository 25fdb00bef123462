"""What :class:`~actorllm.engine.recovery.admission.Admission` hands to the scheduler actor:
a step to launch (:class:`Step`), a request to fail for its caller (:class:`Failure`), and
its statistics snapshot (:class:`AdmissionStatistics`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import msgspec

from actorllm.engine.recovery.pause import PauseStatistics

if TYPE_CHECKING:
    from actorllm.core.scheduler.kv_connector import KVConnectorMetadata
    from actorllm.core.scheduler_output import SchedulerOutput


class Failure(NamedTuple):
    """A request to fail for its caller."""

    request_id: str
    reason: str


class Step(NamedTuple):
    """A step to hand to the executor."""

    epoch: int
    scheduler_output: SchedulerOutput
    connector_meta: KVConnectorMetadata | None


class AdmissionStatistics(msgspec.Struct, frozen=True, kw_only=True):
    epoch: int
    inflight_steps: int
    max_inflight_steps: int
    on_probation: list[str]  # the group being replayed (its members not cleared yet)
    probation_groups: int  # groups waiting behind it
    held: int  # requests waiting for probation to end
    tombstones: int  # aborted, kept out of the core until the ledger closes them
    # {state name: requests in it}, every state but ADMITTED (the default, not recorded).
    states: dict[str, int]
    sleep_level: int
    kv_connector_enabled: bool
    steps_done: int
    asleep: list[str] = []  # sleep tags still asleep (a wake-up by tags restores some)
    pause: PauseStatistics | None = None
