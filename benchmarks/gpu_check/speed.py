"""(g) Throughput and latency with random weights: decode tokens/s and ITL at batch
1/8/64/256 (graphs on; graphs off beside it for the small model), TTFT of a 2k-token
prompt, each decode row with its HBM roofline: the bytes a step must read (every weight
once, every request's KV so far) over the step time, against the copy bandwidth measured
here and the datasheet's."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from actorllm.bench.bandwidth import device_bandwidth_gbps
from actorllm.worker.model_runner import ModelRunner
from benchmarks.gpu_check.common import (
    Ctx,
    decode_schedule,
    greedy,
    random_prompts,
    sync,
    timed_async,
)
from benchmarks.gpu_check.shapes import config_dir, fast_dummy_weights

BLOCK = 16
WARM = 3
TIMED = 32


@dataclass(frozen=True)
class Lengths:
    prompt: int  # tokens of each decode row's prompt
    ttft: int  # tokens of the TTFT prompt


GPU_LENGTHS = Lengths(prompt=128, ttft=2048)
DRY_LENGTHS = Lengths(prompt=16, ttft=64)  # the CPU twin's


def copy_bandwidth_gbps() -> float:
    """Device-to-device copy of 2 GiB, bytes read plus written per second (median of 10)."""
    n = 2**30  # bf16 elements: 2 GiB
    a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    times = []
    for _ in range(13):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()  # deliberate: timing
        times.append(s.elapsed_time(e) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * 2 * n / statistics.median(times[3:]) / 1e9


def _decode(runner: ModelRunner, batch: int, vocab: int, lens: Lengths) -> dict[str, Any]:
    """One prefill of ``batch`` prompts, then WARM + TIMED decode steps, two in flight."""
    prompts = random_prompts(batch, lens.prompt, vocab, seed=batch)
    steps = decode_schedule(prompts, WARM + TIMED, BLOCK, greedy(WARM + TIMED + 1))
    wall = timed_async(runner, steps, 1 + WARM)
    runner.reset_requests()
    step_ms = wall / TIMED * 1e3
    ctx_mean = lens.prompt + WARM + (TIMED + 1) / 2  # tokens of KV each request reads, on average
    return {
        "batch": batch,
        "itl_ms": round(step_ms, 3),
        "tok_s": round(batch * TIMED / wall, 1),
        "kv_tokens": batch * ctx_mean,
    }


def _ttft(runner: ModelRunner, vocab: int, lens: Lengths) -> float:
    """Median prefill-step time of one ``lens.ttft``-token prompt (first of 3 is warm-up)."""
    times = []
    for i in range(3):
        prompts = random_prompts(1, lens.ttft, vocab, seed=100 + i)
        (so,) = decode_schedule(prompts, 0, BLOCK, greedy(1))
        sync(runner.device.type)
        t0 = time.perf_counter()
        runner.execute(so)
        times.append(time.perf_counter() - t0)
        runner.reset_requests()
    return statistics.median(times[1:]) * 1e3


def _runner(ctx: Ctx, name: str, eager: bool, max_seqs: int, lens: Lengths) -> ModelRunner:
    path = config_dir(ctx.work, name)
    r = ModelRunner(
        path, dtype=ctx.dtype, device=ctx.device, attention_backend=ctx.backend,
        load_format="dummy", block_size=BLOCK, max_num_seqs=max_seqs, max_model_len=4096,
        max_num_batched_tokens=max(max_seqs * lens.prompt, lens.ttft), enforce_eager=eager,
    )  # fmt: skip
    r.load_model()
    per_row = -(-(lens.prompt + WARM + TIMED + 2) // BLOCK)
    need = max_seqs * per_row + -(-lens.ttft // BLOCK) + 8
    r.initialize_kv_cache(need)
    return r


def run(ctx: Ctx, budget_s: float) -> None:
    deadline = time.monotonic() + budget_s
    if ctx.dry_run:
        models, batches, bw, sheet = ["tiny"], [1, 4], None, None
        lens = DRY_LENGTHS
    else:
        lens = GPU_LENGTHS
        fast_dummy_weights()
        models, batches = ["qwen3-0.6b", "llama-3-8b"], [1, 8, 64, 256]
        bw = copy_bandwidth_gbps()
        sheet = device_bandwidth_gbps(torch.cuda.get_device_name(0))
        ctx.check("copy bandwidth", None, measured_gbps=round(bw), datasheet_gbps=sheet)
    rows: list[dict[str, Any]] = []
    for name in models:
        for eager in (False, True) if name != "llama-3-8b" else (False,):
            if time.monotonic() > deadline - 20:
                ctx.check(f"{name} eager={eager}: not reached (time box)", False)
                continue
            with ctx.step(f"{name} eager={eager}"):
                t0 = time.perf_counter()
                runner = _runner(ctx, name, eager, max(batches), lens)
                setup_s = time.perf_counter() - t0
                vocab = runner.model_config.vocab_size
                kv_tok = runner.kv_cache_bytes_per_block() // BLOCK
                for b in batches if not eager else batches[:1] + batches[2:3]:
                    row = {
                        "model": name,
                        "graphs": runner.graphs_enabled,
                        **_decode(runner, b, vocab, lens),
                    }
                    need = runner.weight_bytes + row.pop("kv_tokens") * kv_tok
                    if bw:
                        row["roofline_pct_measured_bw"] = round(
                            100 * need / (bw * 1e6) / row["itl_ms"], 1
                        )
                    if sheet:
                        row["roofline_pct_datasheet"] = round(
                            100 * need / (sheet * 1e6) / row["itl_ms"], 1
                        )
                    rows.append(row)
                    print("[speed]", row, flush=True)
                if not eager:
                    ttft = _ttft(runner, vocab, lens)
                    rows.append(
                        {"model": name, "ttft_2k_ms": round(ttft, 2), "setup_s": round(setup_s, 1)}
                    )
                    print("[speed]", rows[-1], flush=True)
                runner.release()
                del runner
                if ctx.device == "cuda":
                    torch.cuda.empty_cache()
    ctx.extra["rows"] = rows
    ctx.check("every row measured", bool(rows), rows=len(rows))
