"""Offline throughput (vLLM's benchmark_throughput): a whole workload submitted at once.

:func:`run_actorllm` starts an :class:`~actorllm.engine.AsyncEngine` (trio), warms it up
with one short request, then submits every request concurrently and times until the last
one finishes. Every request runs with ``ignore_eos`` and ``max_tokens = output_len``, so the
output token count is exact and checked. :func:`throughput_figures` turns a count and a
time into the three headline rates.

    reqs = random_requests(8, input_len=64, output_len=16)
    fig = run_actorllm(reqs, EngineConfig(load_format="dummy"))
    print(fig["output_tokens_per_s"])

``--structured json`` runs the same workload with every request constrained by one JSON
schema (:func:`structured_workload`): a list of short strings with at least
``output_len`` items, so the grammar cannot end before ``max_tokens`` and the token counts
match the unconstrained run. The grammar is compiled by the warm-up request, so the timed
part measures the per-step cost of constraining (a compiled-grammar cache hit).
"""

from __future__ import annotations

import argparse
import cProfile
import time
from pathlib import Path
from typing import Any

import anyio

from actorllm.bench.datasets import BenchRequest
from actorllm.engine.config import EngineConfig


def throughput_figures(
    num_requests: int, prompt_tokens: int, output_tokens: int, elapsed_s: float
) -> dict[str, Any]:
    return {
        "num_requests": num_requests,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "elapsed_s": elapsed_s,
        "requests_per_s": num_requests / elapsed_s,
        "total_tokens_per_s": (prompt_tokens + output_tokens) / elapsed_s,
        "output_tokens_per_s": output_tokens / elapsed_s,
    }


def structured_workload(kind: str | None, output_len: int) -> Any:
    """The constraint every request of a ``--structured`` run gets (None: unconstrained)."""
    if kind is None or kind == "none":
        return None
    from actorllm.core.structured_outputs_params import StructuredOutputsParams

    if kind != "json":
        raise ValueError(f"--structured must be none or json, got {kind!r}")
    schema = {
        "type": "array",
        "items": {"type": "string"},
        "minItems": output_len,  # each item is at least one token: no early end
    }
    return StructuredOutputsParams(json=schema, disable_any_whitespace=True)


def run_actorllm(
    reqs: list[BenchRequest],
    config: EngineConfig,
    *,
    temperature: float = 1.0,
    profile_dir: str | None = None,
    structured: str | None = None,
) -> dict[str, Any]:
    """Run the workload on a fresh engine; blocks until done. Raises ``RuntimeError`` if a
    request produced other than its ``output_len`` tokens.

    ``profile_dir``: cProfile the timed part into ``loop.prof`` (the event loop thread:
    actors, scheduler, output processing) and ``worker.prof`` (the model steps on the
    worker thread); read them with ``python -m pstats``.
    """
    so = structured_workload(structured, max(r.output_len for r in reqs))
    return anyio.run(_run_actorllm, reqs, config, temperature, profile_dir, so, backend="trio")


def _dump_profiles(directory: Path, loop: cProfile.Profile, worker: cProfile.Profile) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    loop.dump_stats(directory / "loop.prof")
    worker.dump_stats(directory / "worker.prof")


async def _run_actorllm(
    reqs: list[BenchRequest],
    config: EngineConfig,
    temperature: float,
    profile_dir: str | None,
    structured: Any = None,
) -> dict[str, Any]:
    from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
    from actorllm.engine import AsyncEngine

    async with AsyncEngine.open(config) as engine:
        warm = SamplingParams(max_tokens=4, ignore_eos=True, structured_outputs=structured)
        async for _ in engine.generate({"prompt_token_ids": reqs[0].prompt_token_ids[:16]}, warm):
            pass
        stats0 = await engine.get_stats()
        loop_prof, worker_prof = cProfile.Profile(), cProfile.Profile()
        if profile_dir:  # cProfile follows one thread: enable it on the worker's too
            await engine.collective_rpc(lambda _worker: worker_prof.enable())
            loop_prof.enable()
        produced = [0] * len(reqs)

        async def one(i: int) -> None:
            params = SamplingParams(
                max_tokens=reqs[i].output_len,
                ignore_eos=True,
                temperature=temperature,
                output_kind=RequestOutputKind.FINAL_ONLY,
                structured_outputs=structured,
            )
            prompt = {"prompt_token_ids": reqs[i].prompt_token_ids}
            async for out in engine.generate(prompt, params):
                produced[i] = len(out.outputs[0].token_ids)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(len(reqs)):
                tg.start_soon(one, i)
        elapsed = time.perf_counter() - start
        if profile_dir:
            loop_prof.disable()
            await engine.collective_rpc(lambda _worker: worker_prof.disable())
            _dump_profiles(Path(profile_dir), loop_prof, worker_prof)
        stats1 = await engine.get_stats()
    wrong = [i for i, r in enumerate(reqs) if produced[i] != r.output_len]
    if wrong:
        i = wrong[0]
        raise RuntimeError(f"request {i} produced {produced[i]} tokens, not {reqs[i].output_len}")
    fig = throughput_figures(
        len(reqs), sum(len(r.prompt_token_ids) for r in reqs), sum(produced), elapsed
    )
    fig["steps"] = stats1.steps_done - stats0.steps_done
    fig["preemptions"] = stats1.num_preemptions - stats0.num_preemptions
    return fig


