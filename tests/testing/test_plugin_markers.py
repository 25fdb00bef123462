"""The pytest plugin as a user suite sees it: markers, mock_clock, fault fixtures."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from actorllm.actors import Actor, ActorCrashed, ChildSpec, Reply, open_supervisor
from actorllm.testing import inject_fault, wait_idle


class Add(msgspec.Struct, frozen=True):
    n: int


class Get(msgspec.Struct, frozen=True, kw_only=True):
    reply: Reply[int]


class Counter(Actor[Add | Get]):
    def __init__(self) -> None:
        self.total = 0

    async def handle(self, msg: Add | Get) -> None:
        if isinstance(msg, Add):
            self.total += msg.n
        else:
            msg.reply.send(self.total)


USER_SUITE = """
import anyio, pytest

@pytest.mark.actorllm_both_backends
async def test_both(anyio_backend_name):
    await anyio.sleep(0)
    print("BACKEND", anyio_backend_name)

@pytest.mark.actorllm_mock_clock
async def test_clock(mock_clock):
    start = anyio.current_time()
    await anyio.sleep(3600)          # an hour of virtual time, instantly
    assert anyio.current_time() - start == 3600
    print("JUMPED", type(mock_clock).__name__)
"""


def test_markers_in_a_user_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_SUITE)
    result = pytester.runpytest_inprocess("-s", "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "test_both[trio] BACKEND trio" in out
    assert "test_both[asyncio] BACKEND asyncio" in out
    assert "test_clock[trio-mockclock] JUMPED MockClock" in out


@pytest.mark.actorllm_mock_clock
async def test_mock_clock_times_out_instantly(mock_clock: object) -> None:
    with pytest.raises(TimeoutError):
        with anyio.fail_after(30.0):
            await anyio.sleep_forever()
    assert anyio.current_time() >= 30.0


@pytest.mark.anyio
async def test_inject_fault_crashes_at_the_nth_matching_message() -> None:
    letters: list[object] = []
    spec = ChildSpec("c", Counter, dead_letter=lambda name, msg, exc: letters.append(msg))
    async with open_supervisor(children=[spec]) as sup:
        ref = sup.ref("c")
        fault = inject_fault(ref, ValueError("injected"), on_message=2, match=Add)
        await ref.send(Add(1))
        await ref.ask(lambda r: Get(reply=r))  # not an Add: not counted
        await ref.send(Add(2))  # the 2nd Add: crashes while holding it
        await ref.send(Add(4))
        await wait_idle(sup, timeout=5.0)
        assert (fault.fired, fault.exhausted) == (1, True)
        assert letters == [Add(2)]
        assert await ref.ask(lambda r: Get(reply=r)) == 4  # restarted: 4 only
        fault2 = inject_fault(ref, KeyError)
        with pytest.raises(ActorCrashed) as info:
            await ref.ask(lambda r: Get(reply=r))
        assert isinstance(info.value.cause, KeyError) and fault2.fired == 1


@pytest.mark.anyio
async def test_fault_fixture_disarms_at_teardown(inject_fault: object) -> None:
    async with open_supervisor(children=[ChildSpec("c", Counter)]) as sup:
        fault = inject_fault(sup.ref("c"), on_message=5)  # type: ignore[operator]
        await sup.ref("c").send(Add(1))
        await wait_idle(sup)
        assert fault.seen == 1 and fault.fired == 0
