"""``actorllm generate "PROMPT"``: one completion, streamed to the terminal."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio

from actorllm.entrypoints.commands.engine_args import add_engine_arguments, engine_config

HELP = "generate a completion for one prompt and print it as it streams"


def add_sampling_arguments(parser: argparse.ArgumentParser, *, max_tokens: int) -> None:
    group = parser.add_argument_group("sampling")
    group.add_argument("--max-tokens", type=int, default=max_tokens)
    group.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    group.add_argument("--top-p", type=float, default=1.0)
    group.add_argument("--top-k", type=int, default=0)
    group.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")


def sampling_params(args: argparse.Namespace) -> Any:
    from actorllm.core.sampling_params import RequestOutputKind, SamplingParams

    return SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        stop=args.stop,
        # --seed is the engine's (EngineConfig.seed, which seeds requests without their own);
        # a flag left out is absent from args, so EngineConfig's default applies.
        seed=getattr(args, "seed", None),
        output_kind=RequestOutputKind.DELTA,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="the prompt text")
    add_sampling_arguments(parser, max_tokens=64)
    add_engine_arguments(parser, model_positional=False)


def run(args: argparse.Namespace) -> int:
    try:
        config, params = engine_config(args), sampling_params(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        from actorllm.engine import AsyncEngine

        async with AsyncEngine.open(config) as engine:
            async for out in engine.generate(args.prompt, params):
                for co in out.outputs:
                    sys.stdout.write(co.text)
                    sys.stdout.flush()
        sys.stdout.write("\n")

    try:
        anyio.run(main, backend="trio")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
