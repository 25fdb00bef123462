"""``actorllm bench cpu-vs-vllm``: the whole side-by-side table against vLLM's CPU build.

Every preset of :mod:`actorllm.bench.presets` (or ``--presets a,b``) runs as
``actorllm bench throughput --preset NAME --backend actorllm,vllm --repeat N`` in a fresh
process of its own (as the vLLM peer is): interleaved rounds, the vLLM peer warm and paused
between its rounds, and the ratio of the medians (output tokens/s) is the row's figure.
One JSON holds every row, the machine (with its ISA and the load average seen during the
run: the box may be shared).

    actorllm bench cpu-vs-vllm --rounds 3 --output-json benchmarks/results/cpu_vs_vllm.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from actorllm.bench.cli_args import add_output_argument
    from actorllm.bench.presets import PRESETS

    parser.add_argument(
        "--presets",
        default=",".join(PRESETS),
        help=f"comma list of rows (default all: {', '.join(PRESETS)})",
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per row")
    parser.add_argument("--threads", type=int, default=None, help="torch threads, both engines")
    parser.add_argument("--vllm-python", default=None, help="the vLLM CPU venv's python")
    parser.add_argument(
        "--async-scheduling",
        action="store_true",
        default=None,
        help="actorllm overlaps scheduling with the model step",
    )
    parser.add_argument("--note", default=None, help="free text stored in the JSON (contention)")
    add_output_argument(parser)


def main(args: argparse.Namespace) -> int:
    from actorllm.bench.machine import result_document, write_json
    from actorllm.bench.presets import get_preset
    from actorllm.bench.report import format_table

    names = [n.strip() for n in args.presets.split(",") if n.strip()]
    for n in names:
        get_preset(n)  # unknown names fail before anything runs
    rows: list[dict[str, Any]] = []
    docs: dict[str, Any] = {}
    for name in names:
        argv = ["--preset", name, "--backend", "actorllm,vllm", "--repeat", str(args.rounds)]
        argv += ["--threads", str(args.threads)] if args.threads else []
        argv += ["--vllm-python", args.vllm_python] if args.vllm_python else []
        argv += ["--async-scheduling"] if args.async_scheduling else []
        load0 = os.getloadavg()
        # Each row in a fresh process, as the vLLM peer is: an engine that ran a previous
        # row's model in this process left state behind that slowed the next (qwen3-75m-bf16
        # after the fp32 row: 1908 -> 1769 out tok/s; not threads, not malloc settings).
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            config, figures = pool.submit(_measure_row, argv).result()
        a = figures["actorllm"]["median_output_tokens_per_s"]
        v = figures["vllm"]["median_output_tokens_per_s"]
        row = {
            "preset": name,
            "actorllm": a,
            "vllm": v,
            "ratio": a / v,
            "actorllm_runs": figures["actorllm"]["runs"],
            "vllm_runs": figures["vllm"]["runs"],
            "loadavg_1m": [load0[0], os.getloadavg()[0]],
        }
        rows.append(row)
        docs[name] = {"config": config, "figures": figures}
        print(format_table([row], _COLUMNS), flush=True)
        if args.output_json:  # after every row: a long table interrupted keeps what it has
            figures_doc = {"rows": rows, "runs": docs, "note": args.note}
            doc = result_document("cpu_vs_vllm", figures=figures_doc, args=args)
            write_json(args.output_json, doc)
    print()
    print(format_table(rows, _COLUMNS))
    return 0


def _measure_row(argv: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One row's interleaved rounds (``bench throughput`` with ``argv``), in the calling
    (fresh) process: (workload config, figures)."""
    from actorllm.bench import throughput
    from actorllm.bench.throughput_workload import workload_from_args

    sub = argparse.ArgumentParser(conflict_handler="resolve")
    throughput.add_arguments(sub)
    targs = sub.parse_args(argv)
    workload = workload_from_args(targs, ("actorllm", "vllm"))
    figures = throughput.run_interleaved(workload, ("actorllm", "vllm"), targs)
    return workload.config, figures


_COLUMNS = [
    ("preset", "preset", ""),
    ("actorllm", "actorllm out tok/s", ".1f"),
    ("vllm", "vllm out tok/s", ".1f"),
    ("ratio", "ratio", ".2f"),
]
