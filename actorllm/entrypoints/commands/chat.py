"""``actorllm chat``: chat with a running server's model, as ``vllm chat`` does (flags,
defaults and output are vLLM's): ``-q MESSAGE`` asks once, otherwise one message a line
until end of input. The local-engine REPL is ``actorllm generate --interactive``.

    $ actorllm chat --url http://localhost:8000/v1 -q "Hello"
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from actorllm.entrypoints.commands.server_client import (
    ServerError,
    add_query_options,
    add_quick_option,
    connect,
    print_stream,
    read_message,
    run_session,
)

HELP = "chat with the model of a running server (as vllm chat)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_query_options(parser)
    parser.add_argument(
        "--system-prompt",
        default=None,
        help="The system prompt to be added to the chat template, used for models that "
        "support system prompts.",
    )
    add_quick_option(
        parser, "MESSAGE", "Send a single prompt as MESSAGE and print the response, then exit."
    )


def run(args: argparse.Namespace) -> int:
    return run_session(lambda: _chat(args))


def _chat(args: argparse.Namespace) -> None:
    model, client = connect(args)
    conversation: list[dict[str, str]] = []
    if args.system_prompt is not None:
        conversation.append({"role": "system", "content": args.system_prompt})
    body: dict[str, Any] = {"model": model}
    if args.stats:
        body["stream_options"] = {"include_usage": True}
    if args.quick is not None:
        conversation.append({"role": "user", "content": args.quick})
        print_stream(
            client.stream("/chat/completions", {**body, "messages": conversation}), args.stats
        )
        return
    print("Please enter a message for the chat model:")
    while (message := read_message()) is not None:
        conversation.append({"role": "user", "content": message})
        try:
            chunks = client.stream("/chat/completions", {**body, "messages": conversation})
            reply = print_stream(chunks, args.stats)
        except ServerError as exc:
            if exc.status != 400:
                raise
            # A refused message (e.g. the conversation outgrew the context): drop it, go on.
            print(f"error: {exc}", file=sys.stderr)
            conversation.pop()
            continue
        conversation.append({"role": "assistant", "content": reply})
