"""What tensor parallel's communication costs per step on CPU, with both ranks ready.

Two processes (rank 0 here, rank 1 spawned) join a group of ``actorllm.distributed.comm``
and time, after a barrier each round (so that skew between the ranks is not counted):

* the all-reduce of one layer's output, ``[T, H]`` float32, for decode-sized and
  prefill-sized T (a step makes ``2 * num_layers + 1`` of them);
* the logits gather, ``[N, V/2]`` per rank;
* the step channel: a frame of ``INLINE`` int64 (one broadcast, what a decode step costs)
  against a frame plus an exact-size second broadcast (a payload larger than the frame),
  and against broadcasting only the exact payload (what one broadcast per step would cost
  with a known size).

The median of ``--repeats`` rounds is reported, in microseconds.

    python benchmarks/tp_comm_bench.py
    python benchmarks/tp_comm_bench.py --output-json benchmarks/results/tp_comm_cpu.json
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from actorllm.bench.machine import result_document, write_json
from actorllm.distributed.comm import GlooComm, host_store, join_store
from actorllm.distributed.step_channel import INLINE

HIDDEN = 256  # the demo model's hidden size
VOCAB = 4096


def cases(comm: GlooComm) -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {}
    for t in (1, 16, 64, 512, 2048):
        x = torch.randn(t, HIDDEN)
        out[f"all_reduce [{t}, {HIDDEN}] f32"] = lambda x=x: comm.all_reduce(x)
    for n in (1, 64):
        logits = torch.randn(n, VOCAB // 2)
        out[f"gather logits [{n}, {VOCAB // 2}] f32"] = lambda v=logits: comm.gather_last_dim(v)
    frame = torch.zeros(INLINE, dtype=torch.int64)
    out[f"step frame [{INLINE}] i64 (one broadcast)"] = lambda: comm.broadcast(frame)
    for p in (512, 16384):
        exact = torch.zeros(p, dtype=torch.int64)
        out[f"exact payload [{p}] i64"] = lambda e=exact: comm.broadcast(e)
    return out


def measure(comm: GlooComm, repeats: int) -> dict[str, float]:
    """Median microseconds per case (both ranks run this in lockstep)."""
    barrier = torch.zeros(1)
    medians: dict[str, float] = {}
    for name, fn in cases(comm).items():
        times = []
        for _ in range(repeats + 5):  # 5 warm-up rounds
            comm.all_reduce(barrier)  # both ranks start the round together
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        medians[name] = 1e6 * statistics.median(times[5:])
        if comm.rank == 0:
            print(f"{name:45s} {medians[name]:9.1f} us")
    return medians


def _rank1(port: int, repeats: int) -> None:
    comm = GlooComm(join_store(port, 2), 1, 2, 60.0)
    measure(comm, repeats)
    comm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--output-json", default=None)
    args = parser.parse_args()

    # Rank 0 hosts the store: make it first so rank 1 can be told the port.
    store = host_store(2)
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_rank1, args=(store.port, args.repeats))
    proc.start()
    comm = GlooComm(store, 0, 2, 60.0)
    figures: dict[str, Any] = {"load_average_before": list(os.getloadavg())}
    medians = measure(comm, args.repeats)
    comm.close()
    proc.join(30)
    figures["median_us_rank0"] = medians
    figures["load_average_after"] = list(os.getloadavg())
    if args.output_json:
        write_json(args.output_json, result_document("tp_comm", figures=figures, args=args))


if __name__ == "__main__":
    main()
