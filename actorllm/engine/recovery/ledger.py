"""The request ledger: what must survive an actor crash, kept beside the actors.

Theory of operation
-------------------
Every open request has one :class:`LedgerEntry`, created by ``AsyncEngine.generate`` before
any actor sees the request and removed when the caller's stream is closed. Actors update it
as the request moves:

* input_processor records the processed request (:meth:`RequestLedger.record_processed`:
  ``prompt_token_ids`` and the children, ``n > 1`` fanning out one per sample);
* output_processor appends each child's tokens as it folds them in (``emitted``; the
  last ``held`` of them not yet sent, see ``stream_interval``), marks
  children finished and closes the request (it is the one owner of a request's end), and
  records the last step it applied (``last_step``), which makes re-applying a step
  idempotent;
* the scheduler (``Admission``) reads the ledger when the core subtree restarts or wakes
  up: it starts a new core *epoch* (:meth:`RequestLedger.new_epoch`) and re-adds every
  unfinished child with ``prompt + emitted`` (recomputed, like a preemption).

The ledger is the recovery record, not the data path: messages carry what each actor
needs (engine/actors/messages.py); an actor reads the ledger only to rebuild after a restart, to
check that a request is still open, or to find the children of a request it aborts.

The ledger holds the caller's stream (engine/api/request_stream.py), so whoever notices a
failure can end that one request with an error. It is plain data with no I/O: actors run on
one event loop, so no locks are needed.

An entry's life is data, checked on every change (:func:`format_transitions`):

    >>> print(format_transitions())
    NEW       --RECORD--> PROCESSED
    NEW       --END--> ENDING
    NEW       --CLOSE--> CLOSED
    PROCESSED --RECORD--> PROCESSED
    PROCESSED --END--> ENDING
    PROCESSED --CLOSE--> CLOSED
    ENDING    --RECORD--> ENDING
    ENDING    --END--> ENDING
    ENDING    --CLOSE--> CLOSED

RECORD: the input processor's result (a retry after a crash records it again); END: the
router ended it (abort or failure): it is routed, or moved off a dead replica, no more;
CLOSE: the caller's stream is closed and the entry forgotten (CLOSED is final). Which
replica runs a request (``replica``) and whether its caller reads too slowly (``slow``)
are facts about it, not steps of its life: they are plain fields beside ``state``.
"""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

import msgspec

from actorllm.core.engine_core_output import FinishReason
from actorllm.core.lora import LoRARequest
from actorllm.core.model_runner_output import TokenLogprobs
from actorllm.core.outputs import RequestOutput
from actorllm.core.prompt_embeds import PromptEmbeds
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.core.transitions import format_table, lookup
from actorllm.engine.api.request_stream import RequestStream, WakeCount
from actorllm.engine.api.step_outputs import merge_outputs

# The caller's stream carries outputs, or the exception that ends the request.
StreamItem = RequestOutput | BaseException


class EntryState(enum.Enum):
    NEW = "new"  # opened by the caller; the input processor has not recorded it
    PROCESSED = "processed"  # prompt tokens and children recorded: routable, rebuildable
    ENDING = "ending"  # aborted or failed: never routed (or moved) again; its end is on its way
    CLOSED = "closed"  # the caller's stream is closed: nothing more is sent (final)


class EntryEvent(enum.Enum):
    RECORD = "record"  # RequestLedger.record_processed
    END = "end"  # RequestLedger.end (the router)
    CLOSE = "close"  # RequestLedger.close


S = EntryState
E = EntryEvent

# {state: {event: next state}}. Only per-request events: none of them runs per token.
TRANSITIONS: Final[dict[EntryState, dict[EntryEvent, EntryState]]] = {
    S.NEW: {E.RECORD: S.PROCESSED, E.END: S.ENDING, E.CLOSE: S.CLOSED},
    S.PROCESSED: {E.RECORD: S.PROCESSED, E.END: S.ENDING, E.CLOSE: S.CLOSED},
    # Processing may finish after the end: recorded (for the output processor), not routed.
    S.ENDING: {E.RECORD: S.ENDING, E.END: S.ENDING, E.CLOSE: S.CLOSED},
    S.CLOSED: {},
}

del S, E

_CLOSED = EntryState.CLOSED  # (a module global: the delivery hot path compares with it)


class LedgerStateError(RuntimeError):
    """An event arrived in a state that has no transition for it (a bug in the engine)."""


