"""The output processor over long DELTA streams: does a step cost the same at token 3000
as at token 50?

``OutputProcessor.process_outputs`` alone (no engine), ``--requests`` DELTA requests on the
demo tokenizer, one token each per step for ``--steps`` steps, per lane:

* ``plain``: no stop strings, one sample (the plain lane);
* ``stop``: a stop string that never matches (the general path: every step searches it);
* ``n2``: two samples per request (the general path: children rendered per user request).

Reported: the median step (ms) over the first and the last ``--window`` steps, and their
ratio (1.0: a step's cost does not grow with the text). With ``--base TREE`` every round
runs both trees, each in a fresh process, alternating:

    git worktree add /tmp/base HEAD~1
    python benchmarks/output_stream_bench.py --base /tmp/base --lanes stop,n2 --rounds 3 \\
        --output-json benchmarks/results/output_stream.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from actorllm.bench.machine import result_document, write_json
from actorllm.bench.tree_probe import run_probe

HERE = Path(__file__).resolve().parent.parent

# Runs inside the tree under test (its actorllm on PYTHONPATH); prints one JSON line.
_PROBE = """
import json, statistics, sys, time
from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs
from actorllm.core.output_processor import OutputProcessor
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.testing.engine_harness import demo_tokenizer
lane, n, steps, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
extra = {"plain": {}, "stop": {"stop": ["\\x01never here\\x02"]}, "n2": {"n": 2}}[lane]
params = SamplingParams(max_tokens=steps + 1, ignore_eos=True,
                        output_kind=RequestOutputKind.DELTA, **extra)
op = OutputProcessor(demo_tokenizer().backend_tokenizer)
engine_ids = []
for i in range(n):
    engine_ids += [rid for rid, _ in op.add_request(f"r{i}", None, [5, 6, 7, 8], params, 0.0)]
times = []
for step in range(steps):
    eco = EngineCoreOutputs(step_id=step, timestamp=float(step), outputs=[
        EngineCoreOutput(req_id=rid, new_token_ids=[300 + (i + step) % 3000])
        for i, rid in enumerate(engine_ids)])
    t0 = time.perf_counter()
    op.process_outputs(eco)
    times.append(time.perf_counter() - t0)
first = statistics.median(times[10:10 + window]) * 1e3
last = statistics.median(times[-window:]) * 1e3
print(json.dumps({"first_ms": first, "last_ms": last}))
"""


def measure(tree: Path, lane: str, args: argparse.Namespace) -> dict[str, float]:
    return run_probe(tree, _PROBE, [lane, str(args.requests), str(args.steps), str(args.window)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="a second tree to run alternately")
    parser.add_argument("--lanes", default="plain,stop,n2")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output-json", type=Path)
    args = parser.parse_args(argv)
    if args.steps < 2 * args.window + 10:
        parser.error("--steps must be at least 2 * --window + 10")
    trees = {"head": HERE} | ({"base": args.base.resolve()} if args.base else {})
    rows: list[dict[str, Any]] = []
    for lane in [x for x in args.lanes.split(",") if x]:
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                runs[name].append(measure(tree, lane, args))
        for name, results in runs.items():
            first = statistics.median(r["first_ms"] for r in results)
            last = statistics.median(r["last_ms"] for r in results)
            row = {"lane": lane, "tree": name, "first_ms": first, "last_ms": last}
            row |= {"growth": last / first, "runs": results}
            rows.append(row)
            print(
                f"{lane:6} {name:5} first {first:.3f} ms  last {last:.3f} ms  x{last / first:.2f}"
            )
    if args.output_json:
        config = {k: v for k, v in vars(args).items() if k != "output_json"}
        config["base"] = str(args.base) if args.base else None
        doc = result_document("output_stream", figures={"rows": rows}, config=config, args=args)
        write_json(args.output_json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
