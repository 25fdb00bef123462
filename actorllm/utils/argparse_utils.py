"""``FlexibleArgumentParser``: vLLM's argument parser for scripts, as
``vllm.utils.argparse_utils`` (and, before vLLM 0.11, ``vllm.utils``) has it.

vLLM's offline examples build their command line from the engine's flags and hand the
namespace to ``LLM``::

    from actorllm import LLM, EngineArgs
    from actorllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    EngineArgs.add_cli_args(parser)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = vars(parser.parse_args())
    max_tokens = args.pop("max_tokens")
    llm = LLM(**args)

It takes the spellings ``actorllm serve`` takes (``--max_model_len 512`` for
``--max-model-len 512``, one key of a JSON flag as ``--structured-outputs-config.backend
xgrammar``) and ``--config FILE.yaml`` (flag: value entries; the command line wins).

    >>> p = FlexibleArgumentParser()
    >>> _ = p.add_argument("--max-model-len", type=int)
    >>> p.parse_args(["--max_model_len", "512"]).max_model_len
    512
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from actorllm.compat.vllm.argv_forms import rewrite
from actorllm.compat.vllm.config_file import add_config_argument


class FlexibleArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` with vLLM's looser flag spellings and ``--config``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        add_config_argument(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(rewrite(self, argv), namespace)
