"""``bench overhead`` for two trees side by side: each measurement in a fresh process, the
trees alternating round by round, medians over many rounds.

On a small VM one run of the zero-model engine step swings ±20 % (two threads handing the
GIL and the step back and forth, each hand-over a cross-CPU wake-up), and the box's speed
drifts over minutes: a change worth a few percent only shows in interleaved rounds.
Each run times ``engine_step_ms`` (its window plus the event-loop thread's CPU time in it)
and then the bare core loop, in one fresh interpreter of the tree under test.

    git worktree add /tmp/base HEAD~3
    python benchmarks/overhead_ab.py --base /tmp/base --num-running 256 --output-kind final \\
        --rounds 10 --output-json benchmarks/results/overhead_ab.json
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from actorllm.bench.machine import result_document, write_json
from actorllm.bench.tree_probe import run_probe

HERE = Path(__file__).resolve().parent.parent

# Runs inside the tree under test (its actorllm on PYTHONPATH); prints one JSON line.
_PROBE = """
import contextlib, functools, json, sys, time, anyio
from actorllm.bench.overhead import core_step_ms, engine_step_ms
n, kind, steps, backend = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
box = {}
@contextlib.contextmanager
def window():
    t = time.thread_time()
    yield
    box["loop_cpu_s"] = time.thread_time() - t
run = functools.partial(engine_step_ms, n, steps, output_kind=kind, window=window)
engine = anyio.run(run, backend=backend)
core = core_step_ms(n, steps)
print(json.dumps({"engine_step_ms": engine["step_ms"],
                  "loop_cpu_ms_per_step": box["loop_cpu_s"] / engine["steps"] * 1e3,
                  "core_step_ms": core["step_ms"]}))
"""


def measure(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    argv = [str(args.num_running), args.output_kind, str(args.steps), args.event_loop]
    return run_probe(tree, _PROBE, argv)


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    keys = ("engine_step_ms", "loop_cpu_ms_per_step", "core_step_ms")
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    med["ratio"] = statistics.median(r["engine_step_ms"] / r["core_step_ms"] for r in runs)
    return {"median": med, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the other tree (e.g. a git worktree)")
    parser.add_argument("--head", default=str(HERE), help="this tree (default: the one here)")
    parser.add_argument("--num-running", type=int, default=256)
    parser.add_argument("--output-kind", choices=("delta", "final"), default="final")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--event-loop", choices=("trio", "asyncio"), default="trio")
    parser.add_argument("--output-json")
    args = parser.parse_args(argv)
    trees = {"base": Path(args.base).resolve(), "head": Path(args.head).resolve()}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for i in range(args.rounds):
        for name, tree in trees.items():
            runs[name].append(measure(tree, args))
            r = runs[name][-1]
            print(
                f"round {i + 1} {name}: engine {r['engine_step_ms']:.3f} ms "
                f"(loop CPU {r['loop_cpu_ms_per_step']:.3f}), core {r['core_step_ms']:.3f} ms",
                flush=True,
            )
    figures = {name: summary(rs) for name, rs in runs.items()}
    for name, fig in figures.items():
        m = fig["median"]
        print(
            f"{name}: engine {m['engine_step_ms']:.3f} ms, loop CPU "
            f"{m['loop_cpu_ms_per_step']:.3f}, core {m['core_step_ms']:.3f}, "
            f"engine/core {m['ratio']:.2f} (medians of {args.rounds})"
        )
    if args.output_json:
        config = {name: str(tree) for name, tree in trees.items()}
        write_json(
            args.output_json,
            result_document("overhead_ab", figures=figures, config=config, args=args),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
