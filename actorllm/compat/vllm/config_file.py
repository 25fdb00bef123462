"""``--config FILE.yaml``: vLLM's way of keeping a launch line in a file.

The file maps flag names (``max-model-len`` or ``max_model_len``, without the dashes in
front) to values, as ``vllm serve --config`` reads it::

    model: Qwen/Qwen3-0.6B
    max-model-len: 4096
    enable-chunked-prefill: true
    api-key: [key-a, key-b]
    kv-transfer-config: {kv_connector: OffloadingConnector, kv_role: kv_both}

Each entry becomes the flag it names and is parsed by the same parser, so a key that is no
flag is an error naming it, and what the file sets is checked like the command line. Flags
given on the command line win over the file, wherever they stand.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any


def config_argv(parser: argparse.ArgumentParser, data: Any, path: str) -> list[str]:
    """The command-line form of a config file's mapping (``parser`` says how each flag
    takes its value). Raises ``argparse.ArgumentError``-style ``parser.error`` on a key
    that is no flag."""
    if not isinstance(data, dict):
        parser.error(f"--config {path}: the file must hold a mapping of flag: value")
    actions = parser._option_string_actions
    argv: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        action = actions.get(flag)
        if action is None:
            parser.error(f"--config {path}: {key!r} is not a flag of this command")
        if isinstance(value, bool):
            if action.nargs == 0:  # a switch: true gives it, false its --no- form (if any)
                if value:
                    argv.append(flag)
                elif "--no-" + flag[2:] in actions:
                    argv.append("--no-" + flag[2:])
                continue
            argv += [flag, "true" if value else "false"]
        elif isinstance(value, list) and action.nargs in ("+", "*"):
            argv += [flag, *(_text(v) for v in value)]
        elif isinstance(value, list) and isinstance(action, argparse._AppendAction):
            for item in value:
                argv += [flag, _text(item)]
        elif value is None:
            continue
        else:
            argv += [flag, _text(value)]
    return argv


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


class ConfigFileAction(argparse.Action):
    """Reads the YAML file and sets what it holds, unless the command line set it too."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        import yaml

        path = str(values)
        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as exc:
            parser.error(f"--config {path}: cannot read it: {exc}")
        from_file = parser.parse_args(config_argv(parser, data or {}, path))
        for name, value in vars(from_file).items():
            current = getattr(namespace, name, None)
            if isinstance(value, list) and name.startswith("_") and isinstance(current, list):
                setattr(namespace, name, [*value, *current])  # notes from both places
            elif not hasattr(namespace, name) or current is None:
                setattr(namespace, name, value)


def add_config_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--config FILE.yaml`` on ``parser`` (``actorllm serve``, ``FlexibleArgumentParser``)."""
    parser.add_argument(
        "--config",
        action=ConfigFileAction,
        default=argparse.SUPPRESS,
        metavar="FILE.yaml",
        help="read flags from a YAML file of flag: value (vLLM's form); the command line wins",
    )
