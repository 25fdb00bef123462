"""The issue's showcase: a random-weight tiny Llama (nothing but the constraint makes its
output valid) under 20+ JSON schemas, regexes, choices and an EBNF grammar — every output
ends by its grammar and validates, on both backends, with async scheduling on and off,
and across injected executor and scheduler crashes."""

from __future__ import annotations

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.testing.engine_harness import check_invariants, inject_fault
from tests.helpers.structured_specs import all_specs, is_valid

pytestmark = pytest.mark.anyio

SPECS = all_specs()


async def _run_all(engine: AsyncEngine) -> list[tuple[str, str | None]]:
    results: list[tuple[str, str | None]] = [("", None)] * len(SPECS)

    async def one(i: int) -> None:
        params = SamplingParams(
            max_tokens=80, temperature=0.0 if i % 3 == 0 else 1.0, seed=i,
            structured_outputs=SPECS[i],
        )  # fmt: skip
        async for out in engine.generate(f"Answer {i}:", params, request_id=f"q{i}"):
            results[i] = (out.outputs[0].text, out.outputs[0].finish_reason)

    async with anyio.create_task_group() as tg:
        for i in range(len(SPECS)):
            tg.start_soon(one, i)
    return results


def _check(results: list[tuple[str, str | None]]) -> None:
    bad = [
        (i, t, r) for i, (t, r) in enumerate(results) if r != "stop" or not is_valid(SPECS[i], t)
    ]
    assert not bad, bad


@pytest.mark.parametrize("backend", ["xgrammar", "guidance"])
@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_all_specs_validate(tiny_model: str, backend: str, async_scheduling: bool) -> None:
    async with AsyncEngine.open(
        tiny_model, max_model_len=256, kv_cache_memory_bytes=8 * 2**20,
        structured_outputs_backend=backend, async_scheduling=async_scheduling,
    ) as engine:  # fmt: skip
        _check(await _run_all(engine))
        await check_invariants(engine)


@pytest.mark.parametrize(
    ("actor", "backend", "async_scheduling"),
    [("executor", "xgrammar", False), ("scheduler", "guidance", True)],
)
async def test_valid_after_a_crash(
    tiny_model: str, actor: str, backend: str, async_scheduling: bool
) -> None:
    async with AsyncEngine.open(
        tiny_model, max_model_len=256, kv_cache_memory_bytes=8 * 2**20,
        structured_outputs_backend=backend, async_scheduling=async_scheduling,
    ) as engine:  # fmt: skip
        inject_fault(engine, actor, at_step=6)
        _check(await _run_all(engine))
        await check_invariants(engine)
