"""The pooling endpoints, as vLLM 0.32 serves them: ``/v1/embeddings`` (OpenAI's),
``/pooling``, ``/classify``, ``/score`` (and ``/v1/score``), ``/rerank`` (and ``/v1/rerank``,
``/v2/rerank``: Cohere's and Jina's shape).

Inputs reuse the completion prompt forms (text, token ids, a batch of either); an embedding
or classification request may instead carry chat ``messages`` (rendered with the chat
template, as vLLM's chat-style embedding requests).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import msgspec

from actorllm.entrypoints.openai.protocol.bounds import MAX_I32, NonEmptyStr
from actorllm.entrypoints.openai.protocol.chat_request import Messages
from actorllm.entrypoints.openai.protocol.usage import UsageInfo

# -1: max_model_len; 0 is refused; above max_model_len too (vLLM's TokenizeParams)
Truncate = Annotated[int, msgspec.Meta(ge=-1, extra_json_schema={"x-served": "max_model_len"})]
Priority = Annotated[
    int, msgspec.Meta(ge=-MAX_I32, le=MAX_I32, extra_json_schema={"x-served": "priority"})
]
Dimensions = Annotated[int, msgspec.Meta(ge=1)]
# A pooling output on the wire (vLLM's; entrypoints/openai/pooling_encoding.py writes them)
EncodingFormat = Literal["float", "base64", "bytes", "bytes_only"]
EmbedDType = Literal["float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"]
Endianness = Literal["native", "little", "big"]
TextOrTexts = NonEmptyStr | Annotated[list[NonEmptyStr], msgspec.Meta(min_length=1)]


class _PoolingFields(msgspec.Struct, kw_only=True):
    """vLLM's ``PoolingBasicRequestMixin`` (the fields every pooling request shares)."""

    model: str | None = None
    user: str | None = None
    truncate_prompt_tokens: Truncate | None = None
    truncation_side: Literal["left", "right"] | None = None
    request_id: str | None = None
    priority: Priority = 0
    # vLLM's: only requests with the same salt share prefix-cache blocks (a decoder's
    # last-token pooling reads them); mixed into the prompt's block hashes, as generation's.
    cache_salt: NonEmptyStr | None = None


# The completion prompt forms, ids unbounded below: vLLM's pooling schema leaves them to
# the vocabulary check (a negative id is "out of vocabulary", as a too large one is).
_AnyId = Annotated[int, msgspec.Meta(ge=-MAX_I32 - 1, le=MAX_I32)]
PoolingPromptInput = (
    NonEmptyStr | Annotated[list[NonEmptyStr | _AnyId | list[_AnyId]], msgspec.Meta(min_length=1)]
)


class _InputFields(_PoolingFields, kw_only=True):
    """Exactly one of ``input`` (prompts) and ``messages`` (one chat, rendered)."""

    input: PoolingPromptInput | msgspec.UnsetType = msgspec.UNSET
    # vLLM's (transformers' names): max_length pads each prompt with the tokenizer's pad
    # token to the context length (models trained without an attention mask need it)
    padding: Literal["max_length", "do_not_pad"] | None = None
    messages: Messages | msgspec.UnsetType = msgspec.UNSET
    add_special_tokens: bool | None = None  # None: True for input, False for messages
    add_generation_prompt: bool = False
    continue_final_message: bool = False
    chat_template: NonEmptyStr | None = None
    chat_template_kwargs: dict[str, Any] | None = None


# The requests whose raw bodies vLLM checks for removed fields (``normalize``, old tasks):
# /v1/embeddings, /pooling, /classify (see removed_pooling_fields.py).
PoolingInputRequest = _InputFields


class EmbeddingRequest(_InputFields, kw_only=True):
    encoding_format: EncodingFormat = "float"
    dimensions: Dimensions | None = None
    use_activation: bool | None = None
    embed_dtype: EmbedDType = "float32"
    endianness: Endianness = "native"


class PoolingRequest(EmbeddingRequest, kw_only=True):
    # vLLM's names; plugin (an IOProcessor plugin's task) is refused by name
    task: Literal["embed", "classify", "token_embed", "token_classify", "plugin"] | None = None
    # PoolingParams' STEP pooling fields (a process reward model's): vLLM's /pooling does
    # not declare them (it drops them with a warning); here they are honoured on a model
    # whose token pooling is STEP and refused (400, naming them) on any other.
    step_tag_id: _AnyId | None = None
    returned_token_ids: list[_AnyId] | None = None


