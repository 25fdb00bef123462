"""Lifecycle of a supervised child (actor or supervisor), as data.

Theory of operation: a child is one persistent node in its supervisor (it owns a mailbox
that outlives instances) that runs a sequence of *incarnations*. Each incarnation goes
STARTING → RUNNING and ends by itself (EXIT, CRASH) or because the supervisor asked it to
(STOP → STOPPING → EXIT). The supervisor then decides: RESTART (the node waits in
RESTARTING, perhaps through a backoff delay, until the next START) or TERMINATE.

Transitions live in :data:`TRANSITIONS`; :func:`next_state` is the only way states change,
so an impossible move is a loud :class:`LifecycleError`, not a silent corruption.
``python -m actorllm.actors.lifecycle`` prints the table.
"""

from __future__ import annotations

import enum
from typing import Final

from actorllm.core.transitions import format_table, lookup


class ActorState(enum.Enum):
    NEW = "new"  # declared, mailbox exists, never started
    STARTING = "starting"  # instance built; on_restart/on_start running
    RUNNING = "running"  # serving its mailbox
    STOPPING = "stopping"  # graceful stop asked: finishing the current message, on_stop
    EXITED = "exited"  # incarnation over; the supervisor has not decided yet
    RESTARTING = "restarting"  # decided to restart; waiting out backoff or siblings
    STOPPED = "stopped"  # not running; the supervisor may start it again


class LifecycleEvent(enum.Enum):
    START = "start"
    STARTED = "started"
    STOP = "stop"
    EXIT = "exit"  # ended normally (also: a requested stop completed)
    CRASH = "crash"  # ended by an exception
    RESTART = "restart"
    TERMINATE = "terminate"


S = ActorState
E = LifecycleEvent

TRANSITIONS: Final[dict[ActorState, dict[LifecycleEvent, ActorState]]] = {
    S.NEW: {E.START: S.STARTING, E.TERMINATE: S.STOPPED},
    S.STARTING: {E.STARTED: S.RUNNING, E.CRASH: S.EXITED, E.EXIT: S.EXITED},
    S.RUNNING: {E.STOP: S.STOPPING, E.EXIT: S.EXITED, E.CRASH: S.EXITED},
    S.STOPPING: {E.STOP: S.STOPPING, E.EXIT: S.EXITED, E.CRASH: S.EXITED},
    S.EXITED: {E.RESTART: S.RESTARTING, E.TERMINATE: S.STOPPED},
    S.RESTARTING: {E.START: S.STARTING, E.RESTART: S.RESTARTING, E.TERMINATE: S.STOPPED},
    S.STOPPED: {E.START: S.STARTING, E.RESTART: S.RESTARTING, E.TERMINATE: S.STOPPED},
}

del S, E


class LifecycleError(RuntimeError):
    """An event arrived in a state that has no transition for it (a runtime bug)."""


def next_state(state: ActorState, event: LifecycleEvent) -> ActorState:
    """The state after ``event``; raises :class:`LifecycleError` if the move is not in the table."""
    return lookup(TRANSITIONS, state, event, LifecycleError, "lifecycle")


def format_transitions() -> str:
    """The table as aligned text, one ``STATE --EVENT--> STATE`` per line."""
    return format_table(TRANSITIONS)


if __name__ == "__main__":
    print(format_transitions())
