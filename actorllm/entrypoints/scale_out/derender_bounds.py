"""What a derender body may carry, checked before any id is decoded (vLLM's bounds, its
messages): a derender's token structures come from the caller, so their sizes are bounded
by the served model, as the engine that produced them would be.

* at most ``MAX_N_SEQUENCES`` generate responses and choices per response (vLLM's
  ``VLLM_MAX_N_SEQUENCES`` default);
* per choice, ``token_ids`` and ``logprobs.content`` up to ``max_model_len``, each
  position's ``top_logprobs`` up to ``max_logprobs`` (-1: no bound);
* ``prompt_logprobs`` and caller-given ``prompt_token_ids`` up to ``max_model_len``;
* a streamed chunk: the prompt, the ids carried in ``stream_state`` and the chunk's own
  together up to ``max_model_len``.

Each is a 400 naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence

from actorllm.entrypoints.openai.errors import bad_request
from actorllm.entrypoints.scale_out.protocol import GenerateResponse

MAX_N_SEQUENCES = 16384

# A derender body is another server's whole answer, so it gets a wider body limit than a
# request: one long-context generation with logprobs is far over 16 MiB (131072 positions
# of 21 candidates are ~150 MB of JSON), and vLLM bounds it by the counts above, not bytes.
DERENDER_PATHS = ("/v1/chat/completions/derender", "/v1/completions/derender")
DERENDER_BODY_FACTOR = 16  # times --max-body-bytes


def check_responses(
    responses: Sequence[GenerateResponse], *, max_model_len: int, max_logprobs: int
) -> None:
    if len(responses) > MAX_N_SEQUENCES:
        raise bad_request(
            f"generate_responses count ({len(responses)}) exceeds server maximum "
            f"({MAX_N_SEQUENCES}).",
            "generate_responses",
        )
    for gen in responses:
        if len(gen.choices) > MAX_N_SEQUENCES:
            raise bad_request(
                f"choices count ({len(gen.choices)}) in response '{gen.request_id}' "
                f"exceeds server maximum ({MAX_N_SEQUENCES}).",
                "choices",
            )
        for c in gen.choices:
            if c.token_ids and len(c.token_ids) > max_model_len:
                raise bad_request(
                    f"token_ids length ({len(c.token_ids)}) in choice {c.index} exceeds "
                    f"max_model_len ({max_model_len}).",
                    "token_ids",
                )
            content = c.logprobs.content if c.logprobs is not None else None
            if not content:
                continue
            if len(content) > max_model_len:
                raise bad_request(
                    f"logprobs.content length ({len(content)}) in choice {c.index} exceeds "
                    f"max_model_len ({max_model_len}).",
                    "logprobs",
                )
            widest = max(len(e.top_logprobs) for e in content)
            if max_logprobs >= 0 and widest > max_logprobs:
                raise bad_request(
                    f"top_logprobs count ({widest}) in choice {c.index} exceeds "
                    f"max_logprobs ({max_logprobs}).",
                    "top_logprobs",
                )
        if gen.prompt_logprobs and len(gen.prompt_logprobs) > max_model_len:
            raise bad_request(
                f"prompt_logprobs length ({len(gen.prompt_logprobs)}) in response "
                f"'{gen.request_id}' exceeds max_model_len ({max_model_len}).",
                "prompt_logprobs",
            )


def check_prompt_ids(given: Sequence[Sequence[int] | None], *, max_model_len: int) -> None:
    for ids in given:
        if ids is not None and len(ids) > max_model_len:
            raise bad_request(
                f"prompt_token_ids length ({len(ids)}) exceeds max_model_len ({max_model_len}).",
                "prompt_token_ids",
            )


def check_stream_length(prompt: int, prior: int, delta: int, *, max_model_len: int) -> None:
    """A streamed chat chunk: the whole replay (prompt, earlier chunks, this one)."""
    if prompt + prior + delta > max_model_len:
        raise bad_request(
            f"prompt_token_ids length ({prompt}) plus output_token_ids length ({prior}) "
            f"plus delta ({delta}) exceeds max_model_len ({max_model_len}).",
            "prompt_token_ids",
        )


def check_token_ids(gen: GenerateResponse, where: str) -> None:
    """Every whole choice carries ids (vLLM's ValueError, a 400)."""
    for c in gen.choices:
        if not c.token_ids:
            raise bad_request(f"choice {c.index}{where} has empty or null token_ids", "token_ids")
