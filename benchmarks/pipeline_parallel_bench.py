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

    python benchmarks/pipeline_parallel_bench.py
    python benchmarks/pipeline_parallel_bench.py --output-json \\
        benchmarks/results/pipeline_parallel.json --note "the box was loaded by ..."
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--output-json", default=None)
    args, extra = parser.parse_known_args()
    figures: dict[str, Any] = {}
    for name in args.runs.split(","):
        figures[name] = run_one(args.preset, RUNS[name], extra)
        print(f"{name}: {figures[name]['output_tokens_per_s']:.1f} output tok/s", flush=True)
    if "pp2" in figures:
        pp = figures["pp2"]["pipeline_parallel"]
        figures["pp2_bytes_between_stages_per_step"] = pp["bytes_between_stages_per_step"]
        print(f"pp2: {pp['bytes_between_stages_per_step']:.0f} bytes between stages per step")
    config = {"preset": args.preset, "runs": {k: RUNS[k] for k in figures if k in RUNS}}
    if args.note:
        config["note"] = args.note
    doc = result_document("pipeline_parallel", figures=figures, config=config, args=args)
    if args.output_json:
        write_json(args.output_json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
