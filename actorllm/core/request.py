"""A request as the scheduler sees it: tokens, progress through the KV cache, and status.

Theory of operation: a request has no prefill or decode *phase*. It has a token list
(``prompt_token_ids + output_token_ids``) and ``num_computed_tokens``, how many of those
tokens already have KV in the cache. Each step the scheduler lets ``num_computed_tokens``
catch up with the token count; when a step's range reaches the end of the known tokens the
model samples one new token, which is appended, and the gap opens again by one.

Under async scheduling the scheduler runs ahead: a request whose sampled token is not back
yet holds an *output placeholder* (``num_output_placeholders``), and the next step computes
one position against that unknown token (the worker fills it in on the device).

Status moves are data, checked on every change:

    >>> print(format_transitions())
    WAITING_FOR_FSM        -> WAITING, FINISHED_*
    WAITING                -> WAITING_FOR_FSM, RUNNING, FINISHED_*
    RUNNING                -> PREEMPTED, FINISHED_*
    PREEMPTED              -> RUNNING, FINISHED_*
    FINISHED_STOPPED       -> (final)
    FINISHED_LENGTH_CAPPED -> (final)
    FINISHED_ABORTED       -> (final)
    FINISHED_ERROR         -> (final)
    FINISHED_REPETITION    -> (final)

(``FINISHED_*``: every finished status.) ``WAITING_FOR_FSM``: a structured-outputs request
whose grammar is still compiling; it holds no batch slot and no KV blocks until it is ready.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence

from actorllm.core.engine_core_output import FinishReason
from actorllm.core.errors import InvalidStatusTransitionError
from actorllm.core.kv_cache.block_hash import BlockHash, BlockHasher
from actorllm.core.lora import LoRARequest
from actorllm.core.pooling_params import PoolingParams
from actorllm.core.prompt_embeds import EMBEDS_SALT, PromptEmbeds
from actorllm.core.routed_experts import RoutedExpertsLog
from actorllm.core.sampling_params import SamplingParams


class RequestStatus(enum.IntEnum):
    WAITING_FOR_FSM = 0  # grammar compiling (vLLM's name)
    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3
    # Everything from here on is finished (``is_finished`` compares against this).
    FINISHED_STOPPED = 4
    FINISHED_LENGTH_CAPPED = 5
    FINISHED_ABORTED = 6
    FINISHED_ERROR = 7
    FINISHED_REPETITION = 8  # repetition_detection found a repeated N-gram (vLLM's)

    @property
    def is_finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED


_FINISHED = (
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH_CAPPED,
    RequestStatus.FINISHED_ABORTED,
    RequestStatus.FINISHED_ERROR,
    RequestStatus.FINISHED_REPETITION,
)

# {status: statuses it may move to}. A finished request never moves again.
TRANSITIONS: dict[RequestStatus, frozenset[RequestStatus]] = {
    RequestStatus.WAITING_FOR_FSM: frozenset({RequestStatus.WAITING, *_FINISHED}),
    # A new request whose grammar is not compiled yet steps aside into WAITING_FOR_FSM.
    RequestStatus.WAITING: frozenset(
        {RequestStatus.WAITING_FOR_FSM, RequestStatus.RUNNING, *_FINISHED}
    ),
    RequestStatus.RUNNING: frozenset({RequestStatus.PREEMPTED, *_FINISHED}),
    RequestStatus.PREEMPTED: frozenset({RequestStatus.RUNNING, *_FINISHED}),
    **{s: frozenset() for s in _FINISHED},
}

# {finished status: the reason the caller sees}.
FINISH_REASONS: dict[RequestStatus, FinishReason] = {
    RequestStatus.FINISHED_STOPPED: FinishReason.STOP,
    RequestStatus.FINISHED_LENGTH_CAPPED: FinishReason.LENGTH,
    RequestStatus.FINISHED_ABORTED: FinishReason.ABORT,
    RequestStatus.FINISHED_ERROR: FinishReason.ERROR,
    RequestStatus.FINISHED_REPETITION: FinishReason.REPETITION,
}


def format_transitions() -> str:
    """The transition table, one line per status (for docs and debugging)."""
    width = max(len(s.name) for s in TRANSITIONS)
    lines = []
    for src, dsts in TRANSITIONS.items():
        names = [d.name for d in sorted(dsts) if not d.is_finished]
        if dsts.issuperset(_FINISHED):
            names.append("FINISHED_*")
        else:
            names += [d.name for d in sorted(dsts) if d.is_finished]
        targets = ", ".join(names) or "(final)"
        lines.append(f"{src.name:<{width}} -> {targets}")
    return "\n".join(lines)


class Request:
    """One sequence being generated. Mutable; owned by the scheduler.

    ``output_token_ids`` may be non-empty at construction: a request resumed after an
    engine crash carries its outputs so far. They are recomputed like after a preemption,
    never sampled again, and count toward ``max_tokens``.

    >>> r = Request("a", [1, 2, 3], SamplingParams(max_tokens=4), output_token_ids=[7])
    >>> r.num_tokens, r.num_output_tokens, r.status.name
    (4, 1, 'WAITING')
    """

    __slots__ = (
        "_all_token_ids",
        "_block_hasher",
        "_hash_ids",
        "_output_token_ids",
        "arrival_time",
        "block_hashes",
        "cache_salt",
        "emitted_first_output",
        "eos_token_id",
        "first_scheduled_time",
        "hash_salt",
        "lora_request",
        "max_tokens",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_output_placeholders",
        "num_preemptions",
        "pooling",
        "priority",
        "prompt_embeds",
        "prompt_token_ids",
        "reasoning_ended",
        "reported_preemptions",
        "request_id",
        "routed_experts",
        "sampling_params",
        "skip_prefix_cache",
        "spec_token_ids",
        "status",
        "stop_reason",
        "stop_token_ids",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        sampling_params: SamplingParams,
        *,
        eos_token_id: int | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
        output_token_ids: Sequence[int] = (),
        cache_salt: str | None = None,
        lora_request: LoRARequest | None = None,
        prompt_embeds: PromptEmbeds | None = None,
        reasoning_ended: bool | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids: list[int] = list(prompt_token_ids)
        # The prompt as embeddings (prompt_token_ids are then placeholders of its length).
        self.prompt_embeds = prompt_embeds
        self._output_token_ids: list[int] = list(output_token_ids)
        self._all_token_ids: list[int] = self.prompt_token_ids + self._output_token_ids
        self.sampling_params = sampling_params
        self.eos_token_id = eos_token_id
        self.arrival_time = time.monotonic() if arrival_time is None else arrival_time
        self.priority = priority  # lower value = served first (vLLM's convention)
        self.cache_salt = cache_salt
        self.lora_request = lora_request  # None: the base model
        # With a reasoning parser, for structured outputs (vLLM's): True: the answer starts
        # at the first output token; False: the output starts inside the reasoning; None:
        # the reasoning gate reads the prompt (structured_output/reasoning_gate.py).
        self.reasoning_ended = reasoning_ended
        # Mixed into the first block's hash: the cache salt and the adapter (vLLM's
        # extra_keys), so blocks computed under different adapters are never shared.
        self.hash_salt = _hash_salt(cache_salt, lora_request)
        # What the prefix-cache hashes read: the tokens, except that an embedding prompt's
        # positions are its rows' digests (core/prompt_embeds.py), under their own salt.
        self._hash_ids: list[int] = self._all_token_ids
        if prompt_embeds is not None:
            self._hash_ids = list(prompt_embeds.hash_ids) + self._output_token_ids
            self.hash_salt = (self.hash_salt or "") + EMBEDS_SALT
        self.status = RequestStatus.WAITING
        # Tokens whose KV is in the cache (or being computed by a step in flight).
        self.num_computed_tokens = 0
        # Prompt tokens served by the prefix cache or the connector at first schedule; -1: not
        # scheduled yet.
        self.num_cached_tokens = -1
        self.first_scheduled_time: float | None = None  # monotonic; rides on the first output
        # Sampled tokens of steps in flight, not yet appended (async scheduling).
        self.num_output_placeholders = 0
        # Draft tokens proposed for the next step (speculative decoding); the scheduler
        # moves them into its next SchedulerOutput and clears them.
        self.spec_token_ids: list[int] = []
        self.num_preemptions = 0
        self.reported_preemptions = 0  # num_preemptions as the last output carried it
        # Whether the scheduler reported an output yet (num_cached_tokens rides on the first).
        self.emitted_first_output = False
        self.stop_reason: int | str | None = None
        # Hashes of the full blocks of the known tokens, extended as tokens arrive.
        self.block_hashes: list[BlockHash] = []
        self._block_hasher: BlockHasher | None = None
        # None: up to max_model_len (the scheduler checks that separately).
        self.max_tokens: int | None = sampling_params.max_tokens
        # Token ids that stop the request: stop_token_ids, and EOS unless ignore_eos.
        self.stop_token_ids: frozenset[int] = frozenset(
            sampling_params.all_stop_token_ids(eos_token_id)
        )
        # No prefix-cache (or connector) hits: skip_reading_prefix_cache, which defaults to
        # True with prompt logprobs (they need every prompt position computed). The
        # request's full blocks are still cached for others.
        self.skip_prefix_cache = bool(
            sampling_params.skip_reading_prefix_cache or sampling_params.prompt_logprobs is not None
        )
        # A pooling request: prefill-only, finished by its pooled output after the last
        # prompt chunk (it never samples, and holds no KV block after that step).
        self.pooling: PoolingParams | None = sampling_params.pooling_params
        if self.pooling is not None and self.pooling.skip_reading_prefix_cache:
            self.skip_prefix_cache = True
        # The experts each position was routed to, when the engine returns them (the
        # scheduler sets it on add; core/routed_experts.py).
        self.routed_experts: RoutedExpertsLog | None = None

    # -- tokens ---------------------------------------------------------------------------

    @property
    def output_token_ids(self) -> list[int]:
        """The outputs so far. Read-only: append via :meth:`append_output_token_ids`."""
        return self._output_token_ids

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt then outputs. Read-only by convention."""
        return self._all_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)

    def append_output_token_ids(self, token_ids: int | Sequence[int]) -> None:
        """Append sampled tokens; the hashes of blocks they complete are computed now."""
        if isinstance(token_ids, int):
            self._output_token_ids.append(token_ids)
            self._all_token_ids.append(token_ids)
            if self.prompt_embeds is not None:
                self._hash_ids.append(token_ids)
        else:
            self._output_token_ids.extend(token_ids)
            self._all_token_ids.extend(token_ids)
            if self.prompt_embeds is not None:
                self._hash_ids.extend(token_ids)
        hasher = self._block_hasher
        if hasher is not None and len(self._all_token_ids) >= (
            (len(self.block_hashes) + 1) * hasher.block_size
        ):
            hasher.extend(self.block_hashes, self._hash_ids, self.hash_salt)

    def attach_block_hasher(self, hasher: BlockHasher) -> None:
        """Hash the full blocks known so far and keep hashing as tokens arrive."""
        if self._block_hasher is not None and self._block_hasher.block_size != hasher.block_size:
            self.block_hashes.clear()
        self._block_hasher = hasher
        hasher.extend(self.block_hashes, self._hash_ids, self.hash_salt)

    # -- status ---------------------------------------------------------------------------

    def transition(self, new: RequestStatus) -> None:
        """Move to ``new``; raises :class:`InvalidStatusTransitionError` if the table forbids it."""
        if new not in TRANSITIONS[self.status]:
            raise InvalidStatusTransitionError(
                f"request {self.request_id!r}: {self.status.name} -> {new.name} is not allowed."
            )
        self.status = new

    @property
    def is_finished(self) -> bool:
        return self.status >= RequestStatus.FINISHED_STOPPED

    @property
    def use_structured_output(self) -> bool:
        return self.sampling_params.structured_outputs is not None

    @property
    def finish_reason(self) -> FinishReason | None:
        return FINISH_REASONS.get(self.status)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, {self.status.name}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, placeholders={self.num_output_placeholders})"
        )


def _hash_salt(cache_salt: str | None, lora: LoRARequest | None) -> str | None:
    """The extra key of a request's first block: its salt and its adapter's name."""
    if lora is None:
        return cache_salt
    return f"{cache_salt or ''}\x00lora:{lora.lora_name}"
