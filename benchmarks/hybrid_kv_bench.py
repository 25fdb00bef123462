"""KV memory of a hybrid model (Gemma 2: sliding and full layers alternate) with one block
table per attention type (sliding layers hand back blocks behind their window) against one
table for all layers (every block kept), over the same bytes of KV cache.

The model config is a scaled-down Gemma 2 built with transformers' own ``Gemma2Config``;
the KV cache groups and bytes per block are what the model runner computes for it
(``worker/kv_cache.py``), and the requests go through the real scheduler
(``core/scheduler``). The model itself is not run: which blocks a request holds depends on
its token counts only (tests/worker/test_runner_scheduler.py shows the tokens are the
same either way). Reported per mode: blocks and bytes one request holds at the end of its
run, the most requests running at once, preemptions and steps.

    python benchmarks/hybrid_kv_bench.py
    python benchmarks/hybrid_kv_bench.py --output-json benchmarks/results/hybrid_kv.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

import torch

from actorllm.bench.machine import result_document, write_json
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler, SchedulerConfig
from actorllm.models.config import CheckpointConfig
from actorllm.worker.kv_cache import kv_cache_bytes_per_block, kv_cache_groups


def gemma2_config(args: argparse.Namespace) -> CheckpointConfig:
    import transformers

    hf = transformers.Gemma2Config(
        vocab_size=1024, hidden_size=256, intermediate_size=512,
        num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, sliding_window=args.window, max_position_embeddings=args.max_model_len,
        architectures=["Gemma2ForCausalLM"],
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        return CheckpointConfig.from_pretrained(d)


def run(cfg: CheckpointConfig, hybrid: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Every request through the scheduler; sampled tokens are fixed (no model)."""
    groups = kv_cache_groups(cfg, hybrid)
    per_block = kv_cache_bytes_per_block(cfg, args.block_size, torch.float32, groups)
    num_blocks = args.kv_mib * 2**20 // per_block
    windows = tuple(g.window for g in groups)
    sched = Scheduler(
        SchedulerConfig(
            max_num_seqs=args.num_requests, max_num_batched_tokens=args.budget,
            max_model_len=args.max_model_len, block_size=args.block_size, num_blocks=num_blocks,
            kv_group_windows=windows if len(windows) > 1 else None,
            sliding_window=windows[0] if len(windows) == 1 else None,
        )
    )  # fmt: skip
    params = SamplingParams(max_tokens=args.output_len, ignore_eos=True)
    g = torch.Generator().manual_seed(0)
    for i in range(args.num_requests):
        prompt = torch.randint(3, 1000, (args.input_len,), generator=g).tolist()
        sched.add_request(Request(f"r{i}", prompt, params))
    kv = sched.kv_cache_manager
    max_running = steps = 0
    end_blocks: list[int] = []  # blocks a request holds at its last step
    while sched.has_unfinished_requests():
        so = sched.schedule()
        steps += 1
        max_running = max(max_running, len(so.num_scheduled_tokens))
        for rid in so.num_scheduled_tokens:
            req = sched.requests[rid]
            if req.num_output_tokens == args.output_len - 1:
                end_blocks.append(kv.num_held_blocks(rid))
        reqs = sched.requests
        # the requests whose prompt is done sample one token this step
        ids = [
            r for r in so.num_scheduled_tokens if reqs[r].num_computed_tokens >= reqs[r].num_tokens
        ]
        out = ModelRunnerOutput(step_id=so.step_id, req_ids=ids, sampled_token_ids=[[7]] * len(ids))
        sched.update_from_output(so, out)
    held = max(end_blocks)
    return {
        "kv_cache_groups": [{"window": g.window, "layers": list(g.layers)} for g in groups],
        "bytes_per_block": per_block,
        "num_blocks": num_blocks,
        "blocks_per_request": held,
        "kib_per_request": held * per_block / 1024,
        "max_running": max_running,
        "preemptions": sched.statistics().num_preemptions,
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--num-requests", type=int, default=32)
    p.add_argument("--budget", type=int, default=2048, help="max_num_batched_tokens")
    p.add_argument("--kv-mib", type=int, default=64, help="KV cache size, both modes")
    p.add_argument("--output-json", default=None)
    args = p.parse_args(argv)
    cfg = gemma2_config(args)
    figures = {"hybrid": run(cfg, True, args), "one_table": run(cfg, False, args)}
    h, o = figures["hybrid"], figures["one_table"]
    figures["kv_per_request_ratio"] = round(o["kib_per_request"] / h["kib_per_request"], 3)
    figures["max_running_ratio"] = round(h["max_running"] / o["max_running"], 3)
    print(f"{'mode':<10} {'KiB/request':>12} {'max running':>12} {'preemptions':>12} {'steps':>6}")
    for mode in ("hybrid", "one_table"):
        f = figures[mode]
        print(
            f"{mode:<10} {f['kib_per_request']:>12.0f} {f['max_running']:>12} "
            f"{f['preemptions']:>12} {f['steps']:>6}"
        )
    print(
        f"one table holds {figures['kv_per_request_ratio']}x the KV per request; hybrid runs "
        f"{figures['max_running_ratio']}x the requests at once"
    )
    if args.output_json:
        doc = result_document(
            "hybrid_kv", figures=figures, args=args, argv=[sys.argv[0], *(argv or sys.argv[1:])]
        )
        write_json(args.output_json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
