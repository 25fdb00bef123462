"""vLLM's LoRA spellings on a tiny real Llama: ``LLM.generate(lora_request=[...])`` (one
per prompt) equals peft; ``from actorllm.lora.request import LoRARequest`` (vLLM's path);
``LLMEngine.add_request`` and ``AsyncLLM.generate`` with an adapter."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from actorllm import LLM, AsyncEngineArgs, EngineArgs, LLMEngine, SamplingParams
from actorllm.core.errors import InvalidRequestError
from actorllm.lora.request import LoRARequest
from actorllm.v1.engine.async_llm import AsyncLLM
from tests.helpers.lora import make_adapter, peft_greedy

GREEDY = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
PROMPT = [11, 42, 97, 300, 5]
OPTIONS: dict[str, Any] = dict(
    max_model_len=128,
    kv_cache_memory_bytes=2 * 2**20,
    enable_lora=True,
    max_loras=2,
    dtype="float32",  # peft's reference runs float32
)


@pytest.fixture(scope="module")
def sql(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> LoRARequest:
    path = make_adapter(tiny_model, tmp_path_factory.mktemp("lora") / "sql", r=8, seed=5)
    return LoRARequest("sql", 1, str(path))


@pytest.fixture(scope="module")
def want(tiny_model: str, sql: LoRARequest) -> dict[str, list[int]]:
    rows = {"base": (None, PROMPT), "sql": (sql.lora_path, PROMPT)}
    return peft_greedy(tiny_model, rows, GREEDY.max_tokens or 0)


def test_llm_generate_one_adapter_per_prompt(
    tiny_model: str, sql: LoRARequest, want: dict[str, list[int]], tmp_path: Path
) -> None:
    with LLM(tiny_model, **OPTIONS) as llm:
        prompts = [{"prompt_token_ids": PROMPT}] * 3
        outs = llm.generate(prompts, GREEDY, use_tqdm=False, lora_request=[sql, None, sql])
        assert [o.outputs[0].token_ids for o in outs] == [want["sql"], want["base"], want["sql"]]
        (one,) = llm.generate(prompts[:1], GREEDY, use_tqdm=False, lora_request=sql)
        assert one.outputs[0].token_ids == want["sql"]
        with pytest.raises(ValueError, match="got 2 LoRA requests for 3 prompts"):
            llm.generate(prompts, GREEDY, use_tqdm=False, lora_request=[sql, sql])
        bad = LoRARequest("bad", 2, str(tmp_path))  # an empty directory
        with pytest.raises(InvalidRequestError, match=r"'bad'.*not a PEFT adapter directory"):
            llm.generate(prompts[:1], GREEDY, use_tqdm=False, lora_request=bad)


def test_llm_engine_and_async_llm(
    tiny_model: str, sql: LoRARequest, want: dict[str, list[int]]
) -> None:
    engine = LLMEngine.from_engine_args(EngineArgs(model=tiny_model, **OPTIONS))
    try:
        engine.add_request("a", {"prompt_token_ids": PROMPT}, GREEDY, None, sql)
        assert engine.list_loras() == {1}
        tokens: list[int] = []
        while engine.has_unfinished_requests():
            for out in engine.step():
                tokens = list(out.outputs[0].token_ids)
        assert tokens == want["sql"]
        # vLLM's pin_lora: kept resident on the worker; an unknown id is vLLM's refusal
        assert engine.pin_lora(1) is True
        slots = engine.collective_rpc(lambda w: sorted(w.model_runner.lora.pinned))
        assert slots == [["sql"]]
        with pytest.raises(InvalidRequestError, match="LoRA 7 is not registered"):
            engine.pin_lora(7)
        engine.add_request("b", {"prompt_token_ids": PROMPT}, GREEDY, None, sql)
        while engine.has_unfinished_requests():
            for out in engine.step():
                tokens = list(out.outputs[0].token_ids)
        assert tokens == want["sql"]
        assert engine.remove_lora(1) and engine.list_loras() == set()
        assert engine.collective_rpc(lambda w: sorted(w.model_runner.lora.pinned)) == [[]]
    finally:
        engine.close()

    async def run() -> list[int]:
        llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=tiny_model, **OPTIONS))
        try:
            assert await llm.add_lora(sql) and await llm.list_loras() == {1}
            assert await llm.pin_lora(1) is True
            last = None
            async for out in llm.generate({"prompt_token_ids": PROMPT}, GREEDY, "r",
                                          lora_request=sql):  # fmt: skip
                last = out
            assert last is not None
            return list(last.outputs[0].token_ids)
        finally:
            llm.shutdown()

    assert asyncio.run(run()) == want["sql"]
