"""The engine's actor protocol: one message union per mailbox, all in one place.

Every message carries what its receiver needs; the ledger (engine/recovery/ledger.py) is the
recovery record that a restarted actor rebuilds from, not the data path. Refs are typed
(:class:`EngineRefs`), so mypy checks every send against the receiver's union.

One streamed request, hop by hop::

    AsyncEngine.generate      ledger.open(id) -> the caller's stream
      --Generate-->           input_processor   tokenize, template, validate, fan out n
      --RegisterRequest-->    output_processor  (first: it knows the request before outputs)
      --Route-->              router            pick the replica (engine/scheduling/routing.py)
      --AddRequest-->         scheduler[i]      Admission.add -> core Scheduler
      --ExecuteStep-->        executor[i]       queue the step on replica i's worker thread
        (worker thread: Worker.execute_step -> runner; the outcome is posted to the loop)
      --StepDone-->           scheduler[i]      update_from_output
      --StepOutputs-->        output_processor  detokenize, stops -> ledger.deliver
                                                -> the caller's stream

``[i]``: with ``data_parallel_size=M`` there are M replicas (scheduler + executor + worker
thread each); the ledger records which one runs each request (``LedgerEntry.replica``).

Ends and aborts are messages too::

    AsyncEngine.abort --Abort--> router --AbortRequest--> scheduler[i] (free its blocks)
                                        --EndRequest--> output_processor (close the stream)
    output_processor --StopChildren--> scheduler[i] (a stop string matched)
    dead-letter policy --FailRequest--> router / input_processor (poison: fail it)
    a replica gives up --ReplicaDown--> router --AdoptRequests--> the other schedulers

Control calls are asks straight to the actor that owns the state (``Sleep``,
``PauseGeneration`` ... to each scheduler, ``CollectiveRPC`` ... to each executor); a
scheduler asks its executor for ``SleepWorker`` / ``WakeWorker``.

A weight update from a trainer (docs/rlhf.md)::

    AsyncEngine.update_weights --ReceiveWeights--> executor[i]  (receiving threads; steps go on)
    AsyncEngine.finish_weight_update --FinishWeightUpdate--> scheduler[i] (owns the version)
      --CommitWeights--> executor[i]   queued behind the steps launched: a step boundary

Steps are tagged with the core *epoch* (owned by the ledger): it grows whenever the
scheduler's state is rebuilt from the ledger (a core restart, a wake-up), and messages of an
older epoch are dropped, so nothing computed before a rebuild is applied twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from actorllm.actors import ActorRef, Reply
from actorllm.core.engine_core_output import EngineCoreOutputs, SchedulerStats
from actorllm.core.lora import LoRARequest
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.prompt_embeds import PromptEmbeds
from actorllm.core.request import RequestStatus
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler.kv_connector import KVConnectorMetadata
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.engine.recovery.pause import PauseMode


class _Msg(msgspec.Struct, frozen=True, kw_only=True):
    pass


# -- data carried by the messages ---------------------------------------------------------


class ChatOptions(_Msg, frozen=True, kw_only=True):
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None  # OpenAI function tools, for the template


class Child(_Msg, frozen=True, kw_only=True):
    """One sample of a request (``n > 1`` fans out one per sample), as the scheduler runs it."""

    child_id: str
    index: int
    params: SamplingParams  # the child's own (seed + index, engine-side stop ids)


class NewRequest(_Msg, frozen=True, kw_only=True):
    """A processed request: everything the scheduler needs to run it."""

    request_id: str
    prompt_token_ids: list[int]
    eos_token_id: int | None
    arrival_time: float
    priority: int
    children: list[Child]
    cache_salt: str | None = None  # mixed into the prefix-cache hashes (vLLM's cache_salt)
    lora_request: LoRARequest | None = None  # the adapter its rows run with (None: base)
    # The prompt as embeddings (prompt_token_ids: placeholders of its length).
    prompt_embeds: PromptEmbeds | None = None
    # Structured outputs start at once (True), after the reasoning (False), or where the
    # reasoning gate finds in the prompt (None): core Request.reasoning_ended.
    reasoning_ended: bool | None = None


# -- router ------------------------------------------------------------------------------


class Generate(_Msg, frozen=True, kw_only=True):
    """A request opened in the ledger, to process and run (router -> input processor)."""

    request_id: str
    prompt: str | Mapping[str, Any] | Sequence[Mapping[str, Any]]  # text, ids, or chat
    params: SamplingParams
    priority: int = 0
    arrival_time: float
    chat: ChatOptions | None = None  # set: ``prompt`` is a conversation
    lora_request: LoRARequest | None = None  # the adapter (None: the base model)
    reasoning_ended: bool | None = None  # NewRequest's


class Route(_Msg, frozen=True, kw_only=True):
    """A processed request, to send to a replica's scheduler (input processor -> router)."""

    request: NewRequest

    @property
    def request_id(self) -> str:
        return self.request.request_id


class Abort(_Msg, frozen=True, kw_only=True):
    request_id: str


