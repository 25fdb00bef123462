"""``actorllm bench chaos``: crash the engine's actors N times while requests stream.

Runs :func:`actorllm.testing.chaos.chaos_soak` on trio, asyncio or both, on the scripted
model (default) or a real model directory, and prints per backend: crashes by actor,
requests identical / changed / failed / lost / hung against a fault-free reference run
with the same seeds, actor restarts, p50/p99 latency with and without faults, and the
invariant checks. Exit status 1 on any lost, changed or hung request or broken invariant
(and on any failed request with ``--fail-on-failed``).

    $ actorllm bench chaos --crashes 1000 --backend both --output-json chaos.json
    $ actorllm bench chaos --crashes 50 --actors scheduler,worker --model /models/tiny
    $ actorllm bench chaos --points scheduler@3@0,output_processor@40@2:hang
    $ actorllm bench chaos --crashes 200 --hangs 0.1     # hung actors and model steps too
    $ actorllm bench chaos --model /models/tiny --lora 3  # 3 adapters + base, max_loras 2
    $ actorllm bench chaos --crashes 200 --prompt-embeds   # half as embeddings, some mixed
    $ actorllm bench chaos --pooling --model /models/all-MiniLM-L6-v2  # encode, not generate

With ``--lora N`` the requests are spread over N random adapters of the model and the base
model, ``max_loras`` below N (slots and the host cache evict under the crashes); after
every batch each worker must still hold every adapter it held at the previous check.

With ``--pooling`` the requests are pooling ones (``AsyncEngine.encode``: every task the
model offers of embed, token_embed and classify, scores of pairs on a cross-encoder;
:mod:`actorllm.testing.chaos_pooling`), each pooled result compared bit for bit with the
reference run's.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio

from actorllm.bench.chaos_workloads import embeds_width, embeds_workload, lora_workload
from actorllm.bench.machine import result_document, write_json
from actorllm.bench.report import format_table
from actorllm.compat.vllm.struct_flags import json_object
from actorllm.testing.chaos_plan import ACTOR_NAMES, CrashPoint
from actorllm.testing.chaos_report import OUTCOMES, ChaosReport


def parse_points(text: str) -> list[CrashPoint]:
    """``actor@message@batch[:hang],...`` (message and batch optional: 1 and 0)."""
    points = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        spec, _, kind = item.partition(":")
        if kind not in ("", "hang"):
            raise ValueError(f"unknown fault kind {kind!r} in {item!r} (only ':hang')")
        actor, *rest = spec.split("@")
        if len(rest) > 2:
            raise ValueError(f"too many '@' in {item!r}: actor@message@batch")
        at_message, batch = ([int(x) for x in rest] + [1, 0][len(rest) :])[:2]
        points.append(CrashPoint(actor, at_message, batch, hang=kind == "hang"))
    return points


def _actors(text: str) -> list[str]:
    actors = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in actors if a not in ACTOR_NAMES]
    if unknown or not actors:
        raise argparse.ArgumentTypeError(f"unknown actors {unknown}; choose from {ACTOR_NAMES}")
    return actors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("chaos")
    g.add_argument("--crashes", type=int, default=100, help="crashes to inject (default 100)")
    g.add_argument("--backend", choices=("trio", "asyncio", "both"), default="both")
    g.add_argument(
        "--actors",
        type=_actors,
        default=list(ACTOR_NAMES),
        help=f"comma-separated actors to crash (default all: {','.join(ACTOR_NAMES)})",
    )
    g.add_argument(
        "--points",
        type=parse_points,
        default=None,
        help="scripted crashes instead of random ones: actor@message@batch[:hang],...",
    )
    g.add_argument(
        "--hangs",
        type=float,
        default=0.0,
        help="fraction of random points that hang instead of raising (default 0)",
    )
    g.add_argument(
        "--watchdog",
        type=float,
        default=2.0,
        help="with hangs: the engine's actor_message_deadline_s and step_timeout_s",
    )
    g.add_argument("--crashes-per-batch", type=int, default=1, help="random points per batch")
    g.add_argument("--seed", type=int, default=0, help="crash points and workload seed")
    g.add_argument("--requests-per-batch", type=int, default=64)
    g.add_argument("--workloads", type=int, default=4, help="distinct workloads, used in turn")
    g.add_argument("--max-tokens", type=int, default=16, help="about this many tokens each")
    g.add_argument(
        "--pooling",
        action="store_true",
        help="pooling requests through encode (the model's embed / token_embed / classify "
        "tasks, scores on a cross-encoder) instead of generation; needs --model, a pooling model",
    )
    g.add_argument("--request-timeout", type=float, default=60.0, help="seconds before 'hung'")
    g.add_argument(
        "--fail-on-failed", action="store_true", help="exit 1 on any failed request, too"
    )
    e = parser.add_argument_group("engine")
    e.add_argument("--model", default=None, help="a model directory (default: scripted model)")
    e.add_argument(
        "--tokenizer", default=None,
        help="--model: its tokenizer (a GGUF file needs the HF directory it was converted from)",
    )  # fmt: skip
    e.add_argument(
        "--dtype",
        default="float32",
        help="--model: the weights' dtype (default float32: a request recomputed after a crash "
        "then samples from the same logits; in bfloat16 a prefill and a decode of the same "
        "tokens differ by ~1e-2 in logprob, so a seeded random sample can differ)",
    )
    e.add_argument("--step-delay", type=float, default=0.0, help="scripted model: s per step")
    e.add_argument("--max-num-seqs", type=int, default=64)
    e.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="the step's token budget (default the engine's); small: a batch spans more steps",
    )
    e.add_argument(
        "--convert",
        choices=("embed", "classify"),
        default=None,
        help="--pooling: serve a decoder --model as a pooling model (vLLM's --convert)",
    )
    e.add_argument("--block-size", type=int, default=8)
    e.add_argument("--num-blocks", type=int, default=1024, help="scripted model: KV blocks")
    e.add_argument(
        "--async-scheduling", action=argparse.BooleanOptionalAction, default=None
    )  # None: the engine's default
    e.add_argument(
        "--speculative-config",
        type=json_object,
        default=None,
        help='vLLM\'s JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 3}\' '
        "(needs --model: the scripted model proposes no drafts)",
    )
    e.add_argument(
        "--lora",
        type=int,
        default=0,
        metavar="N",
        help="spread the requests over N random LoRA adapters of --model and the base model "
        "(request i: adapter i mod (N+1), N meaning the base); needs --model",
    )
    e.add_argument(
        "--max-loras",
        type=int,
        default=None,
        help="--lora: adapters per step (default N-1, so slots are evicted under the crashes; "
        "max_cpu_loras the same, so the host cache evicts too)",
    )
    e.add_argument("--lora-rank", type=int, default=8, help="--lora: the adapters' rank")
    e.add_argument(
        "--kv-cache-dtype",
        default=None,
        help="the KV cache's dtype (vLLM's names: fp8, fp8_e4m3, fp8_e5m2, ...); needs "
        "--model: recovery replays must rebuild the same quantized cache",
    )
    e.add_argument(
        "--prompt-embeds",
        action="store_true",
        help="every other request's prompt as embeddings (random rows, seeded; "
        "enable_prompt_embeds): recovery must replay them too",
    )
    parser.add_argument("--output-json", default=None, help="write the result document here")
    parser.add_argument(
        "--show-crash-logs", action="store_true", help="log every injected crash's traceback"
    )


def engine_opener(args: argparse.Namespace) -> Any:
    """A no-argument callable opening a fault-free engine for one soak."""
    config = {
        "max_num_seqs": args.max_num_seqs,
        "block_size": args.block_size,
        "async_scheduling": args.async_scheduling,
        # The soak crashes on purpose, often: the restart intensity must not kill it.
        "max_restarts": max(10, 2 * args.crashes),
        "restart_window_s": 1.0,
        "freeze_gc_at_start": False,  # one engine after another in one process
    }
    if args.max_num_batched_tokens is not None:
        config["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.convert:
        config |= {"runner": "pooling", "convert": args.convert}
    if args.hangs > 0 or any(p.hang for p in args.points or ()):
        config["actor_message_deadline_s"] = args.watchdog
        config["step_timeout_s"] = args.watchdog
    if args.speculative_config:
        if args.model is None:
            raise SystemExit("--speculative-config needs --model (a real model proposes drafts)")
        config["speculative_config"] = args.speculative_config
    if args.prompt_embeds:
        config["enable_prompt_embeds"] = True
    if args.tokenizer:
        if args.model is None:
            raise SystemExit("--tokenizer needs --model (the scripted model has no tokenizer)")
        config["tokenizer"] = args.tokenizer
    if args.kv_cache_dtype:
        if args.model is None:
            raise SystemExit("--kv-cache-dtype needs --model (the scripted model has no KV cache)")
        config["kv_cache_dtype"] = args.kv_cache_dtype
    if args.lora:
        if args.model is None:
            raise SystemExit("--lora needs --model (random adapters of a real model)")
        max_loras = args.max_loras or max(1, args.lora - 1)
        config |= {"enable_lora": True, "max_loras": max_loras, "max_cpu_loras": max_loras,
                   "max_lora_rank": args.lora_rank}  # fmt: skip
    if args.model is None:
        from actorllm.testing import open_test_engine

        return lambda: open_test_engine(
            step_delay_s=args.step_delay, num_blocks=args.num_blocks, **config
        )
    from actorllm.engine import AsyncEngine

    @contextlib.asynccontextmanager
    async def open_real() -> AsyncIterator[Any]:
        async with AsyncEngine.open(
            args.model, seed=args.seed, dtype=args.dtype, **config
        ) as engine:
            yield engine

    return open_real


def check_pooling(args: argparse.Namespace) -> None:
    """Refuses the flags that make no sense with ``--pooling`` (or without it)."""
    if not args.pooling:
        if args.convert:
            raise SystemExit("--convert needs --pooling (it serves a decoder as a pooling model)")
        return
    if args.model is None:
        raise SystemExit("--pooling needs --model (a pooling model directory, or a decoder "
                         "with --convert embed|classify)")  # fmt: skip
    clash = [
        flag
        for flag, on in (
            ("--lora", args.lora),
            ("--speculative-config", args.speculative_config),
            ("--prompt-embeds", args.prompt_embeds),
        )
        if on
    ]
    if clash:
        raise SystemExit(
            f"--pooling does not combine with {', '.join(clash)}: a pooling request runs its "
            "prompt once, with no adapter, no drafts and no embedding prompt"
        )


def run_backend(args: argparse.Namespace, backend: str) -> ChaosReport:
    from actorllm.testing.chaos import chaos_soak, default_workload

    workloads = [
        default_workload(args.requests_per_batch, seed=args.seed + i, max_tokens=args.max_tokens)
        for i in range(0 if args.pooling else args.workloads)
    ]
    if args.lora:
        workloads = [lora_workload(w, args.lora_paths) for w in workloads]
    if args.prompt_embeds:
        hidden = embeds_width(args.model)
        workloads = [embeds_workload(w, hidden, args.seed + i) for i, w in enumerate(workloads)]
    opener = engine_opener(args)

    def progress(report: ChaosReport) -> None:
        if report.batches % 50 == 0:
            print(
                f"  [{backend}] batch {report.batches}: {report.crashes} crashes, "
                f"{report.requests} requests, {dict(report.outcomes)}",
                file=sys.stderr,
            )

    async def main() -> ChaosReport:
        loads = workloads
        if args.pooling:
            from actorllm.testing.chaos_pooling import pooling_workloads

            loads = await pooling_workloads(
                opener, args.requests_per_batch, count=args.workloads, seed=args.seed
            )
        return await chaos_soak(
            opener,
            loads,
            crashes=args.crashes,
            actors=args.actors,
            seed=args.seed,
            crashes_per_batch=args.crashes_per_batch,
            hangs=args.hangs,
            worker_hang_s=2 * args.watchdog,
            points=args.points,
            request_timeout_s=args.request_timeout,
            progress=progress,
        )

    return anyio.run(main, backend=backend)


def summary_rows(reports: list[ChaosReport]) -> list[dict[str, Any]]:
    rows = []
    for r in reports:
        d = r.to_dict()
        lat = d["latency_s"]
        rows.append(
            {
                "backend": r.backend,
                "crashes": r.crashes,
                "requests": r.requests,
                **{o: r.outcomes[o] for o in OUTCOMES},
                "restarts": sum(r.restarts.values()),
                "deaths": r.engine_deaths,
                "p50": lat["without_faults"]["p50"] * 1e3,
                "p99": lat["without_faults"]["p99"] * 1e3,
                "p50f": lat["with_faults"]["p50"] * 1e3,
                "p99f": lat["with_faults"]["p99"] * 1e3,
                "inv": f"{r.invariant_checks - len(r.invariant_violations)}/{r.invariant_checks}",
            }
        )
    return rows


COLUMNS = [
    ("backend", "backend", ""),
    ("crashes", "crashes", "d"),
    ("requests", "requests", "d"),
    *((o, o, "d") for o in OUTCOMES),
    ("restarts", "restarts", "d"),
    ("deaths", "deaths", "d"),
    ("p50", "p50 ms", ".1f"),
    ("p99", "p99 ms", ".1f"),
    ("p50f", "p50 ms faults", ".1f"),
    ("p99f", "p99 ms faults", ".1f"),
    ("inv", "invariants ok", ""),
]


def main(args: argparse.Namespace) -> int:
    if args.crashes < 0 or args.requests_per_batch < 1 or args.workloads < 1:
        raise ValueError("--crashes must be >= 0, --requests-per-batch and --workloads >= 1")
    if not 0 <= args.hangs <= 1 or args.watchdog <= 0:
        raise ValueError("--hangs must be in [0, 1] and --watchdog > 0")
    if not args.show_crash_logs:
        # Every injected crash logs a traceback; a thousand of them bury the summary.
        logging.getLogger("actorllm.actors").setLevel(logging.CRITICAL)
    check_pooling(args)
    backends = ["trio", "asyncio"] if args.backend == "both" else [args.backend]
    with contextlib.ExitStack() as stack:
        args.lora_paths = []
        if args.lora:
            import tempfile

            from actorllm.bench.lora_adapters import random_adapters

            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="actorllm-chaos-lora-"))
            paths = random_adapters(args.model, tmp, count=args.lora, rank=args.lora_rank,
                                    seed=args.seed)  # fmt: skip
            args.lora_paths = [str(p) for p in paths]
        reports = [run_backend(args, b) for b in backends]
    print(format_table(summary_rows(reports), COLUMNS))
    for r in reports:
        print(f"{r.backend}: crashes by actor {dict(sorted(r.crashes_by_actor.items()))}")
        if r.hangs_by_actor:
            print(f"{r.backend}: hangs among them {dict(sorted(r.hangs_by_actor.items()))}")
        for ex in r.examples[:5]:
            print(f"  {ex.outcome} b{ex.batch}-{ex.name}: {ex.detail}")
        for v in r.invariant_violations[:3]:
            print(f"  invariants: {v}")
    if args.output_json:
        doc = result_document(
            "chaos",
            figures={r.backend: r.to_dict() for r in reports},
            config={
                "model": args.model or "scripted",
                "lora_adapters": args.lora,
                "requests": "pooling" if args.pooling else "generation",
            },
            args=args,
        )
        write_json(args.output_json, doc)
    ok = all(r.ok(allow_failed=not args.fail_on_failed) for r in reports)
    return 0 if ok else 1
