"""The ``actorllm`` command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="actorllm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API")
    args = parser.parse_args(argv)
    if args.command == "serve":
        from examples_runtime import run  # type: ignore[import-not-found]

        return int(run() or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
