"""The online beam answer's text leaves out the EOS that ended a beam, as vLLM's online
beam search does, even when ``include_stop_str_in_output`` keeps it in ``token_ids`` and
``skip_special_tokens`` is off (a stub engine: EOS is the best first token)."""

from collections.abc import AsyncIterator
from typing import Any

import pytest

from actorllm.core.beam_search import BeamSearchParams
from actorllm.core.logprob_types import Logprob
from actorllm.core.outputs import CompletionOutput, RequestOutput
from actorllm.engine.api.beam_search import beam_search

pytestmark = pytest.mark.anyio

EOS, A, B = 2, 7, 8
PROMPT = [5, 6]


class Tokenizer:
    eos_token_id = EOS

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(
            "</s>" if i == EOS else f"<{i}>" for i in ids if not (skip_special_tokens and i == EOS)
        )


async def generate(prompt: Any, params: Any, **_: Any) -> AsyncIterator[RequestOutput]:
    ids = prompt["prompt_token_ids"]
    top = {
        EOS: Logprob(logprob=-0.1, rank=1),
        A: Logprob(logprob=-1.0, rank=2),
        B: Logprob(logprob=-2.0, rank=3),
    }
    yield RequestOutput(
        request_id="r",
        prompt=None,
        prompt_token_ids=list(ids),
        prompt_logprobs=None,
        outputs=[
            CompletionOutput(
                index=0, text="", token_ids=[EOS], logprobs=[top], finish_reason="length"
            )
        ],
        finished=True,
    )


@pytest.mark.parametrize("include", [False, True])
async def test_the_eos_that_ended_a_beam_is_not_in_its_text(include: bool) -> None:
    params = BeamSearchParams(
        beam_width=1, max_tokens=1, include_stop_str_in_output=include, skip_special_tokens=False
    )
    (out,) = [
        o
        async for o in beam_search(generate, Tokenizer(), {"prompt_token_ids": PROMPT}, params, "r")
    ]
    (best,) = out.outputs
    assert best.finish_reason == "stop" and best.stop_reason == EOS
    assert best.token_ids == ([EOS] if include else [])
    assert best.text == ""
