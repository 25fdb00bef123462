"""Greedy parity with transformers for every family the engine serves.

A tiny random model per family (transformers' own config class, fp32, CPU) runs 8 prompts
x 16 greedy tokens through the ``ModelRunner``; every chosen token must be HF's argmax
given the same prefix (within 1e-4 of the argmax logit), and the runner's logprob of it
must match HF's ``log_softmax`` within 1e-4. Per-family numerics (Gemma's ``1 + w`` norms,
scaled embeddings, soft-capping and query_pre_attn_scalar, Granite's multipliers, GPT-2's
biases and Conv1D weights, OLMo 2's post-norms, Phi-3's fused projections and LongRoPE,
the MoE routing rules) are all on this path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.models import PHI3_LONGROPE, hf_logprobs, load_hf_model, make_tiny_checkpoint
from tests.helpers.sched_driver import SchedDriver

TOL = 1e-4
PHIMOE_LONGROPE = {**PHI3_LONGROPE, "short_mscale": 1.1, "long_mscale": 1.3}
N_PROMPTS, N_TOKENS = 8, 16

# (family, config overrides): tied and untied heads, GQA 1-4, sharded checkpoints.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("mixtral", dict(num_kv_heads=2)),
    ("qwen2_moe", dict(num_kv_heads=2)),
    ("qwen3_moe", dict(num_kv_heads=1, max_shard_size="60KB")),
    ("olmoe", dict(num_kv_heads=4)),
    ("gpt_oss", dict(num_kv_heads=2)),
    ("gemma", dict(num_kv_heads=1)),
    ("gemma2", dict(num_kv_heads=2)),
    ("gemma3", dict(num_kv_heads=2)),
    ("phi3", dict(num_kv_heads=4, tie_word_embeddings=True)),
    ("phi3_longrope", dict(num_kv_heads=2)),
    ("olmo2", dict(num_kv_heads=2, max_shard_size="60KB")),
    ("granite", dict(num_kv_heads=2)),
    ("gpt2", dict(num_heads=4)),
    ("gptj", dict(num_heads=4)),
    ("gpt_bigcode", dict(tie_word_embeddings=True)),
    ("falcon_new", dict(num_kv_heads=2)),
    ("phimoe", dict(num_kv_heads=2)),
    # Phi-3.5-MoE's LongRoPE with its own short / long mscale.
    ("phimoe", dict(original_max_position_embeddings=64, rope_parameters=PHIMOE_LONGROPE)),
]


def _prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(11)
    lens = [3, 5, 9, 12, 17, 20, 26, 31]  # past gemma's window of 8 and several blocks
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lens]


def run_greedy(path: Path, num_blocks: int = 160, **runner_kw: Any) -> SchedDriver:
    runner = ModelRunner(
        path, dtype="float32", block_size=4, max_num_seqs=8, max_model_len=64, **runner_kw
    )
    runner.load_model()
    runner.initialize_kv_cache(num_blocks=num_blocks)
    driver = SchedDriver(runner, token_budget=64)
    greedy = SamplingParams(temperature=0.0, max_tokens=N_TOKENS, logprobs=1, ignore_eos=True)
    for i, prompt in enumerate(_prompts(runner.model_config.vocab_size)):
        driver.add(str(i), prompt, greedy)
    driver.run()
    return driver


def assert_hf_greedy(hf: Any, driver: SchedDriver) -> None:
    for req_id, r in driver.reqs.items():
        assert len(r.outputs) == N_TOKENS, req_id
        ref = hf_logprobs(hf, r.prompt + r.outputs)  # [L, V]
        p = len(r.prompt)
        for i, tok in enumerate(r.outputs):
            row = ref[p + i - 1]
            assert row[tok] >= row.max() - TOL, f"{req_id}: token {i} is not HF's argmax"
            assert abs(r.logprobs[i].logprobs[0] - row[tok].item()) < TOL, (req_id, i)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "overrides"), CASES, ids=[c[0] for c in CASES])
def test_greedy_parity_with_hf(tmp_path: Path, family: str, overrides: dict[str, Any]) -> None:
    path = make_tiny_checkpoint(tmp_path / family, family, **overrides)  # type: ignore[arg-type]
    assert_hf_greedy(load_hf_model(path), run_greedy(path))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2_moe", "gemma2", "gpt_oss"])
def test_chunked_prefill_and_prefix_hits_match_hf(tmp_path: Path, family: str) -> None:
    """A MoE and a sliding-window family through 7-token chunks and a prefix-cache hit
    (the hit covers more than gemma2's window of 8)."""
    path = make_tiny_checkpoint(tmp_path / family, family, num_kv_heads=2)  # type: ignore[arg-type]
    runner = ModelRunner(path, dtype="float32", block_size=4, max_num_seqs=4, max_model_len=64)
    runner.load_model()
    runner.initialize_kv_cache(num_blocks=64)
    driver = SchedDriver(runner, token_budget=7)
    greedy = SamplingParams(temperature=0.0, max_tokens=N_TOKENS, logprobs=1, ignore_eos=True)
    prompts = _prompts(runner.model_config.vocab_size)
    long, short = prompts[6], prompts[2]  # 26 and 9 tokens
    driver.add("a", long, greedy)
    driver.add("b", short, greedy)

    def on_step(d: SchedDriver) -> None:
        if d.step_id == 5:  # shares a's first 3 blocks, computed by now: a prefix hit
            d.add("c", [*long[:12], 7, 8, 9], greedy)

    driver.run(on_step=on_step)
    assert driver.prefix_hits >= 12
    assert max(so.total_num_scheduled_tokens for so in driver.steps) <= 7
    assert_hf_greedy(load_hf_model(path), driver)
