"""``actorllm complete``: complete prompts with a running server's model, as ``vllm
complete`` does (flags, defaults and output are vLLM's): ``-q PROMPT`` once, otherwise one
prompt a line until end of input.

    $ actorllm complete --url http://localhost:8000/v1 --max-tokens 16 -q "Once upon a time"
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

HELP = "complete prompts with the model of a running server (as vllm complete)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_query_options(parser)
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="Maximum number of tokens to generate per output sequence.",
    )
    add_quick_option(
        parser, "PROMPT", "Send a single prompt and print the completion output, then exit."
    )


def run(args: argparse.Namespace) -> int:
    return run_session(lambda: _complete(args))


def _complete(args: argparse.Namespace) -> None:
    model, client = connect(args)
    body: dict[str, Any] = {"model": model}
    if args.max_tokens is not None:
        body["max_tokens"] = args.max_tokens
    if args.stats:
        body["stream_options"] = {"include_usage": True}
    if args.quick is not None:
        print_stream(client.stream("/completions", {**body, "prompt": args.quick}), args.stats)
        return
    print("Please enter prompt to complete:")
    while (prompt := read_message()) is not None:
        try:
            print_stream(client.stream("/completions", {**body, "prompt": prompt}), args.stats)
        except ServerError as exc:
            if exc.status != 400:
                raise
            print(f"error: {exc}", file=sys.stderr)  # a refused prompt: go on
