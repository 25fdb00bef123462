"""Instrumentation point: observe (or crash) an actor as it takes each message.

A probe is ``probe(child_name, message)``, called when the actor takes a message from its
mailbox, before ``handle`` (or a custom ``run``) sees it. If the probe raises, that is a
crash of the actor while holding the message — exactly as if ``handle`` had raised: the
message is dead-lettered, its reply fails with ``ActorCrashed``, the supervisor restarts.
If it returns an awaitable, the actor awaits it while holding the message before handling
it: a slow or hung handler, on purpose (``anyio.sleep(2)``, ``anyio.sleep_forever()``),
which a ``ChildSpec.message_deadline`` watchdog sees like a real one. The test harness
builds ``inject_fault`` on this; it is also a place for tracing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from actorllm.actors.ref import ActorRef

Probe = Callable[[str, object], Awaitable[object] | None]


def attach_probe(ref: ActorRef[Any], probe: Probe) -> Callable[[], None]:
    """Attach ``probe`` to the actor behind ``ref`` (it survives restarts).

    Returns a function that detaches it (idempotent).
    """
    probes = ref._cell.probes
    probes.append(probe)

    def detach() -> None:
        if probe in probes:
            probes.remove(probe)

    return detach
