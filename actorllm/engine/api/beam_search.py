"""Beam search on the engine: each step runs every live beam as a one-token request (all
at once, so they share engine steps and the prefix cache), then :mod:`actorllm.core.
beam_search` keeps the best. The first step sends the prompt as given (text or token ids,
so it is tokenized as any request is); later steps send the beams' token ids.

Every one-token request is an ordinary supervised request: a crash mid-step recomputes it,
so the beams come out the same; cancelling the search aborts the step's requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio

from actorllm.core.beam_search import BeamSearchParams, BeamSearchState, StepResult
from actorllm.core.errors import InvalidRequestError
from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.api.prompt_embeds import has_prompt_embeds
from actorllm.engine.errors import RequestFailedError

# generate(prompt, params, request_id=..., lora_request=..., priority=...) -> outputs
Generate = Callable[..., AsyncIterator[RequestOutput]]


async def beam_search(
    generate: Generate, tokenizer: Any, prompt: Any, params: BeamSearchParams, request_id: str,
    **options: Any,
) -> AsyncIterator[RequestOutput]:  # fmt: skip
    """Run the search; yields one finished ``RequestOutput`` whose ``outputs`` are the best
    ``beam_width`` beams, best first (index ``i``), as vLLM's online beam search.
    ``options``: :func:`run_beam_search`'s keywords."""
    first, state = await run_beam_search(generate, tokenizer, prompt, params, request_id, **options)
    yield _final(request_id, first, state, params, tokenizer)


BEAM_EMBEDS_REFUSAL = "beam search does not take prompt_embeds (its beams are token-id prompts)."


def refuse_prompt_embeds(prompt: Any) -> None:
    """The beams continue as token-id prompts: an embedding prompt has no rows to extend."""
    if has_prompt_embeds(prompt):
        raise InvalidRequestError(BEAM_EMBEDS_REFUSAL, param="prompt_embeds")


async def run_beam_search(
    generate: Generate,
    tokenizer: Any,
    prompt: Any,
    params: BeamSearchParams,
    request_id: str,
    *,
    lora_request: Any = None,
    priority: int = 0,
    logprobs: int | None = None,
) -> tuple[RequestOutput, BeamSearchState]:
    """The search itself: the first step's output (the prompt as the engine read it) and
    the final state (:meth:`BeamSearchState.best` is the answer). ``logprobs``: top
    logprobs per generated position to keep for the caller (at least ``2 * beam_width``
    are computed anyway). A step request that fails raises ``RequestFailedError``; an
    aborted one ends the search with ``"abort"`` beams."""
    refuse_prompt_embeds(prompt)
    step = params.step_params(logprobs)
    first = await _one(generate, prompt, step, f"{request_id}-beam-0", lora_request, priority)
    if first.error is not None or first.outputs[0].finish_reason == "error":
        raise RequestFailedError(request_id, first.error or "the first beam step failed")
    eos = getattr(tokenizer, "eos_token_id", None)
    state = BeamSearchState(first.prompt_token_ids, params, eos, lora_request)
    state.advance([_result(first)])
    salt = prompt.get("cache_salt") if isinstance(prompt, Mapping) else None
    extra = {} if salt is None else {"cache_salt": salt}  # the beams share the prompt's salt
    while not state.done:
        prompts = [{"prompt_token_ids": beam.tokens, **extra} for beam in state.beams]
        outs: list[RequestOutput | None] = [None] * len(prompts)

        async def run(
            i: int, p: dict[str, Any], outs: list[RequestOutput | None], step_no: int
        ) -> None:
            rid = f"{request_id}-s{step_no}-beam-{i}"
            outs[i] = await _one(generate, p, step, rid, lora_request, priority)

        async with anyio.create_task_group() as tg:
            for i, p in enumerate(prompts):
                tg.start_soon(run, i, p, outs, state.steps)
        done = [o for o in outs if o is not None]
        for out in done:
            if out.error is not None or out.outputs[0].finish_reason == "error":
                raise RequestFailedError(request_id, out.error or "a beam step failed")
        state.advance([_result(o) for o in done])
    return first, state


async def _one(
    generate: Generate, prompt: Any, params: SamplingParams, rid: str, lora: Any, priority: int
) -> RequestOutput:
    last: RequestOutput | None = None
    async for out in generate(prompt, params, request_id=rid, lora_request=lora, priority=priority):
        last = out
    if last is None:  # pragma: no cover - generate always ends with a finished output
        raise RequestFailedError(rid, "the beam step returned nothing")
    return last


def _result(out: RequestOutput) -> StepResult:
    co = out.outputs[0]
    if not co.token_ids or not co.logprobs:
        return StepResult(None, None, co.finish_reason)
    return StepResult(co.token_ids[0], dict(co.logprobs[0]), co.finish_reason)


def _final(
    request_id: str,
    first: RequestOutput,
    state: BeamSearchState,
    params: BeamSearchParams,
    tokenizer: Any,
) -> RequestOutput:
    outputs = []
    for i, beam in enumerate(state.best()):
        ids = state.generated(beam)
        # vLLM's online text never holds the EOS that ended a beam, even when
        # include_stop_str_in_output keeps it in token_ids.
        shown = (
            ids[:-1] if beam.finish_reason == "stop" and ids[-1:] == [state.eos_token_id] else ids
        )
        text = tokenizer.decode(shown, skip_special_tokens=params.skip_special_tokens)
        beam.text = text
        outputs.append(
            CompletionOutput(
                index=i,
                text=text,
                token_ids=ids,
                cumulative_logprob=beam.cum_logprob,
                logprobs=beam.logprobs[: len(ids)],
                # vLLM's online rule: a beam that ran out of steps (None) ended on length.
                finish_reason=beam.finish_reason or "length",
                stop_reason=beam.stop_reason,
            )
        )
    return RequestOutput(
        request_id=request_id,
        prompt=first.prompt,
        prompt_token_ids=first.prompt_token_ids,
        prompt_logprobs=None,
        outputs=outputs,
        finished=True,
        num_cached_tokens=first.num_cached_tokens,
        num_cache_creation_tokens=first.num_cache_creation_tokens,
    )
