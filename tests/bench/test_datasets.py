"""Workloads: nano-vllm's bench.py draw for draw, and vLLM's random dataset."""

from __future__ import annotations

import random

import pytest

from actorllm.bench.datasets import nanovllm_requests, random_requests, workload_summary


def _nanovllm_reference() -> tuple[list[list[int]], list[int]]:
    """nano-vllm bench.py's own lines (module-level random, as it writes them)."""
    state = random.getstate()
    try:
        random.seed(0)
        prompt_token_ids = [
            [random.randint(0, 10000) for _ in range(random.randint(100, 1024))] for _ in range(256)
        ]
        max_tokens = [random.randint(100, 1024) for _ in range(256)]
    finally:
        random.setstate(state)
    return prompt_token_ids, max_tokens


def test_nanovllm_is_bench_py_exactly() -> None:
    prompts, max_tokens = _nanovllm_reference()
    reqs = nanovllm_requests()
    assert len(reqs) == 256
    assert [r.prompt_token_ids for r in reqs] == prompts
    assert [r.output_len for r in reqs] == max_tokens


def test_nanovllm_scaled_keeps_the_shape_of_the_lengths() -> None:
    prompts, max_tokens = _nanovllm_reference()
    reqs = nanovllm_requests(num_prompts=5, max_len=256, vocab_size=4096)
    assert len(reqs) == 5
    for r, p, m in zip(reqs, prompts, max_tokens, strict=False):
        n = round(len(p) * 256 / 1024)  # a quarter of every length: U[25, 256]
        assert r.prompt_token_ids == [t % 4096 for t in p[:n]]
        assert r.output_len == round(m * 256 / 1024)
        assert max(r.prompt_token_ids) < 4096


def test_nanovllm_more_than_256_is_bench_py_with_more_seqs() -> None:
    # bench.py with num_seqs=300: all prompts are drawn first, so they extend the 256.
    big, base = nanovllm_requests(300), nanovllm_requests(256)
    assert len(big) == 300
    assert [r.prompt_token_ids for r in big[:256]] == [r.prompt_token_ids for r in base]


def test_random_fixed_lengths_and_vocab() -> None:
    reqs = random_requests(4, input_len=10, output_len=7, range_ratio=0.0, vocab_size=50)
    assert [(len(r.prompt_token_ids), r.output_len) for r in reqs] == [(10, 7)] * 4
    assert all(0 <= t < 50 for r in reqs for t in r.prompt_token_ids)
    assert random_requests(4, 10, 7, seed=1) != random_requests(4, 10, 7, seed=2)
    assert workload_summary(reqs)["output_tokens"] == 28


def test_random_range_ratio_varies_lengths_within_bounds() -> None:
    reqs = random_requests(50, input_len=100, output_len=10, range_ratio=0.5)
    lens = {len(r.prompt_token_ids) for r in reqs}
    assert len(lens) > 1 and min(lens) >= 50 and max(lens) <= 150


@pytest.mark.parametrize("bad", [{"num_prompts": 0}, {"range_ratio": 1.0}])
def test_random_rejects_bad_settings(bad: dict[str, float]) -> None:
    kwargs = {"num_prompts": 2, "input_len": 4, "output_len": 4, **bad}
    with pytest.raises(ValueError):
        random_requests(**kwargs)  # type: ignore[arg-type]
