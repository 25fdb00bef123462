"""vLLM's logging flags on ``serve``: ``--log-level LEVEL`` and ``--logging-config JSON``.

``actorllm --log-level LEVEL serve`` sets the level before the command; vLLM spells it
after (``vllm serve --log-level DEBUG``), and both forms set the same level. vLLM's
``--logging-config`` (its ``LoggingConfig``) is read key by key:

* ``log_level``: the level, when ``--log-level`` is not given (vLLM's precedence);
* ``pylogging_config_file``: a ``dictConfig`` JSON file: on ``serve`` it is
  ``--log-config-file`` (which wins when both are given), on ``run-batch`` it is applied
  before the batch starts (:func:`apply_log_config_file`);
* ``formatter`` and ``configure_logging`` only at vLLM's defaults (``"text"``, ``true``):
  a JSON formatter and leaving logging unconfigured are not built, so other values are
  refused by name.

    $ actorllm serve --logging-config '{"log_level": "DEBUG"}'
    $ actorllm serve --logging-config.log_level DEBUG      # the same, vLLM's dotted form
"""

from __future__ import annotations

import argparse
import json
import logging.config
from pathlib import Path
from typing import Any

from actorllm.compat.vllm.struct_flags import json_object

LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG", "NOTSET")
DEFAULT_LEVEL = "INFO"
# {LoggingConfig key: the one value accepted} for the keys kept only at vLLM's default.
_DEFAULT_ONLY: dict[str, Any] = {"formatter": "text", "configure_logging": True}


def logging_config(text: str) -> dict[str, Any]:
    """The argparse ``type`` of ``--logging-config``: vLLM's object, checked key by key."""
    raw = json_object(text)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "log_level":
            out[key] = _level(str(value))
        elif key == "pylogging_config_file":
            out[key] = None if value is None else str(value)
        elif key in _DEFAULT_ONLY:
            if value != _DEFAULT_ONLY[key]:
                raise argparse.ArgumentTypeError(
                    f"{key} {value!r} is not supported (only {_DEFAULT_ONLY[key]!r})"
                )
        else:
            raise argparse.ArgumentTypeError(
                f"unknown key {key!r} (log_level, pylogging_config_file, formatter, "
                "configure_logging)"
            )
    return out


def _level(text: str) -> str:
    level = text.strip().upper()
    if level not in LEVELS:
        raise argparse.ArgumentTypeError(f"log level {text!r}: one of {', '.join(LEVELS)}")
    return level


def add_logging_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--log-level",
        type=_level,
        default=argparse.SUPPRESS,
        metavar="{" + ",".join(LEVELS) + "}",
        help="the log level (as `actorllm --log-level` before the command; default INFO)",
    )
    group.add_argument(
        "--logging-config",
        type=logging_config,
        default=argparse.SUPPRESS,
        metavar="JSON",
        help='vLLM\'s LoggingConfig: \'{"log_level": "DEBUG", "pylogging_config_file": '
        '"log.json"}\' (formatter only "text"; --log-level and --log-config-file win)',
    )


def log_level(args: argparse.Namespace) -> str:
    """The level ``args`` ask for: ``--log-level``, else ``--logging-config``'s, else INFO."""
    given = getattr(args, "log_level", None)
    if given is not None:
        return str(given).upper()
    return str(getattr(args, "logging_config", {}).get("log_level") or DEFAULT_LEVEL)


def log_config_file(args: argparse.Namespace) -> str | None:
    """``--logging-config``'s ``pylogging_config_file`` (``--log-config-file`` wins)."""
    return getattr(args, "logging_config", {}).get("pylogging_config_file")


def apply_log_config_file(args: argparse.Namespace) -> None:
    """Apply ``--logging-config``'s ``pylogging_config_file`` (commands that have no
    ``--log-config-file`` of their own). ``ValueError`` naming it when it is unusable."""
    path = log_config_file(args)
    if path is None:
        return
    where = f"--logging-config pylogging_config_file {path}"
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{where}: cannot read it: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{where}: must hold a JSON object (dictConfig).")
    try:
        logging.config.dictConfig(config)
    except (ValueError, TypeError, AttributeError, ImportError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
