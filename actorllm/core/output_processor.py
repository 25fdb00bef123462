"""The output processor's state machine: ``EngineCoreOutputs`` in, ``RequestOutput``s out.

Theory of operation: the output_processor actor owns one :class:`OutputProcessor`. It
registers each user request with :meth:`~OutputProcessor.add_request` (which fans ``n > 1``
out into child engine requests, see ``core/output_parent.py``), feeds every
``EngineCoreOutputs`` the scheduler sends to :meth:`~OutputProcessor.process_outputs`, and
forwards the results: each ``RequestOutput`` to its caller's stream, each id in
``reqs_to_abort`` to the scheduler (a stop string ended it; finish it FINISHED_STOPPED).

Two kinds of ids: the *user* request id (what the caller passed; ``RequestOutput.request_id``)
and the *engine* request ids the scheduler knows (the user id itself when ``n == 1``,
``f"{index}_{user_id}"`` per child otherwise). Outputs for unknown or already-finished
engine ids are ignored: under async scheduling a step may still report a request that a
stop string ended one step earlier.

Everything here is synchronous and does no I/O; nothing blocks.

    >>> from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs
    >>> op = OutputProcessor(None)  # no tokenizer: token ids only
    >>> engine_reqs = op.add_request("r1", None, [1, 2], SamplingParams(), arrival_time=0.0)
    >>> [engine_id for engine_id, _ in engine_reqs]
    ['r1']
    >>> out = op.process_outputs(EngineCoreOutputs(step_id=0, outputs=[
    ...     EngineCoreOutput(req_id="r1", new_token_ids=[5])]))
    >>> out.request_outputs[0][1].outputs[0].token_ids
    [5]
"""

from __future__ import annotations

from typing import cast, final

import msgspec
from tokenizers import Tokenizer

from actorllm.core.byte_level import byte_level_table
from actorllm.core.detokenizer import TokenDecoder
from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, FinishReason
from actorllm.core.output_parent import UserRequest, child_params, fan_out
from actorllm.core.output_state import RequestState
from actorllm.core.outputs import RequestOutput
from actorllm.core.request_stats import RequestStats
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams


class ProcessedOutputs(msgspec.Struct, kw_only=True):
    # (user request id, output), in the order the scheduler reported the requests.
    request_outputs: list[tuple[str, RequestOutput]] = msgspec.field(default_factory=list)
    # Engine request ids a stop string finished: the scheduler must finish them (STOPPED).
    reqs_to_abort: list[str] = msgspec.field(default_factory=list)
    # User request ids that finished in this call (their output above has finished=True).
    finished_ids: list[str] = msgspec.field(default_factory=list)
    # {engine id: output tokens folded in but not sent yet}, for every child with a
    # stream_interval above 1 that this call changed (0: all sent).
    held: dict[str, int] = msgspec.field(default_factory=dict)


# A slot in ProcessedOutputs.request_outputs kept for an output rendered at the step's end.
_PENDING: tuple[str, RequestOutput] = ("", cast(RequestOutput, None))

# An engine request's lane through process_outputs (fixed at registration). Plain: one
# sample, no stop strings, logprobs or prompt logprobs, DELTA or FINAL_ONLY. Silent: plain,
# FINAL_ONLY, and its text decoded once at the end (no output and no decoding per step).
_GENERAL, _PLAIN, _SILENT = 0, 1, 2


class OutputProcessorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    num_unfinished: int  # user requests
    num_engine_requests: int  # unfinished engine (child) requests


