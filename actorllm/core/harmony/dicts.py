"""Harmony messages as ``openai_harmony``'s ``Message.to_dict()`` writes them: what vLLM
returns as a response's ``input_messages`` / ``output_messages`` and takes back as
``previous_input_messages``.

    >>> d = message_dict(HarmonyMessage("assistant", "Hi", channel="final"))
    >>> d["role"], d["name"], d["content"], d["channel"]
    ('assistant', None, [{'type': 'text', 'text': 'Hi'}], 'final')
    >>> message_from_dict(d) == HarmonyMessage("assistant", "Hi", channel="final")
    True
"""

from __future__ import annotations

from typing import Any

from actorllm.core.harmony.messages import ROLES, HarmonyMessage
from actorllm.core.harmony.render import DeveloperContent, SystemContent

_FIELDS = {"role", "name", "content", "channel", "recipient", "content_type"}


def _dict(role: str, name: str | None, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": role, "name": name, "content": content}


def message_dict(msg: HarmonyMessage) -> dict[str, Any]:
    out = _dict(msg.role, msg.name, [{"type": "text", "text": msg.content}])
    for key in ("channel", "recipient", "content_type"):
        value = getattr(msg, key)
        if value is not None:
            out[key] = value
    return out


def system_dict(sys: SystemContent) -> dict[str, Any]:
    content: dict[str, Any] = {"type": "system_content"}
    for key in ("model_identity", "reasoning_effort", "conversation_start_date"):
        value = getattr(sys, key)
        if value is not None:  # openai_harmony's effort enum values are capitalized
            content[key] = value.capitalize() if key == "reasoning_effort" else value
    if sys.knowledge_cutoff is not None:
        content["knowledge_cutoff"] = sys.knowledge_cutoff
    content["channel_config"] = {
        "valid_channels": list(sys.channels), "channel_required": sys.channel_required,
    }  # fmt: skip
    return _dict("system", None, [content])


def developer_dict(dev: DeveloperContent) -> dict[str, Any]:
    content: dict[str, Any] = {"type": "developer_content"}
    if dev.instructions is not None:
        content["instructions"] = dev.instructions
    if dev.tools:
        tools = []
        for t in dev.tools:
            tool: dict[str, Any] = {"name": t.name, "description": t.description}
            if t.parameters is not None:
                tool["parameters"] = t.parameters
            tools.append(tool)
        content["tools"] = {"functions": {"name": "functions", "tools": tools}}
    return _dict("developer", None, [content])


def message_from_dict(raw: Any) -> HarmonyMessage:
    """One message of ``previous_input_messages``; ValueError names what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError("each message must be an object")
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise ValueError(f"unknown message fields {unknown}")
    role = raw.get("role")
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    content = raw.get("content", "")
    if isinstance(content, list):
        if not all(isinstance(c, dict) and c.get("type") == "text" for c in content):
            raise ValueError("content parts must be text parts")
        content = "".join(str(c.get("text", "")) for c in content)
    if not isinstance(content, str):
        raise ValueError("content must be a string or a list of text parts")
    fields = {k: raw.get(k) for k in ("name", "recipient", "channel", "content_type")}
    if not all(v is None or isinstance(v, str) for v in fields.values()):
        raise ValueError("name, recipient, channel and content_type must be strings")
    return HarmonyMessage(str(role), content, **fields)
