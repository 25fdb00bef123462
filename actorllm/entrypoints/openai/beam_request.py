"""``use_beam_search`` on /v1/completions and /v1/chat/completions (vLLM's extension): the
request's ``n`` is the beam width, ``length_penalty`` ranks the finished beams, and the
answer arrives as one final output (streamed, it is one chunk per beam).

Beam search ranks candidates by their raw logprobs, so the sampling fields that would
reshape or constrain them do nothing there. vLLM ignores them; here a request that sets
one is a 400 naming it (never silently ignored).
"""

from __future__ import annotations

from typing import Any

from actorllm.core.beam_search import BeamSearchParams
from actorllm.core.sampling_params import SamplingParams
from actorllm.entrypoints.openai.errors import bad_request

# {field: its values that ask nothing}, for the fields beam search cannot honour.
NOT_WITH_BEAMS: dict[str, tuple[Any, ...]] = {
    "stop": (None, [], ""),
    "stop_token_ids": (None, []),
    "seed": (None,),
    "top_p": (None, 1, 1.0),
    "top_k": (None, 0, -1),
    "min_p": (None, 0, 0.0),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "logit_bias": (None, {}),
    "allowed_token_ids": (None,),
    "bad_words": (None, []),
    "min_tokens": (0,),
    "thinking_token_budget": (None, -1),
    "prompt_logprobs": (None,),
    "repetition_detection": (None,),
    "vllm_xargs": (None, {}),
}


def asks_nothing(name: str, value: Any) -> bool:
    """Whether ``value`` of :data:`NOT_WITH_BEAMS` field ``name`` is one of its 'off' values."""
    return any(type(value) is type(v) and value == v for v in NOT_WITH_BEAMS[name])


# The OpenAPI document's words for the rules below (openapi/endpoints.py's generation rules).
RULES = (
    " `use_beam_search: true` (`n` is the beam width) takes none of "
    + ", ".join(f"`{name}`" for name in NOT_WITH_BEAMS)
    + " (their 'off' values only), no `logprob_token_ids`, no structured output, not"
    " `echo` with `logprobs` (completions), and needs `2 * n` logprobs per step within"
    " the server's `--max-logprobs` (20 by default); the batch endpoint takes no beam"
    " search."
)


def beam_params(
    req: Any,
    params: SamplingParams,
    *,
    constraint_field: str | None,
    max_logprobs: int,
) -> BeamSearchParams:
    """The beam search a request asks for. ``params``: the sampling parameters built for it
    (their temperature, max_tokens and structured outputs, defaults applied);
    ``constraint_field``: the body field a structured-output constraint came in."""
    if req.logprob_token_ids:  # vLLM's check and words
        raise bad_request(
            "`logprob_token_ids` is not supported with beam search.", "logprob_token_ids"
        )
    for name in NOT_WITH_BEAMS:
        if not asks_nothing(name, getattr(req, name, None)):
            raise bad_request(
                f"`{name}` is not supported with beam search (`use_beam_search`): beam "
                "search ranks candidates by their raw logprobs.",
                name,
            )
    if params.structured_outputs is not None:
        field = constraint_field or "structured_outputs"
        raise bad_request(
            f"`{field}` (a structured output) is not supported with beam search.", field
        )
    if 0 <= max_logprobs < req.n * 2:  # -1: no limit
        raise bad_request(
            f"beam search with n={req.n} needs {2 * req.n} logprobs per step, above the "
            f"server's max_logprobs ({max_logprobs}).",
            "n",
        )
    assert params.max_tokens is not None  # the serving paths always size it
    return BeamSearchParams(
        beam_width=req.n,
        max_tokens=params.max_tokens,
        ignore_eos=req.ignore_eos,
        temperature=params.temperature,
        length_penalty=req.length_penalty,
        include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=params.skip_special_tokens,
        watermarking=params.watermarking,
    )
