"""The engine test harness in a user's own pytest suite.

python -m pytest examples/test_with_harness.py -q
"""

import anyio
import pytest

from actorllm import SamplingParams
from actorllm.testing import check_invariants, inject_fault, open_test_engine, scripted_model


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request):
    return request.param


@pytest.mark.anyio
async def test_answers_are_deterministic_and_complete():
    async with open_test_engine() as engine:
        out = [o async for o in engine.generate("question", SamplingParams(max_tokens=5))][-1]
        context = list(out.prompt_token_ids)
        for token in out.outputs[0].token_ids:  # the scripted model's next token, step by step
            assert token == scripted_model(engine).script(context)
            context.append(token)


@pytest.mark.anyio
async def test_my_service_survives_an_executor_crash():
    async with open_test_engine(step_delay_s=0.001) as engine:
        inject_fault(engine, "executor", at_step=3)
        results = []

        async def ask(i: int) -> None:
            outs = [o async for o in engine.generate(f"user {i}", SamplingParams(max_tokens=8))]
            results.append(outs[-1].outputs[0].finish_reason)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(ask, i)
        assert results == ["length"] * 8
        await check_invariants(engine)
