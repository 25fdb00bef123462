"""OpenAI's harmony format (gpt-oss): render conversations, parse model output.

Text in, text out, no tokenizer: a rendered conversation is a list of :class:`Segment`
(ordinary text or one special token) that the caller tokenizes piece by piece, as
``openai_harmony`` does; a model's output is parsed from its detokenized text with the
special tokens kept, whole (:func:`parse_output`) or as it grows (:class:`HarmonyParser`,
one per stream). docs/server.md ("gpt-oss and harmony") says how the server uses it.
"""

from actorllm.core.harmony.messages import (
    CALL,
    CHANNEL,
    CONSTRAIN,
    END,
    MESSAGE,
    RETURN,
    SPECIAL_TOKENS,
    START,
    HarmonyMessage,
    Segment,
)
from actorllm.core.harmony.parse import (
    Event,
    HarmonyOutput,
    HarmonyParser,
    Opened,
    ParserStatistics,
    Wrote,
    parse_output,
)
from actorllm.core.harmony.render import (
    SystemContent,
    developer_text,
    render_for_completion,
    system_text,
)

__all__ = [
    "CALL",
    "CHANNEL",
    "CONSTRAIN",
    "END",
    "MESSAGE",
    "RETURN",
    "SPECIAL_TOKENS",
    "START",
    "Event",
    "HarmonyMessage",
    "HarmonyOutput",
    "HarmonyParser",
    "Opened",
    "ParserStatistics",
    "Segment",
    "SystemContent",
    "Wrote",
    "developer_text",
    "parse_output",
    "render_for_completion",
    "system_text",
]
