"""``actorllm chat``: an interactive chat in the terminal, replies streamed as they come.

Reads lines from stdin (``/exit`` or end of input quits, ``/reset`` forgets the history);
the engine keeps running between turns, so later turns reuse the cached prefix.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import anyio

from actorllm.entrypoints.commands.engine_args import add_engine_arguments
from actorllm.entrypoints.commands.generate import (
    add_sampling_arguments,
    run_engine,
)

if TYPE_CHECKING:
    from actorllm.core.sampling_params import SamplingParams
    from actorllm.engine import AsyncEngine

HELP = "chat with a model in the terminal (streaming)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--system", default=None, help="a system prompt")
    add_sampling_arguments(parser, max_tokens=256)
    add_engine_arguments(parser, model_positional=False)


def _read_line(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        return None


async def chat_loop(
    engine: AsyncEngine, params: SamplingParams, system: str | None, interactive: bool
) -> None:
    history: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    while True:
        line = await anyio.to_thread.run_sync(_read_line, "> " if interactive else "")
        if line is None or line.strip() == "/exit":
            return
        if line.strip() == "/reset":
            del history[1 if system else 0 :]
            continue
        if not line.strip():
            continue
        history.append({"role": "user", "content": line})
        reply = []
        try:
            async for out in engine.chat(history, params):
                for co in out.outputs:
                    reply.append(co.text)
                    sys.stdout.write(co.text)
                    sys.stdout.flush()
        except ValueError as exc:  # e.g. the conversation outgrew max_model_len
            print(f"\nerror: {exc} (try /reset)", file=sys.stderr)
            history.pop()
            continue
        sys.stdout.write("\n")
        history.append({"role": "assistant", "content": "".join(reply)})


def run(args: argparse.Namespace) -> int:
    async def session(engine: AsyncEngine, params: SamplingParams) -> None:
        await chat_loop(engine, params, args.system, sys.stdin.isatty())

    return run_engine(args, session)
