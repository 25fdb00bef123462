"""--enable-return-routed-experts offline (``LLM.generate``): each finished output's
``routed_experts`` [prompt + output - 1, layers, top_k] are the experts the HF reference's
routers pick (``output_router_logits=True``) for the same tokens, under greedy decoding."""

import shutil

import numpy as np
import pytest
import torch

from actorllm import LLM, SamplingParams
from actorllm.demo import demo_tokenizer_path
from tests.helpers.models import load_hf_model, make_tiny_checkpoint

SMALL = dict(max_model_len=256, kv_cache_memory_bytes=8 * 2**20)
PROMPTS = [[5, 17, 300, 42, 9, 1000, 77], [12, 13, 14]]


def tiny_mixtral(directory) -> str:
    """A tiny random Mixtral with the demo tokenizer, written to ``directory``."""
    path = make_tiny_checkpoint(
        directory, "mixtral", vocab_size=4096, eos_token_id=0, max_position_embeddings=1024
    )
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory) -> str:
    return tiny_mixtral(tmp_path_factory.mktemp("tiny-mixtral"))


def hf_routing(path: str, token_ids: list[int]) -> np.ndarray:
    """The reference's experts per token and layer: [T, layers, top_k]."""
    model = load_hf_model(path)
    with torch.no_grad():
        out = model(torch.tensor([token_ids]), output_router_logits=True)
    k = model.config.num_experts_per_tok
    # router_logits: one [T, E] per layer; top-k of the softmax = top-k of the logits
    return np.stack([lg.topk(k, dim=-1).indices.numpy() for lg in out.router_logits], axis=1)


def same_sets(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal up to the order of each token's k experts."""
    return a.shape == b.shape and bool((np.sort(a, -1) == np.sort(b, -1)).all())


@pytest.fixture(scope="module")
def llm(mixtral):
    with LLM(mixtral, enable_return_routed_experts=True, **SMALL) as llm:
        yield llm


def test_routed_experts_match_the_hf_routers(llm, mixtral):
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params)
    for prompt, out in zip(PROMPTS, outs, strict=True):
        c = out.outputs[0]
        routed = np.asarray(c.routed_experts)
        assert routed.dtype == np.uint8
        assert routed.shape == (len(prompt) + len(c.token_ids) - 1, 2, 2)
        ref = hf_routing(mixtral, prompt + c.token_ids[:-1])
        assert same_sets(routed, ref)


def test_prompt_start_skips_the_first_prompt_rows(llm):
    prompt = PROMPTS[0]
    full = llm.generate(
        {"prompt_token_ids": prompt}, SamplingParams(temperature=0.0, max_tokens=4)
    )[0].outputs[0]
    tail = llm.generate(
        {"prompt_token_ids": prompt},
        SamplingParams(temperature=0.0, max_tokens=4, routed_experts_prompt_start=3),
    )[0].outputs[0]
    assert np.array_equal(np.asarray(tail.routed_experts), np.asarray(full.routed_experts)[3:])


def test_chunked_prefill_and_repeats_give_the_same_array(mixtral, llm):
    """Chunks of 4 tokens (and a prompt run twice: no prefix-cache hit is read) record the
    same rows as one prefill."""
    params = SamplingParams(temperature=0.0, max_tokens=5)
    want = np.asarray(
        llm.generate({"prompt_token_ids": PROMPTS[0]}, params)[0].outputs[0].routed_experts
    )
    with LLM(
        mixtral, enable_return_routed_experts=True, max_num_batched_tokens=4, **SMALL
    ) as chunked:
        for _ in range(2):
            got = chunked.generate({"prompt_token_ids": PROMPTS[0]}, params)[0].outputs[0]
            assert np.array_equal(np.asarray(got.routed_experts), want)


def test_off_by_default(mixtral, tmp_path):
    with LLM(mixtral, **SMALL) as plain:
        out = plain.generate({"prompt_token_ids": PROMPTS[1]}, SamplingParams(max_tokens=2))
    assert out[0].outputs[0].routed_experts is None


def test_a_dense_model_is_refused(tiny_model):
    with pytest.raises(Exception, match="enable_return_routed_experts only supports MoE"):
        LLM(tiny_model, enable_return_routed_experts=True, **SMALL)
