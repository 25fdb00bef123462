"""vLLM's looser spellings of command-line flags, rewritten to the canonical ones before
argparse sees them (vLLM's ``FlexibleArgumentParser`` accepts the same):

* underscores for dashes: ``--max_model_len 4096`` is ``--max-model-len 4096``;
* one key of a JSON-valued flag: ``--compilation-config.level 3`` (``-O.level 3``) and
  ``--structured-outputs-config.backend=xgrammar`` are merged into
  ``--compilation-config '{"level": 3}'`` (values are read as JSON where they parse,
  else kept as text; several keys of one flag merge into one object).

    >>> parser = FlexibleParser()
    >>> _ = parser.add_argument("--max-model-len")
    >>> _ = parser.add_argument("--compilation-config")
    >>> rewrite(parser, ["--max_model_len", "8", "--compilation-config.level", "3"])
    ['--max-model-len', '8', '--compilation-config', '{"level": 3}']
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def rewrite(parser: argparse.ArgumentParser, args: Sequence[str]) -> list[str]:
    """``args`` with vLLM's spellings made canonical for ``parser`` (unknown flags are left
    as they are, for argparse to name)."""
    known = parser._option_string_actions
    out: list[str] = []
    dotted: dict[str, dict[str, Any]] = {}  # {flag: merged object}, emitted where first seen
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg in ("-", "--") or (arg[1] != "-" and "." not in arg):
            out.append(arg)  # a value ("-": stdin / stdout), or a short option (-tp 2, -O3)
            continue
        name, eq, value = arg.partition("=")
        base, dot, path = name.partition(".")
        canonical = base if base in known or base[1] != "-" else "--" + base[2:].replace("_", "-")
        if canonical not in known:
            out.append(arg)
            continue
        if not dot:
            out.append(canonical + eq + value)
            continue
        if not eq:
            if i >= len(args):
                out.append(arg)  # no value: let argparse say so
                continue
            value = args[i]
            i += 1
        if canonical not in dotted:
            dotted[canonical] = {}
            out += [canonical, canonical]  # placeholder for the merged object
        node = dotted[canonical]
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = _value(value)
    for flag, obj in dotted.items():
        at = out.index(flag)
        out[at + 1] = json.dumps(obj)
    return out


class FlexibleParser(argparse.ArgumentParser):
    """An ArgumentParser that takes vLLM's spellings too (see :func:`rewrite`)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if args is not None:
            args = rewrite(self, args)
        return super().parse_known_args(args, namespace)
