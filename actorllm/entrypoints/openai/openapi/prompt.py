"""What a prompt may be: the four forms of a completion prompt, and ``prompt_embeds`` (in a
completion or a chat content part) only with --enable-prompt-embeds."""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.openai.openapi.parts import REF


def prompt_forms(components: dict[str, Any]) -> dict[str, Any]:
    """The four forms of a completion prompt (msgspec allows one array type per union)."""
    token = components["CompletionRequest"]["properties"]["prompt"]["anyOf"][1]["items"]
    token = next(t for t in token["anyOf"] if t.get("type") == "integer")
    text = {"type": "string", "minLength": 1}
    ids = {"type": "array", "items": token, "minItems": 1}
    return {
        "anyOf": [
            text,
            {"type": "array", "items": text, "minItems": 1},
            ids,
            {"type": "array", "items": ids, "minItems": 1},
        ]
    }


def completion_prompt_rule(schema: dict[str, Any], embeds: bool) -> None:
    """A completion needs a non-empty ``prompt`` or, with --enable-prompt-embeds, non-empty
    ``prompt_embeds`` (then ``prompt`` may be ``""``); without the flag ``prompt_embeds``
    takes only its off values."""
    forms = schema["properties"]["prompt"]
    schema["properties"]["prompt"] = {"anyOf": [*forms["anyOf"], {"type": "null"}]}
    need = [{"required": ["prompt"], "properties": {"prompt": forms}}]
    if embeds:
        item = {"type": "string", "minLength": 1, "contentEncoding": "base64"}
        schema["properties"]["prompt_embeds"] = {
            "anyOf": [item, {"type": "array", "items": item}, {"type": "null"}],
            "description": "base64 of torch.save(tensor [seq_len, hidden_size]), or a list.",
        }
        schema["properties"]["prompt"]["anyOf"].append({"const": ""})
        need.append(
            {
                "required": ["prompt_embeds"],
                "properties": {
                    "prompt_embeds": {
                        "anyOf": [item, {"type": "array", "items": item, "minItems": 1}]
                    }
                },
            }
        )
    else:
        schema["properties"]["prompt_embeds"] = {
            "anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}],
            "description": "Refused: the server was not started with --enable-prompt-embeds.",
        }
    schema["anyOf"] = need
    required = [r for r in schema.get("required", []) if r != "prompt"]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)


def content_parts_rule(components: dict[str, Any], embeds: bool) -> None:
    """Chat content parts: ``prompt_embeds`` parts with --enable-prompt-embeds (non-empty
    base64 ``data``; chat completions only), else text parts alone."""
    part = components.get("PromptEmbedsContentPart")
    if part is None:
        return
    if embeds:
        part["properties"]["data"] = {
            "type": "string",
            "minLength": 1,
            "contentEncoding": "base64",
            "description": "base64 of torch.save(tensor [num_tokens, hidden_size]); "
            "taken by /v1/chat/completions only.",
        }
        part["required"] = ["type", "data"]
        return
    del components["PromptEmbedsContentPart"]
    text = {"$ref": REF.format(name="TextContentPart")}

    def only_text(node: Any) -> Any:
        if isinstance(node, dict):
            mapping = node.get("discriminator", {}).get("mapping", {})
            if "prompt_embeds" in mapping and "text" in mapping:
                return text
            return {k: only_text(v) for k, v in node.items()}
        if isinstance(node, list):
            return [only_text(v) for v in node]
        return node

    for name in list(components):
        components[name] = only_text(components[name])
