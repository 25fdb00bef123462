"""Where a chat request's output starts, for structured outputs: the engine constrains the
answer only, and must find it where the reasoning parser will (vLLM's
``resolve_reasoning_ended``).

The parser thinks as the request's effective chat_template_kwargs say
(``ReasoningParser.thinking_of``); the engine's reasoning gate, asked with that same
thinking, reads the prompt for a block the template opened or closed. The answer
(``reasoning_ended``) travels with the request to the engine: True: constrained from the
first token; False: after the reasoning ends; None: the gate reads the prompt there (the
model may open the block with its first token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actorllm.engine.scheduling.structured_outputs import reasoning_gate_for
from actorllm.reasoning import ReasoningParser


def reasoning_ended(
    engine: Any, parser: type[ReasoningParser] | None, template_kwargs: dict[str, Any] | None,
    prompt_token_ids: Sequence[int],
) -> bool | None:  # fmt: skip
    """``prompt_token_ids``' ``reasoning_ended`` on ``engine`` for a request whose template
    got ``template_kwargs`` (None without a reasoning parser, or when the constraint covers
    the reasoning too)."""
    if parser is None:
        return None
    gate = reasoning_gate_for(engine.config, engine.tokenizer)
    if gate is None:
        return None
    state = gate.prompt_state(list(prompt_token_ids), parser.thinking_of(template_kwargs or {}))
    return None if state == "may_open" else state == "closed"
