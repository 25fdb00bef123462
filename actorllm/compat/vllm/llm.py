"""``LLM``: the synchronous facade for offline batches, as in vLLM.

    from actorllm import LLM, SamplingParams

    llm = LLM()                     # the demo model; or LLM("/path/to/model", max_num_seqs=64)
    outs = llm.generate(["Hello", "The sky is"], SamplingParams(max_tokens=16))
    print(outs[0].outputs[0].text)

It runs an :class:`AsyncEngine` on its own event loop (trio) in a background thread (see
:mod:`actorllm.compat.vllm.bridge`) and blocks the calling thread until the batch is done.
Results come back in input order. Use it from synchronous code only (not from inside an
event loop).

Closing is optional: ``with LLM(...) as llm:``, ``llm.close()``, ``del llm`` and the end of
the script all stop the engine and its threads. Ctrl-C during ``generate`` aborts the batch
and raises ``KeyboardInterrupt`` as usual.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
from tqdm.auto import tqdm

from actorllm.compat.vllm.beam_search_offline import BeamSearchMethods
from actorllm.compat.vllm.llm_engine import LLMEngine
from actorllm.compat.vllm.not_built import LLM_NOT_BUILT, check_options, not_built
from actorllm.compat.vllm.offline_prompts import Prompt, as_prompt_list, per_prompt
from actorllm.compat.vllm.pooling_offline import PoolingMethods
from actorllm.compat.vllm.sync_facade import SyncFacade
from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.api.request_fields import check_priority
from actorllm.engine.config.model_config import ModelConfig

Conversation = Sequence[Mapping[str, Any]]


class _ProgressBar(tqdm):
    monitor_interval = 0  # no "tqdm_monitor" thread outliving the batch


class LLM(BeamSearchMethods, PoolingMethods, SyncFacade):
    """An engine for offline batches. ``model`` is a model directory, an ``EngineConfig``
    or None (the demo model); keyword arguments are ``EngineConfig`` fields."""

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
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
        priority: Sequence[int] | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt; one output per prompt, in input order. Blocks.

        A prompt is a str, ``{"prompt": str}`` or ``{"prompt_token_ids": [...]}``;
        ``prompts`` is one of them or a list mixing them. ``sampling_params`` is one
        ``SamplingParams`` for all prompts or a list with one per prompt (None:
        :meth:`get_default_sampling_params`); ``priority`` a
        list with one per prompt (lower runs first under ``scheduling_policy="priority"``).

        Unsupported prompt forms raise ``InvalidRequestError`` before anything runs. Each
        request is then validated by the engine; the first invalid one's error
        (``InvalidRequestError``) is raised once the rest of the batch has finished.
        ``lora_request``: a ``LoRARequest`` for all prompts or a list with one per prompt
        (None: the base model; needs ``enable_lora``). ``tokenization_kwargs`` and
        ``mm_processor_kwargs`` (vLLM's) must be None: anything else raises
        ``NotImplementedError`` naming it.
        """
        check_options(
            "LLM.generate",
            tokenization_kwargs=tokenization_kwargs or None,
            mm_processor_kwargs=mm_processor_kwargs or None,
        )
        items = as_prompt_list(prompts)
        return self._run(
            items, sampling_params, use_tqdm, priority, is_chat=False, lora_request=lora_request
        )

    def chat(
        self,
        messages: Conversation | Sequence[Conversation],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        chat_template: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[RequestOutput]:
        """Reply to one conversation (a list of messages) or to each of several; one output
        per conversation. ``continue_final_message`` continues the last (assistant) message
        instead of starting a new one; ``chat_template`` replaces the tokenizer's template.
        ``tools`` (OpenAI function tools) go to the chat template; constrain the reply with
        ``SamplingParams.structured_outputs`` to force a call's arguments.
        ``lora_request``: one ``LoRARequest`` for all conversations or one per conversation.
        """
        if messages and isinstance(messages[0], Mapping):
            conversations: list[Any] = [messages]
        else:
            conversations = list(messages)
        if continue_final_message and add_generation_prompt:
            raise ValueError(
                "continue_final_message and add_generation_prompt cannot both be set "
                "(pass add_generation_prompt=False)."
            )
        template_kwargs = dict(chat_template_kwargs or {})
        if continue_final_message:
            template_kwargs["continue_final_message"] = True
        if chat_template is not None:
            template_kwargs["chat_template"] = chat_template
        options: dict[str, Any] = {
            "add_generation_prompt": add_generation_prompt,
            "chat_template_kwargs": template_kwargs,
        }
        if tools:
            options["tools"] = [dict(t) for t in tools]
        return self._run(
            conversations, sampling_params, use_tqdm, None, is_chat=True, options=options,
            lora_request=lora_request,
        )  # fmt: skip

    def __getattr__(self, name: str) -> Any:
        # vLLM's methods for features not built here refuse by name (not_built.py).
        return not_built(self, name, LLM_NOT_BUILT)

    def _run(
        self,
        items: list[Any],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None,
        use_tqdm: bool,
        priority: Sequence[int] | None,
        *,
        is_chat: bool,
        options: dict[str, Any] | None = None,
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
    ) -> list[RequestOutput]:
        default = self.get_default_sampling_params()  # for sampling_params=None
        params = per_prompt(sampling_params, len(items), default, "sampling params")
        prios = per_prompt(priority, len(items), 0, "priorities")
        loras = per_prompt(lora_request, len(items), None, "LoRA requests")
        for lora in loras:  # before anything runs, as the prompts and priorities
            if lora is not None:
                self.engine.check_lora_request(lora)
        for prio in prios:
            check_priority(prio, self.engine.config)
        final = [
            self.with_offline_seed(p.clone(output_kind=RequestOutputKind.FINAL_ONLY))
            for p in params
        ]
        return self._thread.call(
            self._batch, items, final, prios, loras, use_tqdm, is_chat, options or {}
        )

    async def _batch(
        self,
        items: list[Any],
        params: list[SamplingParams],
        prios: list[int],
        loras: list[LoRARequest | None],
        use_tqdm: bool,
        is_chat: bool,
        options: dict[str, Any],
    ) -> list[RequestOutput]:
        results: list[RequestOutput | None] = [None] * len(items)
        errors: list[BaseException] = []
        bar = _ProgressBar(
            total=len(items), desc="Processed prompts", disable=not use_tqdm, dynamic_ncols=True
        )

        async def one(i: int) -> None:
            try:
                lora = loras[i]
                if is_chat:
                    stream = self.engine.chat(
                        items[i], params[i], priority=prios[i], lora_request=lora, **options
                    )
                else:
                    stream = self.engine.generate(
                        items[i], params[i], priority=prios[i], lora_request=lora
                    )
                async for out in stream:
                    results[i] = out
            except Exception as exc:  # kept: the other requests of the batch go on
                errors.append(exc)
            bar.update(1)

        try:
            async with anyio.create_task_group() as tg:
                for i in range(len(items)):
                    tg.start_soon(one, i)
        finally:
            bar.close()
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]
