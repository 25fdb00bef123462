"""Serve throughput rounds on vLLM's CPU build; executed by the vLLM venv's Python.

This file imports nothing from actorllm (the vLLM venv does not have it). It reads a job
(JSON) from the path in argv[1], starts ``vllm.LLM`` once, warms it up, then answers one
round per line on stdin (``run``; ``quit`` or EOF ends it): ``LLM.generate`` on the same
token-id prompts with the same sampling actorllm gets, timed, and one JSON line of
figures on stdout. Everything else that would print to stdout (vLLM's logs, its child
processes) goes to stderr, so stdout carries only ``{"ready": ...}`` then the rounds.

Job keys: ``model``, ``dtype``, ``seed``, ``temperature``, ``max_num_seqs``,
``max_num_batched_tokens``, ``max_model_len``, ``async_scheduling``, ``requests``
(``[[prompt ids], output_len]``), ``lora`` (None, or ``{"paths": [...], "max_lora_rank":
R}``: LoRA on, ``max_loras`` = the adapters, request i served by adapter i mod N).

The engine start sits under ``if __name__ == "__main__"``: vLLM's CPU engine core runs in a
spawned process that re-imports this module.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO


def serve(job: dict[str, Any], results: TextIO) -> None:
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    lora = job.get("lora")
    lora_args: dict[str, Any] = {}
    if lora:
        n = len(lora["paths"])
        lora_args = {"enable_lora": True, "max_loras": n, "max_cpu_loras": n,
                     "max_lora_rank": lora["max_lora_rank"]}  # fmt: skip
    llm = LLM(
        model=job["model"],
        dtype=job["dtype"],
        load_format="dummy",
        skip_tokenizer_init=True,  # token-id prompts; like actorllm's detokenize=False
        seed=job["seed"],
        max_num_seqs=job["max_num_seqs"],
        max_num_batched_tokens=job["max_num_batched_tokens"],
        max_model_len=job["max_model_len"],
        async_scheduling=job.get("async_scheduling"),  # None: vLLM's own default
        **lora_args,
    )
    reqs = job["requests"]
    loras: list[Any] | None = None
    if lora:
        from vllm.lora.request import LoRARequest

        adapters = [LoRARequest(f"lora{i}", i + 1, p) for i, p in enumerate(lora["paths"])]
        loras = [adapters[i % len(adapters)] for i in range(len(reqs))]
    warm = SamplingParams(max_tokens=4, ignore_eos=True, detokenize=False)
    for lo in [None] if loras is None else adapters:  # every adapter loaded before timing
        llm.generate([{"prompt_token_ids": reqs[0][0][:16]}], warm, use_tqdm=False,
                     lora_request=lo)  # fmt: skip
    _emit(results, {"ready": True, "startup_s": time.perf_counter() - t0,
                    "vllm": vllm.__version__, "torch": torch.__version__})  # fmt: skip
    prompts = [{"prompt_token_ids": ids} for ids, _ in reqs]
    params = [
        SamplingParams(
            max_tokens=n, ignore_eos=True, temperature=job["temperature"], detokenize=False
        )
        for _, n in reqs
    ]
    for line in sys.stdin:
        if line.strip() != "run":
            break
        llm.reset_prefix_cache()  # every round computes every prompt, as a fresh engine does
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False, lora_request=loras)
        elapsed = time.perf_counter() - start
        produced = [len(o.outputs[0].token_ids) for o in outs]
        wrong = [i for i, (_, n) in enumerate(reqs) if produced[i] != n]
        if wrong:
            i = wrong[0]
            _emit(results, {"error": f"request {i} produced {produced[i]} tokens, "
                                     f"not {reqs[i][1]}"})  # fmt: skip
            continue
        _emit(results, {"elapsed_s": elapsed, "output_tokens": sum(produced)})


def _emit(results: TextIO, doc: dict[str, Any]) -> None:
    results.write(json.dumps(doc) + "\n")
    results.flush()


def run_script(body: Callable[[dict[str, Any], TextIO], None]) -> None:
    """A runner script's entry: ``body(job, results)`` with the job read from the JSON file
    in argv[1]. Results keep the real stdout; fd 1 (this process's and its children's)
    becomes stderr, so vLLM's logs never mix into the results."""
    with open(sys.argv[1]) as f:
        job = json.load(f)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    body(job, out)


if __name__ == "__main__":
    run_script(serve)
