"""ask(): answers, failures, timeouts, and replies that would otherwise hang."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from actorllm.actors import (
    Actor,
    ActorCrashed,
    ActorStopped,
    ChildSpec,
    NoReply,
    Reply,
    open_supervisor,
)

from .support import until

pytestmark = pytest.mark.anyio


class Ask(msgspec.Struct, frozen=True, kw_only=True):
    how: str
    reply: Reply[str]


class Later(msgspec.Struct, frozen=True):
    """Answer every deferred reply now."""


class Replier(Actor[Ask | Later]):
    def __init__(self, kept: list[Reply[str]]) -> None:
        self.kept = kept

    async def handle(self, msg: Ask | Later) -> None:
        if isinstance(msg, Later):
            for reply in self.kept:
                reply.send("later")
            return
        match msg.how:
            case "value":
                msg.reply.send("ok")
            case "fail":
                msg.reply.fail(KeyError("nope"))
            case "forget":
                pass
            case "crash":
                raise ValueError("crashed")
            case "defer":
                self.kept.append(msg.reply.defer())
            case "defer-background":
                reply = msg.reply.defer()
                self.task_group.start_soon(self._answer_soon, reply)
            case "defer-then-crash":
                self.kept.append(msg.reply.defer())
                raise ValueError("crashed after deferring")
            case "hang":
                await anyio.sleep_forever()

    async def _answer_soon(self, reply: Reply[str]) -> None:
        await anyio.sleep(0)
        reply.send("from background")


def ask_spec(kept: list[Reply[str]], **kw: object) -> ChildSpec[Ask | Later]:
    return ChildSpec("replier", Replier, kwargs={"kept": kept}, **kw)  # type: ignore[arg-type]


async def ask(ref: object, how: str, timeout: float | None = 5.0) -> str:
    return await ref.ask(lambda r: Ask(how=how, reply=r), timeout=timeout)  # type: ignore[attr-defined,no-any-return]


async def test_answers_and_explicit_failures() -> None:
    async with open_supervisor(children=[ask_spec([])]) as sup:
        ref = sup.ref("replier")
        assert await ask(ref, "value") == "ok"
        assert await ask(ref, "value", timeout=None) == "ok"
        with pytest.raises(KeyError):
            await ask(ref, "fail")


async def test_an_unanswered_reply_fails_with_no_reply() -> None:
    async with open_supervisor(children=[ask_spec([])]) as sup:
        with pytest.raises(NoReply, match="without answering"):
            await ask(sup.ref("replier"), "forget")
        assert sup.ref("replier").statistics().crashes == 0  # a caller error, not a crash


async def test_a_crash_fails_the_ask_with_actor_crashed() -> None:
    async with open_supervisor(children=[ask_spec([])]) as sup:
        with pytest.raises(ActorCrashed) as info:
            await ask(sup.ref("replier"), "crash")
        assert isinstance(info.value.__cause__, ValueError)
        assert await ask(sup.ref("replier"), "value") == "ok"  # restarted


async def test_deferred_replies_are_answered_later() -> None:
    kept: list[Reply[str]] = []
    async with open_supervisor(children=[ask_spec(kept)]) as sup:
        ref = sup.ref("replier")
        assert await ask(ref, "defer-background") == "from background"
        async with anyio.create_task_group() as tg:
            results: list[str] = []

            async def asker() -> None:
                results.append(await ask(ref, "defer"))

            tg.start_soon(asker)
            await until(lambda: kept)
            await sup.wait_idle()
            assert results == []  # deferred, not failed
            await ref.send(Later())
        assert results == ["later"]


async def test_deferred_replies_fail_when_the_incarnation_ends() -> None:
    kept: list[Reply[str]] = []
    async with open_supervisor(children=[ask_spec(kept)]) as sup:
        ref = sup.ref("replier")
        with pytest.raises(ActorCrashed):
            await ask(ref, "defer-then-crash")
        kept.clear()
        async with anyio.create_task_group() as tg:
            errors: list[BaseException] = []

            async def asker() -> None:
                try:
                    await ask(ref, "defer")
                except ActorStopped as exc:
                    errors.append(exc)

            tg.start_soon(asker)
            await until(lambda: kept)
            await sup.stop()
        assert len(errors) == 1 and "before replying" in str(errors[0])
        assert kept[0].send("too late") is False  # answering after the fact is harmless


async def test_timeout_abandons_the_reply() -> None:
    kept: list[Reply[str]] = []
    async with open_supervisor(children=[ask_spec(kept)]) as sup:
        with pytest.raises(TimeoutError):
            await ask(sup.ref("replier"), "defer", timeout=0.01)
        assert kept[0].done
        assert kept[0].send("late") is False


async def test_a_queued_ask_fails_when_the_actor_stops_for_good() -> None:
    async with open_supervisor(children=[ask_spec([], shutdown_timeout=0.05)]) as sup:
        ref = sup.ref("replier")
        outcomes: list[BaseException] = []

        async def asker(how: str) -> None:
            try:
                await ask(ref, how, timeout=None)
            except ActorStopped as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(asker, "hang")  # in hand, cut short by the shutdown timeout
            await anyio.sleep(0.01)
            tg.start_soon(asker, "value")  # still queued when the mailbox closes
            await anyio.sleep(0.01)
            await sup.stop_child("replier")
    assert len(outcomes) == 2


async def test_answering_twice_is_a_bug() -> None:
    replies: list[Reply[str]] = []
    async with open_supervisor(children=[ask_spec(replies)]) as sup:
        ref = sup.ref("replier")
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, ref, "defer")
            await until(lambda: replies)
            replies[0].send("one")
        with pytest.raises(RuntimeError, match="already answered"):
            replies[0].send("two")


def test_replies_are_created_only_by_ask() -> None:
    with pytest.raises(TypeError):
        Reply(object())