@final
class OutputProcessor:
    """Per-request output state for every open request. ``tokenizer=None`` turns
    detokenization off (text is always ``""``; stop strings do not apply).

    ``stream_interval`` (vLLM's): a streaming request (DELTA or CUMULATIVE) gets an output
    once ``max(stream_interval, params.stream_interval)`` new tokens accumulated; its first
    output and its final one go out at once. Tokens held back are in the next output (DELTA:
    the held deltas concatenated). FINAL_ONLY is unaffected."""

    def __init__(
        self,
        tokenizer: Tokenizer | None,
        stats: RequestStats | None = None,
        stream_interval: int = 1,
    ) -> None:
        if type(stream_interval) is not int or stream_interval < 1:
            raise ValueError(
                f"stream_interval must be an integer of at least 1, got {stream_interval!r}."
            )
        self._interval = stream_interval
        self._tokenizer = tokenizer
        self._stats = stats  # the engine's request statistics (outlives this object)
        self._decode = None if tokenizer is None else TokenDecoder(tokenizer)
        if tokenizer is not None:  # a byte-level table now, not at the first request
            byte_level_table(tokenizer, True)  # (~0.35 s for 150K ids; None: not byte-level)
        self._users: dict[str, UserRequest] = {}  # {user id: request}
        # {engine id: (unfinished child, its user request, its lane in process_outputs)}
        self._engine: dict[str, tuple[RequestState, UserRequest, int]] = {}
        # Unfinished engine ids whose stream_interval is above 1 (outputs may be held).
        self._holding: set[str] = set()
        self._owner: dict[str, UserRequest] = {}  # {engine id: its user request}

    # -- registration ---------------------------------------------------------------------

    def add_request(
        self,
        req_id: str,
        prompt: str | None,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
        parent_id: str | None = None,
        index: int = 0,
    ) -> list[tuple[str, SamplingParams]]:
        """Register a request; return the engine requests ``[(engine_id, params)]`` to add
        to the scheduler.

        Usual form (``parent_id=None``): ``req_id`` is the user's id; with ``params.n > 1``
        this registers the ``n`` children and returns them all. Explicit form: register
        one child ``req_id`` of user request ``parent_id`` at ``index``; ``params`` are the
        *user's* params (their ``n`` says how many children to wait for); the returned
        params are the child's (``n=1``, ``seed + index``).

        Raises ValueError for an id already open.
        """
        if parent_id is None:
            engine_reqs = fan_out(req_id, params)
            user_id = req_id
        else:
            engine_reqs = [(req_id, child_params(params, index))]
            user_id = parent_id
        for engine_id, _ in engine_reqs:
            if engine_id in self._engine or engine_id in self._owner:
                raise ValueError(f"request {engine_id!r} is already open")
        interval = 1
        if params.output_kind != RequestOutputKind.FINAL_ONLY:
            interval = max(self._interval, params.stream_interval or 1)
        user = self._users.get(user_id)
        if user is None:
            user = UserRequest(
                user_id, prompt, prompt_token_ids, params, arrival_time, self._decode
            )
            self._users[user_id] = user
        elif parent_id is None:
            raise ValueError(f"request {user_id!r} is already open")
        for i, (engine_id, engine_params) in enumerate(engine_reqs):
            child_index = i if parent_id is None else index
            state = RequestState(
                engine_id,
                child_index,
                prompt_token_ids,
                engine_params,
                self._tokenizer,
                self._decode,
            )
            user.children[child_index] = state
            if interval > 1:
                state.interval = interval
                self._holding.add(engine_id)
            lane = _GENERAL
            if state.plain and user.plain:
                lane = _SILENT if user.silent and state.text_deferred else _PLAIN
            self._engine[engine_id] = (state, user, lane)
            self._owner[engine_id] = user
        return engine_reqs

    @property
    def tokenizer(self) -> Tokenizer | None:
        """The tokenizer outputs are detokenized with (None: token ids only)."""
        return self._tokenizer

    # -- the step --------------------------------------------------------------------------

    def process_outputs(self, eco: EngineCoreOutputs) -> ProcessedOutputs:
        """Fold one scheduler step into the request states; return what to send on.

        At most one ``RequestOutput`` per user request per call, holding every child that
        changed in this step.

        Most outputs of a step are the plain case (a DELTA or FINAL_ONLY request with one
        sample, no stop strings or logprobs, one new token, not finished): those take a
        short lane that builds the same output (DELTA; FINAL_ONLY has none yet) with less
        work per request; the others are folded per child and rendered per user request
        once the step is folded.
        """
        result = ProcessedOutputs()
        outputs = result.request_outputs
        now = eco.timestamp
        record = self._stats is not None and eco.step_id >= 0  # not replays
        # {user id: (its slot in outputs, children changed)}, in order of first change.
        changed: dict[str, tuple[int, list[RequestState]]] = {}
        # {a sequence's previous token time: sequences}: the plain lane's token counts.
        gaps: dict[float, int] = {}
        engine = self._engine
        holding = self._holding
        version = eco.weight_version
        for out in eco.outputs:
            found = engine.get(out.req_id)
            if found is None:
                continue
            state, user, lane = found
            if version is not None and out.new_token_ids:
                state.note_version(version)
            previous = state.last_token_time
            if (
                lane
                and out.finish_reason is None
                and len(out.new_token_ids) == 1
                and out.new_prompt_logprobs is None
                and out.new_sampling_mask is None
            ):
                silent = user.silent
                if lane == _SILENT:  # the token and its stamps, nothing else
                    state.take_silent(out, now)
                elif silent:
                    state.update_plain(out, now)
                elif holding and out.req_id in holding:
                    state.update_plain(out, now)
                    silent = not state.due()
                    result.held[out.req_id] = state.held
                    delta = None
                else:
                    delta = state.plain_step(out, now)
                if out.scheduled_time is not None:  # (a first output: its cache counts)
                    user.note_cached_tokens(state)
                if record:
                    if previous is not None and user.first_token_seen:
                        gaps[previous] = gaps.get(previous, 0) + 1
                    else:
                        self._record_tokens(user, 1, previous, now)
                if not silent:
                    outputs.append((user.request_id, user.plain_output(state, delta)))
                continue
            self._fold(out, state, user, result, changed, record, now)
        if gaps:
            assert self._stats is not None
            for previous, count in gaps.items():
                self._stats.next_tokens(now - previous, count)
        if changed:
            self._render(changed, result, now)
        return result

    def _fold(
        self,
        out: EngineCoreOutput,
        state: RequestState,
        user: UserRequest,
        result: ProcessedOutputs,
        changed: dict[str, tuple[int, list[RequestState]]],
        record: bool,
        now: float,
    ) -> None:
        """The general path: fold ``out`` into its child; a changed child's user request
        gets a slot in the step's outputs, rendered by :meth:`_render`."""
        previous = state.last_token_time
        if state.update(out, now):
            result.reqs_to_abort.append(out.req_id)
        if out.new_token_ids and record:
            self._record_tokens(user, len(out.new_token_ids), previous, now)
        user.add_prompt_logprobs(state, out.new_prompt_logprobs)
        user.note_cached_tokens(state)
        if self._holding and out.req_id in self._holding:
            shown = state.finished or (bool(out.new_token_ids) and state.due())
            result.held[out.req_id] = state.held
            if state.finished:
                self._holding.discard(out.req_id)
        else:
            shown = bool(out.new_token_ids) or state.finished
        if shown:
            slot = changed.get(user.request_id)
            if slot is None:
                changed[user.request_id] = (len(result.request_outputs), [state])
                result.request_outputs.append(_PENDING)
            else:
                slot[1].append(state)
        if state.finished:
            del self._engine[out.req_id]

    def _render(
        self,
        changed: dict[str, tuple[int, list[RequestState]]],
        result: ProcessedOutputs,
        now: float,
    ) -> None:
        """Each changed user request's output, into the slot kept for it in the step's
        order; finished requests are forgotten."""
        outputs = result.request_outputs
        holes = False
        for user_id, (slot, children) in changed.items():
            user = self._users[user_id]
            request_output = user.make_output(children)
            if request_output is not None:
                outputs[slot] = (user_id, request_output)
                finished = request_output.finished
            else:
                holes = True
                finished = user.finished
            if finished:
                result.finished_ids.append(user_id)
                self._forget(user, now)
        if holes:
            result.request_outputs = [o for o in outputs if o is not _PENDING]

    def _record_tokens(
        self, user: UserRequest, count: int, previous: float | None, now: float
    ) -> None:
        assert self._stats is not None
        if not user.first_token_seen:
            user.first_token_seen = True
            self._stats.prompt(len(user.prompt_token_ids))
        self._stats.tokens(count, None if previous is None else now - previous)

    # -- ending requests from outside -------------------------------------------------------

    def abort_request(self, req_id: str, now: float = 0.0) -> RequestOutput | None:
        """Finish a user request (or the user request an engine id belongs to) as "abort";
        return its final output, or None when it is not open. The caller aborts the engine
        ids from :meth:`engine_request_ids` in the scheduler."""
        user = self._find(req_id)
        if user is None:
            return None
        return self._end(user, FinishReason.ABORT, None, now)

    def fail_request(self, req_id: str, message: str, now: float = 0.0) -> RequestOutput:
        """Finish a request as "error" with ``message`` (e.g. a poison request); an
        unknown id gets a bare error output."""
        user = self._find(req_id)
        if user is None:
            return RequestOutput(
                request_id=req_id,
                prompt=None,
                prompt_token_ids=[],
                prompt_logprobs=None,
                outputs=[],
                finished=True,
                error=message,
            )
        request_output = self._end(user, FinishReason.ERROR, message, now)
        assert request_output is not None
        return request_output

    def _end(
        self, user: UserRequest, reason: FinishReason, error: str | None, now: float
    ) -> RequestOutput | None:
        ended = user.unfinished_children()
        for state in ended:
            state.finish(reason, now)
        # A child the explicit form has not registered yet will never come: the request
        # ends with the children it has.
        user.n = len(user.children)
        request_output = user.make_output(ended, error)
        self._forget(user, now)
        return request_output

    # -- queries ----------------------------------------------------------------------------

    def has_request(self, req_id: str) -> bool:
        """Whether ``req_id`` (a user id or an engine id) is open."""
        return self._find(req_id) is not None

    def engine_request_ids(self, req_id: str) -> list[str]:
        """The unfinished engine ids of the user request ``req_id`` belongs to ([] if none)."""
        user = self._find(req_id)
        return [] if user is None else [c.req_id for c in user.unfinished_children()]

    @property
    def num_unfinished(self) -> int:
        """Open user requests."""
        return len(self._users)

    def statistics(self) -> OutputProcessorStatistics:
        return OutputProcessorStatistics(
            num_unfinished=len(self._users), num_engine_requests=len(self._engine)
        )

    def _find(self, req_id: str) -> UserRequest | None:
        return self._users.get(req_id) or self._owner.get(req_id)

    def _forget(self, user: UserRequest, now: float) -> None:
        """Drop an ended user request; its figures go to the engine's request statistics."""
        if self._stats is not None:
            self._stats.finished(user.finished_stats(now))
        del self._users[user.request_id]
        for state in user.children.values():
            self._engine.pop(state.req_id, None)
            self._owner.pop(state.req_id, None)
            self._holding.discard(state.req_id)
