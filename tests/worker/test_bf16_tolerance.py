"""bfloat16 on CPU (the default where the CPU has native bf16) against transformers in fp32.

bf16 keeps 8 bits of mantissa, so exact greedy parity is not the contract: every token the
bf16 runner picks must be within ``ARGMAX_TOL`` of HF fp32's best logprob at that prefix, and
every logprob it reports within ``LOGPROB_TOL`` of HF's for that token (and within
``LOGPROB_MEAN_TOL`` on average) — through paged
scheduling with chunked prefill. (fp32 parity, exact to 1e-4, is test_parity.py.)
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

ARGMAX_TOL = 0.05
LOGPROB_TOL = 0.15  # any one token (bf16 rounding compounds over layers and positions)
LOGPROB_MEAN_TOL = 0.04  # on average: a real bug (a wrong mask, a wrong rotary) is O(1)

CASES: list[tuple[str, dict[str, Any]]] = [
    ("llama3", dict(num_heads=4, num_kv_heads=2, tie_word_embeddings=True)),
    ("qwen3", dict(num_heads=4, num_kv_heads=1)),
]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "overrides"), CASES, ids=[c[0] for c in CASES])
def test_bf16_tracks_hf_fp32(tmp_path: Path, family: str, overrides: dict[str, Any]) -> None:
    path = make_tiny_checkpoint(tmp_path / family, family, **overrides)  # type: ignore[arg-type]
    hf = load_hf_model(path)  # float32
    runner = ModelRunner(path, dtype="bfloat16", block_size=4, max_num_seqs=8, max_model_len=64)
    assert runner.dtype == torch.bfloat16
    runner.load_model()
    runner.initialize_kv_cache(num_blocks=64)
    driver = SchedDriver(runner, token_budget=7)  # prompts prefill in chunks
    g = torch.Generator().manual_seed(7)
    vocab = runner.model_config.vocab_size
    prompts = {k: torch.randint(3, vocab, (n,), generator=g).tolist() for k, n in
               {"a": 3, "b": 13, "c": 21}.items()}  # fmt: skip
    greedy = SamplingParams(temperature=0.0, max_tokens=8, logprobs=1, ignore_eos=True)
    for req_id, prompt in prompts.items():
        driver.add(req_id, prompt, greedy)
    driver.run()
    worst_gap = worst_lp = 0.0
    errors: list[float] = []
    for req_id, r in driver.reqs.items():
        assert len(r.outputs) == 8, req_id
        ref = hf_logprobs(hf, r.prompt + r.outputs)  # [L, V] fp32
        p = len(r.prompt)
        for i, tok in enumerate(r.outputs):
            row = ref[p + i - 1]
            worst_gap = max(worst_gap, (row.max() - row[tok]).item())
            errors.append(abs(r.logprobs[i].logprobs[0] - row[tok].item()))
            worst_lp = max(worst_lp, errors[-1])
    assert worst_gap <= ARGMAX_TOL, f"a bf16 greedy token is {worst_gap:.4f} below HF's best"
    assert worst_lp <= LOGPROB_TOL, f"a bf16 logprob is {worst_lp:.4f} off HF fp32"
    mean = sum(errors) / len(errors)
    assert mean <= LOGPROB_MEAN_TOL, f"bf16 logprobs are {mean:.4f} off HF fp32 on average"
