"""The ``actorllm`` command line: a table of subcommands, each a module.

A command module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status), and keeps heavy imports (torch, the engine) inside
``run`` so ``actorllm --help`` stays fast. Adding a command is one line in ``COMMANDS``.
This module's own imports stay light too: a tensor-parallel rank (a ``multiprocessing``
spawn) imports the parent's main module, this one under ``python -m
actorllm.entrypoints.cli`` and the ``actorllm`` script.

    $ actorllm serve                 # the embedded demo model on 127.0.0.1:8000
    $ actorllm generate "Once upon a time" --max-tokens 32
    $ actorllm chat -q "Hello"       # a client of a running server, as `vllm chat`
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from actorllm.compat.vllm.argv_forms import FlexibleParser
from actorllm.entrypoints.commands import not_built

COMMANDS: dict[str, str] = {
    "serve": "actorllm.entrypoints.commands.serve",
    "generate": "actorllm.entrypoints.commands.generate",
    "chat": "actorllm.entrypoints.commands.chat",
    "complete": "actorllm.entrypoints.commands.complete",
    "bench": "actorllm.entrypoints.commands.bench",
    "run-batch": "actorllm.entrypoints.commands.run_batch",
    "collect-env": "actorllm.entrypoints.commands.collect_env",
    "launch": "actorllm.entrypoints.commands.launch",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="actorllm",
        description="actorllm: LLM inference and serving.",
        epilog="vLLM's " + ", ".join(not_built.NOT_BUILT) + " are not built here (each says why).",
    )
    # None: the command's own --log-level / --logging-config, else INFO (logging_flags.py).
    parser.add_argument("--log-level", default=None, help="logging level (default INFO)")
    parser.add_argument("-v", "--version", action="version", version=_version())
    # Subcommands take vLLM's looser spellings too (--max_model_len, --x-config.key v).
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=FlexibleParser
    )
    for name, module_path in COMMANDS.items():
        module = importlib.import_module(module_path)
        # No prefix matching: --config must not quietly mean --config-format.
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP, allow_abbrev=False)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def _version() -> str:
    from actorllm import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    from actorllm.compat.vllm.args import export_hf_token  # the engine's config: heavy
    from actorllm.compat.vllm.logging_flags import log_level

    refused = not_built.requested(sys.argv[1:] if argv is None else argv)
    if refused is not None:  # vLLM's subcommands not built here: refused by name
        return not_built.refuse(refused)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=log_level(args),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    # Not an engine setting: the process's token for hub downloads, whatever the command.
    export_hf_token(getattr(args, "hf_token", None))
    try:
        return int(args._run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
