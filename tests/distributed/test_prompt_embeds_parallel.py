"""Embedding prompts under tensor, pipeline and data parallelism: rank 0 sends each step's
embedding rows to the other ranks with the step (worker/tp_step.py), so TP=2, PP=2 and
DP=2 give one worker's greedy tokens, for the embeddings of a prompt's own tokens and for
random ones."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from actorllm import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
IDS = [5 + i for i in range(21)]  # spans several 8-token blocks


def _prompts(llama: str) -> list[dict[str, Any]]:
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(llama, dtype=torch.float32)
    with torch.no_grad():
        own = hf.get_input_embeddings()(torch.tensor(IDS)).clone()  # [T, H]
    rand = torch.randn(13, own.shape[1], generator=torch.Generator().manual_seed(0)) * 0.05
    return [{"prompt_embeds": own}, {"prompt_embeds": rand}, {"prompt_token_ids": IDS}]


def _generate(llama: str, prompts: list[dict[str, Any]], **parallel: Any) -> list[list[int]]:
    with LLM(llama, enable_prompt_embeds=True, dtype="float32", block_size=8, **parallel) as llm:
        outs = llm.generate(prompts, GREEDY, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module")
def case(llama: str) -> tuple[list[dict[str, Any]], list[list[int]]]:
    prompts = _prompts(llama)
    want = _generate(llama, prompts)
    assert want[0] == want[2]  # a prompt's own embeddings give its tokens' output
    return prompts, want


@pytest.mark.parametrize(
    "parallel",
    [{"tensor_parallel_size": 2}, {"pipeline_parallel_size": 2}, {"data_parallel_size": 2}],
    ids=["tp2", "pp2", "dp2"],
)
def test_parallel_engines_take_embedding_prompts(
    llama: str, case: tuple[list[dict[str, Any]], list[list[int]]], parallel: dict[str, int]
) -> None:
    prompts, want = case
    assert _generate(llama, prompts, **parallel) == want
