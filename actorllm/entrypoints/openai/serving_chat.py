"""POST /v1/chat/completions: messages through the chat template, OpenAI's chat response.

Streaming sends, per choice, a first chunk with ``role`` (``--response-role``), then content deltas;
the finish reason rides on the chunk that carries the last delta.

Tools and reasoning (docs/tool_calling.md): ``tools`` go to the chat template; each
choice's text is split by a :class:`ChoiceParser` into ``reasoning_content`` (with
``--reasoning-parser``), ``content`` and ``tool_calls``, whole or as deltas.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.responses import Response

from actorllm.core.chat_template import renders_tools
from actorllm.core.harmony import HarmonyMessage
from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.api.request_fields import check_priority
from actorllm.entrypoints.openai import harmony_chat
from actorllm.entrypoints.openai.beam_request import beam_params
from actorllm.entrypoints.openai.chat_embeds import embeds_parts, spliced_prompt
from actorllm.entrypoints.openai.chat_outputs import ChoiceParser, Delta
from actorllm.entrypoints.openai.errors import APIError, bad_request
from actorllm.entrypoints.openai.harmony_outputs import HarmonyChoiceParser
from actorllm.entrypoints.openai.input_work import messages_chars, run_input_work
from actorllm.entrypoints.openai.kv_transfer import reused_prompt_ids
from actorllm.entrypoints.openai.logprobs import TokenText, chat_logprobs, prompt_logprobs
from actorllm.entrypoints.openai.lora_models import lora_options, resolve_model
from actorllm.entrypoints.openai.preprocess import (
    Prompt,
    content_text,
    effort_kwargs,
    encode,
    fit_max_tokens,
    refuse_beside_embeds,
    render_chat,
    truncate,
)
from actorllm.entrypoints.openai.protocol.chat_request import (
    AssistantMessage,
    ChatCompletionRequest,
    PromptEmbedsContentPart,
    ToolCall,
)
from actorllm.entrypoints.openai.protocol.chat_response import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatResponseMessage,
    DeltaMessage,
    DeltaToolCall,
)
from actorllm.entrypoints.openai.protocol.logprobs import ChatLogProbs, PromptLogprobsOut
from actorllm.entrypoints.openai.protocol.usage import UsageInfo
from actorllm.entrypoints.openai.reasoning_start import reasoning_ended
from actorllm.entrypoints.openai.reasoning_usage import (
    ReasoningCounter,
    completion_details,
    reasoning_counter,
)
from actorllm.entrypoints.openai.sampling import (
    chat_max_tokens,
    chat_params,
    check_generative,
    constraint_field,
    new_request_id,
)
from actorllm.entrypoints.openai.serving_common import (
    ServingContext,
    ServingDefaults,
    UsageTracker,
    json_response,
    usage_options,
)
from actorllm.entrypoints.openai.sse import Emit, SSEResponse
from actorllm.entrypoints.openai.streams import PrimedStream, prime_all, pump, unless_disconnected
from actorllm.entrypoints.openai.structured_request import ToolPlan, client_error, plan_tools
from actorllm.entrypoints.openai.tool_parsers import NamedToolParser
from actorllm.entrypoints.routed_experts import routed_experts_b64


async def create_chat_completion(
    ctx: ServingContext, req: ChatCompletionRequest, receive: Any
) -> Response:
    """Serve one chat request. Raises APIError / ValueError for bad input (400/404),
    ClientDisconnected if the client leaves before the first output."""
    ctx.engine.check_admission(req.n)  # vLLM's queue limits: a 503 before anything starts
    state, streams, _ = await start_chat(ctx, req, receive)
    if req.stream:
        return SSEResponse(
            lambda emit: state.stream(streams, emit),
            is_dead=ctx.is_dead,
            keep_alive_s=ctx.defaults.sse_keep_alive_s,
        )
    await unless_disconnected(receive, lambda: pump(streams, state.collect))
    ctx.defaults.log_outputs_of(state.id, state.choices)
    return json_response(state.response())


@dataclass(frozen=True, slots=True)
class OutputBudget:
    """How another API on the chat path (``/v1/responses``) sizes the output, as vLLM's
    does there: a prompt that fills the context is a 400 naming ``param`` (vLLM's words),
    and the asked ``max_tokens`` is cut to the room the prompt leaves."""

    asked: int | None
    param: str


def _clamped(budget: OutputBudget, prompt_len: int, max_model_len: int) -> int:
    if prompt_len >= max_model_len:
        raise APIError(
            400,
            f"The engine prompt length {prompt_len} exceeds the max_model_len "
            f"{max_model_len}. Please reduce prompt.",
            budget.param,
        )
    room = max_model_len - prompt_len
    return room if budget.asked is None else min(budget.asked, room)


async def start_chat(
    ctx: ServingContext,
    req: ChatCompletionRequest,
    receive: Any,
    *,
    budget: OutputBudget | None = None,
    request_id: str | None = None,
    harmony_history: Sequence[HarmonyMessage] = (),
) -> tuple[ChatState, list[PrimedStream], SamplingParams]:
    """Render, tokenize and submit a chat request; the state that reads its outputs, the
    primed engine streams and the sampling parameters sent. ``request_id``: the engine
    request's id (default: a new ``chatcmpl-`` one); ``harmony_history``: on a gpt-oss
    model, harmony messages before the chat's (the Responses API's
    ``previous_input_messages``)."""
    engine = ctx.engine
    lora = resolve_model(req.model, engine)  # 404 for a name not served
    check_generative(engine)
    check_priority(req.priority, engine.config)  # vLLM: non-zero only under the priority policy
    rendered_chat, params = await plan_chat(
        ctx, req, budget=budget, harmony_history=harmony_history
    )
    tool_plan, prompt = rendered_chat.tool_plan, rendered_chat.prompt
    rid = request_id or new_request_id("chatcmpl", req.request_id)
    # A spec that does not compile is a 400 naming the field the client sent it in.
    forced = tool_plan.forced_schema is not None or tool_plan.strict_tag is not None
    if req.use_beam_search:
        beams = beam_params(
            req, params, constraint_field=constraint_field(req, forced),
            max_logprobs=engine.config.max_logprobs,
        )  # fmt: skip
        it = engine.beam_search(
            prompt.engine_input(req.cache_salt), beams, rid, priority=req.priority,
            logprobs=params.logprobs, lora_request=lora,
        )  # fmt: skip
    else:
        ended = None
        if params.structured_outputs is not None:  # where the constraint starts
            ended = reasoning_ended(
                engine, ctx.chat.reasoning_parser, rendered_chat.template_kwargs, prompt.token_ids
            )
        it = engine.generate(
            prompt.engine_input(req.cache_salt), params, request_id=rid, priority=req.priority,
            reasoning_ended=ended, **lora_options(lora),
        )  # fmt: skip
    with client_error(constraint_field(req, forced)):
        streams = await unless_disconnected(receive, lambda: prime_all([it]))
    model = engine.model_name if lora is None else lora.lora_name
    state = new_chat_state(ctx, req, rendered_chat, rid=rid, model=model)
    return state, streams, params


def new_chat_state(
    ctx: ServingContext, req: ChatCompletionRequest, rendered: RenderedChat, *, rid: str, model: str
) -> ChatState:
    """The state that turns a rendered chat request's engine outputs into OpenAI's answer
    (``/v1/chat/completions/derender`` feeds it a generate response's outputs)."""
    tool_plan, text, prompt = rendered.tool_plan, rendered.text, rendered.prompt
    last = req.messages[-1]
    return ChatState(
        req=req,
        id=rid,
        model=model,
        text=TokenText(ctx.engine.tokenizer, as_ids=_as_ids(ctx, req.return_tokens_as_token_ids)),
        defaults=ctx.defaults,
        # vLLM's chat echo: the last message's content leads the reply when it has its role.
        echo=content_text(last.content) if req.echo and isinstance(last, AssistantMessage) else "",
        prompt_token_ids=prompt.token_ids if req.return_token_ids else None,
        num_prompt_tokens=len(prompt.token_ids),
        prompt_text=text if req.return_prompt_text else None,
        role=ctx.response_role,
        new_parser=_parser_factory(ctx, tool_plan, rendered.template_kwargs),
        # OpenAI: "tool_calls" when the model called tools, "stop" for a forced named call.
        calls_finish=tool_plan.parser is not None
        and not isinstance(tool_plan.parser, NamedToolParser),
        harmony_prompt=rendered.harmony_prompt,
        count_reasoning=(
            reasoning_counter(ctx.engine.tokenizer)
            if ctx.chat.reasoning_parser is not None or ctx.chat.harmony
            else None
        ),
    )


async def plan_chat(
    ctx: ServingContext,
    req: ChatCompletionRequest,
    *,
    budget: OutputBudget | None = None,
    harmony_history: Sequence[HarmonyMessage] = (),
) -> tuple[RenderedChat, SamplingParams]:
    """The prompt and the sampling parameters :func:`start_chat` submits, built without
    submitting them (``/v1/chat/completions/render`` answers them). Raises APIError /
    ValueError for bad input."""
    engine = ctx.engine
    kind = RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY
    harmony = ctx.chat.harmony
    rendered_chat = await render_chat_request(ctx, req, harmony_history=harmony_history)
    tool_plan, prompt = rendered_chat.tool_plan, rendered_chat.prompt
    asked = chat_max_tokens(req) if budget is None else budget.asked
    if budget is not None:
        max_tokens = _clamped(budget, len(prompt.token_ids), engine.max_model_len)
    else:
        max_tokens = fit_max_tokens(len(prompt.token_ids), asked, engine.max_model_len, "messages")
    if asked is None and "max_tokens" in ctx.defaults.sampling:  # generation config's cap
        max_tokens = min(max_tokens, int(ctx.defaults.sampling["max_tokens"]))
    params = chat_params(
        req,
        max_tokens=max_tokens,
        output_kind=kind,
        forced_tool_schema=tool_plan.forced_schema,
        strict_tools_tag=tool_plan.strict_tag,
        keep_special_tokens=(
            harmony
            or (tool_plan.parser is not None and tool_plan.parser.keeps_special_tokens)
            or (
                ctx.chat.reasoning_parser is not None
                and ctx.chat.reasoning_parser.keeps_special_tokens
            )
        ),
        defaults=ctx.defaults.sampling,
        logprob_limits=(engine.config.max_logprobs, engine.vocab_size),
    )
    if harmony:
        assert params.stop_token_ids is not None
        params.stop_token_ids += harmony_chat.stop_token_ids(engine.tokenizer)
        if req.tool_choice == "required":
            params.bad_words_token_ids = harmony_chat.required_call_bans(engine.tokenizer)
    return rendered_chat, params


@dataclass(frozen=True, slots=True)
class RenderedChat:
    """A chat request's prompt as the engine gets it, and how its tools are served."""

    tool_plan: ToolPlan
    text: str  # the rendered template ("" when the prompt came as token ids)
    prompt: Prompt  # truncated as the request asked
    harmony_prompt: harmony_chat.HarmonyPrompt | None  # a gpt-oss model's
    # The chat_template_kwargs the template got (the request's over the server's defaults,
    # reasoning_effort's enable_thinking): the reasoning parser's thinking switch.
    template_kwargs: dict[str, Any] | None = None


async def render_chat_request(
    ctx: ServingContext,
    req: ChatCompletionRequest,
    *,
    harmony_history: Sequence[HarmonyMessage] = (),
) -> RenderedChat:
    """Plan the tools and render and tokenize the prompt, as :func:`start_chat` submits it
    (``/v1/messages/count_tokens`` counts it). Raises APIError / ValueError for bad input."""
    engine = ctx.engine
    harmony = ctx.chat.harmony
    if harmony:
        harmony_chat.check_request(req)
    if harmony and req.tool_choice == "required":
        # The calls are read from harmony's headers; no argument grammar is forced.
        tool_plan = harmony_chat.required_plan(_tool_fields(req), engine.tokenizer)
    else:
        tool_plan = plan_tools(_tool_fields(req), ctx.chat.tools, engine.tokenizer)
    if req.tool_choice == "none" and ctx.defaults.exclude_tools_when_tool_choice_none:
        tool_plan = dataclasses.replace(tool_plan, template_tools=None)
    template = ctx.defaults.request_chat_template(req.chat_template)
    if (
        not harmony
        and tool_plan.forced_schema is not None
        and not renders_tools(template or getattr(engine.tokenizer, "chat_template", None))
    ):
        # A template that cannot show tools (vLLM serves this too): the grammar alone
        # forces the call, so the tools stay out of the prompt instead of being refused.
        tool_plan = dataclasses.replace(tool_plan, template_tools=None)
    template_kwargs = effort_kwargs(
        ctx.defaults.template_kwargs(req.chat_template_kwargs),
        req.reasoning_effort,
        req.chat_template_kwargs,
    )

    spec = engine.prompt_embeds_spec
    parts = embeds_parts(req.messages, spec)  # prompt_embeds content parts, checked
    if parts:
        _refuse_beside_parts(req)

    rendered_harmony: list[harmony_chat.HarmonyPrompt] = []
    reused = reused_prompt_ids(
        req.kv_transfer_params, echo=req.echo, has_embeds=bool(parts), vocab_size=engine.vocab_size
    )

    def render() -> tuple[str, Prompt]:
        if reused is not None:  # the prefill stage's ids: no template, no tokenizer
            return "", Prompt(None, reused)
        if harmony:
            hp = harmony_chat.render_prompt(
                engine.tokenizer, req.messages, tools=tool_plan.template_tools,
                reasoning_effort=req.reasoning_effort, history=harmony_history,
            )  # fmt: skip
            rendered_harmony.append(hp)
            return hp.prompt.text or "", hp.prompt
        text = render_chat(
            engine.tokenizer,
            req.messages,
            add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message,
            documents=req.documents,
            chat_template_kwargs=template_kwargs,
            tools=tool_plan.template_tools,
            chat_template=template,
            embeds_parts=True,
        )
        if parts:
            return text, spliced_prompt(
                text, parts, spec, engine.tokenizer, add_special_tokens=req.add_special_tokens
            )
        ids = encode(engine.tokenizer, text, add_special_tokens=req.add_special_tokens)
        return text, Prompt(text, ids)

    size = messages_chars(req.messages) + sum(len(p.data or "") for p in parts)
    text, rendered = await run_input_work(render, size, ctx.input_limiter)
    prompt = truncate(
        rendered, req.truncate_prompt_tokens, engine.max_model_len, req.truncation_side
    )
    return RenderedChat(
        tool_plan, text, prompt, rendered_harmony[0] if rendered_harmony else None, template_kwargs
    )


def _refuse_beside_parts(req: ChatCompletionRequest) -> None:
    """What a chat with ``prompt_embeds`` parts cannot have: a 400 naming the field."""
    refuse_beside_embeds(req.truncate_prompt_tokens, req.use_beam_search)
    last = req.messages[-1]
    echoed = last.content if req.echo and isinstance(last, AssistantMessage) else None
    if isinstance(echoed, list) and any(isinstance(p, PromptEmbedsContentPart) for p in echoed):
        raise bad_request("echo cannot repeat a prompt_embeds content part.", "echo")


def _as_ids(ctx: ServingContext, asked: bool) -> bool:
    return asked or ctx.defaults.return_tokens_as_token_ids


def _tool_fields(req: ChatCompletionRequest) -> dict[str, Any]:
    return {
        "tools": msgspec.to_builtins(req.tools) if req.tools else None,
        "tool_choice": msgspec.to_builtins(req.tool_choice),
        "parallel_tool_calls": req.parallel_tool_calls,
    }


def _parser_factory(
    ctx: ServingContext, plan: ToolPlan, template_kwargs: dict[str, Any] | None
) -> Callable[[], ChoiceParser]:
    """A fresh :class:`ChoiceParser` per choice (streaming parsers hold state); the
    reasoning parser thinks as ``template_kwargs`` (the effective chat_template_kwargs) say."""
    reasoning_cls = ctx.chat.reasoning_parser
    tools = plan.parser
    if ctx.chat.harmony:
        return lambda: HarmonyChoiceParser(tools is not None, single_call=not plan.parallel)

    def new() -> ChoiceParser:  # tool parsers are stateless; the streamers are per choice
        reasoning = reasoning_cls(ctx.engine.tokenizer, template_kwargs) if reasoning_cls else None
        return ChoiceParser(reasoning, tools, single_call=not plan.parallel)

    return new


@dataclass(slots=True)
class ChatChoiceState:
    """One choice's text so far, its parser and how it finished."""

    parser: ChoiceParser
    text: str = ""
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: ChatLogProbs | None = None
    token_ids: list[int] = field(default_factory=list)
    routed_experts: str | None = None  # base64 .npy, from the final output


@dataclass(slots=True)
class ChatState:
    """One chat request's outputs as they come: :meth:`apply` folds each engine output
    in (and returns the stream's fragments), :meth:`response` builds the answer."""

    req: ChatCompletionRequest
    id: str
    model: str
    text: TokenText
    role: str  # --response-role
    echo: str  # prepended to every choice's content
    prompt_token_ids: list[int] | None  # return_token_ids: sent once
    prompt_text: str | None  # return_prompt_text: the rendered template, sent once
    new_parser: Callable[[], ChoiceParser]  # reasoning / tool-call parsing, one per choice
    defaults: ServingDefaults  # the server-wide options (--enable-force-include-usage, ...)
    calls_finish: bool  # a choice that called tools finishes with "tool_calls"
    # A gpt-oss model's prompt and its messages (the Responses API's input_messages).
    harmony_prompt: harmony_chat.HarmonyPrompt | None = None
    # With a reasoning parser: usage's completion_tokens_details.reasoning_tokens (vLLM's)
    count_reasoning: ReasoningCounter | None = None
    num_prompt_tokens: int = 0  # the role chunks' usage, when every chunk carries it
    prompt_logprobs: PromptLogprobsOut | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    usage: UsageTracker = field(default_factory=UsageTracker)
    choices: dict[int, ChatChoiceState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.usage.details = self.defaults.prompt_tokens_details

    def _logprobs(self, co: CompletionOutput) -> ChatLogProbs | None:
        if not self.req.logprobs or co.logprobs is None:
            return None
        ids = self.req.logprob_token_ids  # every entry shown: the sampled token and the ids
        k = len(ids) + 1 if ids else self.req.top_logprobs or 0
        return chat_logprobs(co.token_ids, co.logprobs, k, self.text)

    def apply(self, out: RequestOutput, *, delta: bool) -> list[ChatChunkChoice]:
        self.usage.update(0, out, delta=delta)
        if self.req.prompt_logprobs is not None and out.prompt_logprobs:
            self.prompt_logprobs = prompt_logprobs(out.prompt_logprobs, self.text)
        fragments = []
        for co in out.outputs:
            choice = self.choices.get(co.index)
            if choice is None:
                choice = self.choices[co.index] = ChatChoiceState(self.new_parser())
            logprobs = self._logprobs(co)
            ids = list(co.token_ids) if self.req.return_token_ids else None
            if delta:
                choice.token_ids += ids or []
                choice.text += co.text
                if logprobs is not None:
                    prev = choice.logprobs.content if choice.logprobs else None
                    choice.logprobs = ChatLogProbs(content=(prev or []) + (logprobs.content or []))
            else:
                choice.text, choice.logprobs, choice.token_ids = co.text, logprobs, ids or []
            if co.finish_reason is not None:
                choice.finish_reason, choice.stop_reason = co.finish_reason, co.stop_reason
            if co.routed_experts is not None:  # (vLLM sends them in whole responses only)
                choice.routed_experts = routed_experts_b64(co.routed_experts)
            if not delta:
                continue
            parsed = self._delta(
                choice.parser.delta(choice.text, final=co.finish_reason is not None)
            )
            finish = co.finish_reason
            if finish == "stop" and self.calls_finish and choice.parser.tools_called:
                finish = "tool_calls"
            if co.token_ids and parsed == DeltaMessage() and choice.parser.plain:
                # A new token is a chunk even when its text is empty (vLLM's, with no
                # reasoning or tool parser: those say when they have nothing to send).
                parsed = DeltaMessage(content="")
            if parsed != DeltaMessage() or finish or logprobs or ids:
                fragments.append(
                    ChatChunkChoice(
                        index=co.index,
                        delta=parsed,
                        logprobs=logprobs,
                        finish_reason=finish,
                        stop_reason=co.stop_reason,
                        token_ids=ids,
                    )
                )
        return fragments

    def _delta(self, d: Delta) -> DeltaMessage:
        return DeltaMessage(
            content=d.content,
            reasoning_content=d.reasoning_content if self.req.include_reasoning else None,
            tool_calls=[
                msgspec.convert(msgspec.to_builtins(t), DeltaToolCall) for t in d.tool_calls
            ]
            or None,
        )

    async def collect(self, _i: int, out: RequestOutput) -> None:
        self.apply(out, delta=False)

    async def stream(self, streams: list[PrimedStream], emit: Emit) -> None:
        final_usage, every_chunk = usage_options(
            self.req.stream_options, force=self.defaults.force_include_usage
        )
        for j in range(self.req.n):
            delta = DeltaMessage(role=self.role, content=self.echo)
            chunk = self._chunk([ChatChunkChoice(index=j, delta=delta)])
            if every_chunk:  # vLLM's: the prompt counted, nothing generated yet
                n = self.num_prompt_tokens
                chunk.usage = UsageInfo(prompt_tokens=n, completion_tokens=0, total_tokens=n)
            if j == 0:
                chunk.prompt_token_ids, chunk.prompt_text = self.prompt_token_ids, self.prompt_text
            await emit(chunk)

        fingerprint = self.defaults.system_fingerprint

        async def on_output(_i: int, out: RequestOutput) -> None:
            fragments = self.apply(out, delta=True)
            fresh = self.prompt_logprobs if out.prompt_logprobs else None  # first chunk only
            for fragment in fragments:
                chunk = self._chunk([fragment], usage=every_chunk, prompt_logprobs=fresh)
                if fragment.finish_reason is not None and not final_usage:
                    chunk.system_fingerprint = fingerprint  # (vLLM's: a choice's last chunk)
                await emit(chunk)
                fresh = None

        await pump(streams, on_output)
        self.defaults.log_outputs_of(self.id, self.choices)
        if final_usage:
            last = self._chunk([], usage=True)
            last.system_fingerprint = fingerprint
            await emit(last)

    def _choice(self, index: int, c: ChatChoiceState) -> ChatChoice:
        m = c.parser.message(c.text)
        content = self.echo + m.content if m.content is not None else (self.echo or None)
        calls = [msgspec.convert(msgspec.to_builtins(t), ToolCall) for t in m.tool_calls]
        finish = c.finish_reason
        if finish == "stop" and calls and self.calls_finish:
            finish = "tool_calls"
        return ChatChoice(
            index=index,
            message=ChatResponseMessage(
                role=self.role,
                content=content,
                reasoning_content=m.reasoning_content if self.req.include_reasoning else None,
                tool_calls=calls,
            ),
            logprobs=c.logprobs,
            finish_reason=finish,
            stop_reason=c.stop_reason,
            token_ids=c.token_ids if self.req.return_token_ids else None,
            routed_experts=c.routed_experts,
        )

    def _chunk(
        self,
        choices: list[ChatChunkChoice],
        usage: bool = False,
        prompt_logprobs: PromptLogprobsOut | None = None,
    ) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=self.usage_info() if usage else None,
            prompt_logprobs=prompt_logprobs,
        )

    def usage_info(self) -> UsageInfo:
        """The usage so far, with the reasoning tokens of each choice's text so far."""
        usage = self.usage.info()
        usage.completion_tokens_details = completion_details(
            self.count_reasoning,
            (c.parser.message(c.text).reasoning_content for c in self.choices.values()),
            usage.completion_tokens,
        )
        return usage

    def response(self) -> ChatCompletionResponse:
        choices = [self._choice(index, c) for index, c in sorted(self.choices.items())]
        return ChatCompletionResponse(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=self.usage_info(),
            system_fingerprint=self.defaults.system_fingerprint,
            prompt_logprobs=self.prompt_logprobs,
            prompt_token_ids=self.prompt_token_ids,
            prompt_text=self.prompt_text,
        )
