"""Who is to blame when an actor crashes: precise blame, as plain logic (no I/O).

Theory of operation
-------------------
A crash is charged to the requests the crashed part of the engine held: the message being
handled (its dead letter) for the router, input processor and output processor; every
request in a step still in flight (and the dead letter's request) for the core. A request is
failed as *poison* only when it is shown to cause crashes: it crashes again while it is the
**only** suspect, replayed alone. However many unrelated crashes a request lives through in
company, it is never failed.

Blame is kept per *scope* (``"router"``, ``"input_processor"``, ``"output_processor"``,
``"core"``): a request that crashed the output processor is cleared by the output processor
handling it, not by a model step.

======================================  ==================================================
event (in one scope)                    effect
======================================  ==================================================
crash with ``r`` alone in hand          ``r`` is charged a crash *alone*; the third
                                        (without being cleared in between) fails it:
                                        :meth:`Blame.crash` returns it, poison
crash with several in hand; suspects    only those suspects are charged (the others are
among them                              bystanders of a known suspect): they stay suspects
crash with several in hand; no suspect  every request in hand becomes a suspect
several charged                         nobody is failed; the caller replays them in
                                        smaller groups (the core bisects, the output
                                        processor splits per request) until each suspect
                                        runs alone
the request is handled (a step with it  it is cleared: no longer a suspect, its count is
completes; a message about it is        reset
handled)
the request ends                        forgotten (:meth:`Blame.forget`)
======================================  ==================================================

So a poison request in a batch of 32 is failed after about ``log2(32) + 3`` crashes of the
core (bisection down to it, then three times alone), while an innocent one is failed only if
three crashes in a row hit it while it runs alone, with no completed step between them.
Three, not two: crashes do pile up (a fault that fires at the next message, twice), and the
replay of a lone suspect runs it alone by design, so two piled crashes on a request that
happened to be alone would fail an innocent one.

    >>> blame = Blame()
    >>> blame.crash("core", ["a", "b", "c"])     # a batch: all suspects, nobody failed
    []
    >>> blame.crash("core", ["a", "b", "d"])     # d is a bystander of known suspects
    []
    >>> blame.crash("core", ["a"])               # replayed alone, a crashes once ...
    []
    >>> blame.crash("core", ["a"])               # ... twice ...
    []
    >>> blame.crash("core", ["a"])               # ... and a third time: poison
    ['a']
    >>> blame.cleared("core", ["b"]); blame.suspects("core")
    ['c']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import final

import msgspec


class BlameStatistics(msgspec.Struct, frozen=True, kw_only=True):
    suspects: dict[str, int]  # {scope: suspects}
    failed: int  # requests failed as poison (cumulative)


MAX_ALONE = 3  # crashes alone (not cleared in between) that make a request poison


@final
class Blame:
    """Suspects per scope. Lives for the whole engine (it must outlive every crash)."""

    def __init__(self) -> None:
        # {scope: {request_id: crashes it had alone in hand since it was last cleared}}
        self._suspects: dict[str, dict[str, int]] = {}
        self._failed = 0

    def crash(self, scope: str, in_hand: Iterable[str]) -> list[str]:
        """Charge a crash of ``scope`` to the requests it held; returns the poison ones
        (to fail now), which are forgotten."""
        held = list(dict.fromkeys(in_hand))
        suspects = self._suspects.setdefault(scope, {})
        if len(held) == 1:
            rid = held[0]
            suspects[rid] = suspects.get(rid, 0) + 1
            if suspects[rid] < MAX_ALONE:
                return []
            del suspects[rid]
            self._failed += 1
            return held
        for rid in [r for r in held if r in suspects] or held:
            suspects.setdefault(rid, 0)
        return []

    def cleared(self, scope: str, request_ids: Iterable[str]) -> None:
        """These requests were handled without a crash."""
        suspects = self._suspects.get(scope)
        if suspects:
            for rid in request_ids:
                suspects.pop(rid, None)

    def forget(self, request_id: str) -> None:
        """The request ended (finished, aborted, failed)."""
        for suspects in self._suspects.values():
            suspects.pop(request_id, None)

    def has_suspects(self, scope: str) -> bool:
        return bool(self._suspects.get(scope))

    def is_suspect(self, scope: str, request_id: str) -> bool:
        return request_id in self._suspects.get(scope, ())

    def suspects(self, scope: str) -> list[str]:
        return list(self._suspects.get(scope, ()))

    def statistics(self) -> BlameStatistics:
        return BlameStatistics(
            suspects={scope: len(s) for scope, s in self._suspects.items() if s},
            failed=self._failed,
        )


def poison_message(actor: str) -> str:
    return (
        f"this request crashed the engine's {actor} {MAX_ALONE} times when it was replayed "
        "alone; it was failed so that it cannot crash the engine again (poison request)."
    )
