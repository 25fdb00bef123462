"""Ledger entry states as data (engine/recovery/ledger.py): the printed table, illegal moves, and
the entry's state as the input processor, the router and the output processor move it."""

from __future__ import annotations

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.recovery.ledger import (
    TRANSITIONS,
    EntryEvent,
    EntryState,
    LedgerStateError,
    RequestLedger,
    format_transitions,
    next_state,
)

TABLE = """\
NEW       --RECORD--> PROCESSED
NEW       --END--> ENDING
NEW       --CLOSE--> CLOSED
PROCESSED --RECORD--> PROCESSED
PROCESSED --END--> ENDING
PROCESSED --CLOSE--> CLOSED
ENDING    --RECORD--> ENDING
ENDING    --END--> ENDING
ENDING    --CLOSE--> CLOSED"""


def _record(ledger: RequestLedger, rid: str) -> None:
    ledger.record_processed(
        rid,
        prompt_text=None,
        prompt_token_ids=[1],
        eos_token_id=None,
        children=[(rid, SamplingParams())],
    )


def test_the_transition_table_prints_as_documented() -> None:
    assert format_transitions() == TABLE
    assert set(TRANSITIONS) == set(EntryState)


@pytest.mark.parametrize("event", list(EntryEvent))
def test_nothing_leaves_closed(event: EntryEvent) -> None:
    with pytest.raises(LedgerStateError, match=f"from CLOSED on {event.name}"):
        next_state(EntryState.CLOSED, event)


def test_an_entry_moves_through_its_states() -> None:
    ledger = RequestLedger()
    ledger.open("r", None, SamplingParams(), 0, 0.0)
    entry = ledger.get("r")
    assert entry is not None and entry.state is EntryState.NEW and not entry.processed
    _record(ledger, "r")
    assert entry.state is EntryState.PROCESSED and entry.processed
    _record(ledger, "r")  # a retry after a crash records it again
    assert ledger.statistics().states == {"NEW": 0, "PROCESSED": 1, "ENDING": 0}
    assert ledger.end("r") is entry and entry.state is EntryState.ENDING
    ledger.close("r")
    assert entry.state is EntryState.CLOSED and ledger.end("r") is None
    assert not ledger.deliver_to(entry, ValueError("late"))  # nothing after the close


def test_an_illegal_change_raises_and_leaves_the_entry_as_it_was() -> None:
    ledger = RequestLedger()
    ledger.open("r", None, SamplingParams(), 0, 0.0)
    entry = ledger.get("r")
    assert entry is not None
    ledger.close("r")
    with pytest.raises(LedgerStateError):
        entry._move(EntryEvent.RECORD)
    assert entry.state is EntryState.CLOSED


def test_processing_that_finishes_after_the_end_keeps_it_ending() -> None:
    ledger = RequestLedger()
    ledger.open("r", None, SamplingParams(), 0, 0.0)
    ledger.end("r")
    _record(ledger, "r")
    entry = ledger.get("r")
    assert entry is not None and entry.state is EntryState.ENDING and entry.processed


@pytest.mark.anyio
async def test_close_delivers_the_error_then_ends_the_stream() -> None:
    ledger = RequestLedger()
    receive = ledger.open("r", None, SamplingParams(), 0, 0.0)
    ledger.close("r", KeyError("gone"))
    with anyio.fail_after(5):
        items = [item async for item in receive]
    assert [type(i) for i in items] == [KeyError] and "r" not in ledger
