"""``LLM``: the synchronous facade for offline batches, as in vLLM.

    llm = LLM()                     # the demo model; or LLM("/path/to/model", max_num_seqs=64)
    outs = llm.generate(["Hello", "The sky is"], SamplingParams(max_tokens=16))
    print(outs[0].outputs[0].text)
    llm.close()

It runs an :class:`AsyncEngine` on its own event loop (trio) in a background thread, via
anyio's blocking portal, and blocks the calling thread until the batch is done. Results
come back in input order. Use it from synchronous code only (not from inside an event loop).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal
from tqdm.auto import tqdm

from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.async_engine import AsyncEngine
from actorllm.engine.config import EngineConfig

Prompt = str | Mapping[str, Any]
Conversation = Sequence[Mapping[str, Any]]


class LLM:
    def __init__(
        self,
        model: str | Path | EngineConfig | None = None,
        *,
        backend: str = "trio",
        **config: Any,
    ) -> None:
        self._stack = ExitStack()
        try:
            self._portal: BlockingPortal = self._stack.enter_context(
                start_blocking_portal(backend=backend)
            )
            cm: AbstractContextManager[AsyncEngine] = self._portal.wrap_async_context_manager(
                AsyncEngine.open(model, **config)
            )
            self.engine: AsyncEngine = self._stack.enter_context(cm)
        except BaseException:
            self._stack.close()
            raise

    # -- generation -----------------------------------------------------------------------

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        priority: Sequence[int] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (a str, a ``{"prompt_token_ids": [...]}`` dict, or a
        list of them); one SamplingParams for all or one per prompt. Blocks until done.

        Each request is validated by the engine; the first invalid one's error
        (``InvalidRequestError``) is raised once the rest of the batch has finished.
        """
        items: list[Prompt] = [prompts] if isinstance(prompts, str | Mapping) else list(prompts)
        return self._run(items, sampling_params, use_tqdm, priority, is_chat=False)

    def chat(
        self,
        messages: Conversation | Sequence[Conversation],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        add_generation_prompt: bool = True,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[RequestOutput]:
        """Generate a reply to one conversation (a list of messages) or to each of several.
        ``tools`` (OpenAI function tools) go to the chat template; constrain the reply with
        ``SamplingParams.structured_outputs`` to force a call's arguments."""
        if messages and isinstance(messages[0], Mapping):
            conversations: list[Any] = [messages]
        else:
            conversations = list(messages)
        options: dict[str, Any] = {
            "add_generation_prompt": add_generation_prompt,
            "chat_template_kwargs": chat_template_kwargs,
        }
        if tools:
            options["tools"] = [dict(t) for t in tools]
        return self._run(
            conversations, sampling_params, use_tqdm, None, is_chat=True, options=options
        )

    def _run(
        self,
        items: list[Any],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None,
        use_tqdm: bool,
        priority: Sequence[int] | None,
        *,
        is_chat: bool,
        options: dict[str, Any] | None = None,
    ) -> list[RequestOutput]:
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(items)
        else:
            params = list(sampling_params)
            if len(params) != len(items):
                raise ValueError(f"got {len(params)} sampling params for {len(items)} prompts.")
        if priority is not None and len(priority) != len(items):
            raise ValueError(f"got {len(priority)} priorities for {len(items)} prompts.")
        prios = list(priority) if priority is not None else [0] * len(items)
        final = [p.clone(output_kind=RequestOutputKind.FINAL_ONLY) for p in params]
        return self._portal.call(self._batch, items, final, prios, use_tqdm, is_chat, options or {})

    async def _batch(
        self,
        items: list[Any],
        params: list[SamplingParams],
        prios: list[int],
        use_tqdm: bool,
        is_chat: bool,
        options: dict[str, Any],
    ) -> list[RequestOutput]:
        results: list[RequestOutput | None] = [None] * len(items)
        errors: list[BaseException] = []
        bar = tqdm(
            total=len(items), desc="Processed prompts", disable=not use_tqdm, dynamic_ncols=True
        )

        async def one(i: int) -> None:
            try:
                if is_chat:
                    stream = self.engine.chat(items[i], params[i], priority=prios[i], **options)
                else:
                    stream = self.engine.generate(items[i], params[i], priority=prios[i])
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

    # -- control plane --------------------------------------------------------------------

    def sleep(self, level: int = 1) -> None:
        self._portal.call(self.engine.sleep, level)

    def wake_up(self) -> None:
        self._portal.call(self.engine.wake_up)

    def reset_prefix_cache(self) -> bool:
        return self._portal.call(self.engine.reset_prefix_cache)

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the engine and its loop thread (idempotent)."""
        self._stack.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
