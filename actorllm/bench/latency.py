"""Decode-step latency over batch sizes: ms per step with B requests decoding together.

For each batch size B, B requests (``input_len`` prompt tokens, ``output_len`` outputs,
ignore_eos) are submitted at once to one engine and streamed token by token. The *steady
window* runs from the moment every request has its first token (all prefills done) until
the first request finishes; each gap between consecutive tokens of a request inside it is
one decode step, so the median and p90 of those gaps are ms per decode step at batch B.
The mean is cross-checked by the engine's own counter: window time / ``steps_done`` in it.

On a GPU the memory-bandwidth bound of the step is printed beside it
(:mod:`actorllm.bench.bandwidth`); on CPU the bound is "n/a".
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

import anyio

from actorllm.engine.config.engine_config import EngineConfig
from actorllm.testing.percentiles import summarize


async def _one_batch(engine: Any, batch: int, input_len: int, output_len: int) -> dict[str, Any]:
    from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
    from actorllm.testing.engine_harness import engine_context

    ctx = engine_context(engine)
    params = SamplingParams(
        max_tokens=output_len, ignore_eos=True, output_kind=RequestOutputKind.DELTA
    )
    times: list[list[tuple[float, int]]] = [[] for _ in range(batch)]  # [(t, tokens so far)]
    marks: dict[str, tuple[float, int]] = {}  # window start / end: (time, steps_done)
    started = [0]

    async def one(i: int) -> None:
        prompt = [3 + (i * 131 + j * 7) % 4000 for j in range(input_len)]  # distinct prompts
        n = 0
        async for out in engine.generate({"prompt_token_ids": prompt}, params):
            now = time.perf_counter()
            n += len(out.outputs[0].token_ids)
            times[i].append((now, n))
            if len(times[i]) == 1:
                started[0] += 1
                if started[0] == batch:
                    marks["start"] = (now, ctx.admission.steps_done)
            if out.finished and "end" not in marks:
                marks["end"] = (now, ctx.admission.steps_done)

    async with anyio.create_task_group() as tg:
        for i in range(batch):
            tg.start_soon(one, i)
    t0, s0 = marks["start"]
    t1, s1 = marks["end"]
    gaps = []
    for series in times:
        for (ta, na), (tb, nb) in itertools.pairwise(series):
            if ta >= t0 and tb <= t1 and nb > na:
                gaps.append((tb - ta) / (nb - na))
    summary = summarize(gaps, scale=1e3)
    return {
        "batch_size": batch,
        "step_ms_median": summary["median"],
        "step_ms_p90": summary["p90"],
        "step_ms_mean": summary["mean"],
        "engine_step_ms": (t1 - t0) / (s1 - s0) * 1e3 if s1 > s0 else None,
        "window_steps": s1 - s0,
        "samples": len(gaps),
    }


async def _sweep(
    config: EngineConfig, batch_sizes: list[int], input_len: int, output_len: int
) -> list[dict[str, Any]]:
    from actorllm.core.sampling_params import SamplingParams
    from actorllm.engine import AsyncEngine

    cfg = config.replace(max_num_seqs=max(config.max_num_seqs, *batch_sizes))
    async with AsyncEngine.open(cfg) as engine:
        async for _ in engine.generate({"prompt_token_ids": [5] * 8}, SamplingParams(max_tokens=4)):
            pass  # warm-up
        return [await _one_batch(engine, b, input_len, output_len) for b in batch_sizes]


def run_latency(
    config: EngineConfig,
    batch_sizes: list[int],
    *,
    input_len: int = 128,
    output_len: int = 64,
    bandwidth_gbps: float | None = None,
) -> list[dict[str, Any]]:
    """Rows per batch size, each with the bandwidth bound (None on CPU); blocks."""
    from actorllm.bench.bandwidth import bound_ms, device_bandwidth_gbps, model_bytes

    rows = anyio.run(_sweep, config, batch_sizes, input_len, output_len, backend="trio")
    gpu = None
    if config.resolved_device() == "cuda":
        import torch

        gpu = torch.cuda.get_device_name(0)
    bw = device_bandwidth_gbps(gpu, bandwidth_gbps) if gpu or bandwidth_gbps else None
    weights, kv_per_token = model_bytes(config.resolved_model(), config.dtype)
    for row in rows:
        # Mid-window context: the prompt plus about half of the outputs.
        kv = row["batch_size"] * (input_len + output_len // 2) * kv_per_token
        row["bound_ms"] = bound_ms(weights, kv, bw) if bw else None
        row["bandwidth_gbps"] = bw
    return rows


# -- command line ----------------------------------------------------------------------------

_COLUMNS = [
    ("batch_size", "batch", "d"),
    ("step_ms_median", "ms/step p50", ".2f"),
    ("step_ms_p90", "p90", ".2f"),
    ("engine_step_ms", "engine mean", ".2f"),
    ("bound_ms", "bandwidth bound ms", ".3f"),
    ("samples", "samples", "d"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from actorllm.bench.cli_args import add_output_argument
    from actorllm.entrypoints.commands.engine_args import add_engine_arguments

    parser.add_argument("--batch-sizes", default="1,4,16,64", help="comma list")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument(
        "--mem-bandwidth-gbps", type=float, default=None, help="device bandwidth (GB/s) override"
    )
    add_engine_arguments(parser, model_positional=False)
    add_output_argument(parser)


def main(args: argparse.Namespace) -> int:
    from actorllm.bench.machine import result_document, write_json
    from actorllm.bench.report import format_table
    from actorllm.bench.throughput_workload import config_dict
    from actorllm.entrypoints.commands.engine_args import engine_config

    config = engine_config(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    if args.output_len < 3:
        raise ValueError("--output-len must be at least 3 (a steady window needs decode steps).")
    rows = run_latency(
        config,
        sizes,
        input_len=args.input_len,
        output_len=args.output_len,
        bandwidth_gbps=args.mem_bandwidth_gbps,
    )
    print(format_table(rows, _COLUMNS))
    if args.output_json:
        run_config = {
            "batch_sizes": sizes,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "engine": config_dict(config),
        }
        write_json(
            args.output_json,
            result_document("latency", figures={"rows": rows}, config=run_config, args=args),
        )
    return 0
