"""``actorllm bench cpu-vs-vllm``: the whole side-by-side table against vLLM's CPU build.

Every preset of :mod:`actorllm.bench.presets` (or ``--presets a,b``) runs as
``actorllm bench throughput --preset NAME --backend actorllm,vllm --repeat N`` in a fresh
process of its own (as the vLLM peer is): interleaved rounds, the vLLM peer warm and paused
between its rounds, and the ratio of the medians (output tokens/s) is the row's figure.
One JSON holds every row, the machine (with its ISA and the load average seen during the
run: the box may be shared).

Each row also gets its roofline (:mod:`actorllm.bench.roofline_model`): the least time this
machine needs for the row's work, from ``benchmarks/roofline.py``'s figures (``--roofline``,
by default ``benchmarks/results/roofline.json`` when it exists), and each engine's median
run as a percentage of it. Figures measured on another CPU, ISA or thread count are not
used: the JSON says why the roofline was skipped.

    actorllm bench cpu-vs-vllm --rounds 3 --output-json benchmarks/results/cpu_vs_vllm.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actorllm.bench.roofline_model import MachineFigures

DEFAULT_ROOFLINE = Path("benchmarks/results/roofline.json")


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
        action=argparse.BooleanOptionalAction,
        default=None,
        help="both engines overlap scheduling with the model step (default: each engine's "
        "own default, on for both)",
    )
    parser.add_argument("--note", default=None, help="free text stored in the JSON (contention)")
    parser.add_argument(
        "--roofline",
        default=None,
        metavar="PATH",
        help="benchmarks/roofline.py's JSON for this machine: each row's floor and each "
        f"engine's percentage of it (default {DEFAULT_ROOFLINE} if it exists; 'none': off)",
    )
    add_output_argument(parser)


def main(args: argparse.Namespace) -> int:
    from actorllm.bench.machine import result_document, write_json
    from actorllm.bench.presets import get_preset
    from actorllm.bench.report import format_table

    names = [n.strip() for n in args.presets.split(",") if n.strip()]
    for n in names:
        get_preset(n)  # unknown names fail before anything runs
    roofline, roofline_info = load_roofline(args.roofline, args.threads)
    if roofline is None:
        print(f"roofline skipped: {roofline_info['skipped']}", flush=True)
    rows: list[dict[str, Any]] = []
    docs: dict[str, Any] = {}
    for name in names:
        argv = ["--preset", name, "--backend", "actorllm,vllm", "--repeat", str(args.rounds)]
        argv += ["--threads", str(args.threads)] if args.threads else []
        argv += ["--vllm-python", args.vllm_python] if args.vllm_python else []
        if args.async_scheduling is not None:
            argv.append("--async-scheduling" if args.async_scheduling else "--no-async-scheduling")
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
            "roofline": row_roofline(name, figures, roofline, roofline_info),
        }
        rows.append(row)
        docs[name] = {"config": config, "figures": figures}
        if roofline is not None and "skipped" in row["roofline"]:
            print(f"{name}: roofline skipped: {row['roofline']['skipped']}", flush=True)
        print(format_table([_table_row(row)], _COLUMNS), flush=True)
        if args.output_json:  # after every row: a long table interrupted keeps what it has
            figures_doc = {"rows": rows, "runs": docs, "note": args.note, "roofline": roofline_info}
            doc = result_document("cpu_vs_vllm", figures=figures_doc, args=args)
            write_json(args.output_json, doc)
    print()
    print(format_table([_table_row(r) for r in rows], _COLUMNS))
    return 0


def load_roofline(
    path: str | None, threads: int | None
) -> tuple[MachineFigures | None, dict[str, Any]]:
    """roofline.py's figures if they were measured on this machine (CPU model, ISA, torch
    threads: ``threads`` or torch's default), else None; and what the JSON records of it
    (``path``, ``skipped``: why not, or None). An explicit ``path`` that is not a file
    raises ``ValueError``."""
    import torch

    from actorllm.bench.machine import cpu_isa, cpu_model
    from actorllm.bench.roofline_model import RooflineUnavailable, load_machine_figures

    if path == "none":
        return None, {"path": None, "skipped": "--roofline none"}
    file = Path(path) if path is not None else DEFAULT_ROOFLINE
    if not file.is_file():
        if path is not None:
            raise ValueError(f"--roofline: no file {path}")
        return None, {"path": str(file), "skipped": f"no {file} (run benchmarks/roofline.py)"}
    current = {
        "cpu_model": cpu_model(),
        "isa": cpu_isa(),
        "torch_threads": threads or torch.get_num_threads(),
    }
    try:
        figures = load_machine_figures(file, current)
    except RooflineUnavailable as e:
        return None, {"path": str(file), "skipped": str(e)}
    return figures, {"path": str(file), "skipped": None, "read_gbs": figures.read_gbs}


def row_roofline(
    name: str,
    figures: dict[str, Any],
    machine: MachineFigures | None,
    info: dict[str, Any],
) -> dict[str, Any]:
    """A row's floor and each engine's median run as a percentage of it (``figures``: the
    row's ``run_interleaved`` result), or ``{"skipped": why}``."""
    from actorllm.bench.presets import get_preset
    from actorllm.bench.roofline_model import RooflineUnavailable, percent_of_floor, preset_floor

    if machine is None:
        return {"skipped": info["skipped"]}
    try:
        floor = preset_floor(get_preset(name), machine)
    except RooflineUnavailable as e:
        return {"skipped": str(e)}
    out = floor.to_dict()
    output_tokens = figures["workload"]["output_tokens"]
    for engine in ("actorllm", "vllm"):
        runs = figures[engine]["runs"]
        out[f"{engine}_pct"] = percent_of_floor(floor.floor_s, output_tokens, runs)
    return out


def _table_row(row: dict[str, Any]) -> dict[str, Any]:
    r = row.get("roofline") or {}
    keys = ("floor_s", "actorllm_pct", "vllm_pct")
    return {**row, **{k: r.get(k) for k in keys}}


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
    ("floor_s", "floor s", ".2f"),
    ("actorllm_pct", "actorllm % of floor", ".0f"),
    ("vllm_pct", "vllm % of floor", ".0f"),
]
