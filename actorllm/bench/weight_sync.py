"""Weight sync: seconds to push a model's weights from a trainer process into a running
engine (``init_weight_transfer_engine`` once, then ``start_weight_update`` +
``update_weights`` + ``finish_weight_update`` per push), against a bare gloo broadcast of
the same tensors from one process to as many receiving processes, on the same machine.

    $ actorllm bench weight-sync                      # Qwen3-0.6B's shapes, bf16, TP 1 and 2
    $ actorllm bench weight-sync --shape tiny --tp 1 --output ws.json

The weights are random, built from the shape's config (no download); the engine loads
dummy weights of that config. The trainer is a spawned process that drives the engine
through the weight-sync client calls (relayed over a pipe to the benchmark process, which
holds the engine). A push is timed on the trainer, from the first call to the return of
``finish_weight_update`` (the engine has applied the weights); the bare broadcast from the
first broadcast until every receiver has its last tensor, into receive buffers allocated
before the clock starts (the transport alone). ``ratio`` = bare seconds / push
seconds (1.0: the engine adds nothing to the broadcast; target >= 0.8). Best of
``--repeats`` each.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": dict(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=40960, tie_word_embeddings=True, rope_theta=1000000.0,
    ),
    "tiny": dict(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=512, tie_word_embeddings=False,
    ),
}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    parser.add_argument("--tp", default="1,2", help="tensor-parallel sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="pushes per size (best kept)")
    parser.add_argument("--output", default=None, help="write the results as JSON here")
    parser.add_argument("--note", default=None, help="a note kept in the result document")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _shapes(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """The Hugging Face parameter names and shapes of ``shape`` (no memory: meta device)."""
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.Qwen3Config(**SHAPES[shape])
        )
    return [(n, tuple(p.shape)) for n, p in model.named_parameters()]


def _tensors(shape: str) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(0)
    return {
        n: torch.empty(s, dtype=torch.bfloat16).uniform_(-0.05, 0.05, generator=gen)
        for n, s in _shapes(shape)
    }


# -- our push: a trainer process and the engine ------------------------------------------------


def _trainer(shape: str, port: int, world: int, repeats: int, cmd: Connection, rpc: Connection):
    from actorllm.distributed.weight_transfer import (
        GlooTrainerInitInfo,
        PipeWeightSyncClient,
        StateDictSource,
        WeightTransferTrainerFactory,
    )

    tensors = _tensors(shape)
    sync = WeightTransferTrainerFactory.trainer_init(
        GlooTrainerInitInfo(master_address="127.0.0.1", master_port=port, world_size=world),
        client=PipeWeightSyncClient(rpc),
        source=StateDictSource(tensors),
    )
    seconds = []
    for i in range(repeats):
        t0 = time.perf_counter()
        sync.send_weights(weight_version=f"push-{i}")
        seconds.append(time.perf_counter() - t0)
    sync.shutdown()
    cmd.send(seconds)


def push_seconds(shape: str, tp: int, repeats: int) -> list[float]:
    from actorllm import LLM
    from actorllm.distributed.weight_transfer import serve_weight_sync_calls

    with tempfile.TemporaryDirectory() as path:
        import transformers

        cfg = transformers.Qwen3Config(**SHAPES[shape], architectures=["Qwen3ForCausalLM"])
        cfg.save_pretrained(path)
        with LLM(
            path, load_format="dummy", dtype="bfloat16", tensor_parallel_size=tp,
            weight_transfer_config={"backend": "gloo"}, max_model_len=256,
            kv_cache_memory_bytes=128 * 2**20,
        ) as llm:  # fmt: skip
            ctx = mp.get_context("spawn")
            cmd, cmd_child = ctx.Pipe()
            rpc, rpc_child = ctx.Pipe()
            world = 1 + llm.get_world_size()
            args = (shape, _free_port(), world, repeats, cmd_child, rpc_child)
            proc = ctx.Process(target=_trainer, args=args)
            proc.start()
            seconds = serve_weight_sync_calls(llm, rpc, until=cmd, poll_s=0.002)
            proc.join(60)
            assert llm.get_weight_version() == f"push-{repeats - 1}"
    return list(seconds)


# -- the bare broadcast ------------------------------------------------------------------------


def _bare(shape: str, port: int, rank: int, world: int, repeats: int, out: Connection | None):
    """Rank 0 broadcasts every tensor, ranks 1.. receive into buffers allocated (and
    faulted in) before the clock starts, reused every round: the transport alone. Rank 0
    reports the seconds of each round."""
    import torch

    from actorllm.distributed.weight_transfer import TransferGroup

    metas = _shapes(shape)
    if rank == 0:
        tensors = _tensors(shape)
    else:
        tensors = {n: torch.zeros(s, dtype=torch.bfloat16) for n, s in metas}
    group = TransferGroup.open("gloo", "127.0.0.1", port, rank, world, timeout_s=600)
    seconds = []
    for _ in range(repeats):
        group.barrier()
        t0 = time.perf_counter()
        for name, _ in metas:
            group.broadcast(tensors[name])
        group.barrier()  # every receiver has its last tensor
        seconds.append(time.perf_counter() - t0)
    group.close()
    if out is not None:
        out.send(seconds)


def bare_seconds(shape: str, receivers: int, repeats: int) -> list[float]:
    ctx = mp.get_context("spawn")
    port, world = _free_port(), 1 + receivers
    recv, send = ctx.Pipe(duplex=False)
    procs = [ctx.Process(target=_bare, args=(shape, port, 0, world, repeats, send))]
    procs += [
        ctx.Process(target=_bare, args=(shape, port, r, world, repeats, None))
        for r in range(1, world)
    ]
    for p in procs:
        p.start()
    seconds = recv.recv()
    for p in procs:
        p.join(60)
    return list(seconds)


def main(args: argparse.Namespace) -> int:
    metas = _shapes(args.shape)
    nbytes = sum(2 * _numel(s) for _, s in metas)
    result: dict[str, Any] = {
        "shape": args.shape,
        "dtype": "bfloat16",
        "tensors": len(metas),
        "bytes": nbytes,
        "runs": [],
    }
    print(f"{args.shape}: {len(metas)} tensors, {nbytes / 2**30:.2f} GiB (bf16)")
    for tp in [int(x) for x in str(args.tp).split(",") if x]:
        bare = min(bare_seconds(args.shape, tp, args.repeats))
        push = min(push_seconds(args.shape, tp, args.repeats))
        run = {
            "tensor_parallel_size": tp,
            "push_s": push,
            "bare_broadcast_s": bare,
            "push_gib_per_s": nbytes / 2**30 / push,
            "bare_gib_per_s": nbytes / 2**30 / bare,
            "ratio": bare / push,
        }
        result["runs"].append(run)
        print(f"TP={tp}: push {push:.3f} s, bare gloo broadcast {bare:.3f} s, "
              f"ratio {run['ratio']:.2f}x (target >= 0.8)")  # fmt: skip
    if args.output:
        from actorllm.bench.machine import result_document, write_json

        doc = result_document("weight-sync", figures=result, args=args)
        if args.note:
            doc["note"] = args.note
        write_json(Path(args.output), doc)
    else:
        print(json.dumps(result, indent=2))
    return 0


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
