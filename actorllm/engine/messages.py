"""The engine's actor protocol: one message union per mailbox, all in one place.

Flow of a request (docs/architecture.md §4)::

    AsyncEngine --Generate--> router --ProcessRequest--> input_processor
        --RegisterRequest--> output_processor   (first, so it knows the request)
        --AddRequest--> scheduler --ExecuteStep--> executor --(worker thread)-->
        executor --StepDone--> scheduler --StepOutputs--> output_processor --> caller's stream

Steps are tagged with the core *epoch*: it grows whenever the scheduler's state is rebuilt
from the ledger (a core restart, a wake-up), and messages from an older epoch are dropped,
so nothing computed before a rebuild is applied twice.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from actorllm.actors import Reply
from actorllm.core.engine_core_output import EngineCoreOutputs
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.request import RequestStatus
from actorllm.core.scheduler_output import SchedulerOutput


class ControlOp(enum.Enum):
    SLEEP = "sleep"
    WAKE_UP = "wake_up"
    IS_SLEEPING = "is_sleeping"
    RESET_PREFIX_CACHE = "reset_prefix_cache"
    SET_KV_CONNECTOR = "set_kv_connector"
    IS_KV_CONNECTOR_ENABLED = "is_kv_connector_enabled"
    GET_STATS = "get_stats"


class _Msg(msgspec.Struct, frozen=True, kw_only=True):
    pass


# -- router ------------------------------------------------------------------------------


class Generate(_Msg, frozen=True, kw_only=True):
    """A request registered in the ledger is ready to be processed."""

    request_id: str
    is_chat: bool = False
    chat_options: dict[str, Any] | None = None


class Abort(_Msg, frozen=True, kw_only=True):
    request_id: str


class Control(_Msg, frozen=True, kw_only=True):
    """A control-plane call; the scheduler answers on ``reply``."""

    op: ControlOp
    arg: Any = None
    reply: Reply[Any]


RouterMsg = Generate | Abort | Control

# -- input processor ---------------------------------------------------------------------


class ProcessRequest(_Msg, frozen=True, kw_only=True):
    request_id: str
    is_chat: bool = False
    chat_options: dict[str, Any] | None = None


InputMsg = ProcessRequest

# -- scheduler ---------------------------------------------------------------------------


class AddRequest(_Msg, frozen=True, kw_only=True):
    """The ledger entry's children are ready for scheduling."""

    request_id: str


class AbortRequests(_Msg, frozen=True, kw_only=True):
    """Finish these scheduler requests (children) now: abort, stop string, failure."""

    child_ids: list[str]
    status: RequestStatus


class StepDone(_Msg, frozen=True, kw_only=True):
    """A step's result (a step that raised crashes the executor instead)."""

    epoch: int
    step_id: int
    output: ModelRunnerOutput


class GrammarReady(_Msg, frozen=True, kw_only=True):
    """A structured-outputs grammar finished compiling: waiting requests may be admitted."""


SchedulerMsg = AddRequest | AbortRequests | StepDone | GrammarReady | Control

# -- executor ----------------------------------------------------------------------------


class ExecuteStep(_Msg, frozen=True, kw_only=True):
    epoch: int
    scheduler_output: SchedulerOutput
    # KV connector work for this step (loads/saves), applied on the worker before it runs.
    connector_meta: Any = None


class WorkerResult(_Msg, frozen=True, kw_only=True):
    """The worker thread finished a step (posted by the thread into the executor's mailbox)."""

    epoch: int
    step_id: int
    output: ModelRunnerOutput | None = None
    error: BaseException | None = None


class ExecutorCall(_Msg, frozen=True, kw_only=True):
    """Run a runner method on the worker thread (sleep, wake_up, reset) and reply."""

    method: str
    args: tuple[Any, ...] = ()
    reply: Reply[Any]


ExecutorMsg = ExecuteStep | WorkerResult | ExecutorCall

# -- output processor --------------------------------------------------------------------


class RegisterRequest(_Msg, frozen=True, kw_only=True):
    request_id: str


class StepOutputs(_Msg, frozen=True, kw_only=True):
    epoch: int
    outputs: EngineCoreOutputs


class EndRequest(_Msg, frozen=True, kw_only=True):
    """End a request for the caller: aborted (error None) or failed (error set)."""

    request_id: str
    error: str | None = None


OutputMsg = RegisterRequest | StepOutputs | EndRequest
