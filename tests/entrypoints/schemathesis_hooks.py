"""Schemathesis hooks for test_openapi.py: the rules between fields that JSON Schema cannot
state, which the OpenAPI document states in words (each generation operation's
description): the prompt's tokens plus ``max_tokens`` fit the context length,
and ``min_tokens <= max_tokens``. Bodies that break them are not generated; everything
else the schema allows is, and must be accepted.

Loaded by the schemathesis CLI through ``SCHEMATHESIS_HOOKS``; the served context length
comes in ``ACTORLLM_MAX_MODEL_LEN``.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
import schemathesis

from actorllm.entrypoints.anthropic.protocol import (
    AnthropicCountTokensRequest,
    AnthropicMessagesRequest,
)
from actorllm.entrypoints.anthropic.to_chat import Conversion, chat_request, count_request
from actorllm.entrypoints.generative_scoring.prompts import item_prompts
from actorllm.entrypoints.generative_scoring.protocol import GenerativeScoringRequest
from actorllm.entrypoints.openai import protocol as p
from actorllm.entrypoints.openai.beam_request import NOT_WITH_BEAMS, asks_nothing
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.preprocess import encode, render_chat
from actorllm.entrypoints.openai.responses.serving import decode_responses_request
from actorllm.entrypoints.openai.responses.to_chat import chat_request as responses_chat
from actorllm.entrypoints.openai.sampling import STRUCTURED_FIELDS
from tests.entrypoints.fake_engine import demo_tokenizer

MAX_MODEL_LEN = int(os.environ.get("ACTORLLM_MAX_MODEL_LEN", "0"))
MAX_LOGPROBS = 20  # the server's --max-logprobs (its default)


def _prompt_lengths(path: str, body: dict[str, Any]) -> list[int] | None:
    """Token counts of the body's prompts, as the server computes them; None when the body
    does not decode (a negative case: the server must refuse it whatever its length)."""
    tok = demo_tokenizer()
    try:
        raw = msgspec.json.encode(body)
        if path == "/v1/completions":
            req = decode_request(raw, p.CompletionRequest)
            batch = p.prompt_batch(req.prompt)
            special = req.add_special_tokens
            lens = [len(encode(tok, x, add_special_tokens=special)) if isinstance(x, str)
                    else len(x) for x in batch]  # fmt: skip
        else:
            chat = decode_request(raw, p.ChatCompletionRequest)
            text = render_chat(
                tok,
                chat.messages,
                add_generation_prompt=chat.add_generation_prompt,
                continue_final_message=chat.continue_final_message,
                documents=chat.documents,
                chat_template_kwargs=chat.chat_template_kwargs,
            )
            lens = [len(encode(tok, text, add_special_tokens=chat.add_special_tokens))]
    except Exception:
        return None
    k = body.get("truncate_prompt_tokens")
    if isinstance(k, int) and k > 0:
        lens = [min(n, k) for n in lens]
    return lens


# Fields whose validity is semantic, not a schema (a regex or grammar that compiles, a JSON
# schema a grammar backend accepts, tools the server is configured to parse): the document
# says so in words; bodies that set them are not generated.
_SEMANTIC = (*STRUCTURED_FIELDS, "tools", "tool_choice")


def _repetition_rule_holds(rd: Any) -> bool:
    """RepetitionDetectionParams' rule (its description): sizes >= 0, min <= max, and
    min_count >= 2 when max_pattern_size > 0."""
    if not isinstance(rd, dict):
        return True  # absent, or not an object: the schema decides
    hi, lo, count = (rd.get(k, 0) for k in ("max_pattern_size", "min_pattern_size", "min_count"))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (hi, lo, count)):
        return True
    return 0 <= lo <= hi and (hi == 0 or count >= 2)


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    """Applied in every phase (the coverage phase does not run body hooks)."""
    path, body = case.operation.path, case.body
    if path.endswith("/render") and isinstance(body, dict):  # the route's own rules hold
        if body.get("use_beam_search") is True:
            return False  # render refuses beam search (the operation says so)
        path = path.removesuffix("/render")
    if path == "/invocations" and isinstance(body, dict):  # routed by the body, as served
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    if path == "/tokenize" and isinstance(body, dict) and body.get("tools") is not None:
        return False  # tools: semantic (the served template must render them), as above
    if path == "/v1/responses" and isinstance(body, dict):
        return _responses_case(body)
    if path in ("/v1/messages", "/v1/messages/count_tokens") and isinstance(body, dict):
        return _messages_case(path, body)
    if path == "/generative_scoring" and isinstance(body, dict):
        return _generative_scoring_case(body)
    if path == "/v1/chat/completions/batch" and isinstance(body, dict):
        conversations = body.get("messages")
        if not isinstance(conversations, list) or not conversations:
            return True  # a negative case: the server must refuse it
        # Each conversation is a chat request of its own: the chat rules hold for each.
        # tool_choice "none" (the one the batch takes) asks for no tool.
        if body.get("use_beam_search") is True:
            return False  # the batch takes no beam search (the rules say so)
        one = {k: v for k, v in body.items() if not (k == "tool_choice" and v == "none")}
        chat = "/v1/chat/completions"
        return all(_generation_case(chat, {**one, "messages": c}) for c in conversations)
    return _generation_case(path, body)


def _generative_scoring_case(body: dict[str, Any]) -> bool:
    """The rule the description states: no item's prompt (with the query) is empty."""
    try:
        req = decode_request(msgspec.json.encode(body), GenerativeScoringRequest)
    except Exception:
        return True  # a negative case: the server must refuse it
    try:
        item_prompts(req, demo_tokenizer(), vocab_size=1 << 31, max_model_len=1 << 31)
    except APIError:
        return False
    return True


