"""What a remote rank 0 (``distributed_executor_backend="ray"``) adds to each step.

With the Ray backend a replica's Worker is a Ray actor: the driver (the replica's worker
thread) msgpack-encodes each ``SchedulerOutput``, ships it with one actor call and decodes
the ``ModelRunnerOutput`` that comes back (worker/remote.py). Measured here:

* **codec**: encode + decode of a decode step's ``SchedulerOutput`` (``--batch`` cached
  requests) and its ``ModelRunnerOutput``, and of a prefill step (4 new requests of 64
  prompt tokens), with their sizes;
* **ray call**: the round trip of ``actor.execute.remote(bytes)`` to an actor that answers
  with a reply of a decode step's size at once (no model), as the driver waits for it:
  ``ray.get``, and a Ray future's callback (what the driver uses, so that step N+1 can be
  shipped while step N runs);
* **engine** (``--engine``): the same greedy batch through an engine with the worker on the
  thread (mp) and in a Ray actor; output tokens per second, and the driver's own
  figures: mean step round trip and its overhead (round trip minus the host's time on the
  step, i.e. transport and codec), over steps shipped with no other in flight.

Needs a Ray cluster: ``RAY_ADDRESS``, or ``--start-cluster`` for a throw-away local head
(tests/helpers/ray_cluster.py). The medians of ``--repeats`` rounds, in microseconds.

    python benchmarks/remote_worker_bench.py --start-cluster --engine
    python benchmarks/remote_worker_bench.py --start-cluster --engine \\
        --output-json benchmarks/results/remote_worker.json
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import msgspec

from actorllm.bench.machine import result_document, write_json
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput
from actorllm.worker.ray_host import decode_step, encode_step


def decode_step_output(batch: int) -> tuple[SchedulerOutput, ModelRunnerOutput]:
    ids = [f"cmpl-{i:08x}-0" for i in range(batch)]
    so = SchedulerOutput(
        step_id=1000,
        scheduled_new_reqs=[],
        scheduled_cached_reqs=[
            CachedRequestData(req_id=r, new_block_ids=([],), num_computed_tokens=100) for r in ids
        ],
        num_scheduled_tokens=dict.fromkeys(ids, 1),
        total_num_scheduled_tokens=batch,
    )
    out = ModelRunnerOutput(
        step_id=1000, req_ids=ids, sampled_token_ids=[[1234] for _ in ids], execute_time_s=0.01
    )
    return so, out


def prefill_step() -> SchedulerOutput:
    params = SamplingParams(temperature=0.0, max_tokens=64)
    new = [
        NewRequestData(
            req_id=f"cmpl-{i:08x}-0",
            prompt_token_ids=list(range(64)),
            output_token_ids=[],
            sampling_params=params,
            block_ids=(list(range(4 * i, 4 * i + 4)),),
            num_computed_tokens=0,
        )
        for i in range(4)
    ]
    return SchedulerOutput(
        step_id=1,
        scheduled_new_reqs=new,
        scheduled_cached_reqs=[],
        num_scheduled_tokens={n.req_id: 64 for n in new},
        total_num_scheduled_tokens=256,
    )


def median_us(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats + 10):  # 10 warm-up rounds
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times[10:])


def codec(batch: int, repeats: int) -> dict[str, float]:
    so, out = decode_step_output(batch)
    enc = msgspec.msgpack.Encoder()
    dec = msgspec.msgpack.Decoder(ModelRunnerOutput)
    reply = enc.encode(out)
    prefill = prefill_step()
    figures = {
        f"decode step [{batch}] request bytes": float(len(encode_step(so))),
        f"decode step [{batch}] reply bytes": float(len(reply)),
        "prefill step [4 x 64] request bytes": float(len(encode_step(prefill))),
        f"decode step [{batch}] encode+decode request us": median_us(
            lambda: decode_step(encode_step(so)), repeats
        ),
        f"decode step [{batch}] encode+decode reply us": median_us(
            lambda: dec.decode(enc.encode(out)), repeats
        ),
        "prefill step [4 x 64] encode+decode request us": median_us(
            lambda: decode_step(encode_step(prefill)), repeats
        ),
    }
    return figures


class Echo:
    """A host that answers at once with a reply of a fixed size (no model)."""

    def __init__(self, reply_bytes: int) -> None:
        self.reply = b"x" * reply_bytes

    def execute(self, payload: bytes) -> bytes:
        return self.reply


def ray_call(batch: int, repeats: int) -> dict[str, float]:
    from actorllm.distributed.ray_connect import connect

    ray = connect()
    so, out = decode_step_output(batch)
    payload, reply_bytes = encode_step(so), len(msgspec.msgpack.encode(out)) + 8
    actor = ray.remote(Echo).options(num_cpus=1).remote(reply_bytes)
    ray.get(actor.execute.remote(payload))

    def with_get() -> None:
        ray.get(actor.execute.remote(payload))

    def with_future() -> None:
        done = threading.Event()
        ref = actor.execute.remote(payload)
        ref.future().add_done_callback(lambda _: done.set())
        done.wait()

    try:
        figures = {
            f"ray call, decode [{batch}] payload, ray.get us": median_us(with_get, repeats),
            f"ray call, decode [{batch}] payload, future callback us": median_us(
                with_future, repeats
            ),
        }
        figures |= compiled_graph(actor, payload, batch, repeats)
        return figures
    finally:
        ray.kill(actor)


def compiled_graph(actor: Any, payload: bytes, batch: int, repeats: int) -> dict[str, float]:
    """The same call through a Ray compiled graph (shared-memory channels; not what the
    engine uses: measured to know what it would save). Last: it takes the actor over."""
    import ray
    from ray.dag import InputNode

    with InputNode() as inp:
        dag = actor.execute.bind(inp)
    compiled = dag.experimental_compile()
    try:
        us = median_us(lambda: ray.get(compiled.execute(payload)), repeats)
    finally:
        compiled.teardown()
    return {f"ray compiled graph, decode [{batch}] payload us": us}


def engine(
    model: str | None, backend: str, prompts: int, tokens: int, async_scheduling: bool = False
) -> dict[str, float]:
    from actorllm import LLM

    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    batch = [
        {"prompt_token_ids": [5 + (i * 7 + j) % 500 for j in range(32)]} for i in range(prompts)
    ]
    kwargs: dict[str, Any] = {"max_model_len": 256, "async_scheduling": async_scheduling}
    name = f"{backend}{' async' if async_scheduling else ''}"
    if backend == "ray":
        kwargs["distributed_executor_backend"] = "ray"
    with LLM(model, **kwargs) as llm:
        llm.generate(batch[:2], params, use_tqdm=False)  # warm-up
        t0 = time.perf_counter()
        outs = llm.generate(batch, params, use_tqdm=False)
        elapsed = time.perf_counter() - t0
        stats = llm.collective_rpc("statistics")
    made = sum(len(o.outputs[0].token_ids) for o in outs)
    figures = {f"engine {name}: output tok/s": made / elapsed}
    remote = stats[0].remote
    if remote is not None:
        figures[f"engine {name}: steps shipped"] = float(remote.steps)
        figures[f"engine {name}: most steps in flight"] = float(remote.max_in_flight)
        figures[f"engine {name}: steps timed (shipped alone)"] = float(remote.steps_alone)
        figures[f"engine {name}: mean step round trip ms"] = remote.mean_round_trip_ms
        figures[f"engine {name}: mean step overhead ms"] = remote.mean_overhead_ms
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="requests in the decode step")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--start-cluster", action="store_true", help="a throw-away local head")
    parser.add_argument("--engine", action="store_true", help="also run the engine both ways")
    parser.add_argument("--model", default=None, help="the engine's model (default: demo)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--output-json", default=None)
    args = parser.parse_args(argv)
    cluster = None
    if args.start_cluster:
        import os

        from tests.helpers.ray_cluster import LocalRayCluster

        cluster = LocalRayCluster(num_cpus=2)
        cluster.start()
        os.environ["RAY_ADDRESS"] = cluster.address
    figures: dict[str, float] = {}
    try:
        figures |= codec(args.batch, args.repeats)
        figures |= ray_call(args.batch, args.repeats)
        if args.engine:
            for backend, overlap in (("mp", False), ("ray", False), ("mp", True), ("ray", True)):
                figures |= engine(args.model, backend, args.prompts, args.tokens, overlap)
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.stop()
    for name, value in figures.items():
        print(f"{name:55s} {value:10.1f}")
    if args.output_json:
        write_json(
            args.output_json,
            result_document("remote_worker_bench", figures=figures, args=args, argv=argv),
        )


if __name__ == "__main__":
    main()
