"""The engine's command-line flags (vLLM's names), shared by serve / generate / chat.

``engine_kwargs(args)`` returns only what the user set, so ``EngineConfig``'s own defaults
apply to the rest; :func:`engine_config` validates them (``EngineConfigError`` names the
flag's field).
"""

from __future__ import annotations

import argparse
from typing import Any, get_args

from actorllm.engine.config import (
    AttentionBackend,
    Device,
    DType,
    EngineConfig,
    LoadFormat,
    SchedulingPolicy,
    parse_size,
)

# (flag, EngineConfig field, argparse kwargs)
_FLAGS: list[tuple[str, dict[str, Any]]] = [
    ("--served-model-name", {"help": "the model name clients use (default: the model path)"}),
    ("--tokenizer", {"help": "tokenizer directory (default: the model's)"}),
    ("--dtype", {"choices": get_args(DType)}),
    ("--max-model-len", {"type": int, "help": "context length (default: the model's)"}),
    ("--max-num-seqs", {"type": int, "help": "max requests per step"}),
    ("--max-num-batched-tokens", {"type": int, "help": "token budget per step"}),
    ("--block-size", {"type": int, "help": "KV-cache block size in tokens"}),
    (
        "--enable-prefix-caching",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "reuse cached prompt prefixes (default on)",
        },
    ),
    ("--scheduling-policy", {"choices": get_args(SchedulingPolicy)}),
    ("--load-format", {"choices": get_args(LoadFormat), "help": "dummy: random weights"}),
    ("--seed", {"type": int}),
    ("--device", {"choices": get_args(Device)}),
    ("--attention-backend", {"choices": get_args(AttentionBackend)}),
    ("--kv-cache-memory-bytes", {"type": parse_size, "help": "KV-cache size, e.g. 512MiB or 2GiB"}),
    (
        "--cpu-omp-short-spin",
        {
            "action": argparse.BooleanOptionalAction,
            "help": "CPU: pin OpenMP to short spin-waits, whatever the host ran (default on)",
        },
    ),
    ("--enforce-eager", {"action": "store_true", "default": None, "help": "no CUDA graphs"}),
    (
        "--async-scheduling",
        {"action": "store_true", "default": None, "help": "overlap scheduling with the model step"},
    ),
]


def add_engine_arguments(parser: argparse.ArgumentParser, *, model_positional: bool = True) -> None:
    group = parser.add_argument_group("engine")
    if model_positional:
        group.add_argument(
            "model",
            nargs="?",
            default=None,
            help="model directory (default: the embedded demo model)",
        )
    else:
        group.add_argument(
            "--model", default=None, help="model directory (default: the embedded demo model)"
        )
    for flag, kwargs in _FLAGS:
        group.add_argument(flag, dest=flag[2:].replace("-", "_"), **{"default": None, **kwargs})


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """EngineConfig keyword arguments for the flags the user gave."""
    names = ["model", *(flag[2:].replace("-", "_") for flag, _ in _FLAGS)]
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(**engine_kwargs(args))
