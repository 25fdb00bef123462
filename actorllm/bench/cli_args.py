"""Command-line flags shared by the benchmarks: the workload and the JSON output."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from actorllm.bench.datasets import (
    NANOVLLM_TEMPERATURE,
    BenchRequest,
    nanovllm_requests,
    random_requests,
)


def add_dataset_arguments(
    parser: argparse.ArgumentParser, *, num_prompts: int | None, num_prompts_help: str = ""
) -> None:
    g = parser.add_argument_group("workload")
    g.add_argument("--dataset", choices=("random", "nanovllm"), default="random")
    g.add_argument(
        "--num-prompts",
        type=int,
        default=num_prompts,
        help=num_prompts_help or f"requests (default {num_prompts}; nanovllm: 256)",
    )
    g.add_argument("--input-len", type=int, default=128, help="random: prompt tokens")
    g.add_argument("--output-len", type=int, default=128, help="random: tokens to generate")
    g.add_argument(
        "--range-ratio", type=float, default=0.0, help="random: lengths vary by +-ratio (0: fixed)"
    )
    # Also the engine's --seed (the parser resolves the clash): one seed per run.
    g.add_argument("--seed", type=int, default=0, help="random: dataset seed (and engine seed)")
    g.add_argument(
        "--max-len", type=int, default=None, help="nanovllm: cap prompt and output lengths"
    )
    g.add_argument(
        "--temperature",
        type=float,
        default=None,
        help=f"sampling temperature (default: nanovllm {NANOVLLM_TEMPERATURE}, random 1.0)",
    )


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output-json", default=None, help="write the result document here")


def requests_from_args(args: argparse.Namespace, vocab_size: int) -> list[BenchRequest]:
    if args.dataset == "nanovllm":
        return nanovllm_requests(args.num_prompts or 256, args.max_len, vocab_size)
    return random_requests(
        args.num_prompts or 64,
        args.input_len,
        args.output_len,
        args.range_ratio,
        args.seed,
        vocab_size,
    )


def temperature_from_args(args: argparse.Namespace) -> float:
    if args.temperature is not None:
        return float(args.temperature)
    return NANOVLLM_TEMPERATURE if args.dataset == "nanovllm" else 1.0


def dataset_config(args: argparse.Namespace) -> dict[str, object]:
    keys = ("dataset", "num_prompts", "input_len", "output_len", "range_ratio", "max_len")
    out: dict[str, object] = {k: getattr(args, k) for k in keys}
    out["seed"] = args.seed
    out["temperature"] = temperature_from_args(args)
    return out


def model_vocab_size(model_dir: str | Path) -> int:
    return int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
