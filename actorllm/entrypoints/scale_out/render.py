"""The render routes: a request rendered to the token ids and sampling parameters the
engine would run, without running it (vLLM's ``/v1/chat/completions/render``,
``/v1/completions/render``; ``/v1/messages/render``, ``/v1/responses/render`` and
``/cohere/v2/chat/render`` convert to a chat request first, as their own routes do).

Rendering is the plain route's own request building (``plan_chat``, ``plan_completion``),
so a rendered request generates exactly what the plain route would.
"""

from __future__ import annotations

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.api.request_fields import check_priority
from actorllm.engine.scheduling.structured_outputs import reasoning_gate_for
from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.openai.lora_models import resolve_model
from actorllm.entrypoints.openai.preprocess import Prompt
from actorllm.entrypoints.openai.protocol.chat_request import ChatCompletionRequest
from actorllm.entrypoints.openai.protocol.completion import CompletionRequest, prompt_batch
from actorllm.entrypoints.openai.protocol.sampling_fields import StreamOptions
from actorllm.entrypoints.openai.reasoning_start import reasoning_ended
from actorllm.entrypoints.openai.sampling import check_generative, new_request_id
from actorllm.entrypoints.openai.serving_chat import OutputBudget, plan_chat
from actorllm.entrypoints.openai.serving_common import ServingContext
from actorllm.entrypoints.openai.serving_completion import plan_completion
from actorllm.entrypoints.scale_out.protocol import GenerateRequest
from actorllm.entrypoints.scale_out.token_offsets import Span, token_offsets
from actorllm.entrypoints.scale_out.vllm_sampling import to_wire

_NO_BEAM = "Beam search is not supported by the render endpoint"


def _rendered(
    request_id: str,
    prompt: Prompt,
    params: SamplingParams,
    *,
    model: str | None,
    stream: bool,
    stream_options: StreamOptions | None,
    cache_salt: str | None,
    priority: int,
    field: str,
    vocab_size: int,
    offsets: list[Span] | None = None,
) -> GenerateRequest:
    if prompt.embeds is not None:
        raise bad_request(
            "prompt embeddings cannot be rendered to token ids: /inference/v1/generate "
            "takes token ids only.",
            field,
        )
    if not prompt.token_ids:
        raise bad_request("No token_ids rendered")
    params.verify_vocab(vocab_size)  # the engine's own check, so generate takes it as is
    return GenerateRequest(
        request_id=request_id,
        token_ids=list(prompt.token_ids),
        token_offsets=offsets,
        sampling_params=to_wire(params),
        model=model,
        stream=stream,
        stream_options=stream_options if stream else None,
        cache_salt=cache_salt,
        priority=priority,
    )


async def render_chat(
    ctx: ServingContext,
    req: ChatCompletionRequest,
    *,
    request_id: str | None = None,
    budget: OutputBudget | None = None,
) -> GenerateRequest:
    """The chat request as the engine would get it (``request_id``: the id another API on
    the chat path gives it; ``budget``: how that API sizes the output). Raises APIError
    (400/404)."""
    resolve_model(req.model, ctx.engine)  # 404 for a name not served
    check_generative(ctx.engine)
    check_priority(req.priority, ctx.engine.config)  # generate here would refuse it
    if req.use_beam_search:
        raise bad_request(_NO_BEAM, "use_beam_search")
    rendered, params = await plan_chat(ctx, req, budget=budget)
    offsets = None
    if req.return_token_offsets:  # spans in the templated prompt
        offsets = token_offsets(
            ctx.engine.tokenizer,
            rendered.text,
            rendered.prompt.token_ids,
            add_special_tokens=req.add_special_tokens,
            truncation_side=req.truncation_side,
        )
    out = _rendered(
        request_id or new_request_id("chatcmpl", req.request_id),
        rendered.prompt,
        params,
        model=req.model,
        stream=bool(req.stream),
        stream_options=req.stream_options,
        cache_salt=req.cache_salt,
        priority=req.priority,
        field="messages",
        vocab_size=ctx.engine.vocab_size,
        offsets=offsets,
    )
    if reasoning_gate_for(ctx.engine.config, ctx.engine.tokenizer) is not None:
        # What the engine will find (vLLM's resolved value: True where the answer starts
        # at once).
        ended = reasoning_ended(
            ctx.engine, ctx.chat.reasoning_parser, rendered.template_kwargs, out.token_ids
        )
        out.reasoning_ended = ended is True
    return out


async def render_completion(ctx: ServingContext, req: CompletionRequest) -> list[GenerateRequest]:
    """One rendered request per prompt (``cmpl-<id>``, ``cmpl-<id>-<i>`` for several).
    Raises APIError (400/404)."""
    resolve_model(req.model, ctx.engine)
    check_generative(ctx.engine)
    check_priority(req.priority, ctx.engine.config)
    if req.use_beam_search:
        raise bad_request(_NO_BEAM, "use_beam_search")
    planned = await plan_completion(ctx, req)
    base = new_request_id("cmpl", req.request_id)
    texts = _source_texts(req, len(planned))
    return [
        _rendered(
            base if len(planned) == 1 else f"{base}-{i}",
            prompt,
            params,
            model=req.model,
            stream=bool(req.stream),
            stream_options=req.stream_options,
            cache_salt=req.cache_salt,
            priority=req.priority,
            field="prompt_embeds",
            vocab_size=ctx.engine.vocab_size,
            offsets=token_offsets(
                ctx.engine.tokenizer,
                texts[i],
                prompt.token_ids,
                add_special_tokens=req.add_special_tokens,
                truncation_side=req.truncation_side,
            )
            if req.return_token_offsets
            else None,
        )
        for i, (prompt, params) in enumerate(planned)
    ]


def _source_texts(req: CompletionRequest, n: int) -> list[str | None]:
    """The text each of the ``n`` planned prompts was tokenized from (None: token ids or
    embeddings, which plan first)."""
    batch = prompt_batch(req.prompt) if req.prompt not in (None, "") else []
    texts = [p if isinstance(p, str) else None for p in batch]
    return [None] * (n - len(texts)) + texts
