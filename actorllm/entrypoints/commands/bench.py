"""``actorllm bench throughput|serve|latency|overhead|chaos|embed|weight-sync``:
reproducible performance figures.

Each benchmark lives in ``actorllm.bench.<name>`` with ``add_arguments(parser)`` and
``main(args) -> int``; this module only routes to them (see benchmarks/README.md).

    $ actorllm bench throughput --backend both --dataset nanovllm --num-prompts 32 --max-len 256
    $ actorllm bench serve --launch --num-prompts 16 --request-rate 4
    $ actorllm bench latency --batch-sizes 1,4,16,64
    $ actorllm bench overhead --num-running 64,256,1024
    $ actorllm bench chaos --crashes 1000 --backend both
    $ actorllm bench embed --num-texts 1000
    $ actorllm bench quant --layers 8 --batches 1,8
    $ actorllm bench weight-sync --tp 1,2
"""

from __future__ import annotations

import argparse
import importlib

HELP = "benchmark throughput, serving, decode latency or engine overhead"

BENCHMARKS: dict[str, tuple[str, str]] = {
    "throughput": ("actorllm.bench.throughput", "offline throughput, actorllm vs transformers"),
    "serve": ("actorllm.bench.serve", "online serving over HTTP: TTFT, TPOT, ITL, E2EL"),
    "latency": ("actorllm.bench.latency", "decode step latency over batch sizes"),
    "overhead": ("actorllm.bench.overhead", "actor engine per-step cost vs the bare core loop"),
    "chaos": ("actorllm.bench.chaos", "crash actors while requests stream: nothing lost"),
    "embed": ("actorllm.bench.embed", "embedding texts/s, actorllm vs sentence-transformers"),
    "weight-sync": (
        "actorllm.bench.weight_sync",
        "seconds to push a model's weights from a trainer, vs a bare gloo broadcast",
    ),
    "cpu-vs-vllm": ("actorllm.bench.cpu_vs_vllm", "every preset row, actorllm vs vLLM's CPU build"),
    "quant": ("actorllm.bench.quant", "decode tok/s of quantized formats against bf16"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name, (module_path, help_text) in BENCHMARKS.items():
        module = importlib.import_module(module_path)
        # "resolve": a benchmark's --seed also serves as the engine's --seed.
        cmd = sub.add_parser(
            name, help=help_text, description=help_text, conflict_handler="resolve"
        )
        module.add_arguments(cmd)
        cmd.set_defaults(_bench=module.main)


def run(args: argparse.Namespace) -> int:
    try:
        return int(args._bench(args))
    except ValueError as exc:  # bad flags: EngineConfigError, workload errors
        print(f"error: {exc}")
        return 2
