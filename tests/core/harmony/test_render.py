"""Harmony prompts, byte for byte as the format's own guide shows them (openai/harmony
docs/format.md: the system and developer messages with function tools)."""

from __future__ import annotations

from actorllm.core.harmony import HarmonyMessage, SystemContent, render_for_completion
from actorllm.core.harmony.render import DeveloperContent, FunctionTool, render_message
from actorllm.core.harmony.schema_ts import schema_to_typescript

UNIT = {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
TOOLS = (
    FunctionTool("get_location", "Gets the location of the user."),
    FunctionTool(
        "get_current_weather",
        "Gets the current weather in the provided location.",
        {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "format": UNIT,
            },
            "required": ["location"],
        },
    ),
    FunctionTool(
        "get_multiple_weathers",
        "Gets the current weather in the provided list of locations.",
        {
            "type": "object",
            "properties": {
                "locations": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": 'List of city and state, e.g. ["San Francisco, CA", '
                    '"New York, NY"]',
                },
                "format": UNIT,
            },
            "required": ["locations"],
        },
    ),
)

GUIDE = """<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
Knowledge cutoff: 2024-06
Current date: 2025-06-28

Reasoning: high

# Valid channels: analysis, commentary, final. Channel must be included for every message.
Calls to these tools must go to the commentary channel: 'functions'.<|end|>\
<|start|>developer<|message|># Instructions

Use a friendly tone.

# Tools

## functions

namespace functions {

// Gets the location of the user.
type get_location = () => any;

// Gets the current weather in the provided location.
type get_current_weather = (_: {
// The city and state, e.g. San Francisco, CA
location: string,
format?: "celsius" | "fahrenheit", // default: celsius
}) => any;

// Gets the current weather in the provided list of locations.
type get_multiple_weathers = (_: {
// List of city and state, e.g. ["San Francisco, CA", "New York, NY"]
locations: string[],
format?: "celsius" | "fahrenheit", // default: celsius
}) => any;

} // namespace functions<|end|>\
<|start|>user<|message|>What is the weather like in SF?<|end|><|start|>assistant"""


def text(segments: list) -> str:
    return "".join(s.text for s in segments)


def test_the_guides_prompt_with_function_tools() -> None:
    segs = render_for_completion(
        [HarmonyMessage("user", "What is the weather like in SF?")],
        SystemContent(reasoning_effort="high", conversation_start_date="2025-06-28"),
        DeveloperContent(instructions="Use a friendly tone.", tools=TOOLS),
    )
    assert text(segs) == GUIDE
    specials = [s.text for s in segs if s.special]
    assert specials[:3] == ["<|start|>", "<|message|>", "<|end|>"]
    # Special-token names inside text stay text: the user's message is one text piece.
    assert "What is the weather like in SF?" in [s.text for s in segs if not s.special]


def test_without_tools_the_channels_line_says_nothing_of_functions() -> None:
    segs = render_for_completion(
        [HarmonyMessage("user", "2 + 2?")], SystemContent(conversation_start_date="2025-01-01")
    )
    assert text(segs) == (
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI."
        "\nKnowledge cutoff: 2024-06\nCurrent date: 2025-01-01\n\nReasoning: medium\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every "
        "message.<|end|><|start|>user<|message|>2 + 2?<|end|><|start|>assistant"
    )


def test_tool_calls_and_results_in_history() -> None:
    call = HarmonyMessage(
        "assistant", '{"location":"San Francisco"}', channel="commentary",
        recipient="functions.get_weather", content_type="<|constrain|>json",
    )  # fmt: skip
    result = HarmonyMessage(
        "tool", '{"sunny": true}', name="functions.get_weather", channel="commentary",
        recipient="assistant",
    )  # fmt: skip
    assert text(render_message(call)) == (
        "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
        '<|message|>{"location":"San Francisco"}<|call|>'
    )
    assert [s.text for s in render_message(call) if s.special][-2:] == ["<|message|>", "<|call|>"]
    assert text(render_message(result)) == (
        "<|start|>functions.get_weather to=assistant<|channel|>commentary"
        '<|message|>{"sunny": true}<|end|>'
    )


def test_schema_types() -> None:
    assert schema_to_typescript({"type": ["integer", "string"]}) == "number | string"
    assert schema_to_typescript({"type": "array"}) == "Array<any>"
    assert schema_to_typescript({"type": "boolean"}) == "boolean"
    assert schema_to_typescript({"anyOf": [{"type": "string"}]}) == "any"
    nested = schema_to_typescript(
        {
            "type": "object",
            "properties": {
                "when": {
                    "type": "object",
                    "properties": {"day": {"type": "integer", "default": 1}},
                },
                "n": {"type": "number", "nullable": True, "title": "Count"},
                "tag": {"type": "string", "default": "x", "examples": ["a"]},
            },
            "required": ["when"],
        }
    )
    assert nested == (
        "{\nwhen: {\n    day?: number, // default: 1\n    },\n// Count\n//\nn?: number | null,\n"
        '// Examples:\n// - "a"\ntag?: string, // default: "x"\n}'
    )
    one_of = schema_to_typescript(
        {
            "type": "object",
            "properties": {
                "v": {"description": "A value", "oneOf": [{"type": "string"}, {"type": "number",
                      "description": "a number"}]},
            },
        }
    )  # fmt: skip
    assert one_of == "{\n// A value\nv?:\n | string\n | number // a number\n,\n}"
