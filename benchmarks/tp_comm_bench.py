"""What tensor parallel's communication costs per step on CPU, with both ranks ready.

Two processes (rank 0 here, rank 1 spawned) join a group of ``actorllm.distributed.comm``
and time, after a barrier each round (so that skew between the ranks is not counted):

* the all-reduce of one layer's output, ``[T, H]`` float32, for decode-sized and
  prefill-sized T (a step makes ``2 * num_layers + 1`` of them);
* the logits gather, ``[N, V/2]`` per rank;
* the step channel: a frame of ``INLINE`` int64 (one broadcast, what a decode step costs)
  against broadcasting only an exact-size payload;
* one-way latency of a step's inputs, send start on rank 0 to usable on rank 1: the gloo
  broadcast against a shared-memory ring that rank 1 spins on (the ring is measured here
  only; the engine uses the broadcast).

The median of ``--repeats`` rounds is reported, in microseconds.

    python benchmarks/tp_comm_bench.py
    python benchmarks/tp_comm_bench.py --output-json benchmarks/results/tp_comm.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np
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


def one_way(comm: GlooComm, repeats: int) -> dict[str, float] | None:
    """Step inputs, send start on rank 0 -> usable on rank 1 (perf_counter is one
    monotonic clock for both processes): the gloo frame broadcast against a shared-memory
    ring (rank 0 writes the payload, then a sequence number; rank 1 spins on it). Rank 1
    returns the medians in microseconds; rank 0 returns None."""
    store = comm.store
    size = 1 + 16384
    if comm.rank == 0:
        shm = shared_memory.SharedMemory(create=True, size=8 * size)
        store.set("shm", shm.name)
    else:
        shm = shared_memory.SharedMemory(name=store.get("shm").decode())
    ring = np.ndarray((size,), dtype=np.int64, buffer=shm.buf)  # [seq, payload ...]
    barrier = torch.zeros(1)
    medians: dict[str, float] = {}
    seq = 0
    for n in (1024, 16384):  # a decode step's payload, a prefill's
        frame = torch.zeros(max(INLINE, n), dtype=torch.int64)
        payload = np.zeros(n, dtype=np.int64)
        for how in ("gloo broadcast", "shm ring (spin)"):
            lat = []
            for _ in range(repeats + 5):
                comm.all_reduce(barrier)
                seq += 1
                if comm.rank == 0:
                    if how == "gloo broadcast":
                        frame[0] = time.perf_counter_ns()
                        comm.broadcast(frame)
                    else:
                        payload[0] = time.perf_counter_ns()
                        ring[1 : 1 + n] = payload
                        ring[0] = seq  # last: x86 keeps the stores in order
                elif how == "gloo broadcast":
                    comm.broadcast(frame)
                    lat.append(time.perf_counter_ns() - int(frame[0]))
                else:
                    while ring[0] != seq:
                        pass
                    got = ring[1 : 1 + n].copy()
                    lat.append(time.perf_counter_ns() - int(got[0]))
            if comm.rank == 1:
                medians[f"{how} [{n}] i64, one way"] = statistics.median(lat[5:]) / 1e3
    comm.all_reduce(barrier)
    del ring
    shm.close()
    if comm.rank == 0:
        shm.unlink()
        return None
    return medians


def _rank1(port: int, repeats: int) -> None:
    comm = GlooComm(join_store("127.0.0.1", port, 2), 1, 2, 60.0)
    measure(comm, repeats)
    medians = one_way(comm, repeats)
    comm.store.set("one_way", json.dumps(medians))
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
    one_way(comm, args.repeats)
    figures["one_way_us_rank1"] = json.loads(store.get("one_way"))
    for name, us in figures["one_way_us_rank1"].items():
        print(f"{name:45s} {us:9.1f} us")
    comm.close()
    proc.join(30)
    figures["median_us_rank0"] = medians
    figures["load_average_after"] = list(os.getloadavg())
    if args.output_json:
        write_json(args.output_json, result_document("tp_comm", figures=figures, args=args))


if __name__ == "__main__":
    main()
