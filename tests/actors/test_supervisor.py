"""Strategies, restart types, escalation, ordered start/stop, start failures."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

from actorllm.actors import (
    ActorState,
    ActorStopped,
    ChildSpec,
    Restart,
    StartFailed,
    Strategy,
    SupervisorEscalation,
    SupervisorGaveUp,
    Unrecoverable,
    open_supervisor,
)

from .support import Add, Boom, Counter, Quit, Wait, get

pytestmark = pytest.mark.anyio


def specs(journal: list[tuple[str, str]], *names: str, **kw: Any) -> list[ChildSpec[Any]]:
    return [ChildSpec(n, Counter, kwargs={"journal": journal}, **kw) for n in names]


async def test_children_start_in_order_and_stop_in_reverse() -> None:
    journal: list[tuple[str, str]] = []
    async with open_supervisor(children=specs(journal, "a", "b", "c")) as sup:
        assert sup.children == ["a", "b", "c"]
    starts = [("a", "start"), ("b", "start"), ("c", "start")]
    assert journal == [*starts, ("c", "stop"), ("b", "stop"), ("a", "stop")]
    assert sup.statistics().state == "stopped"


async def test_one_for_one_restarts_only_the_crashed_child() -> None:
    journal: list[tuple[str, str]] = []
    async with open_supervisor(children=specs(journal, "a", "b")) as sup:
        a, b = sup.ref("a"), sup.ref("b")
        await b.send(Add(5))
        gate = anyio.Event()
        await b.send(Wait(gate))  # b is busy in handle() while a crashes
        await a.send(Boom())
        assert await get(a) == 0
        gate.set()
        assert await get(b) == 5  # b kept its state: not restarted, not cancelled
        assert a.statistics().incarnation == 2
        assert b.statistics().incarnation == 1
    assert ("b", "restart:ValueError") not in journal
    assert ("a", "restart:ValueError") in journal


async def test_one_for_all_restarts_everyone_in_order() -> None:
    journal: list[tuple[str, str]] = []
    async with open_supervisor(
        strategy=Strategy.ONE_FOR_ALL, children=specs(journal, "a", "b", "c")
    ) as sup:
        await sup.ref("a").send(Add(1))
        journal.clear()
        await sup.ref("b").send(Boom())
        await sup.wait_idle()
        assert journal == [
            ("b", "stop"),  # on_stop runs as cleanup after a crash
            ("c", "stop"),
            ("a", "stop"),
            ("a", "restart:ValueError"),
            ("a", "start"),
            ("b", "restart:ValueError"),
            ("b", "start"),
            ("c", "restart:ValueError"),
            ("c", "start"),
        ]
        assert await get(sup.ref("a")) == 0  # a fresh instance
        assert sup.statistics().child_restarts == 3


async def test_rest_for_one_restarts_the_child_and_those_after_it() -> None:
    journal: list[tuple[str, str]] = []
    async with open_supervisor(
        strategy=Strategy.REST_FOR_ONE, children=specs(journal, "a", "b", "c")
    ) as sup:
        await sup.ref("a").send(Add(7))
        journal.clear()
        await sup.ref("b").send(Boom())
        await sup.wait_idle()
        assert [e for e in journal if e[1] in ("stop", "start")] == [
            ("b", "stop"),
            ("c", "stop"),
            ("b", "start"),
            ("c", "start"),
        ]
        assert await get(sup.ref("a")) == 7


@pytest.mark.parametrize(
    ("restart", "how", "restarted"),
    [
        (Restart.PERMANENT, "normal", True),
        (Restart.PERMANENT, "crash", True),
        (Restart.TRANSIENT, "normal", False),
        (Restart.TRANSIENT, "crash", True),
        (Restart.TEMPORARY, "normal", False),
        (Restart.TEMPORARY, "crash", False),
    ],
)
async def test_restart_types(restart: Restart, how: str, restarted: bool) -> None:
    journal: list[tuple[str, str]] = []
    async with open_supervisor(children=specs(journal, "x", restart=restart)) as sup:
        ref = sup.ref("x")
        await ref.send(Quit() if how == "normal" else Boom())
        await sup.wait_idle()
        if restarted:
            assert sup.children == ["x"]
            assert ref.statistics().incarnation == 2
            await ref.send(Add(1))
            assert await get(ref) == 1
        else:
            assert sup.children == []
            assert ref.state is ActorState.STOPPED
            with pytest.raises(ActorStopped):
                await ref.send(Add(1))


async def test_escalation_at_the_root_stops_children_and_raises() -> None:
    journal: list[tuple[str, str]] = []
    with pytest.raises(SupervisorEscalation) as info:
        async with open_supervisor(
            max_restarts=2, within=60.0, children=specs(journal, "a", "b")
        ) as sup:
            for _ in range(3):
                await sup.ref("a").send(Boom("again"))
                await anyio.sleep_forever() if _ == 2 else await sup.wait_idle()
    assert isinstance(info.value.cause, ValueError)
    assert str(info.value.cause) == "again"
    assert journal[-2:] == [("a", "stop"), ("b", "stop")]  # a cleaned up, then b was stopped


async def test_escalation_through_a_nested_supervisor() -> None:
    journal: list[tuple[str, str]] = []
    core = ChildSpec.supervisor(
        "core",
        strategy=Strategy.ONE_FOR_ALL,
        children=specs(journal, "scheduler", "executor"),
        max_restarts=1,
        within=60.0,
    )
    with pytest.raises(SupervisorEscalation) as info:
        async with open_supervisor(
            max_restarts=1, within=60.0, children=[*specs(journal, "front"), core]
        ) as sup:
            executor = sup.ref("core/executor")  # valid across every restart below
            await executor.send(Boom())  # core restarts its pair (1 of 1 allowed)
            await sup.wait_idle()
            await executor.send(Boom())  # core gives up; root restarts core (1 of 1)
            await sup.wait_idle()
            nested = sup.child_supervisor("core")
            assert nested.statistics().incarnation == 2
            assert executor.statistics().incarnation == 3
            assert sup.ref("front").statistics().incarnation == 1  # one_for_one at the root
            await executor.send(Boom())
            await executor.send(Boom())  # core gives up again; root exceeds its limit
            await anyio.sleep_forever()
    outer = info.value
    assert outer.name == "root"
    assert isinstance(outer.cause, SupervisorEscalation) and outer.cause.name == "core"
    assert isinstance(outer.cause.cause, ValueError)


async def test_failed_start_at_open_stops_the_started_children() -> None:
    journal: list[tuple[str, str]] = []

    class Broken(Counter):
        async def on_start(self) -> None:
            raise OSError("no device")

    with pytest.raises(StartFailed) as info:
        async with open_supervisor(
            children=[*specs(journal, "a"), ChildSpec("broken", Broken), *specs(journal, "c")]
        ):
            pytest.fail("the body must not run")
    assert info.value.name == "broken" and isinstance(info.value.cause, OSError)
    assert journal == [("a", "start"), ("a", "stop")]


async def test_start_child_failure_is_raised_and_the_child_not_added() -> None:
    class Broken(Counter):
        async def on_start(self) -> None:
            raise OSError("no device")

    async with open_supervisor() as sup:
        with pytest.raises(StartFailed):
            await sup.start_child(ChildSpec("broken", Broken))
        assert sup.children == []
        ref = await sup.start_child(ChildSpec("broken", Counter))  # the name is free again
        with pytest.raises(ValueError, match="already has"):
            await sup.start_child(ChildSpec("broken", Counter))
        await sup.stop_child("broken")
        with pytest.raises(ActorStopped):
            ref.send_nowait(Add(1))


async def test_stop_is_graceful_and_idempotent() -> None:
    journal: list[tuple[str, str]] = []
    async with open_supervisor(children=specs(journal, "a")) as sup:
        ref = sup.ref("a")
        gate = anyio.Event()
        await ref.send(Wait(gate))
        await ref.send(Add(1))
        async with anyio.create_task_group() as tg:
            tg.start_soon(sup.stop)
            await anyio.sleep(0.01)
            assert ref.state is ActorState.STOPPING  # finishing its current message
            gate.set()
        assert sup.statistics().state == "exited"
        await sup.stop()
    assert journal == [("a", "start"), ("a", "stop")]
    assert ref.statistics().mailbox.closed


async def test_a_temporary_nested_supervisor_that_gives_up_calls_its_exit_hook() -> None:
    journal: list[tuple[str, str]] = []
    exits: list[BaseException | None] = []

    def replica(name: str, on_exit: Any) -> Any:
        return ChildSpec.supervisor(
            name,
            strategy=Strategy.ONE_FOR_ALL,
            children=specs(journal, "scheduler"),
            max_restarts=0,
            within=60.0,
            restart=Restart.TEMPORARY,
            on_exit=on_exit,
        )

    def last(exc: BaseException | None) -> None:
        raise SupervisorEscalation("core1", exc, 0, 60.0)  # the last one gone: escalate

    with pytest.raises(SupervisorEscalation) as info:
        async with open_supervisor(
            max_restarts=0,
            within=60.0,
            children=[*specs(journal, "front"), replica("core0", exits.append)],
        ) as sup:
            await sup.start_child(replica("core1", last))
            await sup.ref("core0/scheduler").send(Boom())
            await sup.wait_idle()
            assert sup.children == ["front", "core1"]  # removed, not restarted
            assert len(exits) == 1 and isinstance(exits[0], SupervisorEscalation)
            assert sup.ref("front").statistics().incarnation == 1  # nobody else restarted
            await sup.ref("core1/scheduler").send(Boom())
            await anyio.sleep_forever()
    assert info.value.name == "core1"  # the hook's exception is the root's crash


async def test_the_exit_hook_is_not_called_for_a_requested_stop() -> None:
    exits: list[BaseException | None] = []
    spec = ChildSpec.supervisor(
        "core", children=specs([], "a"), restart=Restart.TEMPORARY, on_exit=exits.append
    )
    async with open_supervisor() as sup:
        await sup.start_child(spec)
        await sup.stop_child("core")
    assert exits == []


class Lost(msgspec.Struct, frozen=True):
    """Fail for good: what the actor needs is gone."""


class Needy(Counter):
    async def handle(self, msg: Any) -> Any:
        if isinstance(msg, Lost):
            raise Unrecoverable("its host is gone", OSError("no room"))
        return await super().handle(msg)


async def test_an_unrecoverable_crash_gives_up_at_once_through_every_level() -> None:
    """Restarts left at both levels: neither supervisor restarts anything."""
    journal: list[tuple[str, str]] = []
    core = ChildSpec.supervisor(
        "core",
        strategy=Strategy.ONE_FOR_ALL,
        children=[ChildSpec("executor", Needy, kwargs={"journal": journal})],
        max_restarts=5,
        within=60.0,
    )
    with pytest.raises(SupervisorGaveUp) as info:
        async with open_supervisor(max_restarts=5, within=60.0, children=[core]) as sup:
            await sup.ref("core/executor").send(Lost())
            await anyio.sleep_forever()
    assert str(info.value) == "supervisor 'root' gave up: its host is gone"
    assert isinstance(info.value.cause, Unrecoverable)
    assert journal == [("executor", "start"), ("executor", "stop")]  # never restarted


async def test_an_unrecoverable_temporary_replica_is_removed_and_its_hook_told() -> None:
    exits: list[BaseException | None] = []
    replica = ChildSpec.supervisor(
        "core1",
        strategy=Strategy.ONE_FOR_ALL,
        children=[ChildSpec("executor", Needy)],
        max_restarts=5,
        within=60.0,
        restart=Restart.TEMPORARY,
        on_exit=exits.append,
    )
    async with open_supervisor(max_restarts=5, within=60.0, children=[replica]) as sup:
        await sup.ref("core1/executor").send(Lost())
        await sup.wait_idle()
        assert sup.children == []
    (why,) = exits
    assert isinstance(why, SupervisorGaveUp) and isinstance(why.cause, Unrecoverable)