def next_state(state: EntryState, event: EntryEvent) -> EntryState:
    """The state after ``event``; raises :class:`LedgerStateError` if the move is not in
    the table."""
    return lookup(TRANSITIONS, state, event, LedgerStateError, "ledger")


def format_transitions() -> str:
    """The table as aligned text, one ``STATE --EVENT--> STATE`` per line."""
    return format_table(TRANSITIONS)


def _merger(kind: RequestOutputKind) -> Callable[[StreamItem, StreamItem], StreamItem | None]:
    """How a ``kind`` request's stream folds an output into the one its caller has not
    read (see RequestStream): as ``LLMEngine.step`` merges outputs between two calls."""

    def merge(unread: StreamItem, new: StreamItem) -> StreamItem | None:
        if type(unread) is RequestOutput and type(new) is RequestOutput and not unread.finished:
            return merge_outputs(unread, new, kind)
        return None  # an error, or after the final output: queued as it is

    return merge


@dataclass
class ChildState:
    """One sample of a request, as the scheduler sees it."""

    child_id: str
    params: SamplingParams
    # Output tokens the output processor folded in: the caller has seen all but the last
    # ``held`` (stream_interval holds them back for the next output). A rebuilt scheduler
    # continues after all of them; a rebuilt output processor replays the held ones
    # without sending them, so they reach the caller once, in its next output.
    emitted: list[int] = field(default_factory=list)
    held: int = 0
    # The emitted tokens' sample logprobs, one per token (a request with ``logprobs``
    # only): a rebuilt output processor's later outputs still carry every position.
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    # --return-sampling-mask: each emitted token's surviving ids (empty without).
    sampling_masks: list[list[int]] = field(default_factory=list)
    finished: bool = False  # written by the output processor only
    # How the scheduler ended it (None: not finished, or ended by a stop string, which
    # the output processor finds again when it replays the tokens).
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    # The scheduler's first output's (prefix-cache hits, tokens written to the cache, first
    # scheduled time), once folded in: a rebuilt output processor reports them again.
    first_output: tuple[int, int, float] | None = None


@dataclass
class LedgerEntry:
    request_id: str
    prompt: str | list[dict[str, object]] | None  # text, chat messages, or None (token ids)
    params: SamplingParams
    priority: int
    arrival_time: float
    stream: RequestStream[StreamItem]  # the caller reads it; the engine writes it
    prompt_token_ids: list[int] | None = None  # None until the input processor ran
    prompt_text: str | None = None  # the rendered prompt (after the chat template)
    eos_token_id: int | None = None
    cache_salt: str | None = None  # the prompt's prefix-cache salt (kept for replays)
    prompt_embeds: PromptEmbeds | None = None  # an embedding prompt (kept for replays)
    lora_request: LoRARequest | None = None  # its adapter (kept for replays; None: base)
    reasoning_ended: bool | None = None  # NewRequest's (kept for replays)
    children: dict[str, ChildState] = field(default_factory=dict)
    # (core epoch, step id) of the last step the output processor applied to this request.
    last_step: tuple[int, int] = (-1, -1)
    # Where it is in its life; changed by RequestLedger only, checked against TRANSITIONS.
    state: EntryState = EntryState.NEW
    # The data-parallel replica running it (set by the router; None until routed). Data,
    # not a state: the router moves it when a replica dies.
    replica: int | None = None
    # The caller left max_backlog outputs unread (a slow consumer): a fact about the
    # caller, found in any state; the output processor then ends the request.
    slow: bool = False

    @property
    def processed(self) -> bool:
        """The input processor's result is recorded (PROCESSED, or ENDING after it)."""
        return self.prompt_token_ids is not None

    def _move(self, event: EntryEvent) -> None:
        self.state = next_state(self.state, event)


