"""Engine start-up: what the loaded model tells the scheduler (here: its sliding window),
and an engine serving a sliding-window model end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.demo import demo_tokenizer_path
from actorllm.engine import AsyncEngine
from actorllm.engine.config import EngineConfig
from actorllm.engine.startup import _build_on_worker, build_scheduler_config, default_runner_factory
from actorllm.testing.engine_harness import check_invariants
from tests.helpers.models import make_tiny_checkpoint


@pytest.mark.parametrize(("family", "window"), [("mistral", 8), ("gemma2", None), ("llama", None)])
def test_the_scheduler_gets_a_uniform_window(
    tmp_path: Path, family: str, window: int | None
) -> None:
    """Mistral (every layer sliding) hands blocks back; Gemma 2 mixes full layers: no."""
    path = make_tiny_checkpoint(tmp_path / family, family, sliding_window=8)  # type: ignore[arg-type]
    config = EngineConfig(model=str(path), max_model_len=64, kv_cache_memory_bytes=2**20)
    _, info = _build_on_worker(config, default_runner_factory)
    assert info.sliding_window == window
    assert build_scheduler_config(config, info).sliding_window == window


@pytest.fixture
def tiny_mistral(tmp_path: Path) -> str:
    path = make_tiny_checkpoint(
        tmp_path / "m", "mistral", vocab_size=4096, eos_token_id=0, sliding_window=8,
        max_position_embeddings=256,
    )  # fmt: skip
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)


@pytest.mark.anyio
async def test_engine_serves_past_the_window_in_a_pool_smaller_than_one_request(
    tiny_mistral: str,
) -> None:
    """24 usable blocks of 4 (96 positions) serve 3 requests of 100+ tokens at once: only
    the window (and the chunk being written) stays allocated."""
    greedy = SamplingParams(temperature=0.0, max_tokens=90, ignore_eos=True)
    async with AsyncEngine.open(
        tiny_mistral, max_model_len=256, block_size=4, num_gpu_blocks_override=25,
        max_num_batched_tokens=16,
    ) as eng:  # fmt: skip
        outs: dict[str, list[int]] = {}

        async def one(prompt: str) -> None:
            last = None
            async for out in eng.generate(prompt, greedy):
                last = out
            assert last is not None
            outs[prompt] = list(last.outputs[0].token_ids)

        async with anyio.create_task_group() as tg:
            for prompt in ("The quick brown fox", "Hello there", "Sliding windows"):
                tg.start_soon(one, prompt)
        await check_invariants(eng)
    assert len(outs) == 3 and all(len(o) == 90 for o in outs.values())
