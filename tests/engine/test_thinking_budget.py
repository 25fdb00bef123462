"""thinking_token_budget end to end on a tiny random Llama (the real sampler): a request
that is thinking writes exactly N tokens, then the end marker (5 demo-tokenizer tokens:
forced one per step), then continues; with other requests in the batch, after a crash and
the ledger replay (the refusal without a reasoning config: tests/core/test_input_processor.py
and the HTTP 400 in tests/entrypoints)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actorllm import LLM, SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.testing.engine_harness import inject_fault

# The prompt opens the thinking (" <think>" would be other tokens: markers match by id).
PROMPT = "Question: what is two plus two?<think>"
MARKERS = {"reasoning_start_str": "<think>", "reasoning_end_str": "</think>"}
CONFIG: dict[str, Any] = {"max_model_len": 256, "kv_cache_memory_bytes": 8 * 2**20}


@pytest.fixture(scope="module")
def llm(tiny_model):
    with LLM(tiny_model, reasoning_config=MARKERS, **CONFIG) as engine:
        yield engine


def _greedy(budget: int | None, max_tokens: int = 12) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, thinking_token_budget=budget)


def _end_ids(llm: LLM) -> list[int]:
    return llm.get_tokenizer().encode("</think>", add_special_tokens=False)


def test_budget_n_writes_n_thinking_tokens_then_the_end_marker(llm):
    end = _end_ids(llm)
    assert len(end) > 1  # the demo tokenizer spells it in several tokens
    free, three, zero, unlimited = llm.generate(
        [PROMPT] * 4, [_greedy(None), _greedy(3), _greedy(0), _greedy(-1)], use_tqdm=False
    )  # one batch: budgeted rows beside free ones
    free_ids = list(free.outputs[0].token_ids)
    assert list(three.outputs[0].token_ids[:3]) == free_ids[:3]
    assert list(three.outputs[0].token_ids[3 : 3 + len(end)]) == end
    assert list(zero.outputs[0].token_ids[: len(end)]) == end
    assert list(unlimited.outputs[0].token_ids) == free_ids
    assert free_ids[3 : 3 + len(end)] != end  # the model would not have ended by itself


def test_budget_larger_than_the_output_changes_nothing(llm):
    free, big = llm.generate([PROMPT] * 2, [_greedy(None), _greedy(100)], use_tqdm=False)
    assert big.outputs[0].token_ids == free.outputs[0].token_ids


def test_random_sampling_writes_the_marker_too(llm):
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=10, thinking_token_budget=2)
    (out,) = llm.generate([PROMPT], params, use_tqdm=False)
    assert list(out.outputs[0].token_ids[2 : 2 + len(_end_ids(llm))]) == _end_ids(llm)


async def _batch(engine: AsyncEngine, tag: str) -> list[list[int]]:
    budgets = [4, None, 0, 7]
    results: list[list[int]] = [[] for _ in budgets]

    async def one(i: int) -> None:
        params = _greedy(budgets[i], max_tokens=16)
        async for out in engine.generate(PROMPT, params, request_id=f"{tag}{i}"):
            results[i] = list(out.outputs[0].token_ids)

    async with anyio.create_task_group() as tg:
        for i in range(len(budgets)):
            tg.start_soon(one, i)
    return results


@pytest.mark.anyio
async def test_a_crash_and_the_ledger_replay_keep_the_count(anyio_backend, tiny_model):
    async with AsyncEngine.open(
        tiny_model, reasoning_config=MARKERS, async_scheduling=True, **CONFIG
    ) as engine:
        reference = await _batch(engine, "a")
        inject_fault(engine, "executor", at_message=6)  # mid-thinking for the budget of 7
        replayed = await _batch(engine, "b")
        assert engine._actor_stat("restarts")["executor"] >= 1
    assert replayed == reference
    end = engine.tokenizer.encode("</think>", add_special_tokens=False)
    assert reference[0][4 : 4 + len(end)] == end
    assert reference[3][7 : 7 + len(end)] == end


def test_speculative_decoding_forces_the_same_tokens(tiny_model, llm):
    # ngram drafts from the repeating random output: the verified rows read their drafts
    # as outputs, so accepted drafts and forced tokens agree with plain decoding.
    budgets = [2, 5, 0, None]
    params = [_greedy(b, max_tokens=24) for b in budgets]
    plain = llm.generate([PROMPT] * len(budgets), params, use_tqdm=False)
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1}
    with LLM(tiny_model, reasoning_config=MARKERS, speculative_config=spec, **CONFIG) as s:
        drafted = s.generate([PROMPT] * len(budgets), params, use_tqdm=False)
    for a, b in zip(plain, drafted, strict=True):
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
