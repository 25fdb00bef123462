"""Pipeline parallel against one worker and tensor parallel: ``actorllm bench throughput``
on one preset with ``-pp 1``, ``-pp 2`` and ``-tp 2``, each in its own process, into one
result document.

For ``-pp 2`` the throughput bench reports what crosses between the stages: each stage's
``[2, T, H]`` hidden states and residual, counted at every send
(``figures.pp2.pipeline_parallel.bytes_between_stages_per_step``), and the time inside the
sends and receives; for ``-tp 2``, each rank's all-reduces per step and the time inside
them. On one host the ranks share its cores (a 2-core box runs the two stages' processes
on the same two cores as the engine's event loop), so this measures the machinery and the
bytes, not the speed-up PP gives with a host per stage.

``--hosts N`` (root, Ray installed) first builds an N-host Ray cluster in network
namespaces (:class:`actorllm.testing.netns_cluster.NetnsCluster`: one Ray CPU per host, so
each rank or stage is placed on a host of its own, and only the veth addresses route
between hosts) and runs every configuration with ``--distributed-executor-backend ray``:
the stages' hidden states and the ranks' all-reduces cross hosts. The namespaces share this
machine's cores, so the rates remain the machinery's, not a cluster's.

    python benchmarks/pipeline_parallel_bench.py
    python benchmarks/pipeline_parallel_bench.py --output-json \\
        benchmarks/results/pipeline_parallel.json --note "the box was loaded by ..."
    python benchmarks/pipeline_parallel_bench.py --hosts 2 \\
        --output-json benchmarks/results/pipeline_parallel_hosts.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from actorllm.bench.machine import result_document, write_json

RUNS = {"pp1": [], "pp2": ["-pp", "2"], "tp2": ["-tp", "2"]}


def run_one(preset: str, flags: list[str], extra: list[str]) -> dict[str, Any]:
    """One ``bench throughput`` run in a fresh process; its actorllm figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "actorllm.entrypoints.cli", "bench", "throughput"]
        cmd += ["--preset", preset, *flags, *extra, "--output-json", str(out)]
        print("+", " ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True)
        doc = json.loads(out.read_text())
    return dict(doc["figures"]["actorllm"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="llama-4l-256", help="bench throughput's preset")
    parser.add_argument("--runs", default=",".join(RUNS), help="which of pp1,pp2,tp2")
    parser.add_argument("--note", default="", help="what the result document should say")
    parser.add_argument(
        "--hosts", type=int, default=0, help="a Ray cluster of this many netns hosts (root)"
    )
    parser.add_argument("--output-json", default=None)
    args, extra = parser.parse_known_args()
    figures: dict[str, Any] = {}
    cluster: Any = contextlib.nullcontext()
    if args.hosts:
        from actorllm.testing.netns_cluster import NetnsCluster

        cluster = NetnsCluster(hosts=args.hosts)  # exports RAY_ADDRESS to the runs
        extra = [*extra, "--distributed-executor-backend", "ray"]
    with cluster as hosts:
        for name in args.runs.split(","):
            figures[name] = run_one(args.preset, RUNS[name], extra)
            print(f"{name}: {figures[name]['output_tokens_per_s']:.1f} output tok/s", flush=True)
        if args.hosts:
            figures["hosts"] = sorted(node.ip for node in hosts.hosts.values())
    if "pp2" in figures:
        pp = figures["pp2"]["pipeline_parallel"]
        figures["pp2_bytes_between_stages_per_step"] = pp["bytes_between_stages_per_step"]
        print(f"pp2: {pp['bytes_between_stages_per_step']:.0f} bytes between stages per step")
    config: dict[str, Any] = {
        "preset": args.preset,
        "runs": {k: RUNS[k] for k in figures if k in RUNS},
        "hosts": args.hosts or "this process's host",
    }
    if args.note:
        config["note"] = args.note
    doc = result_document("pipeline_parallel", figures=figures, config=config, args=args)
    if args.output_json:
        write_json(args.output_json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
