"""Actor runtime overhead against bare anyio memory streams, on trio and asyncio.

Two measurements, each as a rate and as a ratio to the same loop written directly on an
anyio memory object stream in the same run (so machine speed cancels out):

* throughput — one task sends N messages into a bounded mailbox (64), the actor handles
  them (``handle`` adds to a counter); timed until the last one is handled;
* ask — N sequential request/reply round trips (``ref.ask``) against a bare loop that
  sends a request on one stream and waits for the answer on another.

    python benchmarks/actors_bench.py
    python benchmarks/actors_bench.py --output-json benchmarks/results/actors_bench.json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
import time
from collections.abc import Awaitable, Callable

import anyio
import msgspec

from actorllm.actors import Actor, ChildSpec, Reply, open_supervisor

CAPACITY = 64


class Add(msgspec.Struct, frozen=True):
    n: int


class Get(msgspec.Struct, frozen=True, kw_only=True):
    reply: Reply[int]


class Counter(Actor[Add | Get]):
    def __init__(self) -> None:
        self.total = 0

    async def handle(self, msg: Add | Get) -> None:
        if type(msg) is Add:
            self.total += msg.n
        else:
            msg.reply.send(self.total)  # type: ignore[union-attr]


async def bare_throughput(n: int) -> float:
    send, recv = anyio.create_memory_object_stream[int](CAPACITY)
    total = 0

    async def consume() -> None:
        nonlocal total
        with recv:
            async for item in recv:
                total += item

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        with send:
            for _ in range(n):
                await send.send(1)
    assert total == n
    return time.perf_counter() - t0


async def actor_throughput(n: int) -> float:
    async with open_supervisor(children=[ChildSpec("c", Counter, mailbox_size=CAPACITY)]) as sup:
        ref = sup.ref("c")
        t0 = time.perf_counter()
        for _ in range(n):
            await ref.send(Add(1))
        total = await ref.ask(lambda r: Get(reply=r))
        elapsed = time.perf_counter() - t0
    assert total == n
    return elapsed


async def bare_ask(n: int) -> float:
    req_send, req_recv = anyio.create_memory_object_stream[int](CAPACITY)
    resp_send, resp_recv = anyio.create_memory_object_stream[int](CAPACITY)

    async def server() -> None:
        total = 0
        async for item in req_recv:
            total += item
            await resp_send.send(total)

    async with anyio.create_task_group() as tg:
        tg.start_soon(server)
        t0 = time.perf_counter()
        for _ in range(n):
            await req_send.send(1)
            await resp_recv.receive()
        elapsed = time.perf_counter() - t0
        tg.cancel_scope.cancel()
    return elapsed


async def actor_ask(n: int) -> float:
    async with open_supervisor(children=[ChildSpec("c", Counter, mailbox_size=CAPACITY)]) as sup:
        ref = sup.ref("c")
        t0 = time.perf_counter()
        for _ in range(n):
            await ref.ask(lambda r: Get(reply=r))
        return time.perf_counter() - t0


def best_of(repeat: int, backend: str, fn: Callable[[int], Awaitable[float]], n: int) -> float:
    """Best wall time of ``repeat`` fresh event loops (the least disturbed by neighbours)."""
    return min(anyio.run(fn, n, backend=backend) for _ in range(repeat))


def run(backends: list[str], n_send: int, n_ask: int, repeat: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for backend in backends:
        for name, bare, actor, n in (
            ("throughput", bare_throughput, actor_throughput, n_send),
            ("ask", bare_ask, actor_ask, n_ask),
        ):
            bare_s = best_of(repeat, backend, bare, n)
            actor_s = best_of(repeat, backend, actor, n)
            rows.append(
                {
                    "backend": backend,
                    "measure": name,
                    "messages": n,
                    "bare_per_s": round(n / bare_s),
                    "actor_per_s": round(n / actor_s),
                    "actor_us_per_msg": round(actor_s / n * 1e6, 2),
                    "ratio_to_bare": round(bare_s / actor_s, 3),
                }
            )
    return rows


def machine() -> dict[str, str]:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {p: importlib.metadata.version(p) for p in ("anyio", "trio", "msgspec")}
    return {
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        **versions,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["trio", "asyncio", "both"], default="both")
    parser.add_argument("--messages", type=int, default=20000, help="for throughput")
    parser.add_argument("--asks", type=int, default=5000, help="for ask round trips")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output-json", metavar="PATH")
    args = parser.parse_args()
    backends = ["trio", "asyncio"] if args.backend == "both" else [args.backend]
    rows = run(backends, args.messages, args.asks, args.repeat)
    header = (
        f"{'backend':8} {'measure':10} {'bare/s':>10} {'actor/s':>10} {'us/msg':>8} {'ratio':>6}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['backend']:8} {r['measure']:10} {r['bare_per_s']:>10} {r['actor_per_s']:>10}"
            f" {r['actor_us_per_msg']:>8} {r['ratio_to_bare']:>6}"
        )
    if args.output_json:
        report = {
            "benchmark": "actors_bench",
            "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
            "machine": machine(),
            "notes": "ratio_to_bare = actor rate / bare memory-stream rate (1.0 = no overhead)",
            "results": rows,
        }
        with open(args.output_json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
