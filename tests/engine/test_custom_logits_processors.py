"""Custom logits processors (vLLM's V1 interface) on the engine: loaded by name, told of
the batch's changes (rows added, finished, condensed), fed live output ids, honoured under
async scheduling, and checked at admission."""

from __future__ import annotations

import pytest

from actorllm.core.errors import InvalidRequestError
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.engine.config.engine_config import EngineConfigError
from actorllm.testing.engine_harness import check_invariants

pytestmark = pytest.mark.anyio

BAN = "tests.helpers.logits_procs:BanToken"
FORCE = "tests.helpers.logits_procs:ForceAt"
PROMPTS = [[5, 17, 42, 8], [9, 9, 31], [100, 3, 77, 12, 6], [44, 2]]


def _open(model: str, **kw):
    kw.setdefault("max_model_len", 256)
    kw.setdefault("kv_cache_memory_bytes", 8 * 2**20)
    return AsyncEngine.open(model, **kw)


async def _tokens(eng, prompt, max_tokens=8, **extra) -> list[int]:
    params = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, ignore_eos=True, extra_args=extra or None
    )
    last = None
    async for out in eng.generate({"prompt_token_ids": prompt}, params):
        last = out
    return last.outputs[0].token_ids


async def _batch(eng, rows) -> list[list[int]]:
    import anyio

    got: list[list[int]] = [[] for _ in rows]

    async def one(i, prompt, n, extra):
        got[i] = await _tokens(eng, prompt, n, **extra)

    async with anyio.create_task_group() as tg:
        for i, (prompt, n, extra) in enumerate(rows):
            tg.start_soon(one, i, prompt, n, extra)
    return got


@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_processors_follow_the_batch(tiny_model, async_scheduling):
    async with _open(tiny_model) as eng:
        free = [await _tokens(eng, p) for p in PROMPTS]
    banned = free[0][2]  # a token the first prompt's greedy output uses
    forced = (free[2][3] + 1) % 500
    # Rows of different lengths finish at different steps: the batch condenses under them.
    rows = [
        (PROMPTS[0], 8, {"ban": banned}),
        (PROMPTS[1], 3, {}),
        (PROMPTS[2], 8, {"force": [3, forced]}),
        (PROMPTS[3], 5, {"ban": free[3][0]}),
    ]
    async with _open(
        tiny_model, logits_processors=[BAN, FORCE], async_scheduling=async_scheduling
    ) as eng:
        got = await _batch(eng, rows)
        await check_invariants(eng)
    assert banned not in got[0] and got[0][:2] == free[0][:2]
    assert got[1] == free[1][:3]  # untouched
    assert got[2][:3] == free[2][:3] and got[2][3] == forced
    assert got[3][0] != free[3][0] and free[3][0] not in got[3]


async def test_processor_classes_offline_and_bad_requests(tiny_model):
    from tests.helpers.logits_procs import BanToken

    async with _open(tiny_model, logits_processors=[BanToken]) as eng:
        assert eng.config.logits_processors == [BAN]
        with pytest.raises(InvalidRequestError, match="ban must be a token id") as info:
            await _tokens(eng, PROMPTS[0], ban=-3)
        assert info.value.param == "extra_args"
        assert len(await _tokens(eng, PROMPTS[0], ban=1)) == 8  # still serving
    async with _open(tiny_model) as eng:  # no processor reads extra_args: refused by name
        with pytest.raises(InvalidRequestError, match="extra_args"):
            await _tokens(eng, PROMPTS[0], ban=1)


def test_bad_processor_names_are_refused():
    from actorllm.engine.config.engine_config import EngineConfig

    for bad, why in [
        ("nocolon", "Expected format"),
        ("tests.helpers.logits_procs:Nope", "cannot be loaded"),
        ("actorllm.core.sampling_params:SamplingParams", "subclass of LogitsProcessor"),
    ]:
        with pytest.raises(EngineConfigError, match=why):
            EngineConfig(logits_processors=[bad])
