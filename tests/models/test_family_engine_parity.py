"""Greedy parity with transformers through the whole engine (``LLM``), for the families
served since SmolLM3: each tiny random checkpoint (every switch its family has on: a NoPE
layer, a sliding layer, biases, interleaved or partial RoPE, per-layer-type RoPE, an
un-gated MLP, OPT's learned positions) generates 16 greedy tokens for prompts past the
window of 8, in 16-token chunks, one prompt sharing another's prefix (a prefix-cache hit).
Every token must be HF's argmax given the same prefix and its logprob HF's
``log_softmax`` within 1e-4, float32.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm import LLM, SamplingParams
from actorllm.demo import demo_tokenizer_path
from tests.helpers.models import Family, hf_logprobs, load_hf_model, make_tiny_checkpoint

TOL = 1e-4
N_TOKENS = 16
ENGINE: dict[str, Any] = {
    "dtype": "float32",
    "block_size": 4,
    "max_model_len": 96,
    "max_num_batched_tokens": 16,  # the 30-token prompt prefills in chunks
    "enable_prefix_caching": True,
}
# (family, checkpoint overrides): 3 SmolLM3 layers put a NoPE layer on each attention kind.
FAMILIES: list[tuple[Family, dict[str, Any]]] = [
    ("smollm3", {"num_layers": 3}),
    ("ernie4_5", {"tie_word_embeddings": True}),
    ("arcee", {}),
    ("olmo3", {"num_kv_heads": 1}),
    ("exaone4", {}),
    ("glm", {}),
    ("glm4", {}),
    ("seed_oss", {}),
    ("granitemoe", {"num_kv_heads": 4}),
    ("starcoder2", {"tie_word_embeddings": True}),
    ("stablelm", {}),
    ("apertus", {}),
    ("cohere", {"tie_word_embeddings": True}),
    ("cohere2", {"tie_word_embeddings": True}),
    ("opt", {"tie_word_embeddings": True}),
    ("opt_350m", {"tie_word_embeddings": True}),
    ("phi", {}),
    ("gpt_neox", {}),
    ("gpt_neox_sequential", {}),
    ("gptj", {}),
    ("gpt_bigcode", {"tie_word_embeddings": True}),
    ("gpt_bigcode_mha", {"tie_word_embeddings": True}),
    ("gpt2", {}),
    ("falcon", {"tie_word_embeddings": True}),
    ("falcon_mha", {}),
    ("falcon_new", {}),
    ("falcon_new_1ln", {"num_kv_heads": 1}),
    ("phimoe", {}),
]
# The optional q/k LayerNorms (each family's own weight layout) and StableLM's parallel
# residual, beside the plain checkpoints above.
SWITCHED: list[tuple[Family, dict[str, Any], str]] = [
    ("stablelm", {"qk_layernorm": True, "use_parallel_residual": True}, "stablelm-qk-parallel"),
    ("cohere", {"use_qk_norm": True, "tie_word_embeddings": True}, "cohere-qk_norm"),
    ("phi", {"qk_layernorm": True}, "phi-qk_layernorm"),
]
CASES = [pytest.param(f, o, id=f) for f, o in FAMILIES] + [
    pytest.param(f, o, id=i) for f, o, i in SWITCHED
]


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(5)
    a, b, c = (torch.randint(3, 4000, (n,), generator=g).tolist() for n in (30, 5, 17))
    return [a, b, c, [*a[:20], 11, 12, 13]]  # the last shares a's first 5 blocks


def _checkpoint(directory: Path, family: Family, overrides: dict[str, Any]) -> Path:
    # The demo tokenizer's vocabulary fits in 4093 rows; the engine starts with it.
    path = make_tiny_checkpoint(directory, family, vocab_size=4093, eos_token_id=0, **overrides)
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("family", "overrides"), CASES)
def test_llm_greedy_matches_transformers(
    tmp_path: Path, family: Family, overrides: dict[str, Any]
) -> None:
    path = _checkpoint(tmp_path / family, family, overrides)
    greedy = SamplingParams(temperature=0.0, max_tokens=N_TOKENS, logprobs=1, ignore_eos=True)
    prompts = _prompts()
    with LLM(str(path), **ENGINE) as llm:
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], greedy, use_tqdm=False)
    hf = load_hf_model(path)
    for prompt, out in zip(prompts, outs, strict=True):
        got = out.outputs[0]
        assert len(got.token_ids) == N_TOKENS
        ref = hf_logprobs(hf, prompt + list(got.token_ids))  # [L, V]
        for i, tok in enumerate(got.token_ids):
            row = ref[len(prompt) + i - 1]
            assert row[tok] >= row.max() - TOL, f"token {i} is not HF's argmax"
            assert got.logprobs is not None
            assert abs(got.logprobs[i][tok].logprob - row[tok].item()) < TOL, i
