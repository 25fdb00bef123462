"""Drafts from an EAGLE head (vLLM's ``eagle`` and ``eagle3`` methods) over the target's
hidden states: its final ones (EAGLE) or the residual stream entering three of its layers,
concatenated (EAGLE-3, fused by the head's ``fc``).

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
from typing import Any, Literal

import numpy as np
import torch

from actorllm.kernels.sampling import first_argmax
from actorllm.models.base import CausalLM
from actorllm.models.config import CheckpointConfig
from actorllm.models.eagle import Eagle3LlamaForCausalLM, EagleLlamaForCausalLM, eagle_class
from actorllm.models.llama import LlamaForCausalLM
from actorllm.worker.device_streams import to_device
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.spec_decode.draft_model import DraftModelError, DraftModelProposer
from actorllm.worker.spec_decode.draft_rows import Row, draft_rows
from actorllm.worker.step_output import TargetHidden

# config.json names of EAGLE heads (all Llama decoder layers) and of EAGLE-3 heads.
EAGLE_ARCHITECTURES = ("LlamaForCausalLM", "EagleLlamaForCausalLM", "LlamaForCausalLMEagle")
EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
Method = Literal["eagle", "eagle3"]


def eagle_config(path: Path, target: CheckpointConfig, method: Method) -> CheckpointConfig:
    """The head's config, checked against ``method`` and the target's (raises
    :class:`DraftModelError` naming what does not fit)."""
    raw = json.loads((path / "config.json").read_text())
    arch = (raw.get("architectures") or ["LlamaForCausalLM"])[0]
    kind = "eagle3" if arch in EAGLE3_ARCHITECTURES else "eagle"
    if arch not in EAGLE_ARCHITECTURES + EAGLE3_ARCHITECTURES:
        raise DraftModelError(
            f"method {method!r}: {path} is a {arch}; EAGLE heads here are Llama decoder "
            f"layers ({', '.join(EAGLE_ARCHITECTURES + EAGLE3_ARCHITECTURES)})."
        )
    if kind != method:
        raise DraftModelError(
            f"method {method!r}: {path} is an {'EAGLE-3' if kind == 'eagle3' else 'EAGLE'} "
            f"head ({arch}): use method {kind!r}."
        )
    raw["architectures"] = ["LlamaForCausalLM"]
    raw.setdefault("vocab_size", target.vocab_size)
    cfg = CheckpointConfig.from_dict(raw)
    width = int(raw.get("target_hidden_size") or cfg.hidden_size)
    if width != target.hidden_size or (kind == "eagle" and cfg.hidden_size != width):
        raise DraftModelError(
            f"the EAGLE head's hidden size ({width}) differs from the target's "
            f"({target.hidden_size}): it reads the target's hidden states."
        )
    return cfg


def aux_layer_ids(path: Path, num_layers: int) -> tuple[int, ...]:
    """The target layers whose incoming residual stream an EAGLE-3 head reads: the
    config's ``eagle_aux_hidden_state_layer_ids`` (top level or in ``eagle_config``), else
    vLLM's default (2, L // 2, L - 3)."""
    raw = json.loads((path / "config.json").read_text())
    ids = raw.get("eagle_aux_hidden_state_layer_ids") or (raw.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids"
    )
    out = tuple(int(i) for i in ids) if ids else (2, num_layers // 2, num_layers - 3)
    if len(out) != 3 or not all(0 < i < num_layers for i in out):
        raise DraftModelError(
            f"the EAGLE-3 head reads target layers {list(out)}; the target has {num_layers} "
            "layers (three ids, each in 1 .. layers - 1)."
        )
    return out


class EagleProposer(DraftModelProposer):
    """Greedy drafts from an EAGLE or EAGLE-3 head. Worker thread only."""

    def __init__(self, path: str | Path, k: int, *, method: Method = "eagle", **kw: Any) -> None:
        self.method: Method = method
        super().__init__(path, k, **kw)
        self.head: EagleLlamaForCausalLM | Eagle3LlamaForCausalLM | None = None

    def read_config(self, path: Path, target: CheckpointConfig) -> CheckpointConfig:
        return eagle_config(path, target, self.method)

    def load(self, target: CausalLM | None = None) -> None:
        """Build the head and share ``target``'s embedding (and EAGLE's, its LM head); an
        EAGLE-3 head makes the target keep its auxiliary hidden states."""
        assert target is not None, "an EAGLE head needs its target model"
        eagle3 = self.method == "eagle3"
        if eagle3:
            if not isinstance(target, LlamaForCausalLM):
                raise DraftModelError(f"EAGLE-3 over a {type(target).__name__} is not built.")
            target.aux_layers = aux_layer_ids(self.path, target.config.num_layers)
        dummy = self.load_format == "dummy"  # random weights: no checkpoint to read
        head = self._build(eagle_class(None if dummy else self.path, eagle3))
        assert isinstance(head, EagleLlamaForCausalLM | Eagle3LlamaForCausalLM)
        head.share(target)
        self.model = self.head = head

    def propose(
        self,
        batch: InputBatch,
        slots: list[int],
        room: list[int],
        hidden: TargetHidden | None = None,
    ) -> list[list[int]]:
        """Catch up on the step's ``hidden`` states, then greedy drafts for the requests in
        ``slots`` ([N]; at most ``room[i]`` each, >= 1)."""
        out: list[list[int]] = [[] for _ in slots]
        if self.head is None or not self.kv_caches or hidden is None:
            return out
        rows, hidden_rows = self._catch_up_rows(batch, hidden)
        if not rows:
            return out
        with torch.inference_mode():
            d = draft_rows(batch, rows, self.device)
            target = hidden.hidden.index_select(0, to_device(hidden_rows, self.device))
            hidden_in = self.head.combine(target)  # [T, H] (EAGLE-3: fc over [T, 3H])
            for_logits, h = self.head.draft(
                d.input_ids, d.positions, d.meta, self.kv_caches, hidden_in
            )  # [T, H] each
            last_h = h.index_select(0, d.last)  # [B, H]: each request's row at p = n - 2
            first = self._argmax(for_logits.index_select(0, d.last))
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
                for_logits, h = self.head.draft(
                    d.input_ids, d.positions, d.meta, self.kv_caches, prev.index_select(0, src)
                )  # [B', H] each
                for (i, _, _, _), t in zip(todo, self._argmax(for_logits), strict=True):
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
