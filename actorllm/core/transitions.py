"""State machines as data (h11's ``_state.py`` way): a table ``{state: {event: next
state}}``, one dict lookup per move, and the table printed for a reader.

    >>> from enum import Enum
    >>> class S(Enum): OPEN = 1; SHUT = 2
    >>> class E(Enum): CLOSE = 1
    >>> table = {S.OPEN: {E.CLOSE: S.SHUT}, S.SHUT: {}}
    >>> lookup(table, S.OPEN, E.CLOSE, RuntimeError, "door")
    <S.SHUT: 2>
    >>> print(format_table(table))
    OPEN --CLOSE--> SHUT

Used by actors/lifecycle.py, engine/recovery/ledger.py and admission_states.py; each
keeps its own table, error type and thin ``next_state``/``format_transitions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

S = TypeVar("S", bound=Enum)
E = TypeVar("E", bound=Enum)

Table = Mapping[S, Mapping[E, S]]


def lookup(
    table: Mapping[S, Mapping[E, S]], state: S, event: E, error: type[Exception], what: str
) -> S:
    """The state after ``event``; raises ``error`` if the move is not in ``table``."""
    try:
        return table[state][event]
    except KeyError:
        raise error(f"no {what} transition from {state.name} on {event.name}") from None


def format_table(table: Mapping[S, Mapping[E, S]]) -> str:
    """The table as aligned text, one ``STATE --EVENT--> STATE`` per line."""
    width = max(len(s.name) for s in table)
    return "\n".join(
        f"{state.name:<{width}} --{event.name}--> {target.name}"
        for state, moves in table.items()
        for event, target in moves.items()
    )
