"""``LLM.beam_search`` (vLLM's ``beam_search/offline.py``): beam search for a batch of
prompts, blocking; one ``BeamSearchOutput`` per prompt, in input order.

    from actorllm.sampling_params import BeamSearchParams
    outs = llm.beam_search([{"prompt": "The sky"}], BeamSearchParams(beam_width=4, max_tokens=16))
    outs[0].sequences[0].text       # the prompt and the best continuation, as vLLM

As in vLLM's offline path, a sequence's ``tokens`` are the prompt's and the generated ones
(a final EOS included) and its ``text`` decodes them all.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
from tqdm.auto import tqdm

from actorllm.compat.vllm.offline_prompts import Prompt, as_prompt_list, per_prompt
from actorllm.core.beam_search import BeamSearchOutput, BeamSearchParams
from actorllm.core.lora import LoRARequest
from actorllm.core.watermarking import resolve_beam_search
from actorllm.engine.api.beam_search import refuse_prompt_embeds, run_beam_search

if TYPE_CHECKING:
    from actorllm.compat.vllm.engine_thread import EngineThread
    from actorllm.engine.api.async_engine import AsyncEngine


class BeamSearchMethods:
    """Mixed into ``LLM``: needs its ``engine`` and its engine ``_thread``."""

    engine: AsyncEngine
    _thread: EngineThread

    def beam_search(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: BeamSearchParams,
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
        use_tqdm: bool = False,
        concurrency_limit: int | None = None,
    ) -> list[BeamSearchOutput]:
        """Beam search for every prompt (text or token ids); at most ``concurrency_limit``
        prompts searched at once (None: all). ``lora_request``: one for all prompts or one
        per prompt."""
        if not isinstance(params, BeamSearchParams):
            raise TypeError(f"params must be a BeamSearchParams, got {type(params).__name__}")
        if concurrency_limit is not None and concurrency_limit < 1:
            raise ValueError(f"concurrency_limit must be at least 1, got {concurrency_limit}")
        items = as_prompt_list(prompts)
        for item in items:  # before the searches start (inside them it would be a group)
            refuse_prompt_embeds(item)
        loras = per_prompt(lora_request, len(items), None, "LoRA requests")
        for lora in loras:
            if lora is not None:
                self.engine.check_lora_request(lora)
        limit = concurrency_limit or max(len(items), 1)
        return self._thread.call(self._search_all, items, params, loras, limit, use_tqdm)

    async def _search_all(
        self,
        items: list[Any],
        params: BeamSearchParams,
        loras: list[LoRARequest | None],
        limit: int,
        use_tqdm: bool,
    ) -> list[BeamSearchOutput]:
        results: list[BeamSearchOutput | None] = [None] * len(items)
        gate = anyio.Semaphore(limit)
        bar = tqdm(total=len(items), desc="Beam search", disable=not use_tqdm)
        tokenizer = self.engine.tokenizer
        resolve_beam_search(
            self.engine.config.watermarking(), params.watermarking
        )  # vLLM's warning

        async def one(i: int) -> None:
            async with gate:
                _, state = await run_beam_search(
                    self.engine.generate, tokenizer, items[i], params, uuid.uuid4().hex,
                    lora_request=loras[i],
                )  # fmt: skip
            best = state.best()
            for beam in best:
                beam.text = tokenizer.decode(
                    beam.tokens, skip_special_tokens=params.skip_special_tokens
                )
            results[i] = BeamSearchOutput(sequences=best)
            bar.update(1)

        try:
            async with anyio.create_task_group() as tg:
                for i in range(len(items)):
                    tg.start_soon(one, i)
        finally:
            bar.close()
        return [r for r in results if r is not None]
