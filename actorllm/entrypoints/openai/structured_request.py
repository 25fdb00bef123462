"""What a request body asks of structured outputs and tools, as engine parameters.

Pure functions over the decoded body (a dict of its fields), so both endpoints and the
offline ``LLM.chat`` share them:

* :func:`structured_outputs_from_body`: vLLM's ``structured_outputs`` object, the older
  ``guided_json`` / ``guided_regex`` / ``guided_choice`` / ``guided_grammar`` (with
  ``guided_decoding_backend`` and ``guided_whitespace_pattern``), and OpenAI's
  ``response_format`` (``text``, ``json_object``, ``json_schema`` with ``strict``) ->
  one :class:`StructuredOutputsParams` or None. Asking for two constraints is a 400.
* :func:`structured_source` / :func:`client_error`: the body field the constraint came
  from, and an engine's ``StructuredOutputsError`` (``param="structured_outputs.regex"``)
  renamed to the field the client sent (``guided_regex``, ``response_format``...), so a
  spec that does not compile is a 400 naming what the client wrote.
* :func:`plan_tools`: ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` -> the tools
  for the chat template, the parser that reads calls out of the output, and (for
  ``required`` and a named function) the JSON schema that forces valid arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from actorllm.core.errors import InvalidRequestError
from actorllm.core.structured_outputs_params import (
    BACKEND_CHOICES,
    StructuredOutputsError,
    StructuredOutputsParams,
)
from actorllm.entrypoints.openai.tool_parsers import (
    NamedToolParser,
    RequiredToolParser,
    ToolParser,
    get_tool_parser,
    strict_tools_tag,
    tool_choice_schema,
)

_GUIDED = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
}


def structured_source(body: Mapping[str, Any]) -> str | None:
    """The body field that carries the request's constraint (after
    :func:`structured_outputs_from_body` accepted it), or None."""
    if body.get("structured_outputs") is not None:
        return "structured_outputs"
    for name in _GUIDED:
        if body.get(name) is not None:
            return name
    rf = body.get("response_format")
    if isinstance(rf, Mapping) and rf.get("type") not in (None, "text"):
        return "response_format"
    return None


def client_param(param: str | None, source: str) -> str:
    """``param`` of a structured-outputs error (``structured_outputs[.<field>]``) as the
    field the client sent the constraint in (``source``).

    >>> client_param("structured_outputs.regex", "structured_outputs")
    'structured_outputs.regex'
    >>> client_param("structured_outputs.regex", "guided_regex")
    'guided_regex'
    >>> client_param("structured_outputs.backend", "guided_json")
    'guided_decoding_backend'
    >>> client_param("structured_outputs.json", "response_format")
    'response_format'
    """
    param = param or "structured_outputs"
    if source == "structured_outputs":
        return param
    option = param.partition(".")[2]
    if source in _GUIDED and option in ("backend", "whitespace_pattern"):
        return "guided_decoding_backend" if option == "backend" else "guided_whitespace_pattern"
    return source


@contextmanager
def client_error(source: str | None) -> Iterator[None]:
    """Rename a ``StructuredOutputsError`` raised inside to the client's field."""
    try:
        yield
    except StructuredOutputsError as exc:
        if source is None:
            raise
        raise exc.renamed(client_param(exc.param, source)) from None


def structured_outputs_from_body(body: Mapping[str, Any]) -> StructuredOutputsParams | None:
    """The one output constraint a request asks for, or None. Raises a typed 400."""
    sources: list[tuple[str, dict[str, Any]]] = []
    so = body.get("structured_outputs")
    if so is not None:
        if not isinstance(so, Mapping):
            raise InvalidRequestError(
                "structured_outputs must be an object.", param="structured_outputs"
            )
        sources.append(("structured_outputs", dict(so)))
    guided = {f: body[f] for f in _GUIDED if body.get(f) is not None}
    if len(guided) > 1:
        raise InvalidRequestError(
            f"only one of {', '.join(guided)} may be set.", param=next(iter(guided))
        )
    for field_name, value in guided.items():
        sources.append((field_name, {_GUIDED[field_name]: value}))
    rf = _response_format(body.get("response_format"))
    if rf is not None:
        sources.append(("response_format", rf))
    if not sources:
        for option in ("guided_decoding_backend", "guided_whitespace_pattern"):
            if body.get(option) is not None:
                raise InvalidRequestError(
                    f"{option} needs a constraint (guided_json, guided_regex, ...).", param=option
                )
        return None
    if len(sources) > 1:
        names = [n for n, _ in sources]
        raise InvalidRequestError(
            f"only one kind of structured output may be requested; got {', '.join(names)}.",
            param=names[1],
        )
    param, fields = sources[0]
    backend = body.get("guided_decoding_backend")
    if backend is not None:
        if backend not in BACKEND_CHOICES:
            raise InvalidRequestError(
                f"guided_decoding_backend must be one of {', '.join(BACKEND_CHOICES)}, "
                f"got {backend!r}.",
                param="guided_decoding_backend",
            )
        fields.setdefault("backend", backend)
    if body.get("guided_whitespace_pattern") is not None:
        fields.setdefault("whitespace_pattern", body["guided_whitespace_pattern"])
    try:
        with client_error(param):
            return StructuredOutputsParams(**fields)
    except TypeError as exc:  # an unknown field name inside structured_outputs
        unknown = re.search(r"argument '(\w+)'", str(exc))
        if unknown is not None and param == "structured_outputs":
            field = f"structured_outputs.{unknown.group(1)}"
            raise InvalidRequestError(
                f"{field} is not a structured outputs field.", param=field
            ) from None
        raise InvalidRequestError(f"{param}: {exc}", param=param) from None


