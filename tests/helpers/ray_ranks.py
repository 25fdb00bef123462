"""Rank-side functions for the distributed tests, importable by rank processes: spawned
ones and Ray workers alike (a test module is not: pytest imports it as
``distributed.test_...`` from a path only the test process has)."""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=60)


def sum_then_wait(rank: int, world_size: int, init_method: str) -> int:
    """Join the gloo group, all-reduce ``rank + 1``, then block on a broadcast from rank 0
    (its payload 0: return; anything else: raise). Returns the all-reduced sum."""
    dist.init_process_group("gloo", init_method, rank=rank, world_size=world_size, timeout=TIMEOUT)
    try:
        total = torch.tensor([rank + 1])  # [1]
        dist.all_reduce(total)
        order = torch.zeros(1, dtype=torch.int64)  # [1]
        dist.broadcast(order, src=0)
        if int(order.item()) != 0:
            raise RuntimeError(f"rank {rank} told to fail")
        return int(total.item())
    finally:
        dist.destroy_process_group()


def sleep_forever(rank: int) -> None:
    """A rank that only waits (to be killed)."""
    import time

    while True:
        time.sleep(1)


def kv_allocated(worker: object) -> bool:
    """For ``collective_rpc``: whether this rank's KV cache is allocated."""
    return bool(worker.model_runner.kv_caches)  # type: ignore[attr-defined]


def kv_layers(worker: object) -> int:
    """For ``collective_rpc``: how many layers this rank's KV cache holds (pipeline
    parallel: its stage's)."""
    return len(worker.model_runner.kv_caches)  # type: ignore[attr-defined]


def node_ip(worker: object) -> str:
    """For ``collective_rpc``: the IP of the Ray node this rank runs on."""
    import ray

    return str(ray.util.get_node_ip_address())


def weight_bytes(worker: object) -> int:
    """For ``collective_rpc``: the bytes this rank's weights hold (its shards)."""
    return int(worker.model_runner.weight_bytes)  # type: ignore[attr-defined]


def tiled_linears(worker: object) -> bool:
    """For ``collective_rpc``: whether this rank's 4-bit linears all run on the tile layout
    (kernels/w4a8_amx.py: AMX-INT8 tiles or AVX512-VNNI vectors); False where the host has
    neither."""
    from actorllm.models.quant.linear import PackedLinear

    model = worker.model_runner.model  # type: ignore[attr-defined]
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    return bool(packed) and all(m.tiled for m in packed)


def lora_pinned(worker: object) -> list[str]:
    """For ``collective_rpc``: the LoRA adapters pinned on this rank, by name."""
    return sorted(worker.model_runner.lora.pinned)  # type: ignore[attr-defined]
