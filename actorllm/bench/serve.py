"""Online serving (vLLM's benchmark_serving): streaming /v1/completions over HTTP.

Requests (token-id prompts, ``ignore_eos``, ``max_tokens = output_len``) are sent with
Poisson arrivals at ``request_rate`` per second (``inf``: all at once), at most
``max_concurrency`` in flight. Each is streamed with httpx and timed on arrival of each
SSE chunk:

* TTFT: send -> first chunk with text; E2EL: send -> last chunk;
* ITL: gaps between consecutive text chunks; TPOT: ``(E2EL - TTFT) / (tokens - 1)``
  (tokens from the final ``usage`` chunk).

``launch_server`` starts ``actorllm serve`` (loopback only, a free port) for the duration.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from actorllm.bench.datasets import BenchRequest
from actorllm.bench.metrics import summarize


@dataclass
class RequestTiming:
    ok: bool = False
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float = 0.0
    e2el_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    error: str = ""


async def send_one(
    client: httpx.AsyncClient, model: str, req: BenchRequest, temperature: float
) -> RequestTiming:
    """Stream one completion; never raises for HTTP or protocol errors (``ok=False``)."""
    body = {
        "model": model,
        "prompt": req.prompt_token_ids,
        "max_tokens": req.output_len,
        "temperature": temperature,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    timing = RequestTiming(prompt_tokens=len(req.prompt_token_ids))
    start = last = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                timing.error = f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"
                return timing
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                now = time.perf_counter()
                if chunk.get("usage"):
                    timing.output_tokens = chunk["usage"]["completion_tokens"]
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    if timing.ttft_s == 0.0:
                        timing.ttft_s = now - start
                    else:
                        timing.itl_s.append(now - last)
                    last = now
        timing.e2el_s = last - start
        timing.ok = timing.output_tokens == req.output_len
        if not timing.ok:
            timing.error = f"got {timing.output_tokens} tokens, expected {req.output_len}"
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as exc:
        timing.error = repr(exc)
    return timing


async def run_serve(
    base_url: str,
    reqs: list[BenchRequest],
    *,
    request_rate: float = math.inf,
    max_concurrency: int | None = None,
    temperature: float = 1.0,
    seed: int = 0,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Run the workload against a server; returns the figures (see the module docstring)."""
    limits = httpx.Limits(max_connections=max_concurrency or len(reqs) + 1)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        probe = await send_one(client, model, BenchRequest(reqs[0].prompt_token_ids[:16], 2), 0.0)
        if not probe.ok:
            raise RuntimeError(f"the test request failed: {probe.error}")
        rng = random.Random(seed)
        limiter = anyio.CapacityLimiter(max_concurrency or len(reqs))
        results: list[RequestTiming] = [RequestTiming() for _ in reqs]

        async def one(i: int) -> None:
            async with limiter:
                results[i] = await send_one(client, model, reqs[i], temperature)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(len(reqs)):
                tg.start_soon(one, i)
                if math.isfinite(request_rate) and i + 1 < len(reqs):
                    await anyio.sleep(rng.expovariate(request_rate))
        duration = time.perf_counter() - start
    return serve_figures(results, duration, model)


def serve_figures(results: list[RequestTiming], duration_s: float, model: str) -> dict[str, Any]:
    done = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in done)
    in_tokens = sum(r.prompt_tokens for r in done)
    tpot = [(r.e2el_s - r.ttft_s) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    fig: dict[str, Any] = {
        "model": model,
        "completed": len(done),
        "failed": len(results) - len(done),
        "errors": sorted({r.error for r in results if not r.ok})[:5],
        "duration_s": duration_s,
        "prompt_tokens": in_tokens,
        "output_tokens": out_tokens,
        "requests_per_s": len(done) / duration_s,
        "output_tokens_per_s": out_tokens / duration_s,
        "total_tokens_per_s": (in_tokens + out_tokens) / duration_s,
    }
    for name, values in (
        ("ttft_ms", [r.ttft_s for r in done]),
        ("tpot_ms", tpot),
        ("itl_ms", [x for r in done for x in r.itl_s]),
        ("e2el_ms", [r.e2el_s for r in done]),
    ):
        fig[name] = summarize(values, scale=1e3)
    return fig


# -- command line ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from actorllm.bench.cli_args import add_dataset_arguments, add_output_argument
    from actorllm.entrypoints.commands.engine_args import add_engine_arguments

    parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="server to measure")
    parser.add_argument(
        "--launch",
        action="store_true",
        help="start `actorllm serve` (engine flags below) on 127.0.0.1:<free port> for the run",
    )
    parser.add_argument("--launch-timeout", type=float, default=300.0, help="seconds to start")
    parser.add_argument(
        "--request-rate", type=float, default=math.inf, help="Poisson arrivals/s (default inf)"
    )
    parser.add_argument("--max-concurrency", type=int, default=None)
    add_engine_arguments(parser, model_positional=False)
    add_dataset_arguments(parser, num_prompts=64)
    add_output_argument(parser)


def main(args: argparse.Namespace) -> int:
    from actorllm.bench.cli_args import (
        dataset_config,
        model_vocab_size,
        requests_from_args,
        temperature_from_args,
    )
    from actorllm.bench.launch import launch_server
    from actorllm.bench.machine import result_document, write_json
    from actorllm.entrypoints.commands.engine_args import engine_config, engine_kwargs

    logging.getLogger("httpx").setLevel(logging.WARNING)  # no line per request
    config = engine_config(args)  # validates the flags; the vocabulary comes from the model
    reqs = requests_from_args(args, model_vocab_size(config.resolved_model()))
    kwargs: dict[str, Any] = {
        "request_rate": args.request_rate,
        "max_concurrency": args.max_concurrency,
        "temperature": temperature_from_args(args),
        "seed": args.seed,
    }
    if args.launch:
        with launch_server(engine_kwargs(args), timeout_s=args.launch_timeout) as url:
            fig = anyio.run(lambda: run_serve(url, reqs, **kwargs), backend="trio")
    else:
        fig = anyio.run(lambda: run_serve(args.base_url, reqs, **kwargs), backend="trio")
    print(format_serve(fig))
    if args.output_json:
        run_config = {
            **dataset_config(args),
            "base_url": "launched" if args.launch else args.base_url,
            "request_rate": args.request_rate if math.isfinite(args.request_rate) else "inf",
            "max_concurrency": args.max_concurrency,
        }
        if args.launch:
            run_config["engine"] = engine_kwargs(args)
        write_json(
            args.output_json, result_document("serve", figures=fig, config=run_config, args=args)
        )
    return 0 if fig["failed"] == 0 else 1


def format_serve(fig: dict[str, Any]) -> str:
    lines = [
        f"completed {fig['completed']} failed {fig['failed']} in {fig['duration_s']:.2f} s",
        f"request throughput {fig['requests_per_s']:.2f} req/s, "
        f"output {fig['output_tokens_per_s']:.1f} tok/s, "
        f"total {fig['total_tokens_per_s']:.1f} tok/s",
        f"{'':6} {'mean':>9} {'median':>9} {'p99':>9}  (ms)",
    ]
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        s = fig[key]
        lines.append(f"{key[:-3].upper():6} {s['mean']:>9.2f} {s['median']:>9.2f} {s['p99']:>9.2f}")
    lines.extend(f"error: {e}" for e in fig["errors"])
    return "\n".join(lines)
