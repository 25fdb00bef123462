"""Benchmark workloads as token ids: ``random`` and ``nanovllm`` (nano-vllm's bench.py).

A workload is a list of :class:`BenchRequest` (prompt token ids + the exact number of tokens
to generate, with ``ignore_eos``), so every backend (actorllm, transformers, the HTTP server)
gets the same prompts and does the same work.

``nanovllm`` reproduces GeeeekExplorer/nano-vllm ``bench.py`` draw for draw: ``seed(0)`` on
Python's ``random``, then 256 prompts of ``randint(100, 1024)`` ids each ``randint(0, 10000)``,
then 256 output lengths ``randint(100, 1024)`` (temperature 0.6, ignore_eos). Scaling keeps
that sequence: ``num_prompts`` takes a prefix of it (drawn at the original 256 or more), and
``max_len`` scales every prompt length (truncating the prompt) and output length by
``max_len / 1024``. Token ids must be below the
model's vocabulary: with a vocabulary of at most 10000 ids (the demo model has 4096), each id
is taken ``% vocab_size`` (a smaller vocab changes the ids, never the lengths).

    >>> reqs = nanovllm_requests(num_prompts=2, max_len=128, vocab_size=4096)
    >>> [(len(r.prompt_token_ids), r.output_len) for r in reqs]
    [(120, 106), (90, 39)]
"""

from __future__ import annotations

import random
from dataclasses import dataclass

NANOVLLM_NUM_SEQS = 256
NANOVLLM_MAX_INPUT_LEN = 1024
NANOVLLM_MAX_OUTPUT_LEN = 1024
NANOVLLM_TEMPERATURE = 0.6
NANOVLLM_MAX_TOKEN_ID = 10000  # randint(0, 10000): inclusive


@dataclass(frozen=True)
class BenchRequest:
    prompt_token_ids: list[int]
    output_len: int  # tokens to generate exactly (ignore_eos, min = max)


def nanovllm_requests(
    num_prompts: int = NANOVLLM_NUM_SEQS,
    max_len: int | None = None,
    vocab_size: int | None = None,
) -> list[BenchRequest]:
    """nano-vllm's bench.py workload; ``num_prompts`` and ``max_len`` scale it down."""
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be at least 1, got {num_prompts}.")
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}.")
    rng = random.Random(0)  # == random.seed(0) on the module-level generator
    n = max(num_prompts, NANOVLLM_NUM_SEQS)
    prompts = [
        [
            rng.randint(0, NANOVLLM_MAX_TOKEN_ID)
            for _ in range(rng.randint(100, NANOVLLM_MAX_INPUT_LEN))
        ]
        for _ in range(n)
    ]
    # nano-vllm builds all SamplingParams after all prompts: the draws come in this order.
    out_lens = [rng.randint(100, NANOVLLM_MAX_OUTPUT_LEN) for _ in range(n)]
    reqs = []
    for prompt, out_len in zip(prompts[:num_prompts], out_lens[:num_prompts], strict=True):
        if max_len is not None:
            # Scale both lengths by max_len / 1024 (the workload's longest), so the spread of
            # lengths — what static batching pays for in padding — keeps its shape.
            prompt = prompt[: _scaled(len(prompt), max_len)]
            out_len = _scaled(out_len, max_len)
        reqs.append(BenchRequest(_clamp_ids(prompt, vocab_size), out_len))
    return reqs


def _scaled(length: int, max_len: int) -> int:
    return max(1, round(length * max_len / NANOVLLM_MAX_INPUT_LEN))


def random_requests(
    num_prompts: int,
    input_len: int,
    output_len: int,
    range_ratio: float = 0.0,
    seed: int = 0,
    vocab_size: int = 4096,
) -> list[BenchRequest]:
    """vLLM's ``random`` dataset: lengths uniform in ``[len * (1 - r), len * (1 + r)]``
    (``range_ratio`` 0: fixed lengths), token ids uniform below ``vocab_size``."""
    if num_prompts < 1 or input_len < 1 or output_len < 1:
        raise ValueError("num_prompts, input_len and output_len must be at least 1.")
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio}.")
    rng = random.Random(seed)

    def length(n: int) -> int:
        lo, hi = max(1, int(n * (1 - range_ratio))), max(1, int(n * (1 + range_ratio)))
        return rng.randint(lo, hi)

    reqs = []
    for _ in range(num_prompts):
        in_len, out_len = length(input_len), length(output_len)
        reqs.append(BenchRequest([rng.randrange(vocab_size) for _ in range(in_len)], out_len))
    return reqs


def _clamp_ids(ids: list[int], vocab_size: int | None) -> list[int]:
    if vocab_size is None or vocab_size > NANOVLLM_MAX_TOKEN_ID:
        return ids
    return [i % vocab_size for i in ids]


def workload_summary(reqs: list[BenchRequest]) -> dict[str, int | float]:
    """Counts and lengths of a workload, for the JSON result."""
    ins = [len(r.prompt_token_ids) for r in reqs]
    outs = [r.output_len for r in reqs]
    return {
        "num_requests": len(reqs),
        "prompt_tokens": sum(ins),
        "output_tokens": sum(outs),
        "mean_input_len": sum(ins) / len(ins),
        "mean_output_len": sum(outs) / len(outs),
        "max_input_len": max(ins),
        "max_output_len": max(outs),
    }
