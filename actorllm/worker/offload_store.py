"""``OffloadStore``: the worker half of the offload tier — block copies in host memory and on disk.

Theory of operation
-------------------
The store executes the index's ops (``offload_ops.py``) against the runner's paged KV cache, in
order, on the worker thread, before the step's forward (:meth:`OffloadStore.apply`). One
stored block is one host tensor ``[num_layers, 2, block_size, num_kv_heads, head_dim]``
(2 = K, V) in the cache's dtype, pinned when CUDA is available; spilled, it is the file
``<disk_dir>/<hash hex>.safetensors`` (one tensor named ``kv``).

Runners: :func:`runner_kv_caches` is the one place that knows the runner. A runner whose
``kv_caches`` are tensors (``ModelRunner``: per layer ``(k_cache, v_cache)``, each
``[num_blocks, block_size, num_kv_heads, head_dim]``) gets real copies. A runner whose
``kv_caches`` is None (``ScriptedModel``) has no KV to copy: the store keeps a one-byte
placeholder per hash instead, so hits, loads, spills and drops are exercised end to end
and only the bytes are fake. A placeholder is never loaded into real tensors
(``OffloadStateError``).

Streams and syncs (CUDA): saves and loads are queued on the current stream, the stream the
forward runs on, so a save reads a block before the forward overwrites it and a load lands
before the forward reads it, with no host sync. The one deliberate sync is before a spill:
the host copy must be complete before it is written to disk.

Misses: a load of a hash the store does not have means the index and the store disagree
(ops lost with a crashed actor). The store reports the hash to the index (``on_lost``) and
raises :class:`OffloadMissError`: the step cannot run with a hole in its KV, the engine's
core restarts and recomputes, and the index no longer offers that hash. A failed disk write
drops the block and reports it the same way, without raising.

Disk: the directory is this store's scratch space. Files from an earlier engine (named like
ours) are deleted at start — their KV may belong to another model.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import final

import msgspec
import torch
from safetensors.torch import load_file, save_file

from actorllm.core.kv_cache.block_hash import BlockHash
from actorllm.core.scheduler.kv_connector import KVConnectorMetadata
from actorllm.kernels.kv_quant import is_fp8
from actorllm.worker.offload_ops import OffloadMetadata, OffloadOp
from actorllm.worker.runner import Runner

KVCaches = Sequence[tuple[torch.Tensor, torch.Tensor]]
_FILE = re.compile(r"[0-9a-f]{32}|[0-9a-f]{64}")  # 16- or 32-byte hashes, hex


class OffloadStateError(RuntimeError):
    """The runner cannot take part in offloading right now (no KV cache, wrong shapes)."""


class OffloadMissError(RuntimeError):
    """A load named a block the store does not hold (reported to the index as lost)."""


class OffloadStoreStats(msgspec.Struct, frozen=True, kw_only=True):
    host_blocks: int  # blocks held in host memory now
    host_bytes: int
    disk_blocks: int  # blocks held on disk now
    num_saves: int  # cumulative
    num_loads_host: int
    num_loads_disk: int
    num_spills: int
    num_drops: int
    num_misses: int
    num_disk_errors: int


def _raw(t: torch.Tensor) -> torch.Tensor:
    """An fp8 cache as its bytes (torch's CPU gathers and index_copy_ take no float8); any
    other tensor as it is."""
    return t.view(torch.uint8) if is_fp8(t.dtype) else t


def runner_kv_caches(runner: Runner) -> KVCaches | None:
    """The runner's per-layer ``(k_cache, v_cache)``, or None for a runner without KV tensors.

    Raises :class:`OffloadStateError` when the runner has KV tensors but none allocated
    (asleep, or before ``initialize_kv_cache``).
    """
    caches = runner.kv_caches
    if caches is None:
        return None
    if not caches:
        raise OffloadStateError("the runner has no KV cache allocated (asleep or not started).")
    return caches


@final
class OffloadStore:
    """Stored block copies by hash. Worker thread only; ``statistics()`` may be read anywhere.

    ``on_lost(block_hash)`` is called (on the worker thread) for a hash the store lost.
    """

    def __init__(
        self,
        disk_dir: str | os.PathLike[str] | None = None,
        *,
        on_lost: Callable[[BlockHash], None] | None = None,
    ) -> None:
        self.disk_dir = Path(disk_dir) if disk_dir is not None else None
        if self.disk_dir is not None:
            self.disk_dir.mkdir(parents=True, exist_ok=True)
            for stale in itertools.chain(
                self.disk_dir.glob("*.safetensors"), self.disk_dir.glob("*.tmp")
            ):
                if _FILE.fullmatch(stale.stem):
                    stale.unlink(missing_ok=True)
        self._on_lost = on_lost
        self._pin = torch.cuda.is_available()
        self._host: dict[BlockHash, torch.Tensor] = {}  # {hash: [L, 2, bs, Hkv, D] or placeholder}
        self._disk: set[BlockHash] = set()  # hashes with a file in disk_dir
        self._host_bytes = 0  # sum of the host tensors' sizes (statistics() reads it anywhere)
        self._unsynced: torch.device | None = None  # a device with saves still in flight
        self._counts = dict.fromkeys(
            ("saves", "loads_host", "loads_disk", "spills", "drops", "misses", "disk_errors"), 0
        )

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._host or block_hash in self._disk

    def apply(self, runner: Runner, meta: KVConnectorMetadata) -> None:
        """Run the step's ops in order. Call on the worker thread before ``runner.launch``.

        Plain ``KVConnectorMetadata`` (not :class:`OffloadMetadata`) runs its saves, then its
        loads. Raises :class:`OffloadMissError` / :class:`OffloadStateError` (see module doc).
        """
        if isinstance(meta, OffloadMetadata):
            ops = meta.ops
        else:
            ops = [OffloadOp("save", h, b) for h, b in meta.saves]
            ops += [OffloadOp("load", h, b) for h, b in meta.loads]
        if not ops:
            return
        needs_kv = any(op.kind in ("save", "load") for op in ops)
        kv = runner_kv_caches(runner) if needs_kv else None
        for kind, group in itertools.groupby(ops, key=lambda op: op.kind):
            run = list(group)
            if kind == "save":
                self._save(kv, run)
            elif kind == "load":
                self._load(kv, run)
            elif kind == "spill":
                for op in run:
                    self._spill(op.block_hash)
            else:
                for op in run:
                    self._drop(op.block_hash)

    # -- ops ------------------------------------------------------------------------------

    def _save(self, kv: KVCaches | None, run: list[OffloadOp]) -> None:
        self._counts["saves"] += len(run)
        if kv is None:
            for op in run:
                self._host_put(op.block_hash, torch.zeros(1, dtype=torch.uint8))  # placeholder
            return
        k0 = kv[0][0]
        ids = torch.tensor([op.block_id for op in run], device=k0.device)
        # blocks: [n, L, 2, bs, Hkv, D], gathered on the device in one pass per layer
        blocks = torch.stack(
            [torch.stack((_raw(k)[ids], _raw(v)[ids]), dim=1) for k, v in kv], dim=1
        ).view(k0.dtype)
        for i, op in enumerate(run):
            entry = torch.empty(blocks.shape[1:], dtype=k0.dtype, pin_memory=self._pin)
            # Non-blocking D2H on the forward's stream: ordered before the forward writes.
            entry.copy_(blocks[i], non_blocking=True)
            self._host_put(op.block_hash, entry)
        if k0.device.type == "cuda":
            self._unsynced = k0.device

    def _load(self, kv: KVCaches | None, run: list[OffloadOp]) -> None:
        entries = [self._fetch(op.block_hash) for op in run]
        if kv is None:
            return  # placeholders: nothing to copy
        k0 = kv[0][0]
        want = (len(kv), 2, *k0.shape[1:])
        for op, e in zip(run, entries, strict=True):
            if tuple(e.shape) != want or e.dtype != k0.dtype:
                raise OffloadStateError(
                    f"stored block {op.block_hash.hex()} is {tuple(e.shape)} {e.dtype}, the KV "
                    f"cache wants {want} {k0.dtype} (a placeholder, or another model's KV)."
                )
        # dev: [n, L, 2, bs, Hkv, D]. Host->device copies on the forward's stream: ordered
        # after any save of the same step that filled the entry, before the forward reads.
        dev = torch.empty((len(run), *want), dtype=k0.dtype, device=k0.device)
        for i, e in enumerate(entries):
            dev[i].copy_(e, non_blocking=True)
        ids = torch.tensor([op.block_id for op in run], device=k0.device)
        for layer, (k, v) in enumerate(kv):
            _raw(k).index_copy_(0, ids, _raw(dev[:, layer, 0]))
            _raw(v).index_copy_(0, ids, _raw(dev[:, layer, 1]))

    def _fetch(self, block_hash: BlockHash) -> torch.Tensor:
        entry = self._host.get(block_hash)
        if entry is not None:
            self._counts["loads_host"] += 1
            return entry
        if block_hash in self._disk:
            self._counts["loads_disk"] += 1
            return load_file(self._path(block_hash))["kv"]
        self._counts["misses"] += 1
        self._report_lost(block_hash)
        raise OffloadMissError(f"no stored KV for block {block_hash.hex()}.")

    def _spill(self, block_hash: BlockHash) -> None:
        entry = self._host_pop(block_hash)
        if entry is None:
            return  # lost earlier; the index has been told
        if self.disk_dir is None:
            raise OffloadStateError("a spill was ordered but no disk directory is configured.")
        if self._unsynced is not None:
            # Deliberate host sync: the non-blocking save copies must land before we read them.
            torch.cuda.synchronize(self._unsynced)
            self._unsynced = None
        path = self._path(block_hash)
        tmp = path.with_suffix(".tmp")
        try:
            save_file({"kv": entry.contiguous()}, str(tmp))
            os.replace(tmp, path)  # never leave a half-written file under a valid name
        except OSError:
            tmp.unlink(missing_ok=True)
            self._counts["disk_errors"] += 1
            self._report_lost(block_hash)
            return
        self._disk.add(block_hash)
        self._counts["spills"] += 1

    def _drop(self, block_hash: BlockHash) -> None:
        dropped = self._host_pop(block_hash) is not None
        if block_hash in self._disk:
            self._disk.discard(block_hash)
            self._path(block_hash).unlink(missing_ok=True)
            dropped = True
        if dropped:
            self._counts["drops"] += 1

    def _host_put(self, block_hash: BlockHash, entry: torch.Tensor) -> None:
        self._host_pop(block_hash)
        self._host[block_hash] = entry
        self._host_bytes += entry.numel() * entry.element_size()

    def _host_pop(self, block_hash: BlockHash) -> torch.Tensor | None:
        entry = self._host.pop(block_hash, None)
        if entry is not None:
            self._host_bytes -= entry.numel() * entry.element_size()
        return entry

    def _path(self, block_hash: BlockHash) -> Path:
        assert self.disk_dir is not None
        return self.disk_dir / f"{block_hash.hex()}.safetensors"

    def _report_lost(self, block_hash: BlockHash) -> None:
        if self._on_lost is not None:
            self._on_lost(block_hash)

    def statistics(self) -> OffloadStoreStats:
        c = self._counts
        return OffloadStoreStats(
            host_blocks=len(self._host),
            host_bytes=self._host_bytes,
            disk_blocks=len(self._disk),
            num_saves=c["saves"],
            num_loads_host=c["loads_host"],
            num_loads_disk=c["loads_disk"],
            num_spills=c["spills"],
            num_drops=c["drops"],
            num_misses=c["misses"],
            num_disk_errors=c["disk_errors"],
        )
