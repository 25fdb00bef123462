"""Drafts from an EAGLE head (vLLM's ``eagle`` method) over the target's hidden states.

After every step (sampling or not) the head catches up on the positions the target
computed and whose next token is known: row ``p`` takes token ``p + 1`` and the target's
hidden state at ``p`` and writes the head's KV at ``p`` (its cache lies beside the target's
in the same blocks, like a draft model's). The catch-up row at ``p = n - 2`` (``n``: the
request's tokens now) predicts token ``n``: draft 1. Draft ``j + 1`` takes draft ``j`` at
position ``n - 2 + j`` with the head's own previous output as the hidden state; those
positions are rewritten with the target's hidden states once the target has verified them.
A verify step's rows past the accepted run hold rejected tokens and are not caught up on.
Drafts are greedy, as the draft model's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from actorllm.kernels.ops import get_ops
from actorllm.kernels.sampling import first_argmax
from actorllm.models.base import CausalLM
from actorllm.models.config import CheckpointConfig
from actorllm.models.eagle import EagleLlamaForCausalLM, eagle_class
from actorllm.models.loader import load_model
from actorllm.worker.device_streams import to_device
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.kv_cache import bind_kv_groups
from actorllm.worker.spec_decode.draft_model import DraftModelError, DraftModelProposer
from actorllm.worker.spec_decode.draft_rows import Row, draft_rows
from actorllm.worker.step_output import TargetHidden

# config.json names of EAGLE heads; all are read as a Llama decoder layer.
EAGLE_ARCHITECTURES = ("LlamaForCausalLM", "EagleLlamaForCausalLM", "LlamaForCausalLMEagle")


def eagle_config(path: Path, target: CheckpointConfig) -> CheckpointConfig:
    """The head's config, checked against the target's (raises :class:`DraftModelError`)."""
    raw = json.loads((path / "config.json").read_text())
    arch = (raw.get("architectures") or ["LlamaForCausalLM"])[0]
    if arch not in EAGLE_ARCHITECTURES:
        raise DraftModelError(
            f"method 'eagle': {path} is a {arch}; EAGLE heads here are Llama decoder layers "
            f"({', '.join(EAGLE_ARCHITECTURES)}). EAGLE-3 heads are not built yet."
        )
    raw["architectures"] = ["LlamaForCausalLM"]
    raw.setdefault("vocab_size", target.vocab_size)
    cfg = CheckpointConfig.from_dict(raw)
    if cfg.hidden_size != target.hidden_size:
        raise DraftModelError(
            f"the EAGLE head's hidden size ({cfg.hidden_size}) differs from the target's "
            f"({target.hidden_size}): it reads the target's hidden states."
        )
    return cfg


class EagleProposer(DraftModelProposer):
    """Greedy drafts from an EAGLE head. Worker thread only."""

    head: EagleLlamaForCausalLM | None = None

    def read_config(self, path: Path, target: CheckpointConfig) -> CheckpointConfig:
        return eagle_config(path, target)

    def load(self, target: CausalLM | None = None) -> None:
        """Build the head and share ``target``'s embedding and LM head."""
        assert target is not None, "an EAGLE head needs its target model"
        ops = get_ops(self.attention_backend, self.device)
        dummy = self.load_format == "dummy"
        head = load_model(
            self.path, self.model_config, dtype=self.dtype, device=self.device, ops=ops,
            load_format="dummy" if dummy else "auto", seed=self.seed,
            max_positions=self.model_config.max_model_len,
            model_class=eagle_class(None if dummy else self.path),
        )  # fmt: skip
        assert isinstance(head, EagleLlamaForCausalLM)
        head.share(target)
        bind_kv_groups(head, self.groups, self.model_config.num_layers)
        self.model = self.head = head

    def propose_eagle(
        self,
        batch: InputBatch,
        slots: list[int],
        room: list[int],
        step: TargetHidden | None,
    ) -> list[list[int]]:
        """Catch up on ``step``'s hidden states, then greedy drafts for the requests in
        ``slots`` ([N]; at most ``room[i]`` each, >= 1)."""
        out: list[list[int]] = [[] for _ in slots]
        if self.head is None or not self.kv_caches or step is None:
            return out
        rows, hidden_rows = self._catch_up_rows(batch, step)
        if not rows:
            return out
        with torch.inference_mode():
            d = draft_rows(batch, rows, self.device)
            hidden_in = step.hidden.index_select(0, to_device(hidden_rows, self.device))
            h = self.head.draft(d.input_ids, d.positions, d.meta, self.kv_caches, hidden_in)
            last_h = h.index_select(0, d.last)  # [B, H]: each request's row at p = n - 2
            first = self._argmax(last_h)
            where = {slot: i for i, (slot, _, _) in enumerate(rows)}
            bs = batch.block_size
            todo: list[tuple[int, int, int, int]] = []  # (i in slots, row, n, k)
            for i, (slot, r) in enumerate(zip(slots, room, strict=True)):
                j = where.get(slot)
                n = int(batch.num_tokens[slot])
                # the row at p = n - 2 is this step's last caught-up one for that slot
                if j is None or rows[j][1] + len(rows[j][2]) != n - 1:
                    continue
                # draft m + 1 writes the head's KV at n - 2 + m: within the slot's blocks
                k = min(r, self.k, int(batch.num_blocks[slot]) * bs - n + 2)
                if k >= 1:
                    out[i] = [first[j]]
                    todo.append((i, j, n, k))
            prev = last_h
            for m in range(1, max((t[3] for t in todo), default=0)):
                todo = [t for t in todo if t[3] > m]
                steps = [
                    (slots[i], n - 2 + m, np.array([out[i][-1]], dtype=np.int64))
                    for i, _, n, _ in todo
                ]
                d = draft_rows(batch, steps, self.device)
                src = to_device(np.array([j for _, j, _, _ in todo], dtype=np.int64), self.device)
                h = self.head.draft(
                    d.input_ids, d.positions, d.meta, self.kv_caches, prev.index_select(0, src)
                )  # [B', H]
                for (i, _, _, _), t in zip(todo, self._argmax(h), strict=True):
                    out[i].append(t)
                # the next round's rows follow `todo`'s order: index them by position there
                prev = h
                todo = [(i, b, n, k) for b, (i, _, n, k) in enumerate(todo)]
        return out

    def _catch_up_rows(self, batch: InputBatch, step: TargetHidden) -> tuple[list[Row], np.ndarray]:
        """Each request of ``step`` still in the batch: its rows ``p`` whose token ``p + 1``
        is known (the accepted ones), with token ``p + 1`` as input; and their rows in
        ``step.hidden``."""
        rows: list[Row] = []
        picks: list[np.ndarray] = []
        qsl = step.query_start_loc
        for b, slot in enumerate(step.slots.tolist()):
            if batch.req_ids[slot] is None or int(batch.generation[slot]) != int(step.gens[b]):
                continue
            first = int(step.first[b])
            n = int(batch.num_tokens[slot])
            take = min(int(qsl[b + 1] - qsl[b]), n - 1 - first)
            if take <= 0:
                continue
            rows.append((slot, first, batch.token_ids[slot, first + 1 : first + 1 + take]))
            picks.append(np.arange(qsl[b], qsl[b] + take, dtype=np.int64))
        hidden_rows = np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)
        return rows, hidden_rows

    def _argmax(self, h: torch.Tensor) -> list[int]:
        assert self.head is not None
        logits = self.head.compute_logits(h)  # [B, V]
        # Deliberate host sync: the next draft's input is this argmax.
        return first_argmax(logits).tolist()
