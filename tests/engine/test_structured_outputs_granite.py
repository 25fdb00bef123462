"""--reasoning-parser granite: structured outputs constrain the answer after
'Here is my response:' only (plain-text markers, no special tokens), with async
scheduling on and off, after a crash (the state is rebuilt from tokens) and offline
through ``LLM.chat`` with Granite's ``thinking`` template switch."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsParams as SOP
from actorllm.engine import AsyncEngine
from actorllm.reasoning import GraniteReasoningParser
from actorllm.testing.engine_harness import (
    check_invariants,
    demo_tokenizer,
    inject_fault,
    open_test_engine,
)
from tests.helpers.granite import SCHEMA, TEMPLATE, THOUGHT, GraniteThinker, check_answer

PARAMS = SamplingParams(
    max_tokens=120, structured_outputs=SOP(json=SCHEMA, disable_any_whitespace=True)
)


def _prompt(thinking: bool, question: str = "A pet as JSON?") -> str:
    from jinja2 import Template

    return Template(TEMPLATE).render(
        messages=[{"role": "user", "content": question}],
        add_generation_prompt=True,
        thinking=thinking,
    )


def _answer(text: str) -> str:
    reasoning, content = GraniteReasoningParser().extract(text)
    assert reasoning is not None and content is not None, text
    return content


async def _text(engine: AsyncEngine, prompt: str, request_id: str | None = None) -> str:
    async for out in engine.generate(prompt, PARAMS, request_id=request_id):
        last = out
    return last.outputs[0].text


@pytest.mark.anyio
@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_the_thought_is_free_and_the_answer_is_constrained(async_scheduling: bool) -> None:
    tok = demo_tokenizer()
    async with open_test_engine(
        model=GraniteThinker(tok), reasoning_parser="granite", async_scheduling=async_scheduling
    ) as engine:
        text = await _text(engine, _prompt(thinking=True))
        assert text.startswith(THOUGHT.rstrip("\n")), text
        check_answer(_answer(text))
        # Thinking off (Granite's default): constrained from the first token.
        check_answer(await _text(engine, _prompt(thinking=False)))
        await check_invariants(engine)


PROMPTS = [_prompt(i % 2 == 0, f"Pet {i} as JSON?") for i in range(6)]  # thinking: even


async def _run_all(engine: AsyncEngine) -> list[str]:
    """Every prompt at once; each output checked (the thinking ones after the thought)."""
    results = [""] * len(PROMPTS)

    async def one(i: int) -> None:
        results[i] = await _text(engine, PROMPTS[i], request_id=f"g{i}")

    async with anyio.create_task_group() as tg:
        for i in range(len(PROMPTS)):
            tg.start_soon(one, i)
    for i, text in enumerate(results):
        check_answer(_answer(text) if i % 2 == 0 else text)
    return results


@pytest.mark.anyio
@pytest.mark.parametrize("at_step", [8, 40])  # inside the thought; in the answer
@pytest.mark.parametrize("actor", ["scheduler", "executor"])
async def test_identical_after_a_crash(actor: str, at_step: int) -> None:
    """A rebuilt scheduler replays each request's tokens through the reasoning gate and
    the matcher: the outputs are those of a fault-free run."""
    tok = demo_tokenizer()
    kw: dict[str, Any] = {
        "reasoning_parser": "granite",
        "async_scheduling": True,
        "step_delay_s": 0.001,
    }
    async with open_test_engine(model=GraniteThinker(tok), **kw) as engine:
        reference = await _run_all(engine)
    async with open_test_engine(model=GraniteThinker(tok), **kw) as engine:
        inject_fault(engine, actor, at_step=at_step)
        results = await _run_all(engine)
        await check_invariants(engine)
    assert results == reference


@pytest.mark.anyio
@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_identical_under_preemption(async_scheduling: bool) -> None:
    """A KV pool too small for the batch preempts requests mid-thought or mid-answer; each
    keeps its outputs, its gate state and its matcher."""
    tok = demo_tokenizer()
    kw: dict[str, Any] = {"reasoning_parser": "granite", "async_scheduling": async_scheduling}
    async with open_test_engine(model=GraniteThinker(tok), **kw) as engine:
        reference = await _run_all(engine)
    async with open_test_engine(
        model=GraniteThinker(tok), num_blocks=62, block_size=4, max_model_len=240, **kw
    ) as engine:
        results = await _run_all(engine)
        assert (await engine.get_stats()).num_preemptions > 0
        await check_invariants(engine)
    assert results == reference


def test_llm_chat_with_the_thinking_switch() -> None:
    """Offline: ``chat_template_kwargs={"thinking": True}`` makes the template ask for a
    thought, which stays free; the answer after it validates. Without it, and with
    ``enable_thinking`` (Granite's template reads only ``thinking``, as with vLLM), the
    whole output is the constrained answer."""
    from actorllm import LLM

    tok = demo_tokenizer()
    msgs = [{"role": "user", "content": "A pet as JSON?"}]
    with LLM(
        None, runner_factory=lambda _cfg: GraniteThinker(tok), tokenizer=tok,
        reasoning_parser="granite", num_gpu_blocks_override=512, max_model_len=1024,
    ) as llm:  # fmt: skip

        def chat(**kwargs: object) -> str:
            out = llm.chat(msgs, PARAMS, use_tqdm=False, chat_template=TEMPLATE, **kwargs)  # type: ignore[arg-type]
            return out[0].outputs[0].text

        text = chat(chat_template_kwargs={"thinking": True})
        assert text.startswith(THOUGHT.rstrip("\n")), text
        check_answer(_answer(text))
        for kwargs in ({}, {"enable_thinking": False}, {"enable_thinking": True}):
            check_answer(chat(chat_template_kwargs=kwargs))


@pytest.mark.anyio
@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_olmo3_plain_text_think_tags(async_scheduling: bool) -> None:
    """--reasoning-parser olmo3: <think>…</think> as plain text; the template opened the
    block, the answer after '</think>' (merged with the '.' before it or not) validates.
    A prompt that closed an empty block is constrained from the first token."""
    tok = demo_tokenizer()
    thought = "The user wants a pet.</think>\n"
    opener = "<|im_start|>assistant\n<think>"
    model = GraniteThinker(tok, thought=thought, opener=opener)
    async with open_test_engine(
        model=model, reasoning_parser="olmo3", async_scheduling=async_scheduling
    ) as engine:
        text = await _text(engine, "<|im_start|>user\nA pet?<|im_end|>\n" + opener)
        assert text.startswith("The user wants a pet.</think>"), text
        check_answer(text.split("</think>", 1)[1])
        closed = "<|im_start|>user\nA pet?<|im_end|>\n" + opener + "</think>\n"
        check_answer(await _text(engine, closed))
        await check_invariants(engine)
