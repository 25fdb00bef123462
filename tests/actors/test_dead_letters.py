"""Dead letters: the message in hand at a crash, and what is left when a child goes."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actorllm.actors import ActorStopped, ChildSpec, open_supervisor

from .support import Add, Boom, Counter, Wait, get, until

pytestmark = pytest.mark.anyio

Letters = list[tuple[str, object, BaseException]]


def recorder(letters: Letters, redeliver: bool = False) -> Any:
    def hook(name: str, msg: object, exc: BaseException) -> list[object]:
        letters.append((name, msg, exc))
        # Retry a crashing message once, as the engine does with a request.
        if redeliver and isinstance(msg, Boom) and msg.error == "once":
            return [Boom("twice-is-fine"), Add(100)]
        return []

    return hook


async def test_the_message_in_hand_goes_to_the_supervisors_hook() -> None:
    letters: Letters = []
    core = ChildSpec.supervisor("core", children=[ChildSpec("inner", Counter)])
    async with open_supervisor(dead_letter=recorder(letters), children=[core]) as sup:
        await sup.ref("core/inner").send(Boom("x"))
        await sup.wait_idle()
    (name, msg, exc) = letters[0]
    assert (name, msg) == ("inner", Boom("x"))  # inherited by the nested supervisor
    assert isinstance(exc, ValueError) and str(exc) == "x"
    assert sup.ref("core/inner").statistics().dead_letters == 1


async def test_a_childs_own_hook_wins_and_can_redeliver_at_the_front() -> None:
    root_letters: Letters = []
    own: Letters = []
    spec = ChildSpec("c", Counter, dead_letter=recorder(own, redeliver=True))
    async with open_supervisor(dead_letter=recorder(root_letters), children=[spec]) as sup:
        ref = sup.ref("c")
        await ref.send(Boom("once"))
        await ref.send(Add(1))
        # Redelivered ahead of Add(1): Boom("twice-is-fine") crashes again, then Add(100).
        assert await get(ref) == 101
        assert [type(m).__name__ for _, m, _ in own] == ["Boom", "Boom"]
        assert ref.statistics().incarnation == 3
    assert root_letters == []


async def test_messages_left_when_a_child_stops_for_good_are_dead_letters() -> None:
    letters: Letters = []
    spec = ChildSpec("c", Counter, dead_letter=recorder(letters, redeliver=True))
    async with open_supervisor(children=[spec]) as sup:
        ref = sup.ref("c")
        gate = anyio.Event()
        await ref.send(Wait(gate))
        await ref.send(Add(5))
        await ref.send(Boom("once"))  # redelivery is refused once the mailbox is closed
        await until(lambda: ref.statistics().mailbox.taken == 1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(sup.stop_child, "c")
            await until(lambda: ref.statistics().state == "stopping")
            gate.set()  # Wait finishes normally; the rest never reaches the actor
    assert [(n, m) for n, m, _ in letters] == [("c", Add(5)), ("c", Boom("once"))]
    assert all(isinstance(e, ActorStopped) for _, _, e in letters)
