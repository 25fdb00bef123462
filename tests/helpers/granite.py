"""A scripted IBM Granite 3.2 stand-in: a chat template with Granite's ``thinking`` switch
(it writes the two plain-text markers into the system prompt, as Granite's does) and a
scripted model that answers every chat with a thought, ``Here is my response:``, then
its usual script (which a grammar bends into the answer)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import jsonschema

from actorllm.testing.scripted_model import ScriptedModel

# Granite 3.2's thinking system prompt ends like this (its template ignores enable_thinking).
TEMPLATE = (
    "{% if thinking %}<|im_start|>system\nRespond to every user query in a comprehensive "
    "and detailed way. Write your thoughts after 'Here is my thought process:' and write "
    "your response after 'Here is my response:' for each user query.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
THOUGHT = "Here is my thought process:\nThe user wants a pet: a cat.\n\nHere is my response:\n"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "kind": {"enum": ["cat", "dog"]},
    },
    "required": ["id", "kind"],
    "additionalProperties": False,
}


@functools.cache
def granite_tokenizer() -> Any:
    """The demo tokenizer with :data:`TEMPLATE` as its chat template (its own copy)."""
    from transformers import AutoTokenizer

    from actorllm.demo import demo_tokenizer_path

    tok = AutoTokenizer.from_pretrained(str(demo_tokenizer_path()))
    tok.chat_template = TEMPLATE
    return tok


def check_answer(text: str) -> None:
    jsonschema.validate(json.loads(text), SCHEMA)


class GraniteThinker(ScriptedModel):
    """Writes ``thought`` right after the prompt's last ``opener``,
    then its usual script. Under a grammar from the first token (thinking off), the grammar
    bends the thought away like any other script."""

    def __init__(
        self,
        tokenizer: Any,
        thought: str = THOUGHT,
        opener: str = "<|im_start|>assistant\n",
        **kw: Any,
    ) -> None:
        kw.setdefault("vocab_size", len(tokenizer))
        kw.setdefault("eos_token_id", tokenizer.eos_token_id)
        super().__init__(**kw)
        self.opener = list(tokenizer.encode(opener, add_special_tokens=False))
        self.thought = list(tokenizer.encode(thought, add_special_tokens=False))

    def fresh(self) -> ScriptedModel:
        raise NotImplementedError  # one replica

    def script(self, context: Sequence[int]) -> int:
        n = len(self.opener)
        opened = max(
            (i + n for i in range(len(context) - n + 1) if list(context[i : i + n]) == self.opener),
            default=None,
        )
        if opened is not None and len(context) - opened < len(self.thought):
            return self.thought[len(context) - opened]
        return super().script(context)
