"""Greedy parity with transformers' own implementations, through real paged scheduling.

Every token the runner picks must be HF's argmax given the same prefix (exact ties within
1e-4 excepted) and every reported logprob must match HF's ``log_softmax`` within 1e-4 —
with mixed prompt lengths, chunked prefill, prefix-cache hits and a recompute preemption.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.models import hf_logprobs, load_hf_model, make_tiny_checkpoint
from tests.helpers.sched_driver import SchedDriver

TOL = 1e-4

# (family, config overrides): every family, tied and untied, GQA ratios 1, 2 and 4.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("llama", dict(num_heads=4, num_kv_heads=4)),
    ("llama3", dict(num_heads=4, num_kv_heads=2, tie_word_embeddings=True)),
    ("mistral", dict(num_heads=4, num_kv_heads=1, sliding_window=8)),
    ("qwen2", dict(num_heads=4, num_kv_heads=2, tie_word_embeddings=True)),
    ("qwen3", dict(num_heads=4, num_kv_heads=1)),
]


def _prompts(vocab: int) -> dict[str, list[int]]:
    g = torch.Generator().manual_seed(7)
    lens = {"a": 3, "b": 13, "c": 21}
    return {k: torch.randint(3, vocab, (n,), generator=g).tolist() for k, n in lens.items()}


@pytest.mark.slow
@pytest.mark.parametrize(("family", "overrides"), CASES, ids=[c[0] for c in CASES])
def test_greedy_parity_with_hf(tmp_path: Path, family: str, overrides: dict[str, Any]) -> None:
    path = make_tiny_checkpoint(tmp_path / family, family, **overrides)  # type: ignore[arg-type]
    hf = load_hf_model(path)
    runner = ModelRunner(path, dtype="float32", block_size=4, max_num_seqs=8, max_model_len=64)
    runner.load_model()
    runner.initialize_kv_cache(num_blocks=96)
    driver = SchedDriver(runner, token_budget=7)  # small budget: prompts prefill in chunks
    prompts = _prompts(runner.model_config.vocab_size)
    greedy = SamplingParams(temperature=0.0, max_tokens=8, logprobs=3, ignore_eos=True)
    for req_id, prompt in prompts.items():
        params = greedy.clone(prompt_logprobs=2) if req_id == "c" else greedy
        driver.add(req_id, prompt, params)

    def on_step(d: SchedDriver) -> None:
        if d.step_id == 4:  # shares b's first 3 blocks, computed by now: a prefix hit
            d.add("d", [*prompts["b"][:12], 5, 6, 7], greedy)
        if d.step_id == 6 and d.reqs["a"] in d.running and d.reqs["a"].outputs:
            d.preempt("a")  # recompute: comes back as a new request with its outputs

    driver.run(on_step=on_step)
    assert driver.prefix_hits >= 12
    assert any("a" in so.preempted_req_ids for so in driver.steps)
    assert max(so.total_num_scheduled_tokens for so in driver.steps) <= 7

    for req_id, r in driver.reqs.items():
        assert len(r.outputs) == 8, req_id
        seq = r.prompt + r.outputs
        ref = hf_logprobs(hf, seq)  # [L, V]
        p = len(r.prompt)
        for i, tok in enumerate(r.outputs):
            row = ref[p + i - 1]
            assert row[tok] >= row.max() - TOL, f"{req_id}: token {i} is not HF's argmax"
            lp = r.logprobs[i]
            assert lp.token_ids[0] == tok
            assert abs(lp.logprobs[0] - row[tok].item()) < TOL
            top = row.topk(3)
            assert lp.logprobs[1:] == pytest.approx(top.values.tolist(), abs=TOL)
            assert lp.rank == int((row > row[tok]).sum()) + 1
    c = driver.reqs["c"]
    assert len(c.prompt_logprobs) == len(c.prompt) - 1
    ref = hf_logprobs(hf, c.prompt)
    for pos, entry in enumerate(c.prompt_logprobs):
        assert entry.token_ids[0] == c.prompt[pos + 1]
        assert abs(entry.logprobs[0] - ref[pos, c.prompt[pos + 1]].item()) < TOL
        assert entry.logprobs[1:] == pytest.approx(ref[pos].topk(2).values.tolist(), abs=TOL)
