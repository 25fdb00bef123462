"""What the document knows about the served model and the server's flags (:class:`Served`),
and what that decides: the ``x-served`` bounds (token ids below the vocabulary size,
``max_tokens`` below the context length, ``priority`` only 0 under the fcfs policy), the
request fields this server refuses, and which pooling routes it serves."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actorllm.entrypoints.openai.openapi.rules import BATCH


@dataclass(frozen=True, slots=True)
class Served:
    """What the document needs to know about the served model."""

    max_model_len: int
    vocab_size: int
    scheduling_policy: str
    trust_request_chat_template: bool = False  # a request's chat_template is accepted
    max_logprobs: int = 20  # --max-logprobs; -1: the vocabulary size
    tokenizer_info: bool = False  # GET /tokenizer_info exists (--enable-tokenizer-info-endpoint)
    # A pooling model's tasks, its default first (the one /pooling serves); empty: a
    # generative model.
    # The document lists the routes that serve this model: generation or pooling ones.
    pooling_tasks: tuple[str, ...] = ()
    cross_encoder: bool = False  # a one-label classifier: /score and /rerank read pairs
    has_chat_template: bool = True  # the tokenizer has one: pooling requests take messages
    matryoshka: bool = False  # embeddings may be cut (`dimensions`)
    # A model whose token pooling is STEP: /pooling takes step_tag_id and
    # returned_token_ids (column indices below this many logits); 0: no STEP pooling
    step_columns: int = 0
    embedding_size: int = 0
    input_types: tuple[str, ...] = ()  # /v2/embed's input_type: the model's task instructions
    prompt_embeds: bool = False  # --enable-prompt-embeds: completions take prompt_embeds
    # POST /v1/load_lora_adapter and /v1/unload_lora_adapter exist
    # (ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING)
    runtime_lora: bool = False
    # POST /cohere/v2/chat exists (ACTORLLM_ENABLE_COHERE_API)
    cohere_api: bool = False
    # --enable-scale-out: render / generate / derender (generative models only)
    scale_out: bool = False
    # ACTORLLM_ENABLE_RESPONSES_API_STORE: /v1/responses may store and run in the background
    responses_store: bool = False
    # A gpt-oss (harmony) model: /v1/responses takes previous_input_messages (other
    # models: a 400 naming it)
    harmony: bool = False


def digits_below(n: int) -> str:
    """A regex matching the decimal numbers 0 .. n-1 (no leading zeros).

    >>> import re
    >>> [k for k in range(130) if re.fullmatch(digits_below(103), str(k))] == list(range(103))
    True
    """
    top = str(n - 1)
    alts = ["0"] if n >= 1 else []
    for width in range(1, len(top)):  # every shorter width, whole range
        alts.append("[1-9]" + "[0-9]" * (width - 1) if width > 1 else "[1-9]")
    # same width as n - 1: at each position, a smaller digit then anything, or equal
    for i, d in enumerate(top):
        lo = "1" if i == 0 else "0"
        if int(d) > int(lo):
            rest = "[0-9]" * (len(top) - i - 1)
            alts.append(f"{top[:i]}[{lo}-{int(d) - 1}]{rest}")
    if top != "0":
        alts.append(top)
    return "^(" + "|".join(dict.fromkeys(alts)) + ")$"


def fill_served(node: Any, served: Served) -> None:
    """Fill the ``x-served`` bounds in place (see protocol/bounds.py)."""
    if isinstance(node, list):
        for item in node:
            fill_served(item, served)
        return
    if not isinstance(node, dict):
        return
    kind = node.pop("x-served", None)
    if kind == "token":
        node["maximum"] = served.vocab_size - 1
    elif kind == "token_key":
        node["pattern"] = digits_below(served.vocab_size)
    elif kind == "max_tokens":
        node["maximum"] = served.max_model_len - 1  # the prompt takes at least one token
    elif kind == "max_model_len":  # a pooling truncation: the whole context at most
        node["maximum"] = served.max_model_len
    elif kind == "logprobs":  # -1 is the vocabulary size: within the limit or not
        limit = served.vocab_size if served.max_logprobs == -1 else served.max_logprobs
        node["maximum"] = limit
        node["minimum"] = -1 if served.vocab_size <= limit else 0
    elif kind == "priority" and served.scheduling_policy != "priority":
        node["minimum"] = node["maximum"] = 0
    for value in node.values():
        fill_served(value, served)


def restrict_to_served(components: dict[str, Any], served: Served) -> None:
    """Narrow the request schemas to what this server takes: ``chat_template`` only with
    --trust-request-chat-template, the pooling fields its model offers, and pooling
    ``messages`` only with a chat template to render them."""
    if not served.trust_request_chat_template:
        for name in ("ChatCompletionRequest", "TokenizeRequest", BATCH, "EmbeddingRequest",
                     "PoolingRequest", "ClassificationRequest"):  # fmt: skip
            components[name]["properties"]["chat_template"] = {
                "type": "null",
                "description": "Refused: the server was not started with "
                "--trust-request-chat-template.",
            }
    if served.pooling_tasks:
        _served_pooling(components, served)
    if not served.has_chat_template and not served.trust_request_chat_template:
        for name in ("EmbeddingRequest", "PoolingRequest", "ClassificationRequest"):
            components[name]["properties"]["messages"] = {
                "not": {},
                "description": "Refused: the tokenizer has no chat template.",
            }
            components[name]["oneOf"] = [{"required": ["input"]}]
    if not served.has_chat_template:  # /v2/embed takes no template of its own
        cohere = components["CohereEmbedRequest"]
        cohere["properties"]["inputs"] = {
            "type": "null",
            "description": "Refused: the tokenizer has no chat template to render inputs.",
        }
        cohere["oneOf"] = cohere["oneOf"][:1]  # texts only


def _served_pooling(components: dict[str, Any], served: Served) -> None:
    """The pooling fields whose values depend on the served model: the one task /pooling
    serves (the model's default, first), and ``dimensions`` (matryoshka models only, up to
    the embedding size)."""
    components["PoolingRequest"]["properties"]["task"] = {
        "anyOf": [{"enum": [served.pooling_tasks[0]]}, {"type": "null"}],
        "default": None,
    }
    for name, field in (("EmbeddingRequest", "dimensions"), ("PoolingRequest", "dimensions"),
                        ("CohereEmbedRequest", "output_dimension")):  # fmt: skip
        props = components[name]["properties"]
        if served.matryoshka:
            props[field]["anyOf"][0]["maximum"] = served.embedding_size
        else:
            props[field] = {
                "type": "null",
                "description": "Refused: the model has no matryoshka embeddings.",
            }
    _served_step_pooling(components["PoolingRequest"]["properties"], served.step_columns)
    kinds = list(served.input_types)
    components["CohereEmbedRequest"]["properties"]["input_type"] = (
        {"anyOf": [{"enum": kinds}, {"type": "null"}], "default": None}
        if kinds
        else {"type": "null", "description": "Refused: the model has no task instructions."}
    )


def _served_step_pooling(props: dict[str, Any], columns: int) -> None:
    """STEP pooling's fields: refused unless the model pools so; then the returned
    columns index its logits."""
    if not columns:
        for field in ("step_tag_id", "returned_token_ids"):
            props[field] = {
                "type": "null",
                "description": "Refused: the model's token pooling is not STEP.",
            }
        return
    props["returned_token_ids"] = {
        "anyOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 0,
                                        "maximum": columns - 1}},
            {"type": "null"},
        ],
        "default": None,
    }  # fmt: skip


def offers(needs: str, tasks: Sequence[str], cross_encoder: bool) -> bool:
    """Whether a pooling model with ``tasks`` (its pooling task first) offers what a
    pooling route ``needs`` (a task, "score" or "any"); the app's 404s
    (``app/served_routes.py``) ask this too."""
    if needs == "any":
        return bool(tasks)
    if needs == "score":  # by the pooling task (first): vLLM's enable_scoring_api
        return tasks[:1] in (("embed",), ("token_embed",)) or (
            tasks[:1] == ("classify",) and cross_encoder
        )
    return needs in tasks


def beside_pooling_task(needs: str, tasks: Sequence[str]) -> bool:
    """Whether a task route (embeddings, classification) asks for a task that is not the
    model's pooling task (``tasks``' first): vLLM mounts it without a handler, a 501."""
    return needs in ("embed", "classify") and tuple(tasks[:1]) != (needs,)


def pooling_served(needs: str, served: Served) -> bool:
    """Whether the documented model serves what a pooling route ``needs`` (embeddings and
    classification only as its pooling task: the app answers 501 otherwise, as vLLM)."""
    if beside_pooling_task(needs, served.pooling_tasks):
        return False
    return offers(needs, served.pooling_tasks, served.cross_encoder)
