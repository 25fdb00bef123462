"""(d) The async overlap, read from a ``torch.profiler`` trace of a decode loop that keeps
two steps in flight: no device-wide or stream syncs between decode steps (only each step's
own event), host-to-device copies on the copy stream and from pinned memory, and the gain
in wall time over resolving each step before launching the next."""

from __future__ import annotations

import json
import time
from typing import Any

import torch

from actorllm.worker.model_runner import ModelRunner
from benchmarks.gpu_check.common import (
    Ctx,
    decode_schedule,
    greedy,
    random_prompts,
    timed_async,
)
from benchmarks.gpu_check.tiny import BLOCK, tiny_runner

STEPS = 40
WINDOW_FROM = 3  # decode steps before this are outside the traced window
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")


def _sync_loop(runner: ModelRunner, steps: list[Any]) -> float:
    t0 = 0.0
    for i, so in enumerate(steps):
        if i == WINDOW_FROM:
            t0 = time.perf_counter()
        runner.execute(so)
    return time.perf_counter() - t0


def run(ctx: Ctx, budget_s: float) -> None:
    prompts = random_prompts(8, 32, 256, seed=5)
    runner = tiny_runner(ctx, "qwen3", prompts, STEPS + 1)
    steps = decode_schedule(prompts, STEPS, BLOCK, greedy(STEPS + 1))
    with ctx.step("warm-up and sync vs async wall time"):
        timed_async(runner, steps, WINDOW_FROM)  # compiles every kernel
        runner.reset_requests()
        sync_s = _sync_loop(runner, steps)
        runner.reset_requests()
        async_s = timed_async(runner, steps, WINDOW_FROM)
        runner.reset_requests()
        n = STEPS - WINDOW_FROM + 1
        ctx.check(
            "decode step time, async vs sync", None,
            sync_ms=round(sync_s / n * 1e3, 3), async_ms=round(async_s / n * 1e3, 3),
            speedup=round(sync_s / async_s, 3) if async_s else None,
        )  # fmt: skip
    with ctx.step("profiler trace"):
        acts = [torch.profiler.ProfilerActivity.CPU]
        if ctx.device == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            timed_async(runner, steps, WINDOW_FROM, "decode_window")
        trace = ctx.work / "overlap-trace.json"
        prof.export_chrome_trace(str(trace))
        analyse(ctx, json.loads(trace.read_text()), runner)
    runner.release()


def analyse(ctx: Ctx, trace: dict[str, Any], runner: ModelRunner) -> None:
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    windows = [e for e in events if e.get("name") == "decode_window"]
    if not windows:
        ctx.check("decode window in the trace", False)
        return
    w0 = windows[0]["ts"]
    w1 = w0 + windows[0]["dur"]
    inside = [e for e in events if w0 <= e["ts"] <= w1]
    calls: dict[str, int] = {}
    for e in inside:
        if e["name"] in SYNC_CALLS or e["name"].startswith("cudaMemcpy"):
            calls[e["name"]] = calls.get(e["name"], 0) + 1
    decode_steps = STEPS - WINDOW_FROM + 1
    ctx.extra["runtime_calls"] = calls
    ctx.check(
        "no device or stream syncs between decode steps",
        calls.get("cudaDeviceSynchronize", 0) == 0 and calls.get("cudaStreamSynchronize", 0) == 0,
        **calls,
    )  # fmt: skip
    if ctx.device != "cuda":
        ctx.check("CUDA stream checks", None, skipped="dry run: no CUDA events")
        return
    ctx.check(
        # one for the step's sampled ids, one before its pinned input set is rewritten
        "at most two event waits per step",
        calls.get("cudaEventSynchronize", 0) <= 2 * decode_steps + 2,
        event_syncs=calls.get("cudaEventSynchronize", 0), decode_steps=decode_steps,
    )  # fmt: skip
    gpu = [e for e in inside if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels = [e for e in gpu if e.get("cat") == "kernel"]
    per_stream: dict[Any, int] = {}
    for k in kernels:
        s = k.get("args", {}).get("stream")
        per_stream[s] = per_stream.get(s, 0) + 1
    compute = max(per_stream, key=lambda s: per_stream[s]) if per_stream else None
    h2d = [e for e in gpu if e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]]
    pageable = [e["name"] for e in h2d if "Pageable" in e["name"]]
    on_compute = [e for e in h2d if e.get("args", {}).get("stream") == compute]
    overlapped = 0
    for c in h2d:
        c0, c1 = c["ts"], c["ts"] + c.get("dur", 0)
        if any(k["ts"] < c1 and c0 < k["ts"] + k.get("dur", 0) for k in kernels):
            overlapped += 1
    ctx.extra["streams"] = {"kernels_per_stream": per_stream, "compute": compute}
    ctx.check(
        "no pageable host-to-device copies", not pageable, pageable=pageable[:10], h2d=len(h2d)
    )
    ctx.check(
        "step inputs upload on the copy stream", len(on_compute) <= len(h2d) // 2,
        h2d_on_compute=len(on_compute), h2d=len(h2d),
        streams_of_h2d=sorted({str(e.get("args", {}).get("stream")) for e in h2d}),
    )  # fmt: skip
    ctx.check("uploads overlap kernels", None, overlapped=overlapped, h2d=len(h2d))
    busy, span = sum(k.get("dur", 0) for k in kernels), max(w1 - w0, 1)
    ctx.check(
        "device busy in the decode window", None,
        kernel_us=round(busy), window_us=round(span), busy_pct=round(100 * busy / span, 1),
    )  # fmt: skip
