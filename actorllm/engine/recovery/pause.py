"""Pausing generation (vLLM's ``pause_generation``/``resume_generation``), as plain data.

Theory of operation
-------------------
An RL trainer pauses the engine around a weight update. The pause state belongs to the
admission of each replica (engine/recovery/admission.py), which owns this object and
survives scheduler restarts, so a crash while paused neither loses a request nor lifts
the pause. vLLM's three modes map onto two states:

=========  ============  ====================================================================
mode       state         what runs while paused
=========  ============  ====================================================================
``abort``  PAUSED_NEW    nothing: the control plane aborts every open request first (their
                         callers see ``finish_reason="abort"``)
``wait``   PAUSED_NEW    the requests that had started (running in the core) run to their
                         end; queued ones stay queued
``keep``   PAUSED_ALL    nothing: running requests are frozen with their KV cache and go on
                         at resume exactly where they stood
=========  ============  ====================================================================

In every mode a request that arrives while paused is *parked* (kept in the ledger, not
added to the core) and added, in arrival order, at resume: it queues, it does not fail.
The pause is *complete* (the ``pause_generation`` call returns) once no step is in flight
and, under PAUSED_NEW, nothing runs in the core.

A new core epoch while paused (a scheduler restart, a wake-up) adds nothing: every open
request waits for resume (:attr:`Pause.rebuilt`), then the whole ledger is re-added as
after any rebuild (recomputed: a kept request's KV did not survive the restart).

    >>> p = Pause()
    >>> p.pause("keep"); p.state, p.schedules_running
    (<PauseState.PAUSED_ALL: 'paused_all'>, False)
    >>> p.park("r1"); p.park("r2"); p.resume()
    (['r1', 'r2'], False)
    >>> p.paused
    False
"""

from __future__ import annotations

import enum
from typing import Literal, final, get_args

import msgspec

from actorllm.core.errors import InvalidRequestError

PauseMode = Literal["abort", "wait", "keep"]
PAUSE_MODES: tuple[str, ...] = get_args(PauseMode)


class PauseState(enum.Enum):
    UNPAUSED = "unpaused"
    PAUSED_NEW = "paused_new"  # abort, wait: nothing new starts; what runs may finish
    PAUSED_ALL = "paused_all"  # keep: nothing is scheduled at all


def check_mode(mode: object) -> PauseMode:
    """``mode`` if it is one of vLLM's pause modes; else ``InvalidRequestError`` (HTTP 400)
    with vLLM's message."""
    if mode not in PAUSE_MODES:
        raise InvalidRequestError(
            f"Invalid pause mode: {mode} (one of {', '.join(PAUSE_MODES)}).", param="mode"
        )
    return mode  # type: ignore[return-value]  # checked against the Literal's values


class PauseStatistics(msgspec.Struct, frozen=True, kw_only=True):
    state: str
    mode: str | None  # the last pause's mode while paused
    parked: int  # requests that arrived while paused, added at resume
    rebuilt: bool  # a core epoch began while paused: the whole ledger is re-added at resume
    pauses: int  # lifetime count


@final
class Pause:
    """The pause state of one replica's admission (its one writer)."""

    def __init__(self) -> None:
        self.state = PauseState.UNPAUSED
        self.mode: PauseMode | None = None  # while paused
        # {request_id: None}: arrived while paused, not in the core; insertion order is the
        # order they are added at resume.
        self._parked: dict[str, None] = {}
        self.rebuilt = False  # a new core epoch began while paused
        self.pauses = 0

    @property
    def paused(self) -> bool:
        return self.state is not PauseState.UNPAUSED

    @property
    def schedules_running(self) -> bool:
        """Whether steps may run the requests already running (not under ``keep``)."""
        return self.state is not PauseState.PAUSED_ALL

    @property
    def admits_waiting(self) -> bool:
        """Whether the core may start queued requests (only when unpaused)."""
        return self.state is PauseState.UNPAUSED

    def pause(self, mode: PauseMode) -> None:
        """Enter (or change) the pause; parked requests stay parked."""
        self.state = PauseState.PAUSED_ALL if mode == "keep" else PauseState.PAUSED_NEW
        self.mode = mode
        self.pauses += 1

    def park(self, rid: str) -> None:
        """``rid`` arrived while paused: it waits for resume."""
        self._parked[rid] = None

    @property
    def parked(self) -> list[str]:
        """The requests parked so far, in arrival order."""
        return list(self._parked)

    def forget(self, rid: str) -> None:
        """``rid`` ended (aborted, failed) while parked."""
        self._parked.pop(rid, None)

    def resume(self) -> tuple[list[str], bool]:
        """Leave the pause; returns the parked requests (arrival order) and whether a core
        epoch began while paused (then the whole ledger is to be re-added)."""
        parked, rebuilt = list(self._parked), self.rebuilt
        self.state, self.mode, self.rebuilt = PauseState.UNPAUSED, None, False
        self._parked.clear()
        return parked, rebuilt

    def statistics(self) -> PauseStatistics:
        return PauseStatistics(
            state=self.state.value,
            mode=self.mode,
            parked=len(self._parked),
            rebuilt=self.rebuilt,
            pauses=self.pauses,
        )
