"""Drafts from a separate, smaller model (vLLM's ``draft_model`` method), on the worker
thread, with its own KV cache over the target's blocks.

The draft model's cache has one tensor per draft layer with the *same* block count and
block size as the target's, and is addressed through the target's block tables: a block id
the scheduler gives a request holds that request's positions in both caches, so the draft
needs no block manager of its own and its memory is part of each block's size (the engine
sizes the pool with both). The scheduler allocates ``k`` lookahead slots past every step,
where the draft writes the KV of its own proposals.

After a step resolves, for each request that sampled: the draft computes the positions it
has not seen (``[seen, n)``: the whole prompt the first time, afterwards the accepted tokens
of the last step) and takes the argmax of the last one as draft 1, then runs ``k - 1``
single-token steps on its own drafts. Its positions past ``n`` hold its own proposals, so
``seen`` stays ``n``: the next call recomputes from there. Drafts are greedy (vLLM's
``draft_sample_method="greedy"``): the verifier treats them as one-hot.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import torch

from actorllm.kernels.kv_quant import cache_dtype, is_fp8
from actorllm.kernels.ops import get_ops
from actorllm.kernels.sampling import first_argmax
from actorllm.models.base import CausalLM
from actorllm.models.config import CheckpointConfig
from actorllm.models.load_format import LoadFormat
from actorllm.models.loader import load_model, resolve_dtype
from actorllm.models.onednn_linear import prepack_linears
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.kv_cache import (
    KVCaches,
    KVLayout,
    allocate_kv_caches,
    bind_kv_groups,
    kv_cache_bytes_per_block,
    kv_cache_groups,
    load_kv_scales,
)
from actorllm.worker.spec_decode.draft_rows import Row, draft_rows
from actorllm.worker.step_output import TargetHidden


class DraftModelError(ValueError):
    """The draft model cannot serve this target (named as ``speculative_config``)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"speculative_config: {message}")


