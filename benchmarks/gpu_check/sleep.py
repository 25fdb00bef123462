"""(f) Sleep and wake with CUDA graphs: level 1 (weights to host) and level 2 (weights
dropped, reloaded from disk) free the device memory, wake-up recaptures the graphs, and the
same prompts give the same tokens afterwards."""

from __future__ import annotations

import torch

from benchmarks.gpu_check.common import (
    Ctx,
    collect,
    decode_schedule,
    greedy,
    random_prompts,
    run_async,
)
from benchmarks.gpu_check.tiny import BLOCK, tiny_runner

STEPS = 10


def _allocated_mib(ctx: Ctx) -> float:
    return round(torch.cuda.memory_allocated() / 2**20, 1) if ctx.device == "cuda" else 0.0


def run(ctx: Ctx, budget_s: float) -> None:
    prompts = random_prompts(4, 24, 256, seed=11)
    runner = tiny_runner(ctx, "qwen3", prompts, STEPS + 1, max_num_seqs=16)
    schedule = decode_schedule(prompts, STEPS, BLOCK, greedy(STEPS + 1))
    want = collect(run_async(runner, schedule))
    awake = _allocated_mib(ctx)
    for level in (1, 2):
        with ctx.step(f"sleep level {level}"):
            runner.sleep(level)
            asleep = _allocated_mib(ctx)
            runner.wake_up()
            graphs = runner.launcher.graphs is not None
            before = runner.statistics()["graph_steps"]
            got = collect(run_async(runner, schedule))
            replayed = int(runner.statistics()["graph_steps"]) - int(before)  # type: ignore[call-overload]
            ctx.check(
                f"level {level}: memory freed, graphs back, same tokens",
                got == want and (ctx.dry_run or (asleep < awake and graphs and replayed == STEPS)),
                allocated_awake_mib=awake, allocated_asleep_mib=asleep,
                graphs_recaptured=graphs, graph_steps=replayed, same_tokens=got == want,
            )  # fmt: skip
    runner.release()
