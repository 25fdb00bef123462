"""``bench serve`` over several servers in interleaved rounds: actorllm's ``serve`` and vLLM's
OpenAI server (its CPU build, :mod:`actorllm.bench.vllm_server`), side by side.

Both servers are started first and each paused (SIGSTOP to its process group) while the
other is measured, so on a shared box the idle one takes no CPU. A round resumes one
server, resets its prefix cache (``POST /reset_prefix_cache``: both are started in dev
mode, so every round computes every prompt, as the first did), sends the same requests with
the same sampling, and pauses it again. Per server the medians over rounds are kept, and
with both the ratios: throughput actorllm / vLLM, latencies vLLM / actorllm (so > 1 means
actorllm is better on every line).

    rounds = run_rounds({"actorllm": a, "vllm": v}, reqs, 3, temperature=0.6)
    doc = compare(rounds)
"""

from __future__ import annotations

import logging
import statistics
from functools import partial
from typing import Any, Protocol

import anyio
import httpx

from actorllm.bench.datasets import BenchRequest

log = logging.getLogger(__name__)

SERVE_BACKENDS: tuple[str, ...] = ("actorllm", "vllm")
SERVE_ALIASES: dict[str, tuple[str, ...]] = {"both": SERVE_BACKENDS, "all": SERVE_BACKENDS}

# (name in the medians, figure key, statistic): the lines kept over rounds.
_LINES = [
    ("output_tokens_per_s", "output_tokens_per_s", None),
    ("requests_per_s", "requests_per_s", None),
    ("total_tokens_per_s", "total_tokens_per_s", None),
    ("ttft_ms_median", "ttft_ms", "median"),
    ("ttft_ms_p99", "ttft_ms", "p99"),
    ("tpot_ms_median", "tpot_ms", "median"),
    ("itl_ms_median", "itl_ms", "median"),
    ("e2el_ms_median", "e2el_ms", "median"),
]
_THROUGHPUT = {"output_tokens_per_s", "requests_per_s", "total_tokens_per_s"}


class Server(Protocol):
    url: str

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class ExternalServer:
    """A server this process did not start (``--base-url``): measured, never paused."""

    def __init__(self, url: str) -> None:
        self.url = url

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass


async def reset_prefix_cache(url: str) -> bool:
    """``POST /reset_prefix_cache`` (dev mode on both servers); whether it was done."""
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
            resp = await client.post("/reset_prefix_cache")
    except httpx.HTTPError:
        return False
    return resp.status_code == 200


def run_rounds(
    servers: dict[str, Server],
    reqs: list[BenchRequest],
    rounds: int,
    *,
    warmup: int = 8,
    **serve_kwargs: Any,
) -> dict[str, list[dict[str, Any]]]:
    """``rounds`` rounds of the servers in turn (each resumed for its run only); first, per
    server, an untimed warm-up of ``warmup`` short requests. Per server its rounds' figures,
    each with ``prefix_cache_reset``."""
    from actorllm.bench.serve import run_serve

    for server in servers.values():
        server.pause()
    if warmup:
        warm = [BenchRequest(r.prompt_token_ids, min(r.output_len, 8)) for r in reqs[:warmup]]
        for server in servers.values():
            server.resume()
            try:
                anyio.run(partial(run_serve, server.url, warm, **serve_kwargs), backend="trio")
            finally:
                server.pause()
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
    for r in range(rounds):
        for name, server in servers.items():
            server.resume()
            try:
                fig = anyio.run(_round, server.url, reqs, serve_kwargs, backend="trio")
            finally:
                server.pause()
            log.info("round %d %s: %.1f output tok/s", r + 1, name, fig["output_tokens_per_s"])
            out[name].append(fig)
    for server in servers.values():
        server.resume()
    return out


async def _round(url: str, reqs: list[BenchRequest], kwargs: dict[str, Any]) -> dict[str, Any]:
    from actorllm.bench.serve import run_serve

    reset = await reset_prefix_cache(url)
    if not reset:
        log.warning(
            "%s: could not reset the prefix cache (a server not in dev mode?): this round may "
            "reuse prompts an earlier round cached",
            url,
        )
    fig = await run_serve(url, reqs, **kwargs)
    fig["prefix_cache_reset"] = reset
    return fig


def medians(figs: list[dict[str, Any]]) -> dict[str, float]:
    """Each line's median over the rounds."""
    out: dict[str, float] = {}
    for name, key, stat in _LINES:
        values = [f[key] if stat is None else f[key][stat] for f in figs]
        out[name] = statistics.median(values)
    return out


def compare(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The result document's figures: per server every round and the medians; with both
    servers, ``ratios`` (throughput actorllm / vllm, latency vllm / actorllm)."""
    per = {name: {"rounds": figs, "median": medians(figs)} for name, figs in rounds.items()}
    doc: dict[str, Any] = {"backends": per}
    if set(SERVE_BACKENDS) <= set(rounds):
        a, v = doc["backends"]["actorllm"]["median"], doc["backends"]["vllm"]["median"]
        ratios: dict[str, float] = {}
        for name, _, _ in _LINES:
            num, den = (a[name], v[name]) if name in _THROUGHPUT else (v[name], a[name])
            if den > 0:  # NaN compares False too: a line with no samples has no ratio
                ratios[name] = num / den
        doc["ratios"] = ratios
    return doc


def format_compare(doc: dict[str, Any]) -> str:
    """The medians as a table, one column per server (and the ratio)."""
    names = list(doc["backends"])
    ratios = doc.get("ratios")
    head = f"{'median over rounds':22}" + "".join(f"{n:>12}" for n in names)
    lines = [head + (f"{'ratio':>9}" if ratios else "")]
    for name, _, _ in _LINES:
        row = f"{name:22}" + "".join(f"{doc['backends'][n]['median'][name]:>12.1f}" for n in names)
        if ratios and name in ratios:
            row += f"{ratios[name]:>8.2f}x"
        lines.append(row)
    if ratios:
        lines.append("ratio: throughput actorllm / vllm, latency vllm / actorllm (> 1: better)")
    return "\n".join(lines)
