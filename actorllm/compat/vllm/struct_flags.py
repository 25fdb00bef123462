"""Command-line flags generated from a msgspec ``Struct``: one flag per field.

Theory of operation: a settings struct (``EngineConfig``, ``ServerSettings``,
``AppSettings``) is read two ways, at parser-building time:

* its fields and types (``msgspec.structs.fields``) give each flag's name, parser and
  choices: ``bool`` -> ``--x`` / ``--no-x``; ``Literal`` -> choices; ``int`` fields named
  ``*_bytes`` take sizes (``512MiB``); ``list[str]`` takes a JSON list or a comma list
  (or, for a field in the struct's ``CLI_APPEND``, one value per repeated flag);
  ``str | list[str]`` takes several values (``--api-key a b``, vLLM's form) and repeats;
  ``dict[str, Any]`` takes a JSON object; ``X | None`` parses as ``X``. Other types cannot
  be flags: name them in ``exclude``;
* its ``CLI_HELP`` table, ``{group title: {field: help text}}``, gives each flag's
  ``--help`` text and group (vLLM's config class names: ModelConfig, CacheConfig, ...).

The flag of a field is ``--`` + its name with dashes, less a ``_s`` suffix (seconds):
``restart_window_s`` -> ``--restart-window``. Flags default to *absent*
(``argparse.SUPPRESS``), so :func:`given` returns only what the user typed and the struct's
own defaults (shown in the help) apply to the rest.

    >>> import argparse
    >>> from actorllm.engine.config.engine_config import EngineConfig
    >>> parser = argparse.ArgumentParser()
    >>> add_struct_flags(parser, EngineConfig, groups={})
    >>> given(parser.parse_args(["--max-num-seqs", "8"]), EngineConfig)
    {'max_num_seqs': 8}
"""

from __future__ import annotations

import argparse
import json
import types
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import msgspec

from actorllm.engine.config.sizes import parse_size

Groups = dict[str, Any]  # {title: argparse argument group}, shared by several structs
HelpTable = Mapping[str, Mapping[str, str]]  # {group title: {field: help text}}


@dataclass(frozen=True)
class FieldDoc:
    group: str  # the --help group of the field's flag ("" when the table has no entry)
    help: str  # its help text ("" when the table has no entry)


def field_docs(cls: type) -> dict[str, FieldDoc]:
    """{field name: its group and help text}, from the struct's ``CLI_HELP`` table."""
    table: HelpTable | None = getattr(cls, "CLI_HELP", None)
    if table is None:
        raise TypeError(f"{cls.__name__} has no CLI_HELP table: its flags need help text.")
    return {
        name: FieldDoc(group=group, help=text)
        for group, fields in table.items()
        for name, text in fields.items()
    }


def flag_for(field: str) -> str:
    """``restart_window_s`` -> ``--restart-window``; ``max_num_seqs`` -> ``--max-num-seqs``."""
    return "--" + field.removesuffix("_s").replace("_", "-")


def str_list(text: str) -> list[str]:
    """A JSON list (``'["a", "b"]'``, vLLM's form) or a comma-separated list (``a,b``)."""
    if text.lstrip().startswith("["):
        value = json.loads(text)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise argparse.ArgumentTypeError(f"not a JSON list of strings: {text}")
        return value
    return [part.strip() for part in text.split(",") if part.strip()]


def json_object(text: str) -> dict[str, Any]:
    """A JSON object (vLLM's form for dict-valued flags)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text}")
    return value


def _without_none(tp: Any) -> Any:
    if get_origin(tp) in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return members[0]
        return Union[tuple(members)]  # noqa: UP007 - rebuilt from a runtime tuple
    return tp


def _parser_kwargs(info: msgspec.structs.FieldInfo, append: Collection[str]) -> dict[str, Any]:
    tp = _without_none(info.type)
    if tp == Union[str, list[str]]:  # noqa: UP007
        return {"nargs": "+", "action": "extend", "type": str}
    if get_origin(tp) is dict and get_args(tp)[:1] == (str,):
        return {"type": json_object, "metavar": "JSON"}
    if get_origin(tp) is list and get_args(tp) == (str,) and info.name in append:
        return {"action": "append", "type": str}
    if tp is bool:
        return {"action": argparse.BooleanOptionalAction}
    if get_origin(tp) is Literal:
        choices = [c for c in get_args(tp) if c is not None]
        return {"choices": choices, "type": type(choices[0])}
    if tp is int:
        return {"type": parse_size if info.name.endswith("_bytes") else int}
    if tp in (float, str):
        return {"type": tp}
    if get_origin(tp) is list and get_args(tp) == (str,):
        return {"type": str_list, "metavar": "LIST"}
    raise TypeError(f"{info.name}: no command-line form for {info.type!r}; exclude it")


def _default_text(info: msgspec.structs.FieldInfo) -> str:
    if info.default_factory is not msgspec.NODEFAULT:
        return repr(info.default_factory())
    if info.default is msgspec.NODEFAULT:
        return "required"
    return repr(info.default) if isinstance(info.default, str) else str(info.default)


def _group(parser: argparse.ArgumentParser, groups: Groups, title: str) -> Any:
    if title not in groups:
        groups[title] = parser.add_argument_group(title)
    return groups[title]


def flag_fields(cls: type, exclude: Collection[str] = ()) -> list[msgspec.structs.FieldInfo]:
    return [f for f in msgspec.structs.fields(cls) if f.name not in exclude]


def add_struct_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    groups: Groups,
    exclude: Collection[str] = (),
    aliases: Mapping[str, tuple[str, ...]] | None = None,
    default_group: str = "options",
) -> None:
    """Add one flag per field of ``cls`` (less ``exclude``) to ``parser``, in the groups of
    the struct's ``CLI_HELP``. ``aliases`` adds extra option strings (``-tp``)."""
    docs = field_docs(cls)
    append: Collection[str] = getattr(cls, "CLI_APPEND", frozenset())
    for info in flag_fields(cls, exclude):
        doc = docs.get(info.name, FieldDoc("", ""))
        help_text = doc.help
        if "default" not in help_text.lower():  # the docstring may say it better itself
            help_text += f" (default: {_default_text(info)})"
        flag = flag_for(info.name)
        kwargs = _parser_kwargs(info, append)
        if (
            "metavar" not in kwargs
            and "choices" not in kwargs
            and kwargs.get("action")
            in (
                None,
                "extend",
                "append",
            )
        ):
            kwargs.setdefault("metavar", flag[2:].replace("-", "_").upper())
        _group(parser, groups, doc.group or default_group).add_argument(
            flag,
            *(aliases or {}).get(info.name, ()),
            dest=info.name,
            default=argparse.SUPPRESS,
            help=help_text.replace("%", "%%"),
            **kwargs,
        )


def given(args: argparse.Namespace, cls: type, exclude: Collection[str] = ()) -> dict[str, Any]:
    """The fields of ``cls`` the user set on the command line (keyword arguments for it)."""
    values = vars(args)
    return {f.name: values[f.name] for f in flag_fields(cls, exclude) if f.name in values}
