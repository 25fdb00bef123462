"""``generate``, ``chat``, ``abort`` and ``drain``: the request side of ``AsyncEngine``.

A request is opened in the ledger (its caller's stream) before any actor sees it, then
sent to the input processor; its outputs come back on that stream. Cancelling the
iterating task, or closing the iterator early, aborts the request and frees its KV blocks.

:class:`RequestAPI` is a component of ``AsyncEngine`` (which delegates these methods to
it): it holds the engine's parts, the shared :class:`EngineStatus`, and how to make the
default sampling parameters, all handed to it at construction.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, final

import anyio

from actorllm.core.input_processor import PromptType
from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import RequestOutput
from actorllm.core.pooling_params import PoolingParams
from actorllm.core.prompt_embeds import PromptEmbeds
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.actors.messages import Abort, ChatOptions, Generate
from actorllm.engine.api.admission_limits import check_admission, queued_tokens
from actorllm.engine.api.chat_embeds import chat_embeds_prompt, has_embeds_parts
from actorllm.engine.api.engine_status import EngineStatus, live_replicas
from actorllm.engine.api.overload import check_waiting_bound
from actorllm.engine.api.pooling_outputs import PoolingOutput, PoolingRequestOutput
from actorllm.engine.api.pooling_requests import check_pooling, pooling_sampling_params
from actorllm.engine.api.prompt_embeds import has_prompt_embeds, prompt_embeds_of
from actorllm.engine.api.request_fields import check_priority, monotonic_arrival
from actorllm.engine.errors import EngineDeadError, InvalidRequestError, RequestFailedError

if TYPE_CHECKING:
    from actorllm.engine.actors.assembly import EngineParts
    from actorllm.engine.api.lora_api import LoRAAdapters


@final
class RequestAPI:
    """The request side of one ``AsyncEngine``."""

    def __init__(
        self,
        parts: EngineParts,
        status: EngineStatus,
        default_params: Callable[[], SamplingParams],
        loras: LoRAAdapters,
    ) -> None:
        self._parts = parts
        self._ctx = parts.ctx  # the first replica's: the shared ledger and refs
        self._status = status  # shared with the control plane; drain() closes it
        self._default_params = default_params  # AsyncEngine.get_default_sampling_params
        self._loras = loras  # the adapters requests may name

    @property
    def is_dead(self) -> bool:
        return self._status.is_dead

    def generate(
        self,
        prompt: PromptType,
        sampling_params: SamplingParams | None = None,
        request_id: str | None = None,
        priority: int = 0,
        *,
        arrival_time: float | None = None,
        lora_request: LoRARequest | None = None,
        reasoning_ended: bool | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Outputs of one request as it runs (see ``SamplingParams.output_kind``). A caller
        that falls behind the engine reads the outputs it missed merged into one (DELTA
        pieces joined, CUMULATIVE the newest), as vLLM's ``AsyncLLM`` does.

        ``priority`` (lower runs first) needs ``scheduling_policy="priority"`` unless it is
        0. ``arrival_time`` is when the request arrived, in ``time.time()`` seconds (vLLM's
        convention; default: now): it orders the waiting queue and starts the queue-time
        and latency metrics.

        ``lora_request``: run with that LoRA adapter (``enable_lora``); one not added yet is
        added first (a bad one raises ``InvalidRequestError`` naming it).

        ``reasoning_ended`` (vLLM's; with a reasoning parser and structured outputs): True
        constrains the output from its first token, False only after its reasoning ends;
        None (default) lets the engine read the prompt (the server decides it from the
        request's ``chat_template_kwargs``).

        Without ``sampling_params``: :meth:`get_default_sampling_params` (the model's
        generation_config defaults). Invalid input raises ``InvalidRequestError`` (a
        ``ValueError``) on the first iteration; a dead engine raises ``EngineDeadError``.
        """
        return self._request(
            prompt, sampling_params, request_id, priority, chat=None, arrival_time=arrival_time,
            lora_request=lora_request, reasoning_ended=reasoning_ended,
        )  # fmt: skip

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        sampling_params: SamplingParams | None = None,
        request_id: str | None = None,
        priority: int = 0,
        *,
        add_generation_prompt: bool = True,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        lora_request: LoRARequest | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Like :meth:`generate`, for a conversation rendered with the chat template
        (``tools``: OpenAI function tools, handed to the template)."""
        options = ChatOptions(
            add_generation_prompt=add_generation_prompt,
            chat_template_kwargs=dict(chat_template_kwargs or {}),
            tools=[dict(t) for t in tools] if tools else None,
        )
        return self._request(
            list(messages), sampling_params, request_id, priority, chat=options,
            arrival_time=None, lora_request=lora_request,
        )  # fmt: skip

    async def encode(
        self,
        prompt: PromptType,
        pooling_params: PoolingParams | None = None,
        request_id: str | None = None,
        priority: int = 0,
        *,
        truncate_prompt_tokens: int | None = None,
        arrival_time: float | None = None,
    ) -> AsyncIterator[PoolingRequestOutput[PoolingOutput]]:
        """A pooling model's result for one prompt (vLLM's ``AsyncLLM.encode``): one
        ``PoolingRequestOutput`` (``outputs.data``: the embedding, the class
        probabilities, or one row per token for ``token_embed``).

        ``pooling_params.task`` picks what to compute (default: the model's first task:
        ``embed`` for an embedding model, ``classify`` for a classifier). A generative
        model, a task the model lacks, ``dimensions`` on a model without matryoshka
        embeddings, an empty or too long prompt raise ``InvalidRequestError`` naming the
        field (on the first iteration).
        """
        ctx = self._ctx
        params = check_pooling(
            ctx.model.pooling, pooling_params or PoolingParams(), ctx.config.model_name()
        )
        sampling = pooling_sampling_params(params, truncate_prompt_tokens)
        async for out in self._request(
            prompt, sampling, request_id, priority, chat=None, arrival_time=arrival_time
        ):
            if out.finished:
                if out.pooled is None:  # ended without a result (aborted, failed)
                    reason = out.error or "it ended without a result"
                    raise RequestFailedError(out.request_id, reason)
                yield PoolingRequestOutput.from_request_output(out)

    async def _request(
        self,
        prompt: Any,
        params: SamplingParams | None,
        request_id: str | None,
        priority: int,
        *,
        chat: ChatOptions | None,
        arrival_time: float | None,
        lora_request: LoRARequest | None = None,
        reasoning_ended: bool | None = None,
    ) -> AsyncIterator[RequestOutput]:
        self._status.check_open()
        ctx = self._ctx
        if lora_request is not None:
            lora_request = await self._loras.ensure(lora_request)
        check_priority(priority, ctx.config)
        if chat is not None and has_embeds_parts(prompt, ctx.model.prompt_embeds):
            # rendered and spliced here, off the loop: the engine gets a mixed prompt
            splice = functools.partial(
                chat_embeds_prompt,
                self._parts.tokenizer,
                prompt,
                ctx.model.prompt_embeds,
                add_generation_prompt=chat.add_generation_prompt,
                chat_template_kwargs=chat.chat_template_kwargs,
                tools=chat.tools,
            )
            prompt = await anyio.to_thread.run_sync(splice)
            chat = None
        if has_prompt_embeds(prompt) and not isinstance(prompt["prompt_embeds"], PromptEmbeds):
            # checked, cast and fingerprinted off the loop
            embeds = await anyio.to_thread.run_sync(
                prompt_embeds_of, prompt, ctx.model.prompt_embeds
            )
            prompt = {**prompt, "prompt_embeds": embeds}
        check_waiting_bound(
            ctx.ledger,
            (r.ctx.admission.running for r in live_replicas(self._parts)),
            ctx.config.max_waiting_requests,
        )
        if params is None:  # the model's generation_config defaults, as vLLM
            params = self._default_params()
        if params.pooling_params is None and ctx.model.pooling is not None:
            raise InvalidRequestError(
                f"The model {ctx.config.model_name()!r} is a pooling model (runner "
                "'pooling'): it does not generate text. Use its embed, classify or score "
                "endpoints.",
                param="model",
            )
        rid = request_id or uuid.uuid4().hex
        now = monotonic_arrival(arrival_time)
        try:
            receive = ctx.ledger.open(rid, prompt, params, priority, now, lora_request)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param="request_id") from exc
        finished = False
        try:
            async with receive:
                await ctx.refs.input_processor.send(
                    Generate(
                        request_id=rid,
                        prompt=prompt,
                        params=params,
                        priority=priority,
                        arrival_time=now,
                        chat=chat,
                        lora_request=lora_request,
                        reasoning_ended=reasoning_ended,
                    )
                )
                async for item in receive:
                    if isinstance(item, BaseException):
                        finished = True
                        raise item
                    finished = item.finished
                    yield item
                    if finished:
                        return
            if self._status.dead is not None:
                raise EngineDeadError(f"the engine died: {self._status.dead}")
        finally:
            if not finished:
                await self._abort_quietly(rid)

    def check_admission(self, n: int = 1, request_id: str | None = None) -> None:
        """vLLM's: refuse a request of ``n`` sequences that ``max_num_queued_reqs`` or
        ``max_num_queued_tokens`` does not admit (``QueueOverflowError`` /
        ``MaxQueuedTokensError``, HTTP 503; engine/api/admission_limits.py). The server's
        generation routes call it before a response starts; ``request_id``: vLLM's, unused."""
        config = self._ctx.config
        check_admission(
            self._ctx.ledger,
            config.max_num_queued_reqs,
            config.max_num_queued_tokens,
            self._parts.request_stats,
            n,
        )

    def get_num_queued_tokens(self) -> int:
        """vLLM's: prompt tokens of the open requests with no output token yet."""
        return queued_tokens(self._ctx.ledger)

    async def abort(self, request_id: str) -> None:
        """Abort a request; its caller's iterator ends. Unknown ids are ignored."""
        if request_id in self._ctx.ledger and not self.is_dead:
            await self._ctx.refs.router.send(Abort(request_id=request_id))

    async def abort_all(self) -> int:
        """Abort every open request (vLLM's ``POST /abort_requests`` without ids); returns
        how many were open. Nothing is paused: requests that arrive meanwhile run."""
        ids = [entry.request_id for entry in self._ctx.ledger]
        for rid in ids:
            await self.abort(rid)
        return len(ids)

    async def _abort_quietly(self, request_id: str) -> None:
        if request_id not in self._ctx.ledger or self.is_dead:
            return
        with anyio.move_on_after(5.0, shield=True):
            try:
                await self._ctx.refs.router.send(Abort(request_id=request_id))
            except Exception:  # the engine is stopping: it fails what is left anyway
                self._ctx.ledger.close(request_id)

    async def drain(self, timeout_s: float | None = None) -> int:
        """Stop accepting requests, let open ones finish for up to ``timeout_s`` seconds
        (default ``EngineConfig.shutdown_timeout``), then abort the rest; returns how many
        were aborted.

        New ``generate``/``chat`` calls raise ``EngineClosedError`` from the moment this is
        called; aborted callers see their stream end with ``finish_reason="abort"``. Blocks
        until every request is closed (or the engine died). The engine keeps serving
        control calls until its ``async with`` block ends.
        """
        timeout = self._ctx.config.shutdown_timeout if timeout_s is None else timeout_s
        self._status.close()
        with anyio.move_on_after(timeout):
            await self._until_no_open_request()
        stragglers = [e.request_id for e in self._ctx.ledger]
        for rid in stragglers:
            await self.abort(rid)
        with anyio.move_on_after(max(5.0, timeout)):
            await self._until_no_open_request()
        return len(stragglers)

    async def _until_no_open_request(self) -> None:
        # Shutdown only: a 20 ms poll rather than an event on every ledger close.
        while len(self._ctx.ledger) and not self.is_dead:  # noqa: ASYNC110
            await anyio.sleep(0.02)