class FailRequest(_Msg, frozen=True, kw_only=True):
    """End a request with an error (redelivered by the dead-letter policy: poison)."""

    request_id: str
    reason: str


class ReplicaDown(_Msg, frozen=True, kw_only=True):
    """A data-parallel replica gave up (its restart budget is spent): move its requests."""

    replica: int
    reason: str


RouterMsg = Route | Abort | FailRequest | ReplicaDown

# -- input processor ---------------------------------------------------------------------

InputMsg = Generate | FailRequest

# -- scheduler ---------------------------------------------------------------------------


class AddRequest(_Msg, frozen=True, kw_only=True):
    request: NewRequest


class AbortRequest(_Msg, frozen=True, kw_only=True):
    """Finish a request's children now (aborted by its caller, or failed)."""

    request_id: str
    child_ids: list[str]  # empty: not processed yet (a later AddRequest is then ignored)
    status: RequestStatus = RequestStatus.FINISHED_ABORTED


class StopChildren(_Msg, frozen=True, kw_only=True):
    """The output processor matched a stop string in these children."""

    child_ids: list[str]


class StepDone(_Msg, frozen=True, kw_only=True):
    """A step's result (a step that raised crashes the executor instead)."""

    epoch: int
    step_id: int
    output: ModelRunnerOutput


class Sleep(_Msg, frozen=True, kw_only=True):
    level: int
    reply: Reply[None]


class PinLoRAs(_Msg, frozen=True, kw_only=True):
    """The LoRA adapters pinned on the workers now (all of them): each step counts them as
    holding their slots (``core/scheduler/lora_gate.py``)."""

    names: list[str]
    reply: Reply[None]


class ReleaseKVCache(_Msg, frozen=True, kw_only=True):
    """vLLM's ``release_kv_cache_memory``: free the KV cache alone, the weights staying;
    only once a pause is complete and nothing sleeps (else the reply fails naming why)."""

    reply: Reply[None]


class WakeUp(_Msg, frozen=True, kw_only=True):
    """Restore what ``tags`` names (worker/sleep_tags.py; None: everything); the answer
    says whether the replica is fully awake (then it schedules again)."""

    tags: list[str] | None = None
    reply: Reply[bool]


class IsSleeping(_Msg, frozen=True, kw_only=True):
    reply: Reply[bool]


class PauseGeneration(_Msg, frozen=True, kw_only=True):
    """Enter the pause (engine/recovery/pause.py) now: new requests are parked from here."""

    mode: PauseMode
    reply: Reply[None]


class AwaitPaused(_Msg, frozen=True, kw_only=True):
    """Answered once the pause is complete (no step in flight; under abort and wait,
    nothing running), after the prefix cache was reset when ``clear_cache``."""

    clear_cache: bool
    reply: Reply[None]


class ResumeGeneration(_Msg, frozen=True, kw_only=True):
    reply: Reply[None]


class IsPaused(_Msg, frozen=True, kw_only=True):
    reply: Reply[bool]


class ResetPrefixCache(_Msg, frozen=True, kw_only=True):
    reply: Reply[bool]


class SetKVConnector(_Msg, frozen=True, kw_only=True):
    enabled: bool
    reply: Reply[None]


class IsKVConnectorEnabled(_Msg, frozen=True, kw_only=True):
    reply: Reply[bool]


class ReplicaSchedulerStats(_Msg, frozen=True, kw_only=True):
    """``GetStats``'s answer: a replica's scheduler figures, from the actor that owns them."""

    core: SchedulerStats  # the core's own (queues, KV usage, prefix cache, preemptions)
    steps_done: int  # cumulative
    # vLLM's iteration tokens of each recent step with outputs, newest last (at most 4096),
    # and the cumulative count of such steps (a reader's cursor into the list).
    iteration_tokens: list[int]
    iterations_done: int
    is_sleeping: bool
    kv_connector_enabled: bool


class GetStats(_Msg, frozen=True, kw_only=True):
    reply: Reply[ReplicaSchedulerStats]


class FinishWeightUpdate(_Msg, frozen=True, kw_only=True):
    """Apply the staged weight update at the next step boundary (the executor's
    ``CommitWeights``), then label later steps ``weight_version`` (None: keep the label).
    The reply: the parameters written on each rank."""

    weight_version: str | None = None
    reply: Reply[list[Any]]


class SetWeightVersion(_Msg, frozen=True, kw_only=True):
    """Label the steps launched from now on, weights unchanged (vLLM's
    ``update_weight_version``)."""

    weight_version: str
    reply: Reply[None]


class GetWeightVersion(_Msg, frozen=True, kw_only=True):
    reply: Reply[str]


SchedulerControl = (
    Sleep
    | ReleaseKVCache
    | PinLoRAs
    | WakeUp
    | IsSleeping
    | PauseGeneration
    | AwaitPaused
    | ResumeGeneration
    | IsPaused
    | ResetPrefixCache
    | SetKVConnector
    | IsKVConnectorEnabled
    | GetStats
    | FinishWeightUpdate
    | SetWeightVersion
    | GetWeightVersion
)


