"""Batch-1 latency with a speculative config on vLLM's CPU build; executed by the vLLM
venv's Python, by path (it imports only ``vllm_runner`` beside it, nothing of actorllm);
``timed_rounds`` is the measurement actorllm's side (benchmarks/spec_decode_bench.py) runs too.

Job keys: ``model`` (a checkpoint directory: the same weights actorllm loads), ``dtype``,
``max_model_len``, ``speculative_config`` (vLLM's dict, or None), ``prompt`` (token ids),
``output_len``, ``rounds``, ``edit`` (true: the prompt becomes prompt + the model's own
greedy continuation + prompt, so prompt lookups can hit). Prints one JSON document: the
prompt served, the greedy tokens, each round's seconds for ``output_len`` tokens and for
one token, and vLLM's draft / accepted counters. ``prefix_caching`` (default false: every
round computes the whole prompt) turns vLLM's prefix cache on.
"""

from __future__ import annotations

import time
from typing import Any, TextIO


def prepare(llm: Any, params_cls: Any, job: dict[str, Any]) -> dict[str, Any]:
    """The edit prompt, built from the model's own greedy continuation, and a warm-up run
    of it: ``{"prompt", "tokens", "full_s": [], "one_s": []}`` for the rounds to fill."""
    prompt = list(job["prompt"])
    if job.get("edit"):
        prompt = prompt + _greedy(llm, params_cls, prompt, job["output_len"])[0] + prompt
    tokens, _ = _greedy(llm, params_cls, prompt, job["output_len"])  # warm-up
    return {"prompt": prompt, "tokens": tokens, "full_s": [], "one_s": []}


def timed_round(
    llm: Any, params_cls: Any, prompt: list[int], job: dict[str, Any]
) -> tuple[float, float]:
    """Seconds for one token, then for ``output_len`` tokens, of ``prompt``."""
    one = _greedy(llm, params_cls, prompt, 1)[1]
    return one, _greedy(llm, params_cls, prompt, job["output_len"])[1]


def timed_rounds(llm: Any, params_cls: Any, job: dict[str, Any]) -> dict[str, Any]:
    """The measurement, the same for both engines (``llm``: vLLM's or actorllm's ``LLM``,
    ``params_cls`` its ``SamplingParams``): :func:`prepare`, then ``rounds`` of
    :func:`timed_round`. Returns the prompt served, the greedy tokens, and the round
    times."""
    doc = prepare(llm, params_cls, job)
    for _ in range(job["rounds"]):
        one, full = timed_round(llm, params_cls, doc["prompt"], job)
        doc["one_s"].append(one)
        doc["full_s"].append(full)
    return doc


def _greedy(llm: Any, params_cls: Any, ids: list[int], tokens: int) -> tuple[list[int], float]:
    params = params_cls(max_tokens=tokens, temperature=0.0, ignore_eos=True, detokenize=False)
    start = time.perf_counter()
    out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
    return list(out[0].outputs[0].token_ids), time.perf_counter() - start


def measure(job: dict[str, Any], results: TextIO) -> None:
    import vllm
    from vllm import LLM, SamplingParams
    from vllm_runner import _emit  # beside this file (run by path)

    llm = LLM(
        model=job["model"], dtype=job["dtype"], skip_tokenizer_init=True, seed=0,
        max_model_len=job["max_model_len"],
        enable_prefix_caching=job.get("prefix_caching", False),
        speculative_config=job["speculative_config"],
        disable_log_stats=False,  # get_metrics() needs the stat loggers (LLM turns them off)
    )  # fmt: skip
    doc = timed_rounds(llm, SamplingParams, job)
    counters: dict[str, float] = {}
    try:
        for m in llm.get_metrics():
            if m.name.startswith("vllm:spec_decode_num_") and hasattr(m, "value"):
                counters[m.name] = m.value
    except Exception as e:
        counters["error"] = str(e)  # type: ignore[assignment]
    _emit(results, {"vllm": vllm.__version__, **doc, "counters": counters})


if __name__ == "__main__":
    from vllm_runner import run_script

    run_script(measure)
