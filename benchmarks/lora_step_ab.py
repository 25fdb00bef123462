"""LoRA's cost per model step, base and LoRA runners side by side in one process, step
by step interleaved (what ``bench throughput --lora-adapters`` measures end to end, without
the engine around it).

Two :class:`ModelRunner` of the same model (dummy weights, same seed) run the same
scheduler steps: one plain, one with ``N`` random adapters of rank ``R`` and the batch's
requests spread over them round-robin (``max_loras = N``). Each decode step runs on both,
the order alternating, so a load that comes and goes on the host hits both alike; the
headline is the median over steps of (LoRA step time / base step time).

    python benchmarks/lora_step_ab.py --preset qwen3-75m-fp32 --batch 128 \\
        --output-json benchmarks/results/lora_step_ab.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import torch

from actorllm.bench.lora_adapters import random_adapters
from actorllm.bench.machine import result_document, write_json
from actorllm.bench.presets import get_preset
from actorllm.core.lora import LoRARequest
from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler
from actorllm.core.scheduler.config import SchedulerConfig
from actorllm.worker.lora_settings import LoRASettings
from actorllm.worker.model_runner import ModelRunner


def _side(model: str, dtype: str, lora: LoRASettings | None, loras: list[Any], args: Any) -> Any:
    runner = ModelRunner(
        model, dtype=dtype, max_model_len=args.prompt_len + args.steps + 8,
        max_num_batched_tokens=args.batch * args.prompt_len, load_format="dummy", seed=0,
        lora=lora,
    )  # fmt: skip
    runner.load_model()
    blocks = args.batch * ((args.prompt_len + args.steps) // 16 + 2) + 8
    runner.initialize_kv_cache(blocks)
    sched = Scheduler(SchedulerConfig(
        max_model_len=args.prompt_len + args.steps + 8, num_blocks=blocks,
        max_num_batched_tokens=args.batch * args.prompt_len, max_num_seqs=args.batch,
        max_loras=len(loras) if lora else 0,
    ))  # fmt: skip
    for i in range(args.batch):
        params = SamplingParams(max_tokens=args.steps + 2, temperature=0.0, ignore_eos=True)
        prompt = [(7 * i + j) % 1000 + 1 for j in range(args.prompt_len)]
        adapter = loras[i % len(loras)] if lora else None
        sched.add_request(Request(str(i), prompt, params, lora_request=adapter))
    return runner, sched


def _step(side: Any) -> float:
    runner, sched = side
    so = sched.schedule()
    t = time.perf_counter()
    out = runner.execute(so)
    dt = time.perf_counter() - t
    sched.update_from_output(so, out)
    return dt


def run(args: argparse.Namespace, preset: str) -> dict[str, Any]:
    p = get_preset(preset)
    model = str(p.model_dir())
    with tempfile.TemporaryDirectory() as tmp:
        paths = random_adapters(model, tmp, count=args.adapters, rank=args.rank)
        loras = [LoRARequest(f"lora{i}", i + 1, str(x)) for i, x in enumerate(paths)]
        settings = LoRASettings(max_loras=args.adapters, max_lora_rank=args.rank,
                                max_cpu_loras=args.adapters)  # fmt: skip
        base = _side(model, p.dtype, None, loras, args)
        lora = _side(model, p.dtype, settings, loras, args)
        _step(base), _step(lora)  # the prefill
        for _ in range(2):  # warm
            _step(base), _step(lora)
        tb, tl = [], []
        for i in range(args.steps - 3):
            if i % 2:
                tb.append(_step(base))
                tl.append(_step(lora))
            else:
                tl.append(_step(lora))
                tb.append(_step(base))
    ratios = [lo / b for b, lo in zip(tb, tl, strict=True)]
    return {
        "preset": preset,
        "dtype": p.dtype,
        "base_step_ms_median": 1e3 * statistics.median(tb),
        "lora_step_ms_median": 1e3 * statistics.median(tl),
        "ratio_median_of_steps": statistics.median(ratios),
        "ratio_of_medians": statistics.median(tl) / statistics.median(tb),
        "steps": len(ratios),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", action="append", default=None,
                    help="bench preset(s) (default qwen3-75m-fp32 and qwen3-75m-bf16)")  # fmt: skip
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--batch", type=int, default=128, help="decode rows per step")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=24, help="decode steps timed (each side)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--output-json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    figures = {}
    for preset in args.preset or ["qwen3-75m-fp32", "qwen3-75m-bf16"]:
        figures[preset] = fig = run(args, preset)
        print(
            f"{preset}: base {fig['base_step_ms_median']:.1f} ms, LoRA "
            f"{fig['lora_step_ms_median']:.1f} ms per decode step of {args.batch} rows; "
            f"LoRA/base median of per-step ratios {fig['ratio_median_of_steps']:.3f}",
            flush=True,
        )
    if args.output_json:
        doc = result_document("lora_step_ab", figures=figures, config=vars(args))
        write_json(args.output_json, doc)


if __name__ == "__main__":
    main()
