"""Bounded mailboxes: backpressure, survival across restarts, closing, statistics."""

from __future__ import annotations

import functools

import anyio
import pytest

from actorllm.actors import (
    ActorStopped,
    ChildSpec,
    MailboxFull,
    open_supervisor,
)
from actorllm.actors.mailbox import Mailbox

from .support import Add, Boom, Counter, Wait, get, until

pytestmark = pytest.mark.anyio


async def test_send_waits_when_full_and_send_nowait_raises() -> None:
    async with open_supervisor(children=[ChildSpec("c", Counter, mailbox_size=2)]) as sup:
        ref = sup.ref("c")
        gate = anyio.Event()
        await ref.send(Wait(gate))
        await until(lambda: ref.statistics().mailbox.taken == 1)  # busy in handle()
        ref.send_nowait(Add(1))
        await ref.send(Add(2))  # the mailbox is now full
        with pytest.raises(MailboxFull):
            ref.send_nowait(Add(4))
        with anyio.move_on_after(0.05) as scope:
            await ref.send(Add(4))
        assert scope.cancelled_caught  # send blocked: backpressure
        async with anyio.create_task_group() as tg:
            tg.start_soon(ref.send, Add(8))
            await until(lambda: ref.statistics().mailbox.senders_waiting == 1)
            gate.set()
        assert await get(ref) == 1 + 2 + 8
        stats = ref.statistics().mailbox
        assert (stats.capacity, stats.peak_depth, stats.depth, stats.sent) == (2, 2, 0, 5)


async def test_send_without_checkpoint_yields_only_to_wait_for_room() -> None:
    """``send(msg, checkpoint=False)``: enqueued without a yield while there is room (the
    engine's hot paths), and waits for room like ``send`` when the mailbox is full."""
    async with open_supervisor(children=[ChildSpec("c", Counter, mailbox_size=2)]) as sup:
        ref = sup.ref("c")
        gate = anyio.Event()
        await ref.send(Wait(gate))
        await until(lambda: ref.statistics().mailbox.taken == 1)  # busy in handle()
        ran: list[int] = []

        async def mark() -> None:
            ran.append(1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(mark)  # runs at the parent's next yield
            await ref.send(Add(1), checkpoint=False)
            await ref.send(Add(2), checkpoint=False)  # the mailbox is now full
            assert ran == []  # no yield so far
            with anyio.move_on_after(0.05) as scope:
                await ref.send(Add(4), checkpoint=False)
            assert scope.cancelled_caught  # no room: it waited (backpressure)
            assert ran == [1]
            tg.start_soon(functools.partial(ref.send, Add(8), checkpoint=False))
            await until(lambda: ref.statistics().mailbox.senders_waiting == 1)
            gate.set()
        assert await get(ref) == 1 + 2 + 8


async def test_queued_messages_survive_a_restart() -> None:
    async with open_supervisor(children=[ChildSpec("c", Counter, mailbox_size=8)]) as sup:
        ref = sup.ref("c")
        gate = anyio.Event()
        await ref.send(Wait(gate))
        await ref.send(Boom())
        for n in (1, 2, 3):
            await ref.send(Add(n))
        await until(lambda: ref.statistics().mailbox.depth == 4)
        gate.set()  # Boom crashes the first incarnation with three Adds still queued
        assert await get(ref) == 6  # ... which the second incarnation handled
        stats = ref.statistics()
        assert (stats.incarnation, stats.crashes, stats.handled) == (2, 1, 5)


async def test_a_ref_sent_to_before_start_delivers_after_start() -> None:
    """Refs of declared children exist before they start (for cycles between siblings)."""
    core = ChildSpec.supervisor("core", children=[ChildSpec("late", Counter)])
    async with open_supervisor() as sup:
        nested = await sup.start_child(core)
        ref = nested.ref("late")
        await ref.send(Add(3))
        assert await get(ref) == 3


async def test_closing_refuses_sends_and_wakes_blocked_senders() -> None:
    async with open_supervisor(children=[ChildSpec("c", Counter, mailbox_size=1)]) as sup:
        ref = sup.ref("c")
        gate = anyio.Event()
        await ref.send(Wait(gate))
        await until(lambda: ref.statistics().mailbox.taken == 1)
        await ref.send(Add(1))
        results: list[str] = []

        async def blocked_sender() -> None:
            try:
                await ref.send(Add(2))
                results.append("drained")  # moved into the mailbox and dead-lettered
            except ActorStopped:
                results.append("refused")

        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked_sender)
            await until(lambda: ref.statistics().mailbox.senders_waiting == 1)
            gate.set()
            await sup.stop_child("c")
        assert results in (["drained"], ["refused"])
        assert ref.statistics().mailbox.closed
        with pytest.raises(ActorStopped):
            await ref.send(Add(3))
        with pytest.raises(ActorStopped):
            ref.send_nowait(Add(3))


def test_capacity_must_be_positive() -> None:
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError):
            Mailbox("m", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ChildSpec("c", Counter, mailbox_size=0)
