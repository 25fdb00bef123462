"""--return-sampling-mask end to end on a tiny random Llama (AsyncEngine and LLM): each
output token's mask holds the token and is exactly where the processed logprobs are finite;
the same seeded requests give the same masks under chunked prefill, preemption and injected
crashes (ledger replay included); vLLM's request refusals (the config's:
tests/compat/vllm/test_sampling_mask_args.py)."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from actorllm import LLM
from actorllm.core.errors import InvalidRequestError
from actorllm.core.outputs import CompletionOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.testing.engine_harness import check_invariants, inject_fault

pytestmark = pytest.mark.anyio

ENGINE: dict[str, Any] = {
    "max_model_len": 256,
    "kv_cache_memory_bytes": 8 * 2**20,
    "return_sampling_mask": True,
    "logprobs_mode": "processed_logprobs",
}
TOP_K = 6


def _params(i: int, **kw: Any) -> SamplingParams:
    return SamplingParams(
        max_tokens=12, temperature=0.9, top_k=TOP_K, top_p=0.95 if i % 2 else 1.0,
        min_p=0.02 if i % 3 == 0 else 0.0, seed=i, ignore_eos=True, **kw,
    )  # fmt: skip


Sample = tuple[list[int], list[list[int]] | None]


async def _batch(engine: AsyncEngine, n: int = 5, **kw: Any) -> dict[int, Sample]:
    results: dict[int, Sample] = {}

    async def one(i: int) -> None:
        prompt = f"Sample {i}: " + "words " * (i * 7)
        async for out in engine.generate(prompt, _params(i, **kw), request_id=f"m{i}"):
            co = out.outputs[0]
            results[i] = (list(co.token_ids), co.sampling_mask and co.sampling_mask.token_ids)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return results


def _check_aligned(co: CompletionOutput) -> None:
    assert co.sampling_mask is not None and co.logprobs is not None
    masks = co.sampling_mask.token_ids
    assert len(masks) == len(co.token_ids) == len(co.logprobs)
    for tok, support, entry in zip(co.token_ids, masks, co.logprobs, strict=True):
        # top-k keeps ties at the k-th value (as vLLM's, whose mask widens to its bitmask
        # then): the random model's bfloat16 logits tie often, so no bound of TOP_K here.
        assert tok in support
        assert support == sorted(set(support))
        for tid, lp in entry.items():  # processed logprobs: finite exactly on the support
            assert (tid in support) == math.isfinite(lp.logprob)


async def test_masks_align_with_tokens_and_processed_logprobs(tiny_model: str) -> None:
    async with AsyncEngine.open(tiny_model, **ENGINE) as engine:
        for i in range(3):
            final = None
            async for out in engine.generate(f"Hello {i}", _params(i, logprobs=TOP_K + 2)):
                final = out
            assert final is not None
            _check_aligned(final.outputs[0])


async def test_delta_outputs_carry_each_steps_masks(tiny_model: str) -> None:
    delta = RequestOutputKind.DELTA
    async with AsyncEngine.open(tiny_model, **ENGINE) as engine:
        whole = await _batch(engine, n=1)
        tokens: list[int] = []
        masks: list[list[int]] = []
        async for out in engine.generate("Sample 0: ", _params(0, output_kind=delta)):
            co = out.outputs[0]
            tokens += co.token_ids
            if co.token_ids:
                assert co.sampling_mask is not None
                assert len(co.sampling_mask.token_ids) == len(co.token_ids)
                masks += co.sampling_mask.token_ids
    assert (tokens, masks) == whole[0]


async def test_chunked_prefill_gives_the_same_masks(tiny_model: str) -> None:
    async with AsyncEngine.open(tiny_model, **ENGINE) as engine:
        reference = await _batch(engine)
    async with AsyncEngine.open(tiny_model, **ENGINE, max_num_batched_tokens=16) as engine:
        assert await _batch(engine) == reference
    assert all(masks is not None and len(masks) == 12 for _, masks in reference.values())


async def test_preempted_requests_recompute_the_same_masks(tiny_model: str) -> None:
    """A KV pool too small for the batch preempts (recompute): the tokens and masks after
    the recomputation are those of an unpreempted run."""
    small = {**ENGINE, "num_gpu_blocks_override": 18, "block_size": 4, "max_model_len": 64}
    async with AsyncEngine.open(tiny_model, **ENGINE) as engine:
        reference = await _batch(engine)
    async with AsyncEngine.open(tiny_model, **small) as engine:
        preempted = await _batch(engine)
        assert (await engine.get_stats()).num_preemptions > 0
    assert preempted == reference


@pytest.mark.parametrize(
    ("actor", "step"), [("executor", 4), ("scheduler", 6), ("output_processor", 5)]
)
async def test_masks_survive_a_crash_and_the_replay(tiny_model: str, actor: str, step: int) -> None:
    async with AsyncEngine.open(tiny_model, **ENGINE) as engine:
        reference = await _batch(engine)
    async with AsyncEngine.open(tiny_model, **ENGINE) as engine:
        inject_fault(engine, actor, at_step=step)
        results = await _batch(engine)
        restarts = engine._actor_stat("restarts")
        await check_invariants(engine)
    assert restarts[actor] >= 1
    assert results == reference


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"temperature": 0.0}, "requires temperature > 0"),
        ({"top_k": 0}, "requires top_k > 0"),
    ],
)
async def test_requests_without_a_bounded_draw_are_refused(
    tiny_model: str, change: dict[str, Any], message: str
) -> None:
    params = SamplingParams(max_tokens=2, **{"temperature": 1.0, "top_k": 4, **change})
    async with AsyncEngine.open(tiny_model, **ENGINE) as engine:
        with pytest.raises(InvalidRequestError, match=message):
            async for _ in engine.generate("x", params):
                pass


def test_offline_llm_returns_masks(tiny_model: str) -> None:
    """``LLM(..., return_sampling_mask=True, logprobs_mode="processed_logprobs")``: vLLM's
    keywords, and each output's mask aligned with its tokens."""
    with LLM(tiny_model, seed=0, **ENGINE) as llm:
        outs = llm.generate(["a", "b c"], _params(1, logprobs=2), use_tqdm=False)
    for out in outs:
        _check_aligned(out.outputs[0])
