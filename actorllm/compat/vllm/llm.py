"""``LLM``: the synchronous facade for offline batches, as in vLLM.

    from actorllm import LLM, SamplingParams

    llm = LLM()                     # the demo model; or LLM("/path/to/model", max_num_seqs=64)
    outs = llm.generate(["Hello", "The sky is"], SamplingParams(max_tokens=16))
    print(outs[0].outputs[0].text)

It runs an :class:`AsyncEngine` on its own event loop (trio) in a background thread (see
:mod:`actorllm.compat.vllm.bridge`) and blocks the calling thread until the batch is done.
Results come back in input order. ``enqueue`` / ``wait_for_completion`` split the two
(:mod:`actorllm.compat.vllm.offline_queue`). Every request is named by the ``LLM``'s
counter, as vLLM's: ``"0"``, ``"1"``, ... across all calls (``output.request_id``). Use it
from synchronous code only (not from inside an event loop).

Closing is optional: ``with LLM(...) as llm:``, ``llm.close()``, ``del llm`` and the end of
the script all stop the engine and its threads. Ctrl-C during ``generate`` (or
``wait_for_completion``) aborts the batch and raises ``KeyboardInterrupt`` as usual.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import anyio

from actorllm.compat.vllm.beam_search_offline import BeamSearchMethods
from actorllm.compat.vllm.chat_content_format import check_content_format, with_content_format
from actorllm.compat.vllm.engine_args import EngineArgs
from actorllm.compat.vllm.llm_engine import LLMEngine
from actorllm.compat.vllm.not_built import LLM_NOT_BUILT, check_options, not_built
from actorllm.compat.vllm.offline_checks import Rejected, checked_prompt, engine_inputs
from actorllm.compat.vllm.offline_prompts import Prompt, as_prompt_list, per_prompt
from actorllm.compat.vllm.offline_queue import OfflineQueue, OutputType
from actorllm.compat.vllm.offline_requests import (
    OfflineRequest,
    UseTqdm,
    chat_options,
    final_output,
    progress_bar,
)
from actorllm.compat.vllm.pooling_offline import PoolingMethods
from actorllm.compat.vllm.sync_facade import SyncFacade
from actorllm.core.input_processor import InputProcessor
from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.api.request_fields import check_priority
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.config.model_config import ModelConfig

Conversation = Sequence[Mapping[str, Any]]
Params = SamplingParams | Sequence[SamplingParams] | None
Loras = LoRARequest | Sequence[LoRARequest | None] | None
Priorities = int | Sequence[int] | None


class LLM(BeamSearchMethods, PoolingMethods, SyncFacade):
    """An engine for offline batches. ``model`` is a model directory, an ``EngineConfig``
    or None (the demo model); keyword arguments are ``EngineConfig`` fields."""

    def __init__(self, model: str | Path | EngineConfig | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self._request_ids = itertools.count()  # names every request, as vLLM's counter
        self._queue = OfflineQueue(self._thread, self.engine)  # enqueue's, until waited for

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs) -> Self:
        """vLLM's ``LLM.from_engine_args``: an ``LLM`` of these arguments, as
        ``LLM(**vars(engine_args))`` (so ``disable_log_stats`` is ``EngineArgs``' default,
        False: a stats line every 10 s, as in vLLM)."""
        if not isinstance(engine_args, EngineArgs):
            raise TypeError(f"engine_args must be EngineArgs, got {type(engine_args).__name__}.")
        return cls(
            engine_args.create_engine_config(),
            disable_log_stats=engine_args.disable_log_stats,
            hf_token=engine_args.hf_token,
        )

    # -- generation -----------------------------------------------------------------------

    @functools.cached_property
    def llm_engine(self) -> LLMEngine:
        """vLLM's ``LLM.llm_engine``: the ``LLMEngine`` API (``add_request`` / ``step``,
        ``get_model_config()``, ``get_tokenizer()``, ...) on this LLM's engine."""
        return LLMEngine.over(self)

    @property
    def model_config(self) -> ModelConfig:
        """vLLM's ``LLM.model_config``: ``llm_engine.model_config``."""
        return self.llm_engine.model_config

    @property
    def engine_class(self) -> type[LLMEngine]:
        """vLLM's ``LLM.engine_class``: the class of ``llm_engine``."""
        return LLMEngine

    def get_default_sampling_params(self) -> SamplingParams:
        """What ``generate``/``chat`` use without ``sampling_params``: the model's
        generation_config.json defaults (temperature, top_p, top_k, min_p,
        repetition_penalty, max_new_tokens as max_tokens) over ``SamplingParams()``'s, as
        vLLM. ``LLM(..., generation_config="vllm")`` ignores the file;
        ``override_generation_config={...}`` goes on top."""
        return self.engine.get_default_sampling_params()

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: Params = None,
        *,
        use_tqdm: UseTqdm = True,
        lora_request: Loras = None,
        priority: Priorities = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt; one output per prompt, in input order. Blocks.

        A prompt is a str, ``{"prompt": str}`` or ``{"prompt_token_ids": [...]}``;
        ``prompts`` is one of them or a list mixing them. ``sampling_params`` is one
        ``SamplingParams`` for all prompts or a list with one per prompt (None:
        :meth:`get_default_sampling_params`); ``priority`` one for all or a list with one
        per prompt (lower runs first under ``scheduling_policy="priority"``).

        Every prompt is checked before anything runs, as vLLM renders and checks each
        before its engine runs (its form, and what the engine checks: its length, an empty
        prompt, ids out of vocabulary, logprobs above ``max_logprobs``, ...;
        :mod:`offline_checks`): the first refused raises its ``InvalidRequestError``
        (vLLM's ``VLLMValidationError``) and none of the batch runs.
        ``lora_request``: a ``LoRARequest`` for all prompts or a list with one per prompt
        (None: the base model; needs ``enable_lora``). ``tokenization_kwargs`` and
        ``mm_processor_kwargs`` (vLLM's) must be None: anything else raises
        ``NotImplementedError`` naming it. ``use_tqdm``: a progress bar, or a callable
        that makes one (vLLM's). Outputs carry the request ids ``"0"``, ``"1"``, ... of
        this LLM's counter, as vLLM's.
        """
        requests = self._prompt_requests(
            "LLM.generate", prompts, sampling_params, lora_request, priority,
            tokenization_kwargs, mm_processor_kwargs,
        )  # fmt: skip
        return self._thread.call(self._batch, requests, use_tqdm)

    def chat(
        self,
        messages: Conversation | Sequence[Conversation],
        sampling_params: Params = None,
        use_tqdm: UseTqdm = True,
        lora_request: Loras = None,
        priority: Priorities = None,
        chat_template: str | None = None,
        chat_template_content_format: str = "auto",
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """Reply to one conversation (a list of messages) or to each of several; one output
        per conversation, in order (vLLM's arguments, in vLLM's order).
        ``continue_final_message`` continues the last (assistant) message instead of
        starting a new one; ``chat_template`` replaces the tokenizer's template;
        ``chat_template_content_format`` (``"auto"``, ``"string"``, ``"openai"``) is how
        message content reaches the template (:mod:`chat_content_format`). ``tools``
        (OpenAI function tools) go to the chat template; constrain the reply with
        ``SamplingParams.structured_outputs`` to force a call's arguments.
        ``sampling_params``, ``lora_request`` and ``priority``: as :meth:`generate`'s.
        ``tokenization_kwargs`` and ``mm_processor_kwargs`` must be None (else
        ``NotImplementedError`` naming them). Each conversation is rendered and checked
        before any runs, as :meth:`generate` checks its prompts.
        """
        requests = self._chat_requests(
            "LLM.chat", messages, sampling_params, lora_request, priority, chat_template,
            chat_template_content_format, add_generation_prompt, continue_final_message, tools,
            chat_template_kwargs, tokenization_kwargs, mm_processor_kwargs,
        )  # fmt: skip
        return self._thread.call(self._batch, requests, use_tqdm)

    # -- queueing without waiting (vLLM's enqueue / wait_for_completion) -------------------

    def enqueue(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: Params = None,
        lora_request: Loras = None,
        priority: Priorities = None,
        use_tqdm: UseTqdm = True,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Start generating for ``prompts`` without waiting; returns their request ids
        (this LLM's counter: ``"0"``, ``"1"``, ...). :meth:`wait_for_completion` collects
        the outputs. The arguments are :meth:`generate`'s, and so are the rules.

        The engine runs all the time here, so the requests start at once (vLLM's run only
        inside ``wait_for_completion``); greedy and seeded outputs are the same. To have
        every request queued before any is scheduled, vLLM's recipe works here too: pause
        with ``sleep(level=0)`` first and resume with ``wake_up(tags=["scheduling"])``.
        Every prompt is checked here, as vLLM's ``enqueue`` checks it (its form, the
        numbers of parameters, priorities, LoRA adapters, and what the engine checks: its
        length, an empty prompt, token ids out of vocabulary, logprobs above
        ``max_logprobs``, ...; :mod:`offline_checks`): the first one refused raises its
        ``InvalidRequestError`` (vLLM's ``VLLMValidationError``) and none of the call's
        prompts is queued. A pooling model raises ``ValueError`` (vLLM's).
        """
        self._check_generative("LLM.enqueue")
        requests = self._prompt_requests(
            "LLM.enqueue", prompts, sampling_params, lora_request, priority,
            tokenization_kwargs, mm_processor_kwargs,
        )  # fmt: skip
        return self._queue.add(requests, use_tqdm)

    def enqueue_chat(
        self,
        messages: Conversation | Sequence[Conversation],
        sampling_params: Params = None,
        use_tqdm: UseTqdm = True,
        lora_request: Loras = None,
        priority: Priorities = None,
        chat_template: str | None = None,
        chat_template_content_format: str = "auto",
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """:meth:`chat`'s conversations queued as :meth:`enqueue` queues prompts; returns
        their request ids. Each is rendered and checked here, as :meth:`enqueue` checks a
        prompt (a chat template error too): the first refused raises, nothing queued."""
        self._check_generative("LLM.enqueue_chat")
        requests = self._chat_requests(
            "LLM.enqueue_chat", messages, sampling_params, lora_request, priority,
            chat_template, chat_template_content_format, add_generation_prompt,
            continue_final_message, tools, chat_template_kwargs, tokenization_kwargs,
            mm_processor_kwargs,
        )  # fmt: skip
        return self._queue.add(requests, use_tqdm)

    def wait_for_completion(
        self, output_type: OutputType | None = None, *, use_tqdm: UseTqdm = True
    ) -> list[RequestOutput]:
        """Block until every enqueued request has finished; their final outputs, sorted by
        request id (enqueue order), and forget them. Nothing enqueued: ``[]``.

        ``output_type`` (a type or a tuple of them; vLLM asserts each output is one) must
        admit ``RequestOutput``, else ``TypeError`` (raised before waiting; the requests
        stay queued). A request that failed raises its error once all have finished (the
        first by id; the others' outputs are dropped, as ``generate``'s). Ctrl-C aborts
        every request still queued and raises ``KeyboardInterrupt``.
        """
        self._thread.release_caller_team()
        return self._queue.wait(output_type, use_tqdm)

    def __getattr__(self, name: str) -> Any:
        # vLLM's methods for features not built here refuse by name (not_built.py).
        return not_built(self, name, LLM_NOT_BUILT)

    # -- the requests of one call ---------------------------------------------------------

    def _check_generative(self, method: str) -> None:
        if self.engine.pooling_model is not None:
            raise ValueError(f"{method}() is only supported for generative models.")

    def _prompt_requests(
        self,
        method: str,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: Params,
        lora_request: Loras,
        priority: Priorities,
        tokenization_kwargs: Mapping[str, Any] | None,
        mm_processor_kwargs: Mapping[str, Any] | None,
    ) -> list[OfflineRequest]:
        """``generate``'s and ``enqueue``'s requests (the options not built refused), each
        checked here as the engine will (:meth:`_checked`)."""
        check_options(
            method,
            tokenization_kwargs=tokenization_kwargs or None,
            mm_processor_kwargs=mm_processor_kwargs or None,
        )
        return self._requests(as_prompt_list(prompts), sampling_params, priority, lora_request)

    def _chat_requests(
        self,
        method: str,
        messages: Conversation | Sequence[Conversation],
        sampling_params: Params,
        lora_request: Loras,
        priority: Priorities,
        chat_template: str | None,
        content_format: str,
        add_generation_prompt: bool,
        continue_final_message: bool,
        tools: Sequence[Mapping[str, Any]] | None,
        chat_template_kwargs: Mapping[str, Any] | None,
        tokenization_kwargs: Mapping[str, Any] | None,
        mm_processor_kwargs: Mapping[str, Any] | None,
    ) -> list[OfflineRequest]:
        check_options(
            method,
            tokenization_kwargs=tokenization_kwargs or None,
            mm_processor_kwargs=mm_processor_kwargs or None,
        )
        content_format = check_content_format(content_format)
        if messages and isinstance(messages[0], Mapping):
            conversations: list[Any] = [messages]
        else:
            conversations = list(messages)
        conversations = [with_content_format(c, content_format) for c in conversations]
        options = chat_options(
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            chat_template=chat_template,
            chat_template_kwargs=chat_template_kwargs,
            tools=tools,
        )
        return self._requests(conversations, sampling_params, priority, lora_request, options)

    def _requests(
        self,
        items: list[Any],
        sampling_params: Params,
        priority: Priorities,
        lora_request: Loras,
        chat: Mapping[str, Any] | None = None,
    ) -> list[OfflineRequest]:
        """One request per prompt (or conversation, with ``chat``'s options), checked
        before anything runs (the engine's checks too: :meth:`_checked`), each named by the
        counter; vLLM's per-prompt rules."""
        default = self.get_default_sampling_params()  # for sampling_params=None
        params = per_prompt(sampling_params, len(items), default, "sampling params")
        prios = per_prompt(priority, len(items), 0, "priorities")
        loras = per_prompt(lora_request, len(items), None, "LoRA requests")
        for lora in loras:  # before anything runs, as the prompts and priorities
            if lora is not None:
                self.engine.check_lora_request(lora)
        for prio in prios:
            check_priority(prio, self.engine.config)
        items, chats = self._checked(items, params, chat)
        return [
            OfflineRequest(
                request_id=str(next(self._request_ids)),
                prompt=item,
                params=self.with_offline_seed(p.clone(output_kind=RequestOutputKind.FINAL_ONLY)),
                priority=prio,
                lora_request=lora,
                chat=item_chat,
            )
            for item, p, prio, lora, item_chat in zip(
                items, params, prios, loras, chats, strict=True
            )
        ]

    def _checked(
        self, items: list[Any], params: list[SamplingParams], chat: Mapping[str, Any] | None
    ) -> tuple[list[Any], list[Mapping[str, Any] | None]]:
        """``items`` as the engine will run them (token ids; chat options left only on a
        conversation of embeddings, which the engine renders), each checked as the engine
        checks it (:mod:`offline_checks`). The first refused raises its error, and the
        counter moves on as vLLM's does: it numbered the prompts before that one, and that
        one too unless its rendering refused it."""
        spec = self.engine.prompt_embeds_spec
        prompts: list[Any] = []
        chats: list[Mapping[str, Any] | None] = []
        for i, (item, p) in enumerate(zip(items, params, strict=True)):
            try:
                prompt = checked_prompt(self._inputs, item, p, chat, spec)
            except Rejected as rejected:
                for _ in range(i + int(rejected.numbered)):
                    next(self._request_ids)
                raise rejected.error from None
            prompts.append(prompt)
            chats.append(chat if prompt is item else None)
        return prompts, chats

    @functools.cached_property
    def _inputs(self) -> InputProcessor:
        """The engine's checks, for the caller's thread."""
        return engine_inputs(self.engine)

    async def _batch(
        self, requests: list[OfflineRequest], use_tqdm: UseTqdm
    ) -> list[RequestOutput]:
        results: list[RequestOutput | None] = [None] * len(requests)
        errors: list[BaseException] = []
        bar = progress_bar(use_tqdm, len(requests), "Processed prompts")

        async def one(i: int) -> None:
            try:
                results[i] = await final_output(self.engine, requests[i])
            except Exception as exc:  # kept: the other requests of the batch go on
                errors.append(exc)
            bar.update(1)

        try:
            async with anyio.create_task_group() as tg:
                for i in range(len(requests)):
                    tg.start_soon(one, i)
        finally:
            bar.close()
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]