class ClassificationRequest(_InputFields, kw_only=True):
    use_activation: bool | None = None


# (no lower bound here: a negative one is refused in vLLM's words, score_limits.py)
_TokenLimit = Annotated[int, msgspec.Meta(le=MAX_I32, extra_json_schema={"minimum": 0})]


class _ScoringFields(_PoolingFields, kw_only=True):
    padding: Literal["do_not_pad"] | None = None  # a scored pair is not padded
    truncation_side: Literal["left"] | None = None  # a pair keeps its last tokens
    use_activation: bool | None = None
    # each query's / document's first N tokens only (0: all). A negative N, or one not
    # below the context, is engine/api/score_limits.py's 400 (vLLM's words): decoded here,
    # documented as 0 or more.
    max_tokens_per_query: _TokenLimit = 0
    max_tokens_per_doc: _TokenLimit = 0
    # score templates are not built: None only
    instruction: None = None
    chat_template_kwargs: None = None


# A score request's pairs of fields (one pair per request): its two sides
SCORE_PAIRS: tuple[tuple[str, str], ...] = (
    ("text_1", "text_2"),
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
)


class ScoreRequest(_ScoringFields, kw_only=True):
    """One pair of fields: ``text_1``/``text_2``, ``queries``/``documents``,
    ``queries``/``items`` or ``data_1``/``data_2`` (1:1, 1:N or N:N)."""

    text_1: TextOrTexts | msgspec.UnsetType = msgspec.UNSET
    text_2: TextOrTexts | msgspec.UnsetType = msgspec.UNSET
    queries: TextOrTexts | msgspec.UnsetType = msgspec.UNSET
    documents: TextOrTexts | msgspec.UnsetType = msgspec.UNSET
    items: TextOrTexts | msgspec.UnsetType = msgspec.UNSET
    data_1: TextOrTexts | msgspec.UnsetType = msgspec.UNSET
    data_2: TextOrTexts | msgspec.UnsetType = msgspec.UNSET


class RerankRequest(_ScoringFields, kw_only=True):
    query: NonEmptyStr
    documents: TextOrTexts
    # 0 or less: every document (vLLM's ``top_n if top_n > 0 else len(documents)``; a
    # client's -1 "all" is not a 400 there)
    top_n: Annotated[int, msgspec.Meta(ge=-MAX_I32, le=MAX_I32)] = 0
    return_documents: bool = True  # Cohere's and Jina's; vLLM always returns them


# -- responses ---------------------------------------------------------------------------


def _now() -> int:
    return int(time.time())


class EmbeddingResponseData(msgspec.Struct, kw_only=True):
    index: int
    object: str = "embedding"
    embedding: list[float] | str  # str: base64 of the little/big-endian float32 values


class EmbeddingResponse(msgspec.Struct, kw_only=True):
    id: str
    object: str = "list"
    created: int = msgspec.field(default_factory=_now)
    model: str
    data: list[EmbeddingResponseData]
    usage: UsageInfo


class PoolingResponseData(msgspec.Struct, kw_only=True):
    index: int
    object: str = "pooling"
    data: list[Any] | str  # [dim] floats, [num_tokens, dim] (token_embed), or base64


class PoolingResponse(msgspec.Struct, kw_only=True):
    id: str
    object: str = "list"
    created: int = msgspec.field(default_factory=_now)
    model: str
    data: list[PoolingResponseData]
    usage: UsageInfo


class ClassificationData(msgspec.Struct, kw_only=True):
    index: int
    label: str | None
    probs: list[float]
    num_classes: int


class ClassificationResponse(msgspec.Struct, kw_only=True):
    id: str
    object: str = "list"
    created: int = msgspec.field(default_factory=_now)
    model: str
    data: list[ClassificationData]
    usage: UsageInfo


class ScoreResponseData(msgspec.Struct, kw_only=True):
    index: int
    object: str = "score"
    score: float


class ScoreResponse(msgspec.Struct, kw_only=True):
    id: str
    object: str = "list"
    created: int = msgspec.field(default_factory=_now)
    model: str
    data: list[ScoreResponseData]
    usage: UsageInfo


class RerankDocument(msgspec.Struct, kw_only=True):
    text: str | None = None


class RerankResult(msgspec.Struct, kw_only=True):
    index: int
    document: RerankDocument | None
    relevance_score: float


class RerankUsage(msgspec.Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class RerankResponse(msgspec.Struct, kw_only=True):
    id: str
    model: str
    usage: RerankUsage
    results: list[RerankResult]
