"""tool_choice "required" with parameters that use ``$defs``: the definitions move to the
schema's root, where their "#/$defs/..." references point (vLLM's rule and 400s)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import xgrammar as xgr

from actorllm.core.errors import InvalidRequestError
from actorllm.entrypoints.openai.tool_parsers import tool_choice_schema

OPTIONS = {"type": "object", "properties": {"unit": {"type": "string"}}}


def _tool(name: str, defs: Any) -> dict[str, Any]:
    params = {"type": "object", "properties": {"o": {"$ref": "#/$defs/Options"}}, "$defs": defs}
    return {"type": "function", "function": {"name": name, "parameters": params}}


def test_defs_move_to_the_root_and_the_schema_compiles() -> None:
    schema = tool_choice_schema([_tool("a", {"Options": OPTIONS}), _tool("b", {})], "required")
    assert schema is not None and schema["$defs"] == {"Options": OPTIONS}
    assert all("$defs" not in i["properties"]["parameters"] for i in schema["items"]["anyOf"])
    xgr.Grammar.from_json_schema(schema)  # the references resolve


@pytest.mark.parametrize(
    ("tools", "words"),
    [([_tool("a", [])], "`$defs` in the parameters of tool 'a' must be an object"),
     ([_tool("a", {"Options": OPTIONS}), _tool("b", {"Options": {"type": "string"}})],
      "Tool definition 'Options' has multiple schemas")],
)  # fmt: skip
def test_defs_that_cannot_be_shared_are_refused_naming_tools(
    tools: list[dict[str, Any]], words: str
) -> None:
    with pytest.raises(InvalidRequestError, match=re.escape(words)) as e:
        tool_choice_schema(tools, "required")
    assert e.value.param == "tools"
