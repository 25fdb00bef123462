"""What ``bench throughput`` runs: the requests, the engine config, and the settings every
backend shares, from ``--preset`` or from the dataset flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from actorllm.bench.datasets import BenchRequest
from actorllm.engine.config.engine_config import EngineConfig


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
    if args.profile and config.pipeline_parallel_size > 1:
        raise ValueError(
            "--profile: cProfile follows the engine process's threads only; run it with "
            "--pipeline-parallel-size 1"
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


def resolved_dtype_name(config: EngineConfig) -> str:
    """The dtype actorllm runs ``config`` in ("auto" resolved, e.g. bfloat16 on a CPU with
    native bf16), so every backend runs the same one."""
    from actorllm.models.config import CheckpointConfig
    from actorllm.models.loader import resolve_dtype

    cfg = CheckpointConfig.from_pretrained(config.resolved_model())
    dtype = resolve_dtype(config.dtype, cfg, config.resolved_device())
    return str(dtype).removeprefix("torch.")


def config_dict(config: EngineConfig) -> dict[str, Any]:
    import msgspec

    return {k: v for k, v in msgspec.structs.asdict(config).items() if v is not None}


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]
