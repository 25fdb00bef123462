"""``actorllm bench throughput --lora-adapters N --lora-rank R``: what serving N LoRA
adapters costs against the base model alone, on the same workload in the same run.

N random adapters of the bench model (``lora_adapters.py``: rank R, every attention and
MLP projection) are written to a temporary directory; the requests are spread over them
round-robin (request i uses adapter i mod N), with ``max_loras = N`` so every step can
hold them all. Rounds alternate base, LoRA, base, LoRA... (``--repeat`` pairs), each on
a fresh engine, so a load that comes and goes on the host hits both alike. The headline
is the ratio of the median step times (elapsed / steps; both runs take the same steps).

``--backend actorllm,vllm``: vLLM's CPU build runs the same rounds beside ours (two warm
peers, base and LoRA, each paused while anything else runs), serving the same adapter
files with the same round-robin; compared on output tokens/s (vLLM reports no steps).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from contextlib import ExitStack
from typing import Any

import msgspec

from actorllm.bench.throughput import vllm_peer
from actorllm.bench.throughput_run import run_actorllm
from actorllm.bench.throughput_workload import Workload


def run_lora_ab(
    w: Workload, args: argparse.Namespace, backends: tuple[str, ...] = ("actorllm",)
) -> dict[str, Any]:
    """Interleaved base / LoRA rounds of workload ``w``; the figures of both and the
    step-time ratio (LoRA / base)."""
    from actorllm.bench.datasets import workload_summary
    from actorllm.bench.lora_adapters import random_adapters
    from actorllm.core.lora import LoRARequest

    n, rank = args.lora_adapters, args.lora_rank
    if args.profile:
        raise ValueError("--lora-adapters: --profile is not supported with it")
    figures: dict[str, Any] = {"workload": workload_summary(w.reqs)}
    kinds = ["base", "lora"] + (["vllm_base", "vllm_lora"] if "vllm" in backends else [])
    with tempfile.TemporaryDirectory(prefix="actorllm-bench-lora-") as tmp, ExitStack() as stack:
        paths = random_adapters(w.engine.resolved_model(), tmp, count=n, rank=rank)
        peers: dict[str, Any] = {}
        if "vllm" in backends:
            job = {"paths": [str(p) for p in paths], "max_lora_rank": rank}
            peers["vllm_base"] = stack.enter_context(vllm_peer(w, args))
            peers["vllm_lora"] = stack.enter_context(vllm_peer(w, args, lora=job))
            figures["vllm_info"] = peers["vllm_lora"].info
        adapters = [LoRARequest(f"lora{i}", i + 1, str(p)) for i, p in enumerate(paths)]
        loras = [adapters[i % n] for i in range(len(w.reqs))]
        lora_engine = msgspec.structs.replace(
            w.engine, enable_lora=True, max_loras=n, max_lora_rank=rank, max_cpu_loras=n
        )
        rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for _ in range(max(1, args.repeat)):
            for kind in kinds:
                if kind in peers:
                    fig = peers[kind].run_round()
                    rounds[kind].append(fig)
                    print(f"{kind}: {fig['output_tokens_per_s']:.1f} out tok/s", flush=True)
                    continue
                fig = run_actorllm(
                    w.reqs,
                    lora_engine if kind == "lora" else w.engine,
                    temperature=w.temperature,
                    detokenize=w.detokenize,
                    loras=loras if kind == "lora" else None,
                    warmups=n + 1,  # the same warm-up for both
                )
                fig["step_ms"] = 1e3 * fig["elapsed_s"] / max(1, fig["steps"])
                rounds[kind].append(fig)
                print(
                    f"{kind}: {fig['elapsed_s']:.2f} s, {fig['steps']} steps, "
                    f"{fig['step_ms']:.1f} ms/step, {fig['output_tokens_per_s']:.1f} out tok/s",
                    flush=True,
                )
    for kind, runs in rounds.items():
        figures[kind] = {
            "median_output_tokens_per_s": statistics.median(r["output_tokens_per_s"] for r in runs),
            "rounds": runs,
        }
        if kind in ("base", "lora"):
            figures[kind]["median_step_ms"] = statistics.median(r["step_ms"] for r in runs)
    if peers:
        tps = {k: figures[k]["median_output_tokens_per_s"] for k in kinds}
        figures["vllm_lora_vs_base_tokens"] = tps["vllm_lora"] / tps["vllm_base"]
        figures["ratio_lora_vs_vllm_lora"] = tps["lora"] / tps["vllm_lora"]
        figures["ratio_base_vs_vllm_base"] = tps["base"] / tps["vllm_base"]
    figures["lora_adapters"] = n
    figures["lora_rank"] = rank
    figures["step_time_ratio_lora_vs_base"] = (
        figures["lora"]["median_step_ms"] / figures["base"]["median_step_ms"]
    )
    figures["round_ratios"] = [
        lo["step_ms"] / b["step_ms"] for b, lo in zip(rounds["base"], rounds["lora"], strict=True)
    ]
    return figures


def lora_main(w: Workload, backends: tuple[str, ...], args: argparse.Namespace) -> int:
    from actorllm.bench.machine import result_document, write_json

    if backends not in (("actorllm",), ("actorllm", "vllm")):
        raise ValueError(
            "--lora-adapters runs actorllm (base against LoRA), with vLLM's CPU build "
            f"beside it on --backend actorllm,vllm; not --backend {','.join(backends)}"
        )
    if w.engine.enable_lora:
        raise ValueError("--lora-adapters sets the LoRA flags itself: drop --enable-lora")
    figures = run_lora_ab(w, args, backends)
    print(
        f"{args.lora_adapters} adapters of rank {args.lora_rank}: LoRA step "
        f"{figures['lora']['median_step_ms']:.1f} ms, base {figures['base']['median_step_ms']:.1f}"
        f" ms (medians of {max(1, args.repeat)} interleaved rounds): "
        f"{figures['step_time_ratio_lora_vs_base']:.3f}x"
    )
    if "ratio_lora_vs_vllm_lora" in figures:
        print(
            f"LoRA output tokens/s, actorllm / vllm: {figures['ratio_lora_vs_vllm_lora']:.2f}x "
            f"(base: {figures['ratio_base_vs_vllm_base']:.2f}x; vLLM's LoRA / its base: "
            f"{figures['vllm_lora_vs_base_tokens']:.3f}x)"
        )
    if args.output_json:
        config = {**w.config, "lora_adapters": args.lora_adapters, "lora_rank": args.lora_rank}
        doc = result_document("throughput_lora", figures=figures, config=config, args=args)
        write_json(args.output_json, doc)
    return 0
