"""One chat-template renderer: the HTTP server's (chat completions, /tokenize) and the
engine's (``LLM.chat``, ``AsyncEngine.chat``) make the same prompt of the same messages."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actorllm.core.chat_template import render_chat
from actorllm.core.errors import InvalidRequestError
from actorllm.core.input_processor import InputProcessor
from actorllm.entrypoints.openai import preprocess
from actorllm.entrypoints.openai.protocol import ChatCompletionRequest
from actorllm.testing.engine_harness import demo_tokenizer

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        ],
    },
    {"role": "tool", "content": "2", "tool_call_id": "c1"},
    {"role": "assistant", "content": "The answer is"},
]


@pytest.mark.parametrize("continue_final", [False, True])
def test_server_and_engine_render_alike(continue_final: bool) -> None:
    tok = demo_tokenizer()
    req = msgspec.convert({"messages": CONVERSATION}, ChatCompletionRequest)
    served = preprocess.render_chat(
        tok,
        req.messages,
        add_generation_prompt=not continue_final,
        continue_final_message=continue_final,
        documents=None,
        chat_template_kwargs=None,
    )
    # LLM.chat hands continue_final_message inside the template kwargs.
    engine = InputProcessor(tok, vocab_size=len(tok), max_model_len=4096).render_chat(
        CONVERSATION,
        add_generation_prompt=not continue_final,
        chat_template_kwargs={"continue_final_message": True} if continue_final else None,
    )
    assert served == engine
    assert served.endswith("The answer is") == continue_final


def test_errors_name_the_field() -> None:
    tok = demo_tokenizer()
    user = [{"role": "user", "content": "Hi"}]
    with pytest.raises(InvalidRequestError) as info:
        render_chat(tok, user, continue_final_message=True, add_generation_prompt=True)
    assert info.value.param == "continue_final_message"
    with pytest.raises(InvalidRequestError) as info:
        render_chat(tok, user, chat_template_kwargs={"tokenize": True})
    assert info.value.param == "chat_template_kwargs"
    with pytest.raises(InvalidRequestError) as info:
        render_chat(tok, [])
    assert info.value.param == "messages"
    inline = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    assert render_chat(tok, user, chat_template=inline) == "[Hi]"
