"""Batched decode rate of one (quantized) checkpoint on vLLM's CPU build; executed by the
vLLM venv's Python, by path (it imports only ``vllm_runner`` beside it, nothing of
actorllm). ``decode_rates`` is the measurement actorllm's side
(benchmarks/quant_vs_vllm.py) runs too, through its own ``LLM``.

Job keys: ``model`` (a directory: config.json with its ``quantization_config``, random
weights drawn at load, or a GGUF file), ``load_format`` (``dummy`` or ``auto``),
``tokenizer`` (a GGUF file's), ``dtype``, ``max_model_len``, ``batches``, ``prompt_len``,
``output_len``, ``rounds``. Prints one JSON document: the rates per batch and round, or
the error vLLM's start raised.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, TextIO


def decode_rates(llm: Any, params_cls: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Per batch size ``b``: ``b`` requests of ``prompt_len`` ids, timed for one output
    token (``one_s``) and for ``output_len`` (``full_s``) each round (greedy, no prefix
    caching, so both prefill alike), and the decode rate ``b (n - 1) / (t_n - t_1)`` over
    the rounds' medians (prefill excluded)."""
    n = job["output_len"]
    out: dict[str, Any] = {}
    for b in job["batches"]:
        prompts = [
            {"prompt_token_ids": [100 + (7 * i + 13 * j) % 3000 for j in range(job["prompt_len"])]}
            for i in range(b)
        ]
        _generate(llm, params_cls, prompts, n)  # warm-up at this batch size
        one, full = [], []
        for _ in range(job["rounds"]):
            one.append(_generate(llm, params_cls, prompts, 1))
            full.append(_generate(llm, params_cls, prompts, n))
        decode_s = statistics.median(full) - statistics.median(one)
        # None: the prefill's own spread outgrew the decode it is subtracted from (a
        # slow, noisy prefill and too few output tokens to see past it).
        rate = round(b * (n - 1) / decode_s, 2) if decode_s > 0 else None
        out[str(b)] = {"tokens_per_s": rate, "one_s": one, "full_s": full}
    return out


def _generate(llm: Any, params_cls: Any, prompts: list[dict[str, Any]], tokens: int) -> float:
    params = params_cls(max_tokens=tokens, temperature=0.0, ignore_eos=True, detokenize=False)
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - start


def measure(job: dict[str, Any], results: TextIO) -> None:
    import vllm
    from vllm import LLM, SamplingParams
    from vllm_runner import _emit  # beside this file (run by path)

    try:
        llm = LLM(
            model=job["model"], load_format=job["load_format"], tokenizer=job.get("tokenizer"),
            skip_tokenizer_init=job.get("tokenizer") is None, dtype=job["dtype"], seed=0,
            max_model_len=job["max_model_len"], enable_prefix_caching=False,
        )  # fmt: skip
    except Exception as e:  # the engine refused the checkpoint: that is the row's result
        _emit(results, {"vllm": vllm.__version__, "error": f"{type(e).__name__}: {e}"})
        return
    _emit(results, {"vllm": vllm.__version__, "rates": decode_rates(llm, SamplingParams, job)})


if __name__ == "__main__":
    from vllm_runner import run_script

    run_script(measure)
