"""Milliseconds per scheduler step: ``schedule()`` + ``update_from_output()``, no model.

N requests are brought to steady decode (prompts already computed), then each timed step
schedules one decode token per request and feeds back a fake ``ModelRunnerOutput`` with
one sampled token each. Requests never stop (ignore_eos, no max_tokens), so N stays fixed;
blocks fill and new ones are allocated every ``block_size`` steps, as in real decode.

    python benchmarks/scheduler_bench.py                      # table
    python benchmarks/scheduler_bench.py --output-json benchmarks/results/scheduler_bench.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

from actorllm.bench.machine import cpu_model
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.request import Request
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler, SchedulerConfig


def bench(num_reqs: int, steps: int, prompt_len: int, async_scheduling: bool) -> dict[str, float]:
    max_len = prompt_len + steps + 64
    block_size = 16
    cfg = SchedulerConfig(
        max_num_seqs=num_reqs,
        max_num_batched_tokens=max(8192, num_reqs),
        max_model_len=max_len,
        block_size=block_size,
        num_blocks=num_reqs * (-(-max_len // block_size)) + 1,
        async_scheduling=async_scheduling,
    )
    s = Scheduler(cfg)
    params = SamplingParams(max_tokens=None, ignore_eos=True)
    for i in range(num_reqs):
        prompt = [(i * 7 + j) % 30000 + 1 for j in range(prompt_len)]
        s.add_request(Request(f"req-{i}", prompt, params, eos_token_id=2, arrival_time=float(i)))

    def run_one() -> tuple[float, float]:
        t0 = time.perf_counter()
        so = s.schedule()
        t1 = time.perf_counter()
        ids = list(so.num_scheduled_tokens)
        ro = ModelRunnerOutput(step_id=so.step_id, req_ids=ids, sampled_token_ids=[[5]] * len(ids))
        t2 = time.perf_counter()
        s.update_from_output(so, ro)
        t3 = time.perf_counter()
        return t1 - t0, t3 - t2

    while s.statistics().num_running_reqs < num_reqs or s.num_waiting:  # prefill, untimed
        run_one()
    for _ in range(20):  # warm-up decode
        run_one()
    sched_t, upd_t = [], []
    for _ in range(steps):
        a, b = run_one()
        sched_t.append(a * 1e3)
        upd_t.append(b * 1e3)
    total = [a + b for a, b in zip(sched_t, upd_t, strict=True)]
    return {
        "num_running": num_reqs,
        "async_scheduling": async_scheduling,
        "steps": steps,
        "schedule_ms_median": statistics.median(sched_t),
        "update_ms_median": statistics.median(upd_t),
        "step_ms_median": statistics.median(total),
        "step_ms_p90": sorted(total)[int(0.9 * len(total))],
        "step_ms_mean": statistics.fmean(total),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--output-json", default=None)
    args = ap.parse_args()
    rows = [bench(n, args.steps, args.prompt_len, a) for n in args.sizes for a in (False, True)]
    head = ("running", "async", "schedule", "update", "step p50", "p90")
    print("{:>8} {:>6} {:>9} {:>8} {:>9} {:>7}  (ms)".format(*head))
    for r in rows:
        print(
            f"{r['num_running']:>8} {r['async_scheduling']!s:>6} {r['schedule_ms_median']:>9.3f} "
            f"{r['update_ms_median']:>8.3f} {r['step_ms_median']:>9.3f} {r['step_ms_p90']:>7.3f}"
        )
    if args.output_json:
        doc = {
            "benchmark": "scheduler_bench",
            "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
            "machine": {
                "cpu_model": cpu_model(),
                "python": platform.python_version(),
                "implementation": platform.python_implementation(),
                "platform": platform.platform(),
            },
            "results": rows,
        }
        with open(args.output_json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
