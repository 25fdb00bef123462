"""The model runner's custom logits processors: built once, told of the persistent batch's
changes once per step, applied to the step's logits.

The persistent batch (worker/input_batch.py) reports each change as it happens; a step's
changes come in vLLM's order (finished and preempted requests removed, new ones added, then
the rows condensed: moves), and :meth:`BatchProcessors.flush` hands them over as one
:class:`BatchUpdate` before the step's forward. Each request's ``output_tok_ids`` is a list
kept up to date from the batch's token array at every flush (the runner resolves tokens
still on the device first: ``needs_token_history``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.worker.logitsprocs.interface import (
    AddedRequest,
    BatchUpdate,
    LogitsProcessor,
    MoveDirectionality,
    MovedRequest,
)
from actorllm.worker.logitsprocs.loader import load_classes

if TYPE_CHECKING:
    from actorllm.worker.input_batch import InputBatch


class BatchProcessors:
    """The processor instances of one runner and the batch changes not yet handed over."""

    def __init__(self, processors: Sequence[LogitsProcessor]) -> None:
        self.processors = list(processors)
        self.non_invariant = [p for p in self.processors if not p.is_argmax_invariant()]
        self.invariant = [p for p in self.processors if p.is_argmax_invariant()]
        self._removed: list[int] = []
        self._added: list[AddedRequest] = []
        self._moved: list[MovedRequest] = []
        # [slot] -> the live output_tok_ids list handed to the processors
        self._outputs: dict[int, list[int]] = {}
        self._batch_size = 0

    # -- the persistent batch's changes (called by InputBatch) --------------------------

    def added(
        self, slot: int, params: SamplingParams, prompt: list[int], outputs: list[int]
    ) -> None:
        live = list(outputs)
        self._outputs[slot] = live
        self._added.append((slot, params, list(prompt), live))

    def removed(self, slot: int) -> None:
        self._outputs.pop(slot, None)
        # Added and removed within one step: it never existed for the processors.
        self._added = [a for a in self._added if a[0] != slot]
        self._removed.append(slot)

    def moved(self, src: int, dst: int) -> None:
        live = self._outputs.pop(src, None)
        if live is not None:
            self._outputs[dst] = live
        self._moved.append((src, dst, MoveDirectionality.UNIDIRECTIONAL))

    def reset(self) -> None:
        """The runner dropped every request (a new persistent batch): all are removed."""
        for slot in list(self._outputs):
            self.removed(slot)

    # -- once per step --------------------------------------------------------------------

    def flush(self, batch: InputBatch) -> None:
        """Bring the output lists up to date and hand the step's changes to every
        processor (``None`` when nothing changed), before the forward."""
        for slot, live in self._outputs.items():
            start = int(batch.num_prompt_tokens[slot]) + len(live)
            end = int(batch.num_tokens[slot])
            if end > start:
                live.extend(batch.token_ids[slot, start:end].tolist())
        self._batch_size = batch.num_reqs
        update = None
        if self._removed or self._added or self._moved:
            update = BatchUpdate(self._batch_size, self._removed, self._added, self._moved)
            self._removed, self._added, self._moved = [], [], []
        for p in self.processors:
            p.update_state(update)

    def apply(self, logits: torch.Tensor, slots: np.ndarray, all_greedy: bool) -> torch.Tensor:
        """``logits``: [N, V] float32, row ``n`` the request in slot ``slots[n]``. Processors
        index the persistent batch, so rows are laid out by slot when ``slots`` is not
        ``0..N-1``. Argmax-invariant processors are skipped when every row is greedy."""
        procs = self.non_invariant if all_greedy else self.non_invariant + self.invariant
        if not procs:
            return logits
        n = len(slots)
        dense = n == self._batch_size and bool((slots == np.arange(n)).all())
        if dense:
            x = logits
        else:  # [batch_size, V]: rows of requests not sampled this step stay zero
            index = torch.from_numpy(slots).to(logits.device)
            x = logits.new_zeros((self._batch_size, logits.shape[1]))
            x.index_copy_(0, index, logits)
        for p in procs:
            x = p.apply(x)
        return x if dense else x.index_select(0, index)


def build_processors(
    names: Sequence[str], config: Any, device: torch.device
) -> BatchProcessors | None:
    """Instances of the plugins and the named classes (vLLM's constructor arguments:
    ``config`` in place of ``vllm_config``); None when there are none."""
    classes = load_classes(tuple(names))
    if not classes:
        return None
    pin = device.type == "cuda"
    return BatchProcessors([cls(config, device, pin) for cls in classes])


def param_checks(names: Sequence[str]) -> list[Any]:
    """Each class's ``validate_params``, run on every request at admission."""
    return [cls.validate_params for cls in load_classes(tuple(names))]
