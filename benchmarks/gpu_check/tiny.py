"""The small random checkpoints the correctness groups run (parity, graphs, overlap, sleep)
and a runner over one, loaded, its KV cache sized for a scripted schedule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actorllm.worker.model_runner import ModelRunner
from benchmarks.gpu_check.common import Ctx, blocks_needed
from tests.helpers.models import make_tiny_checkpoint

FAMILIES: dict[str, dict[str, Any]] = {
    "llama": dict(num_heads=4, num_kv_heads=2),
    "qwen3": dict(num_heads=4, num_kv_heads=2),
    "qwen3_moe": dict(num_heads=4, num_kv_heads=2),
    "gemma2": dict(num_heads=4, num_kv_heads=2),
}
BLOCK = 16


def checkpoint(ctx: Ctx, family: str) -> Path:
    path = ctx.work / f"tiny-{family}"
    if not (path / "config.json").exists():
        make_tiny_checkpoint(
            path,
            family,
            vocab_size=256,
            hidden_size=128,
            **FAMILIES[family],  # type: ignore[arg-type]
        )
    return path


def tiny_runner(
    ctx: Ctx,
    family: str,
    prompts: dict[str, list[int]],
    steps: int,
    *,
    eager: bool = False,
    dtype: str | None = None,
    on_host: bool = False,
    max_num_seqs: int = 64,
) -> ModelRunner:
    """A runner over ``family``'s tiny checkpoint with room for ``prompts`` + ``steps``
    tokens each; ``on_host``: the torch reference backend on the CPU instead of the group's
    device and backend."""
    runner = ModelRunner(
        checkpoint(ctx, family), dtype=dtype or ctx.dtype,
        device="cpu" if on_host else ctx.device,
        attention_backend="torch" if on_host else ctx.backend,
        block_size=BLOCK, max_num_seqs=max_num_seqs, max_model_len=256, enforce_eager=eager,
        max_num_batched_tokens=512,
    )  # fmt: skip
    runner.load_model()
    runner.initialize_kv_cache(blocks_needed(prompts, steps, BLOCK, len(runner.kv_groups)) + 4)
    return runner
