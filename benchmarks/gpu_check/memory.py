"""(e) ``profile_num_blocks(0.9)`` against ``torch.cuda.mem_get_info``: after the cache is
allocated and graphs captured, about 90 % of the device is in use, and a full-budget prefill
plus decode still fits. Dry run: the CPU refusal and the sizing arithmetic."""

from __future__ import annotations

import time

import torch

from actorllm.worker.memory_profile import blocks_from_profile
from actorllm.worker.model_runner import ModelRunner, ModelRunnerStateError
from benchmarks.gpu_check.common import Ctx, decode_schedule, greedy, random_prompts, run_async
from benchmarks.gpu_check.shapes import config_dir, fast_dummy_weights

UTIL = 0.9
BLOCK = 16


def run(ctx: Ctx, budget_s: float) -> None:
    if ctx.dry_run:
        dry(ctx)
        return
    fast_dummy_weights()
    path = config_dir(ctx.work, "qwen3-0.6b")
    runner = ModelRunner(
        path, dtype="bfloat16", device="cuda", load_format="dummy", block_size=BLOCK,
        max_num_seqs=256, max_model_len=4096, max_num_batched_tokens=8192,
    )  # fmt: skip
    runner.load_model()
    t0 = time.perf_counter()
    blocks = runner.profile_num_blocks(UTIL)
    profile_s = time.perf_counter() - t0
    runner.initialize_kv_cache(blocks)
    torch.cuda.synchronize()  # deliberate: read memory after capture
    free, total = torch.cuda.mem_get_info()
    used = (total - free) / total
    ctx.check(
        f"used memory after start-up is about {UTIL:.0%}", 0.85 <= used <= 0.93,
        used_fraction=round(used, 4), blocks=blocks, profile_s=round(profile_s, 2),
        kv_gib=round(blocks * runner.kv_cache_bytes_per_block() / 2**30, 2),
        weights_gib=round(runner.weight_bytes / 2**30, 2),
        reserved_gib=round(torch.cuda.memory_reserved() / 2**30, 2),
        total_gib=round(total / 2**30, 2),
    )  # fmt: skip
    with ctx.step("full-budget prefill and decode fit"):
        prompts = random_prompts(8, 1024, 151936, seed=9)  # 8192 tokens: the whole budget
        run_async(runner, decode_schedule(prompts, 8, BLOCK, greedy(9)))
        torch.cuda.synchronize()  # deliberate: peak after real steps
        free2, _ = torch.cuda.mem_get_info()
        peak = (total - free2) / total
        ctx.check("no growth past the budget", peak <= 0.95, used_fraction=round(peak, 4))
    runner.release()


def dry(ctx: Ctx) -> None:
    path = config_dir(ctx.work, "tiny")
    runner = ModelRunner(path, dtype="float32", device="cpu", load_format="dummy")
    runner.load_model()
    try:
        runner.profile_num_blocks(UTIL)
        ctx.check("profile_num_blocks refuses a CPU device", False)
    except ModelRunnerStateError:
        ctx.check("profile_num_blocks refuses a CPU device", True)
    gib = 2**30
    n = blocks_from_profile(
        total=80 * gib, free=70 * gib, reserved=8 * gib, torch_peak=9 * gib,
        utilization=UTIL, bytes_per_block=gib // 64,
    )  # fmt: skip
    want = int((80 * UTIL - 9 - 2) * 64)
    ctx.check("sizing arithmetic", n == want, blocks=n, want=want)
    ctx.check("profile_run on CPU", runner.profile_run() > 0)