def _beam_rules_hold(path: str, body: dict[str, Any]) -> bool:
    """beam_request's rules (the generation rules' words): no sampling field but its 'off'
    values, no logprob_token_ids, no echo with logprobs, 2 * n within max_logprobs."""
    if any(name in body and not asks_nothing(name, body[name]) for name in NOT_WITH_BEAMS):
        return False
    if body.get("logprob_token_ids"):
        return False
    if path == "/v1/completions" and body.get("echo") and body.get("logprobs") is not None:
        return False
    n = body.get("n", 1)
    return not (isinstance(n, int) and 2 * n > MAX_LOGPROBS)


def _generation_case(path: str, body: Any) -> bool:
    if path not in ("/v1/completions", "/v1/chat/completions") or not isinstance(body, dict):
        return True
    if any(body.get(name) is not None for name in _SEMANTIC):
        return False
    logprobs = body.get("logprobs")
    if body.get("logprob_token_ids") and (logprobs is None or logprobs is False):
        return False  # logprob_token_ids requires logprobs (its description says so)
    if not _repetition_rule_holds(body.get("repetition_detection")):
        return False
    if body.get("use_beam_search") is True and not _beam_rules_hold(path, body):
        return False
    default = 16 if path == "/v1/completions" else None
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", default))
    if path == "/v1/chat/completions" and body.get("max_completion_tokens") is None:
        max_tokens = body.get("max_tokens")
    min_tokens = body.get("min_tokens", 0)
    both = isinstance(max_tokens, int | float) and isinstance(min_tokens, int | float)
    if both and min_tokens > max_tokens:
        return False
    lens = _prompt_lengths(path, body)
    if lens is None:  # a negative case (or one this hook cannot read): the server decides
        return True
    for n in lens:
        room = MAX_MODEL_LEN - n
        want = room if max_tokens is None else max_tokens
        if room < 1 or want > room or min_tokens > want:
            return False
    return True


# /v1/responses: fields whose validity is semantic (a constraint that compiles, tools the
# server parses, a stored response's id), as for the chat fields above.
_RESPONSES_SEMANTIC = ("text", "structured_outputs", "tools", "tool_choice", "previous_response_id")


def _responses_case(body: dict[str, Any]) -> bool:
    """Generated unless semantic, or the input leaves no room for an output token."""
    if any(body.get(name) is not None for name in _RESPONSES_SEMANTIC):
        return False
    if body.get("truncation") == "auto":
        return True  # the input's start is cut to fit
    try:
        req = decode_responses_request(msgspec.json.encode(body))
        chat = responses_chat(req, [], truncate_to=None)
        text = render_chat(
            demo_tokenizer(),
            chat.messages,
            add_generation_prompt=chat.add_generation_prompt,
            continue_final_message=chat.continue_final_message,
            chat_template_kwargs=chat.chat_template_kwargs,
        )
        n = len(encode(demo_tokenizer(), text, add_special_tokens=False))
    except Exception:
        # Not sized here (the input renders differently from the server's path): not
        # generated, since a refusal for its length would read as a schema-valid rejection.
        return False
    return n < MAX_MODEL_LEN


# /v1/messages: tools (the server's parser), output_config (a schema that compiles) are
# semantic, as for the chat fields above.
_MESSAGES_SEMANTIC = ("tools", "tool_choice", "output_config")


def _messages_case(path: str, body: dict[str, Any]) -> bool:
    """Generated unless semantic, or the prompt (with inline system messages kept or
    merged, as the template wants) leaves no room for ``max_tokens``. A body the
    conversion refuses by its content (an image in a tool result, a turn left empty) is
    not generated either: the document states those rules in words."""
    if any(body.get(name) is not None for name in _MESSAGES_SEMANTIC):
        return False
    raw = msgspec.json.encode(body)
    kind = AnthropicMessagesRequest if path == "/v1/messages" else AnthropicCountTokensRequest
    try:
        req = decode_request(raw, kind)
    except Exception:
        return True  # a negative case: the server must refuse it
    lengths = []
    try:
        for merge in (False, True):
            conv = Conversion(merge_inline_system=merge)
            if isinstance(req, AnthropicMessagesRequest):
                chat = chat_request(req, conv)
            else:
                chat = count_request(req, conv)
            text = render_chat(
                demo_tokenizer(),
                chat.messages,
                add_generation_prompt=True,
                continue_final_message=False,
                documents=None,
                chat_template_kwargs=chat.chat_template_kwargs,
            )
            lengths.append(len(encode(demo_tokenizer(), text, add_special_tokens=False)))
    except Exception:
        return False
    want = req.max_tokens if isinstance(req, AnthropicMessagesRequest) else 0
    return all(n + want <= MAX_MODEL_LEN and n < MAX_MODEL_LEN for n in lengths)