class RequestLedger:
    """All open requests, by user-facing id, and their children by scheduler id."""

    def __init__(self, max_backlog: int | None = None) -> None:
        # Outputs a caller may leave unread before deliver() refuses more (None: no bound).
        self.max_backlog = max_backlog
        self._entries: dict[str, LedgerEntry] = {}  # {request_id: entry}
        # {child_id: (its open entry, its state)}: one lookup per output on the hot path.
        self._by_child: dict[str, tuple[LedgerEntry, ChildState]] = {}
        # child(child_id): the open entry a child belongs to and the child's state, or None.
        # The dict's own bound ``get``: no Python frame per output on the hot path
        # (``_by_child`` is never rebound).
        self.child = self._by_child.get
        # The core epoch: grows whenever a replica's scheduler rebuilds its state from this
        # ledger (new_epoch, called by the replica's Admission only). Epochs are unique
        # across replicas; outputs of an epoch that is no longer some replica's current one
        # are dropped by the output processor, so no token is applied twice.
        self.epoch = 0
        self._current: dict[int, int] = {}  # {replica: its current epoch}
        self._load: dict[int, int] = {}  # {replica: open requests routed to it}
        # Outputs folded into an unread one in the streams already closed (their callers
        # were a step or more behind the engine).
        self._merged_closed = 0
        # Callers woken by a delivery that have not run since (every stream counts here).
        self.woken_readers = WakeCount()

    def open(
        self,
        request_id: str,
        prompt: str | list[dict[str, object]] | None,
        params: SamplingParams,
        priority: int,
        arrival_time: float,
        lora_request: LoRARequest | None = None,
    ) -> RequestStream[StreamItem]:
        """Register a request; returns its output stream (the caller reads it).

        Raises ``ValueError`` when ``request_id`` is already open.
        """
        if request_id in self._entries:
            raise ValueError(f"request id {request_id!r} is already in use.")
        # FINAL_ONLY sends one output: nothing to merge.
        kind = params.output_kind
        merge = None if kind == RequestOutputKind.FINAL_ONLY else _merger(kind)
        stream: RequestStream[StreamItem] = RequestStream(merge, self.woken_readers)
        self._entries[request_id] = LedgerEntry(
            request_id=request_id,
            prompt=prompt,
            params=params,
            priority=priority,
            arrival_time=arrival_time,
            stream=stream,
            lora_request=lora_request,
        )
        return stream

    def get(self, request_id: str) -> LedgerEntry | None:
        return self._entries.get(request_id)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(list(self._entries.values()))

    def new_epoch(self, replica: int = 0) -> int:
        """Start a new core epoch of ``replica`` (before reading the ledger to rebuild);
        returns it."""
        self.epoch += 1
        self._current[replica] = self.epoch
        return self.epoch

    def is_current(self, epoch: int) -> bool:
        """Whether ``epoch`` is a live replica's current epoch (its outputs apply)."""
        return epoch in self._current.values()

    def retire(self, replica: int) -> None:
        """``replica`` is gone for good: outputs of its epochs no longer apply."""
        self._current.pop(replica, None)

    def assign(self, request_id: str, replica: int) -> LedgerEntry:
        """Route a request to ``replica`` (the router); a request moved from a dead replica
        starts its step stamps over (the new replica's epochs are unrelated)."""
        entry = self._entries[request_id]
        if entry.replica is not None:
            self._load[entry.replica] -= 1
            entry.last_step = (-1, -1)
        entry.replica = replica
        self._load[replica] = self._load.get(replica, 0) + 1
        return entry

    def load(self, replica: int) -> int:
        """Open requests routed to ``replica`` (waiting, running or on their way)."""
        return self._load.get(replica, 0)

    def on_replica(self, replica: int) -> list[LedgerEntry]:
        """The open requests routed to ``replica``, oldest first."""
        return [e for e in self._entries.values() if e.replica == replica]

    def record_processed(
        self,
        request_id: str,
        *,
        prompt_text: str | None,
        prompt_token_ids: list[int],
        eos_token_id: int | None,
        children: list[tuple[str, SamplingParams]],
        cache_salt: str | None = None,
        prompt_embeds: PromptEmbeds | None = None,
        reasoning_ended: bool | None = None,
    ) -> None:
        """The input processor's result, kept for recovery (idempotent: a retry after a crash
        records the same children again)."""
        entry = self._entries[request_id]
        entry.reasoning_ended = reasoning_ended
        entry.prompt_text = prompt_text
        entry.eos_token_id = eos_token_id
        entry.cache_salt = cache_salt
        entry.prompt_embeds = prompt_embeds
        for child_id, params in children:
            child = entry.children.get(child_id)
            if child is None:
                child = entry.children[child_id] = ChildState(child_id=child_id, params=params)
            self._by_child[child_id] = (entry, child)
        entry.prompt_token_ids = prompt_token_ids  # set last: marks it processed
        entry._move(EntryEvent.RECORD)

    def end(self, request_id: str) -> LedgerEntry | None:
        """The router ended the request (abort or failure): it is routed, or moved off a
        dead replica, no more. Returns its entry (None: already closed)."""
        entry = self._entries.get(request_id)
        if entry is not None:
            entry._move(EntryEvent.END)
        return entry

    def entry_of_child(self, child_id: str) -> LedgerEntry | None:
        found = self._by_child.get(child_id)
        return None if found is None else found[0]

    def deliver(self, request_id: str, item: StreamItem) -> bool:
        """Put an output (or the exception ending the request) on the caller's stream.

        Never blocks. Returns False when the caller is gone, or when it left ``max_backlog``
        outputs unread: then nothing is sent and ``entry.slow`` is set (the output
        processor aborts the request and ends the stream with ``SlowConsumerError``).
        """
        entry = self._entries.get(request_id)
        return entry is not None and self.deliver_to(entry, item)

    def deliver_to(self, entry: LedgerEntry, item: StreamItem) -> bool:
        """:meth:`deliver` to an entry the caller already looked up (open or closed)."""
        if entry.state is _CLOSED:
            return False
        backlog = self.max_backlog
        sent = entry.stream.offer(item, math.inf if backlog is None else backlog)
        if sent is False:
            entry.slow = True
        return bool(sent)  # (None: the caller closed its end)

    def deliver_step(self, outputs: list[tuple[str, RequestOutput]]) -> list[str]:
        """:meth:`deliver` each ``(request_id, output)`` of one step (every id open); return
        the ids whose caller left ``max_backlog`` outputs unread (``slow`` is set)."""
        entries = self._entries
        limit = math.inf if self.max_backlog is None else self.max_backlog
        slow: list[str] = []
        closed = _CLOSED
        for rid, item in outputs:
            entry = entries[rid]
            # (None: the caller closed its end; nothing to do)
            if entry.state is not closed and entry.stream.offer(item, limit) is False:
                entry.slow = True
                slow.append(rid)
        return slow

    def close(self, request_id: str, error: BaseException | None = None) -> None:
        """End a request: optionally deliver ``error``, close the stream, forget the entry."""
        entry = self._entries.pop(request_id, None)
        if entry is None:
            return
        for child_id in entry.children:
            self._by_child.pop(child_id, None)
        if entry.replica is not None:
            self._load[entry.replica] -= 1
        self._merged_closed += entry.stream.merged
        if error is not None:
            with contextlib.suppress(Exception):  # the caller already closed its end
                entry.stream.send_nowait(error)
        entry._move(EntryEvent.CLOSE)
        entry.stream.close()

    def fail_all(self, error: BaseException) -> None:
        for entry in list(self._entries.values()):
            self.close(entry.request_id, error)

    def open_children(self) -> Iterator[tuple[LedgerEntry, ChildState]]:
        """Unfinished children of processed requests, oldest request first."""
        for entry in sorted(self._entries.values(), key=lambda e: e.arrival_time):
            if entry.processed:  # (every entry here is open: close() removes it)
                for child in entry.children.values():
                    if not child.finished:
                        yield entry, child

    def statistics(self) -> LedgerStatistics:
        return LedgerStatistics(
            open_requests=len(self._entries),
            open_children=sum(1 for _ in self.open_children()),
            states=self._state_counts(),
            epoch=self.epoch,
            merged_outputs=self.merged_outputs(),
        )

    def _state_counts(self) -> dict[str, int]:
        counts = dict.fromkeys((s.name for s in EntryState if s is not _CLOSED), 0)
        for entry in self._entries.values():
            counts[entry.state.name] += 1
        return counts

    def merged_outputs(self) -> int:
        """Outputs delivered while the caller had the one before unread, so that the two
        reached it as one: since start, every request's (open or closed)."""
        return self._merged_closed + sum(e.stream.merged for e in self._entries.values())


class LedgerStatistics(msgspec.Struct, frozen=True, kw_only=True):
    open_requests: int
    open_children: int  # unfinished children of processed requests
    states: dict[str, int]  # {state name: open requests in it} (CLOSED ones are gone)
    epoch: int
    # Outputs a caller had not read when the next came, so the two went out as one: a
    # client that does not keep up (or a loop too busy to run its reader).
    merged_outputs: int


if __name__ == "__main__":
    print(format_transitions())