# -- command line ----------------------------------------------------------------------------

_COLUMNS = [
    ("backend", "backend", ""),
    ("batch_size", "hf batch", "d"),
    ("elapsed_s", "time s", ".2f"),
    ("requests_per_s", "req/s", ".2f"),
    ("total_tokens_per_s", "total tok/s", ".1f"),
    ("output_tokens_per_s", "output tok/s", ".1f"),
    ("padding_waste", "hf padding waste", ".1%"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from actorllm.bench.cli_args import add_dataset_arguments, add_output_argument
    from actorllm.entrypoints.commands.engine_args import add_engine_arguments

    parser.add_argument("--backend", choices=("actorllm", "hf", "both"), default="actorllm")
    parser.add_argument("--hf-batch-size", type=int, default=None, help="one hf batch size")
    parser.add_argument(
        "--hf-batch-sizes",
        default="1,4,16,64",
        help="hf batch sizes to sweep, keeping the best (default 1,4,16,64)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads, both backends")
    parser.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="cProfile actorllm into DIR/{loop,worker}.prof",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="run the backends in turn N times; keep each best"
    )
    parser.add_argument(
        "--structured",
        choices=("none", "json"),
        default="none",
        help="constrain every actorllm request with a JSON schema (structured outputs)",
    )
    add_engine_arguments(parser, model_positional=False)
    add_dataset_arguments(parser, num_prompts=None)
    add_output_argument(parser)


def main(args: argparse.Namespace) -> int:
    import torch

    from actorllm.bench.cli_args import (
        dataset_config,
        model_vocab_size,
        requests_from_args,
        temperature_from_args,
    )
    from actorllm.bench.datasets import workload_summary
    from actorllm.bench.machine import result_document, write_json
    from actorllm.bench.report import format_table
    from actorllm.entrypoints.commands.engine_args import engine_config

    config = engine_config(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = config.resolved_model()
    reqs = requests_from_args(args, model_vocab_size(model_dir))
    temperature = temperature_from_args(args)
    sizes = [args.hf_batch_size] if args.hf_batch_size else _int_list(args.hf_batch_sizes)
    figures: dict[str, Any] = {"workload": workload_summary(reqs)}
    for _ in range(max(1, args.repeat)):
        if args.backend in ("actorllm", "both"):
            fig = run_actorllm(
                reqs,
                config,
                temperature=temperature,
                profile_dir=args.profile,
                structured=args.structured,
            )
            _keep_best(figures, "actorllm", fig, fig)
        if args.backend in ("hf", "both"):
            from actorllm.bench.hf_baseline import run_hf_sweep

            hf = run_hf_sweep(
                reqs,
                model_dir,
                sizes,
                dtype=config.dtype,
                load_format=config.load_format,
                device=config.resolved_device(),
                temperature=temperature,
            )
            _keep_best(figures, "hf", hf["best"], hf)
    rows = [{"backend": "actorllm", **figures["actorllm"]}] if "actorllm" in figures else []
    rows += [{"backend": "hf", **f} for f in figures.get("hf", {}).get("sweep", [])]
    print(format_table(rows, _COLUMNS))
    if "actorllm" in figures and "hf" in figures:
        best = figures["hf"]["best"]
        ratio = figures["actorllm"]["output_tokens_per_s"] / best["output_tokens_per_s"]
        figures["speedup_output_tokens_vs_hf_best"] = ratio
        print(f"actorllm / hf best (batch {best['batch_size']}): {ratio:.2f}x output tokens/s")
    if args.output_json:
        run_config = {
            **dataset_config(args),
            "backend": args.backend,
            "structured": args.structured,
            "engine": config_dict(config),
        }
        run_config["hf_batch_sizes"] = sizes
        doc = result_document("throughput", figures=figures, config=run_config, args=args)
        write_json(args.output_json, doc)
    return 0


def _keep_best(figures: dict[str, Any], key: str, fig: dict[str, Any], doc: dict[str, Any]) -> None:
    """Keep ``doc`` under ``key`` when its ``fig`` beats the kept one (by output tokens/s);
    ``runs`` lists every repeat's output tokens/s in order."""
    kept = figures.get(key)
    runs = [*(kept["runs"] if kept else []), fig["output_tokens_per_s"]]
    kept_fig = kept.get("best", kept) if kept else None
    if kept_fig is None or fig["output_tokens_per_s"] > kept_fig["output_tokens_per_s"]:
        figures[key] = dict(doc)
    figures[key]["runs"] = runs


def config_dict(config: EngineConfig) -> dict[str, Any]:
    import msgspec

    return {k: v for k, v in msgspec.structs.asdict(config).items() if v is not None}


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]
