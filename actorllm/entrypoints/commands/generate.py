"""``actorllm generate "PROMPT"``: one completion, streamed to the terminal; ``actorllm
generate --interactive``: a chat in the terminal (``repl.py``). Both run a local engine."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from actorllm.entrypoints.commands.engine_args import add_engine_arguments, engine_config
from actorllm.entrypoints.commands.repl import chat_loop

if TYPE_CHECKING:
    from actorllm.core.sampling_params import SamplingParams
    from actorllm.engine import AsyncEngine

HELP = "run a local engine: complete one prompt, or chat with --interactive, printed as it streams"


# A sampling flag left out takes the model's generation_config default (--generation-config,
# --override-generation-config), else this command's own: greedy, no top-p/top-k cut, and
# room for a chat reply in the REPL.
_OWN_DEFAULTS = {"temperature": 0.0, "top_p": 1.0, "top_k": 0}
_OWN_MAX_TOKENS = 64
_OWN_MAX_TOKENS_INTERACTIVE = 256


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "sampling (a flag left out: the model's generation_config default, else the one shown)"
    )
    group.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help=f"default: {_OWN_MAX_TOKENS}, --interactive: {_OWN_MAX_TOKENS_INTERACTIVE}",
    )
    group.add_argument("--temperature", type=float, default=None, help="default: 0, greedy")
    group.add_argument("--top-p", type=float, default=None, help="default: 1.0")
    group.add_argument("--top-k", type=int, default=None, help="default: 0 (no cut)")
    group.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")


def sampling_params(args: argparse.Namespace, defaults: Mapping[str, float]) -> Any:
    """The flags given, over ``defaults`` (``EngineConfig.get_diff_sampling_param()``: the
    model's generation_config), over this command's own defaults."""
    from actorllm.core.sampling_params import RequestOutputKind, SamplingParams

    own_max = _OWN_MAX_TOKENS_INTERACTIVE if args.interactive else _OWN_MAX_TOKENS
    fields: dict[str, Any] = {**_OWN_DEFAULTS, "max_tokens": own_max}
    fields.update(defaults)
    for name in ("max_tokens", "temperature", "top_p", "top_k"):
        given = getattr(args, name)
        if given is not None:
            fields[name] = given
    return SamplingParams(
        **fields,
        stop=args.stop,
        # --seed is the engine's (EngineConfig.seed, which seeds requests without their own);
        # a flag left out is absent from args, so EngineConfig's default applies.
        seed=getattr(args, "seed", None),
        output_kind=RequestOutputKind.DELTA,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", nargs="?", help="the prompt text (not with --interactive)")
    parser.add_argument(
        "--interactive",
        action="store_true",
        help="chat in the terminal instead: one message a line, /reset forgets the "
        "history, /exit or end of input quits",
    )
    parser.add_argument(
        "--system", default=None, help="with --interactive: a system prompt for the chat"
    )
    add_sampling_arguments(parser)
    add_engine_arguments(parser, model_positional=False)


def run(args: argparse.Namespace) -> int:
    if args.interactive == (args.prompt is not None):
        print("error: give a PROMPT or --interactive (one of them)", file=sys.stderr)
        return 2
    if args.system is not None and not args.interactive:
        print("error: --system is for --interactive", file=sys.stderr)
        return 2

    async def session(engine: AsyncEngine, params: SamplingParams) -> None:
        if args.interactive:
            await chat_loop(engine, params, args.system, sys.stdin.isatty())
            return
        async for out in engine.generate(args.prompt, params):
            for co in out.outputs:
                sys.stdout.write(co.text)
                sys.stdout.flush()
        sys.stdout.write("\n")

    return run_engine(args, session)


def run_engine(
    args: argparse.Namespace, session: Callable[[AsyncEngine, SamplingParams], Awaitable[None]]
) -> int:
    """Build the engine the flags describe and run ``session`` on it (trio); a bad flag
    or request is exit status 2 with its message, as argparse's usage errors."""
    try:
        config = engine_config(args)
        params = sampling_params(args, config.get_diff_sampling_param())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        from actorllm.engine import AsyncEngine

        async with AsyncEngine.open(config) as engine:
            await session(engine, params)

    try:
        anyio.run(main, backend="trio")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
