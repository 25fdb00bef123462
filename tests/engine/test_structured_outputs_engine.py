"""Structured outputs through the whole actor engine (scripted model: the constraint alone
makes the output valid): every finished output validates, with async scheduling on and
off, n > 1, min_tokens, stop strings, and after injected scheduler / executor crashes.
Bad specs are typed errors before scheduling."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import anyio
import jsonschema
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsError
from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP
from actorllm.testing.engine_harness import (
    check_invariants,
    demo_tokenizer,
    inject_fault,
    open_test_engine,
)
from actorllm.testing.scripted_model import ScriptedModel

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "kind": {"enum": ["cat", "dog"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
    },
    "required": ["id", "kind"],
    "additionalProperties": False,
}
SPECS = [
    SOP(json=SCHEMA, disable_any_whitespace=True),
    SOP(regex=r"[A-Z][a-z]{1,6} [0-9]{2}"),
    SOP(choice=["north", "south", "east", "west"]),
    SOP(grammar='root ::= "(" num ("+" num){0,3} ")"\nnum ::= [0-9]{1,3}'),
]


def valid(spec: SOP, text: str) -> bool:
    if spec.json is not None:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    if spec.regex is not None:
        return re.fullmatch(spec.regex, text) is not None
    if spec.choice is not None:
        return text in spec.choice
    return re.fullmatch(r"\([0-9]{1,3}(\+[0-9]{1,3}){0,3}\)", text) is not None


async def run(engine, n: int = 12, **extra: object) -> list[tuple[str, str | None]]:
    results: list[tuple[str, str | None]] = [("", None)] * n

    async def one(i: int) -> None:
        params = SamplingParams(
            max_tokens=60, temperature=0.0 if i % 2 else 0.9, seed=i,
            structured_outputs=SPECS[i % len(SPECS)], **extra,  # type: ignore[arg-type]
        )  # fmt: skip
        async for out in engine.generate(f"item {i}:", params, request_id=f"s{i}"):
            results[i] = (out.outputs[0].text, out.outputs[0].finish_reason)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return results


@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_every_finished_output_validates(async_scheduling: bool) -> None:
    async with open_test_engine(async_scheduling=async_scheduling, max_num_seqs=8) as engine:
        results = await run(engine)
        await check_invariants(engine)
    for i, (text, reason) in enumerate(results):
        assert reason == "stop", (i, text, reason)
        assert valid(SPECS[i % len(SPECS)], text), (i, text)


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("actor", ["scheduler", "executor"])
async def test_valid_and_identical_after_a_crash(actor: str, async_scheduling: bool) -> None:
    """Also under async scheduling, where a crash can land while a step's bitmask waits
    for the token of the step before it."""
    kw = {"step_delay_s": 0.001, "async_scheduling": async_scheduling}
    async with open_test_engine(**kw) as engine:
        reference = await run(engine)
    async with open_test_engine(**kw) as engine:
        inject_fault(engine, actor, at_step=4)
        results = await run(engine)
        await check_invariants(engine)
    assert results == reference


@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_n_min_tokens_and_stop_strings(async_scheduling: bool) -> None:
    async with open_test_engine(async_scheduling=async_scheduling) as engine:
        spec = SOP(regex=r"[a-z]{3,8}")
        params = SamplingParams(n=3, max_tokens=20, temperature=1.0, seed=3, min_tokens=2,
                                structured_outputs=spec)  # fmt: skip
        last = None
        async for out in engine.generate("x", params):
            last = out
        assert last is not None and len(last.outputs) == 3
        assert all(re.fullmatch(r"[a-z]{3,8}", c.text) for c in last.outputs)
        stop = SamplingParams(max_tokens=20, structured_outputs=SOP(regex="[a-c]{20}"), stop=["b"])
        async for out in engine.generate("y", stop):
            last = out
        assert last is not None and "b" not in last.outputs[0].text


@pytest.mark.parametrize(
    "spec", [SOP(regex="(unclosed"), SOP(grammar="root ::= ("), SOP(json={"type": "nope"})]
)
async def test_bad_specs_fail_before_scheduling(spec: SOP) -> None:
    async with open_test_engine() as engine:
        with pytest.raises(StructuredOutputsError) as info:
            async for _ in engine.generate("z", SamplingParams(structured_outputs=spec)):
                pass
        assert info.value.param == spec.key.param  # structured_outputs.regex, .grammar, .json
        assert (await engine.get_stats()).num_running_reqs == 0
        await check_invariants(engine)


async def test_a_slow_compile_holds_up_nobody() -> None:
    """While one request's grammar compiles, others are processed, scheduled and finish;
    the slow one still validates once its grammar is ready."""
    import threading

    release = threading.Event()
    async with open_test_engine() as engine:
        compiler = engine._structured.compiler
        inner = compiler._compile

        def slow(key, choice):  # type: ignore[no-untyped-def]
            if key.spec == "slow[a-z]{2}":
                release.wait(10)
            return inner(key, choice)

        compiler._compile = slow
        order: list[str] = []

        async def run_one(name: str, spec: SOP | None) -> None:
            params = SamplingParams(max_tokens=8, structured_outputs=spec)
            async for out in engine.generate(name, params):
                last = out
            order.append(name)
            if spec is not None:
                assert re.fullmatch(r"slow[a-z]{2}", last.outputs[0].text)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_one, "slow", SOP(regex="slow[a-z]{2}"))
            await anyio.sleep(0.05)
            tg.start_soon(run_one, "plain", None)
            while "plain" not in order:
                await anyio.sleep(0.01)
            release.set()
        assert order == ["plain", "slow"]
        await check_invariants(engine)


async def test_async_scheduling_advances_a_structured_request_every_step() -> None:
    """Beside an unconstrained request, a constrained one under async scheduling takes
    about one engine step per token (it used to sit out every other step: 2x)."""
    async with open_test_engine(async_scheduling=True, step_delay_s=0.003) as engine:
        spec = SOP(regex=r"[0-9]{40}")  # ~20 tokens
        params = SamplingParams(max_tokens=60, structured_outputs=spec)
        async for _ in engine.generate("warm", params):
            pass  # compiled and cached

        async def plain() -> None:
            async for _ in engine.generate("bg", SamplingParams(max_tokens=400, ignore_eos=True)):
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(plain)
            await anyio.sleep(0.02)
            before = (await engine.get_stats()).steps_done
            async for out in engine.generate("x", params):
                last = out
            steps = (await engine.get_stats()).steps_done - before
            tg.cancel_scope.cancel()
        assert re.fullmatch(r"[0-9]{40}", last.outputs[0].text)
        num_tokens = len(last.outputs[0].token_ids)
        # Every other step would be about 2 * num_tokens; a few steps of slack for the
        # request's way in (input processor, router) while the other request steps on.
        assert num_tokens >= 15 and steps <= 1.3 * num_tokens, (steps, num_tokens)
        await check_invariants(engine)


class _Thinker(ScriptedModel):
    """Writes a fixed reasoning text after the prompt's ``<think>``, then its usual
    script (which the grammar bends into the answer)."""

    def __init__(self, start: list[int], thought: list[int], **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.start, self.thought = start, thought

    def fresh(self) -> ScriptedModel:
        raise NotImplementedError  # one replica

    def script(self, context: Sequence[int]) -> int:
        n = len(self.start)
        opened = max(
            (i + n for i in range(len(context) - n + 1) if list(context[i : i + n]) == self.start),
            default=None,
        )
        if opened is not None and len(context) - opened < len(self.thought):
            return self.thought[len(context) - opened]
        return super().script(context)


@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_reasoning_is_free_and_only_the_answer_is_constrained(
    async_scheduling: bool,
) -> None:
    """--reasoning-parser deepseek_r1: the prompt opens <think>; the model's reasoning is
    not held to the regex (it could not be), the answer after </think> is. A prompt that
    closed the block (enable_thinking: false), or a request whose reasoning_ended says so,
    is constrained from the first token."""
    tok = demo_tokenizer()
    ids = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    thought = ids("Let me think about it.</think>")
    model = _Thinker(ids("<think>"), thought, vocab_size=len(tok), eos_token_id=tok.eos_token_id)
    spec = SOP(regex=r"[0-9]{3}")
    params = SamplingParams(max_tokens=40, structured_outputs=spec)
    async with open_test_engine(
        model=model, reasoning_parser="deepseek_r1", async_scheduling=async_scheduling
    ) as engine:
        async for out in engine.generate("Q: a number?\n<think>", params):
            last = out
        text = last.outputs[0].text
        assert text.startswith("Let me think about it.</think>"), text
        assert re.fullmatch(r"[0-9]{3}", text.split("</think>", 1)[1]), text
        async for out in engine.generate("Q: a number?\n<think>\n\n</think>\n\n", params):
            last = out
        assert re.fullmatch(r"[0-9]{3}", last.outputs[0].text), last.outputs[0].text
        # The server's resolved reasoning_ended (thinking off in the request's kwargs)
        # wins over the prompt's open block.
        async for out in engine.generate("Q: a number?\n<think>", params, reasoning_ended=True):
            last = out
        assert re.fullmatch(r"[0-9]{3}", last.outputs[0].text), last.outputs[0].text
        await check_invariants(engine)


@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_valid_and_identical_under_preemption(async_scheduling: bool) -> None:
    """A KV pool too small for the batch preempts requests (recompute): a preempted
    request keeps its outputs and its matcher, so it resumes where its grammar was."""
    async with open_test_engine(async_scheduling=async_scheduling, max_num_seqs=24) as engine:
        reference = await run(engine, n=24)
    async with open_test_engine(
        async_scheduling=async_scheduling, num_blocks=21, block_size=4, max_num_seqs=24,
        max_model_len=80,
    ) as engine:  # fmt: skip
        results = await run(engine, n=24)
        assert (await engine.get_stats()).num_preemptions > 0
        await check_invariants(engine)
    assert results == reference


@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_ignore_eos_past_a_complete_grammar_ends_cleanly(async_scheduling: bool) -> None:
    """With ignore_eos the request goes on after the grammar took its stop token; the next
    row allows only stop tokens and that token ends it (filling a terminated xgrammar
    matcher used to crash the step, over and over: a poison request)."""
    async with open_test_engine(async_scheduling=async_scheduling) as engine:
        params = SamplingParams(max_tokens=50, ignore_eos=True,
                                structured_outputs=SOP(regex="[a-z]{5}"))  # fmt: skip
        for i in range(4):
            async for out in engine.generate(f"w{i}", params):
                last = out
            assert last.outputs[0].finish_reason == "stop"
            assert re.fullmatch("[a-z]{5}", last.outputs[0].text), last.outputs[0].text
        stats = await engine.get_stats()
        assert not any(stats.actor_restarts.values()), stats.actor_restarts
        await check_invariants(engine)