def _response_format(rf: Any) -> dict[str, Any] | None:
    if rf is None:
        return None
    if not isinstance(rf, Mapping) or "type" not in rf:
        raise InvalidRequestError(
            "response_format must be an object with a type.", param="response_format"
        )
    kind = rf["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        spec = rf.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if schema is None:
            raise InvalidRequestError(
                "response_format.json_schema.schema is required.", param="response_format"
            )
        fields: dict[str, Any] = {"json": schema}
        if spec.get("strict"):  # type: ignore[union-attr]
            fields["disable_additional_properties"] = True
        return fields
    if kind == "structural_tag":  # as vLLM: the whole object is the tag
        return {"structural_tag": json.dumps(dict(rf))}
    raise InvalidRequestError(
        "response_format.type must be text, json_object, json_schema or structural_tag, "
        f"got {kind!r}.",
        param="response_format",
    )


@dataclass(frozen=True)
class ToolPlan:
    """How a chat request uses tools."""

    template_tools: list[dict[str, Any]] | None  # handed to the chat template
    parser: ToolParser | None  # reads calls out of the output (None: plain content)
    forced_schema: dict[str, Any] | None  # JSON schema forcing the calls' arguments
    parallel: bool  # several calls allowed in one answer
    # tool_choice auto with strict functions: the structural tag (JSON) that holds the
    # calls the model chooses to make to their functions' parameters.
    strict_tag: str | None = None


@dataclass(frozen=True)
class ToolSettings:
    """The server's tool options (``--enable-auto-tool-choice``, ``--tool-call-parser``)."""

    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None


def plan_tools(body: Mapping[str, Any], settings: ToolSettings, tokenizer: Any = None) -> ToolPlan:
    """Check ``tools`` / ``tool_choice`` / ``parallel_tool_calls``; raises a typed 400."""
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(_is_function_tool(t) for t in tools):
        raise InvalidRequestError(
            'tools must be a list of {"type": "function", "function": {"name": ...}}.',
            param="tools",
        )
    choice = body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    parallel = True if parallel is None else bool(parallel)
    if not tools:
        if choice not in (None, "none"):
            raise InvalidRequestError("tool_choice needs tools.", param="tool_choice")
        return ToolPlan(None, None, None, parallel)
    if choice is None:
        choice = "auto"
    if choice == "none":
        return ToolPlan(tools, None, None, parallel)
    if choice == "auto":
        if not (settings.enable_auto_tool_choice and settings.tool_call_parser):
            raise InvalidRequestError(
                'tool_choice "auto" needs the server started with --enable-auto-tool-choice '
                "and --tool-call-parser.",
                param="tool_choice",
            )
        parser = get_tool_parser(settings.tool_call_parser)(tokenizer, tools=tools)
        try:
            tag = strict_tools_tag(parser, tools)
        except ValueError:
            raise InvalidRequestError(
                f'tools with "strict": true cannot be enforced with --tool-call-parser '
                f"{settings.tool_call_parser} under tool_choice auto (hermes and llama3_json "
                "can); send strict false, or force the call with tool_choice.",
                param="tools",
            ) from None
        return ToolPlan(tools, parser, None, parallel, strict_tag=tag)
    if choice == "required":
        schema = tool_choice_schema(tools, "required")
        assert schema is not None
        if not parallel:
            schema["maxItems"] = 1
        return ToolPlan(tools, RequiredToolParser(tokenizer, tools=tools), schema, parallel)
    if isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        name = choice["function"].get("name")
        try:
            schema = tool_choice_schema(tools, dict(choice))
        except KeyError:
            raise InvalidRequestError(
                f"tool_choice names function {name!r}, which is not in tools.",
                param="tool_choice",
            ) from None
        return ToolPlan(tools, NamedToolParser(str(name), tokenizer), schema, parallel)
    raise InvalidRequestError(
        'tool_choice must be "none", "auto", "required" or '
        '{"type": "function", "function": {"name": ...}}.',
        param="tool_choice",
    )


def _is_function_tool(tool: Any) -> bool:
    return (
        isinstance(tool, Mapping)
        and tool.get("type", "function") == "function"
        and isinstance(tool.get("function"), Mapping)
        and isinstance(tool["function"].get("name"), str)
    )