class DraftModelProposer:
    """Greedy drafts from a draft model. Worker thread only."""

    def __init__(
        self,
        path: str | Path,
        k: int,
        *,
        target: CheckpointConfig,
        dtype: torch.dtype,
        device: torch.device,
        attention_backend: str,
        block_size: int,
        max_model_len: int,
        seed: int = 0,
        load_format: LoadFormat = "auto",
        kv_cache_dtype: str = "auto",
    ) -> None:
        # a dummy-loaded target (benchmarks) gets a dummy drafter; else its own files
        self.load_format: LoadFormat = "dummy" if load_format == "dummy" else "auto"
        cfg = self.read_config(Path(path), target)
        if cfg.vocab_size != target.vocab_size:
            raise DraftModelError(
                f"the draft model's vocabulary ({cfg.vocab_size} tokens) differs from the "
                f"target's ({target.vocab_size}): draft tokens must be the target's tokens."
            )
        if cfg.max_position_embeddings < max_model_len:
            raise DraftModelError(
                f"the draft model holds {cfg.max_position_embeddings} positions, fewer than "
                f"max_model_len {max_model_len}."
            )
        self.groups = kv_cache_groups(cfg, hybrid=False)  # one table: the target's first
        self.path = Path(path)
        self.k = k
        self.model_config = msgspec.structs.replace(cfg, max_model_len=max_model_len)
        self.dtype = resolve_dtype(str(dtype).removeprefix("torch."), cfg, device)
        # the drafter's own cache in the target's kv_cache_dtype (scales: its checkpoint's)
        self.kv_dtype = cache_dtype(kv_cache_dtype, self.dtype)
        self.device = device
        self.attention_backend = attention_backend
        self.block_size = block_size
        self.seed = seed
        self.model: CausalLM | None = None
        self.kv_caches: KVCaches = []
        # {req_id: (generation, positions whose draft KV is valid)}
        self._seen: dict[str, tuple[int, int]] = {}

    def read_config(self, path: Path, target: CheckpointConfig) -> CheckpointConfig:
        """The drafter's checkpoint config (``target``: what it must fit)."""
        return CheckpointConfig.from_pretrained(path)

    def load(self, target: CausalLM | None = None) -> None:
        """Build the draft model (``target``: the target model, unused by a draft model)."""
        self.model = self._build()

    def _build(self, model_class: type[CausalLM] | None = None) -> CausalLM:
        """Load the drafter (``model_class``: a head, not a model of its own), its linears
        prepacked on CPU as the target's, its layers bound to its KV cache groups."""
        ops = get_ops(self.attention_backend, self.device)
        model = load_model(
            self.path, self.model_config, dtype=self.dtype, device=self.device, ops=ops,
            seed=self.seed, max_positions=self.model_config.max_model_len,
            load_format=self.load_format, model_class=model_class,
        )  # fmt: skip
        if self.device.type == "cpu":
            prepack_linears(model)  # oneDNN matmuls (a head's shared ones stay the target's)
        bind_kv_groups(model, self.groups, self.model_config.num_layers)
        if is_fp8(self.kv_dtype):
            load_kv_scales(model, self.path, self.load_format)
        return model

    def bytes_per_block(self) -> int:
        return kv_cache_bytes_per_block(
            self.model_config, self.block_size, self.kv_dtype, self.groups
        )

    def allocate(self, num_blocks: int, layout: KVLayout) -> None:
        self.kv_caches = allocate_kv_caches(
            self.model_config, num_blocks, self.block_size, self.kv_dtype, self.device,
            layout=layout, groups=self.groups,
        )  # fmt: skip
        self._seen.clear()

    def release(self) -> None:
        self.kv_caches = []
        self._seen.clear()

    def reset(self) -> None:
        """The batch was rebuilt: every request is new to the draft again."""
        self._seen.clear()

    # -- proposing -------------------------------------------------------------------

    def propose(
        self,
        batch: InputBatch,
        slots: list[int],
        room: list[int],
        hidden: TargetHidden | None = None,
    ) -> list[list[int]]:
        """Greedy drafts for the requests in ``slots`` ([N]; at most ``room[i]`` each,
        >= 1), their tokens all in ``batch`` (``hidden``: the step's hidden states, which
        only an EAGLE head reads)."""
        if self.model is None or not self.kv_caches:
            return [[] for _ in slots]
        live = set(batch.req_id_to_index)
        for gone in [r for r in self._seen if r not in live]:
            del self._seen[gone]
        bs = batch.block_size
        # How many drafts each can take: its room, and the slots its blocks hold (the
        # draft writes positions n .. n + k - 2).
        n_all = batch.num_tokens[slots]  # [N]
        cap = np.minimum(np.asarray(room), batch.num_blocks[slots] * bs - n_all + 1)
        out: list[list[int]] = [[] for _ in slots]
        keep = np.flatnonzero(cap >= 1)  # the newest token's slot exists
        if len(keep) == 0:
            return out
        slots = [slots[i] for i in keep.tolist()]
        n = n_all[keep]
        ks = np.minimum(cap[keep], self.k)  # [N']
        starts = []
        for slot in slots:
            rid = batch.req_ids[slot]
            gen = int(batch.generation[slot])
            seen = self._seen.get(rid or "", (gen, 0))
            starts.append(seen[1] if seen[0] == gen else 0)
        with torch.inference_mode():
            # Catch up on the unseen tokens; the last row's argmax is draft 1.
            rows = [
                (slot, s, batch.token_ids[slot, s:nn])
                for slot, s, nn in zip(slots, starts, n.tolist(), strict=True)
            ]
            drafts = [[t] for t in self._forward(batch, rows)]
            for slot, nn in zip(slots, n.tolist(), strict=True):
                rid = batch.req_ids[slot]
                if rid is not None:
                    self._seen[rid] = (int(batch.generation[slot]), nn)
            for j in range(1, int(ks.max(initial=0))):
                idx = [i for i in range(len(slots)) if ks[i] > j]
                rows = [
                    (slots[i], int(n[i]) + j - 1, np.array([drafts[i][-1]], dtype=np.int64))
                    for i in idx
                ]
                for i, t in zip(idx, self._forward(batch, rows), strict=True):
                    drafts[i].append(t)
        for i, d, kk in zip(keep.tolist(), drafts, ks.tolist(), strict=True):
            out[i] = d[:kk]
        return out

    def _forward(self, batch: InputBatch, rows: list[Row]) -> list[int]:
        """One draft forward: request ``slot`` computes ``tokens`` at positions ``start..``;
        returns the argmax after each request's last token."""
        assert self.model is not None
        d = draft_rows(batch, rows, self.device)
        hidden = self.model(d.input_ids, d.positions, d.meta, self.kv_caches)  # [T, H]
        logits = self.model.compute_logits(hidden.index_select(0, d.last))  # [B, V]
        # Deliberate host sync: the next draft step's input is this argmax.
        return first_argmax(logits).tolist()