class AdoptRequests(_Msg, frozen=True, kw_only=True):
    """Requests the router moved here from a replica that died (they are in the ledger)."""

    request_ids: list[str]


class GrammarReady(_Msg, frozen=True, kw_only=True):
    """A structured-outputs grammar finished compiling: waiting requests may be admitted."""


class LaunchDue(_Msg, frozen=True, kw_only=True):
    """The scheduler's own timer: the step overlapping the one running is due (lookahead)."""


SchedulerMsg = (
    AddRequest
    | AbortRequest
    | StopChildren
    | StepDone
    | GrammarReady
    | LaunchDue
    | AdoptRequests
    | SchedulerControl
)

# -- executor ----------------------------------------------------------------------------


class ExecuteStep(_Msg, frozen=True, kw_only=True):
    epoch: int
    scheduler_output: SchedulerOutput
    # KV connector work for this step (loads/saves), applied on the worker before it runs.
    connector_meta: KVConnectorMetadata | None = None


class SleepWorker(_Msg, frozen=True, kw_only=True):
    """Free the KV cache (and at level 2 the weights); no step is in flight. ``tags``
    ``["kv_cache"]``: the KV cache alone (worker/sleep_tags.py ``sleep_parts``)."""

    level: int
    tags: list[str] | None = None
    reply: Reply[None]


class WakeWorker(_Msg, frozen=True, kw_only=True):
    tags: list[str] | None = None  # worker/sleep_tags.py; None: everything
    reply: Reply[None]


class CollectiveRPC(_Msg, frozen=True, kw_only=True):
    """Run a method of the ``Worker`` (by name, or a callable taking the worker) between
    steps, on the worker thread; the reply is one result per rank."""

    method: str | Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    reply: Reply[list[Any]]


class ReceiveWeights(_Msg, frozen=True, kw_only=True):
    """Receive one ``update_weights`` call's tensors from the trainer on every rank, on
    receiving threads (steps go on); reply once all are staged, or with the error."""

    update_info: dict[str, Any] | list[dict[str, Any]]
    reply: Reply[int]  # the tensors received


class CommitWeights(_Msg, frozen=True, kw_only=True):
    """Write the staged weights into the model between two steps, on every rank; the reply
    is each rank's parameters written."""

    reply: Reply[list[Any]]


class StartProfile(_Msg, frozen=True, kw_only=True):
    reply: Reply[None]


class StopProfile(_Msg, frozen=True, kw_only=True):
    reply: Reply[str]  # the trace file written


ExecutorControl = (
    SleepWorker
    | WakeWorker
    | CollectiveRPC
    | ReceiveWeights
    | CommitWeights
    | StartProfile
    | StopProfile
)
ExecutorMsg = ExecuteStep | ExecutorControl

# -- output processor --------------------------------------------------------------------


class RegisterRequest(_Msg, frozen=True, kw_only=True):
    """A processed request whose outputs are about to come (input processor -> here)."""

    request_id: str
    prompt_text: str | None
    prompt_token_ids: list[int]
    params: SamplingParams  # the caller's
    arrival_time: float
    child_ids: list[str]  # in index order


class StepOutputs(_Msg, frozen=True, kw_only=True):
    epoch: int
    outputs: EngineCoreOutputs


class EndRequest(_Msg, frozen=True, kw_only=True):
    """End a request for the caller: aborted (error None) or failed (error set)."""

    request_id: str
    error: str | None = None
    # Also finish its children in the scheduler (the sender could not: the output
    # processor's own poison requests).
    finish_in_scheduler: bool = False


class FlushOutputs(_Msg, frozen=True, kw_only=True):
    """Answered once every output sent to the output processor before it has reached its
    callers' streams (``pause_generation`` returns after the last in-flight tokens)."""

    reply: Reply[None]


OutputMsg = RegisterRequest | StepOutputs | EndRequest | FlushOutputs

# -- the refs ----------------------------------------------------------------------------


@dataclass(eq=False)
class CoreRefs:
    """One data-parallel replica's actors."""

    scheduler: ActorRef[SchedulerMsg]
    executor: ActorRef[ExecutorMsg]


@dataclass(eq=False)
class EngineRefs:
    """Typed refs to the engine's actors, set as each one starts (sinks first): reading one
    before its actor started raises ``AttributeError``. Refs stay valid across restarts.

    Each replica's actors see their own ``EngineRefs``: ``scheduler`` and ``executor`` are
    that replica's; the shared actors (router, input and output processors) and ``cores``
    (every replica's, in replica order) are the same in all of them."""

    output_processor: ActorRef[OutputMsg] = field(init=False)
    executor: ActorRef[ExecutorMsg] = field(init=False)
    scheduler: ActorRef[SchedulerMsg] = field(init=False)
    input_processor: ActorRef[InputMsg] = field(init=False)
    router: ActorRef[RouterMsg] = field(init=False)
    cores: list[CoreRefs] = field(default_factory=list)

    def started(self) -> dict[str, ActorRef[Any]]:
        """{actor name: ref} for the actors started so far (this replica's core)."""
        return {k: v for k, v in vars(self).items() if k != "cores"}
