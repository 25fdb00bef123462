"""vLLM's logits-processor interface: a processor sees the persistent batch's changes
(:class:`BatchUpdate`: requests removed, added, moved, by batch index) before each step and
rewrites that step's ``[num_reqs, V]`` logits in :meth:`LogitsProcessor.apply`.

Batch index ``i`` is the request's row in the worker's persistent batch (its slot). The
``output_tok_ids`` list of an added request is a live reference: it grows as the request
generates, so a processor always reads its latest tokens.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum, auto
from functools import partial
from typing import Any

import torch

from actorllm.core.sampling_params import SamplingParams


class MoveDirectionality(Enum):
    UNIDIRECTIONAL = auto()  # i1 -> i2 (i1 is left empty)
    SWAP = auto()  # i1 <-> i2


RemovedRequest = int
# (index, params, prompt_tok_ids, output_tok_ids)
AddedRequest = tuple[int, SamplingParams, list[int] | None, list[int]]
MovedRequest = tuple[int, int, MoveDirectionality]


@dataclass(frozen=True)
class BatchUpdate:
    """The batch's changes since the last step; apply them in the order removed, added,
    moved (an added or moved request may take the index of an existing one)."""

    batch_size: int
    removed: Sequence[RemovedRequest]
    added: Sequence[AddedRequest]
    moved: Sequence[MovedRequest]


class LogitsProcessor(ABC):
    """A batch-level logits processor (vLLM's V1 ``LogitsProcessor``)."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Raise ``ValueError`` for a request whose parameters this processor refuses (the
        server answers 400). Optional: the default accepts every request."""
        return None

    @abstractmethod
    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        raise NotImplementedError

    @abstractmethod
    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Rewrite ``logits`` ([num_reqs, V], float32; may be modified in place)."""
        raise NotImplementedError

    @abstractmethod
    def is_argmax_invariant(self) -> bool:
        """True if it never changes a row's argmax (then greedy rows skip it)."""
        raise NotImplementedError

    @abstractmethod
    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Before each step: ``batch_update`` is None when the batch did not change."""
        raise NotImplementedError


# A per-request processor: f(output_ids, logits_row) or f(prompt_ids, output_ids, row).
RequestLogitsProcessor = Callable[..., torch.Tensor]


def process_dict_updates(
    req_info: dict[int, Any],
    batch_update: BatchUpdate | None,
    new_state: Callable[[SamplingParams, list[int] | None, list[int]], Any],
) -> bool:
    """Keep a ``{batch index: state}`` dict in step with the batch (vLLM's helper);
    ``new_state`` returns None for a request the processor leaves alone. True if the dict
    changed."""
    if batch_update is None:
        return False
    changed = False
    for index in batch_update.removed:
        changed |= req_info.pop(index, None) is not None
    for index, params, prompt_ids, output_ids in batch_update.added:
        state = new_state(params, prompt_ids, output_ids)
        if state is not None:
            req_info[index] = state
            changed = True
        else:
            changed |= req_info.pop(index, None) is not None
    for a, b, direction in batch_update.moved:
        a_state, b_state = req_info.pop(a, None), req_info.pop(b, None)
        if a_state is not None:
            req_info[b] = a_state
            changed = True
        if direction is MoveDirectionality.SWAP and b_state is not None:
            req_info[a] = b_state
            changed = True
    return changed


class AdapterLogitsProcessor(LogitsProcessor):
    """Wraps per-request processors (vLLM's): subclass it, implement
    :meth:`is_argmax_invariant` and :meth:`new_req_logits_processor`."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.req_info: dict[int, partial[torch.Tensor]] = {}

    @abstractmethod
    def new_req_logits_processor(self, params: SamplingParams) -> RequestLogitsProcessor | None:
        """The request's processor, or None to leave it alone."""
        raise NotImplementedError

    def _new_state(
        self, params: SamplingParams, prompt_ids: list[int] | None, output_ids: list[int]
    ) -> partial[torch.Tensor] | None:
        fn = self.new_req_logits_processor(params)
        if fn is None:
            return None
        if len(inspect.signature(fn).parameters) == 3:
            if prompt_ids is None:
                raise ValueError("this logits processor needs the prompt token ids")
            return partial(fn, prompt_ids, output_ids)
        return partial(fn, output_ids)

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.req_info, batch_update, self._new_state)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for index, fn in self.req_info.items():
            row = logits[index]
            new = fn(row)
            if new is not row:
                logits[index] = new
        return logits
