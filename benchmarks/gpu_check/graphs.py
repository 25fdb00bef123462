"""(c) CUDA graphs captured and replayed: ``graph_steps`` grows on decode steps, tokens
equal the eager run's, capture time and pool memory per ladder. Dry run: graphs are off on
CPU, so this checks that they stay off and the tokens still match."""

from __future__ import annotations

import time

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

STEPS = 24
BATCH = 6  # padded to the captured size 8


def _run(ctx: Ctx, eager: bool) -> tuple[dict[str, list[int]], dict[str, object], dict[str, float]]:
    prompts = random_prompts(BATCH, 20, 256, seed=3)
    cuda = ctx.device == "cuda"
    before = torch.cuda.memory_reserved() if cuda else 0
    t0 = time.perf_counter()
    runner = tiny_runner(ctx, "qwen3", prompts, STEPS + 1, eager=eager)  # graphs captured
    if cuda:
        torch.cuda.synchronize()  # deliberate: start-up time
    grown = (torch.cuda.memory_reserved() if cuda else 0) - before
    cost = {
        "start_up_s": round(time.perf_counter() - t0, 3),
        "reserved_growth_mib": round(grown / 2**20, 1),
    }
    outs = run_async(runner, decode_schedule(prompts, STEPS, BLOCK, greedy(STEPS + 1)))
    stats = runner.statistics()
    runner.release()
    return collect(outs), stats, cost


def run(ctx: Ctx, budget_s: float) -> None:
    with ctx.step("graphs vs eager"):
        eager_toks, eager_stats, eager_cost = _run(ctx, eager=True)
        graph_toks, graph_stats, graph_cost = _run(ctx, eager=False)
        want = 0 if ctx.dry_run else STEPS  # graphs are off on CPU
        ctx.check(
            "no graphs on CPU" if ctx.dry_run else "decode steps replay graphs",
            graph_stats["graph_steps"] == want,
            graph_steps=graph_stats["graph_steps"], decode_steps=STEPS,
            graphs=graph_stats.get("graphs") or {},
        )  # fmt: skip
        ctx.check("eager run replays no graph", eager_stats["graph_steps"] == 0)
        same = sum(eager_toks[r] == graph_toks[r] for r in eager_toks)
        ctx.check(
            "graph tokens equal eager tokens", same == len(eager_toks),
            equal_requests=same, requests=len(eager_toks),
        )  # fmt: skip
        capture = graph_cost["start_up_s"] - eager_cost["start_up_s"]
        pool = graph_cost["reserved_growth_mib"] - eager_cost["reserved_growth_mib"]
        ctx.check(
            "capture cost", None, eager=eager_cost, graphs=graph_cost,
            capture_s=round(capture, 3), pool_mib=round(pool, 1),
        )  # fmt: skip
