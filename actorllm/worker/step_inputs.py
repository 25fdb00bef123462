"""Turn the input batch + a ``SchedulerOutput`` into one step's flat model inputs.

All index arithmetic runs vectorized on the host (numpy) over the batch's preallocated
arrays, then the results go to the device in one copy each.

For scheduled request ``b`` (in slot order) with ``start = num_computed_tokens`` and
``n = num_scheduled_tokens``, rows ``[qsl[b], qsl[b] + n)`` of the step hold positions
``start .. start + n - 1``; the request samples when ``start + n`` reaches its known tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from actorllm.models.attention import AttentionMetadata
from actorllm.worker.input_batch import InputBatch


class SchedulerProtocolError(RuntimeError):
    """The SchedulerOutput contradicts the worker's state (a scheduler bug, not a user error)."""


@dataclass(frozen=True)
class PromptLogprobsPlan:
    req_id: str
    hidden_rows: np.ndarray  # [M] rows of the step's hidden states
    target_token_ids: np.ndarray  # [M] the prompt token each row predicts
    k: int  # SamplingParams.prompt_logprobs


@dataclass(frozen=True)
class StepInputs:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    attn_metadata: AttentionMetadata
    req_ids: list[str]  # [B] scheduled requests, batch (slot) order
    slots: np.ndarray  # [B] their slots
    sample_mask: np.ndarray  # [B] bool, request samples this step
    sample_hidden_rows: torch.Tensor  # [N] int64, last row of each sampling request
    prompt_logprobs: list[PromptLogprobsPlan]


def prepare_step_inputs(
    batch: InputBatch, num_scheduled: dict[str, int], device: torch.device
) -> StepInputs:
    """Plan the step; raises :class:`SchedulerProtocolError` on an inconsistent schedule."""
    try:
        slots = np.array(sorted(batch.req_id_to_index[r] for r in num_scheduled), dtype=np.int64)
    except KeyError as e:
        raise SchedulerProtocolError(f"scheduled request {e} is unknown to the worker") from None
    req_ids = [r for r in (batch.req_ids[s] for s in slots.tolist()) if r is not None]
    n = np.array([num_scheduled[r] for r in req_ids], dtype=np.int64)
    start = batch.num_computed_tokens[slots]
    end = start + n
    known = batch.num_tokens[slots]
    bs = batch.block_size
    if (end > known).any() or (n <= 0).any():
        b = int(np.flatnonzero((end > known) | (n <= 0))[0])
        raise SchedulerProtocolError(
            f"request {req_ids[b]}: scheduled [{start[b]}, {end[b]}) "
            f"but it has {known[b]} known tokens"
        )
    if (end > batch.num_blocks[slots] * bs).any():
        b = int(np.flatnonzero(end > batch.num_blocks[slots] * bs)[0])
        raise SchedulerProtocolError(
            f"request {req_ids[b]}: {end[b]} tokens need more than its blocks"
        )
    qsl = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(n, out=qsl[1:])
    total = int(qsl[-1])
    rep_slots = np.repeat(slots, n)  # [T]
    positions = np.repeat(start - qsl[:-1], n) + np.arange(total)  # [T]
    input_ids = batch.token_ids[rep_slots, positions]  # [T]
    slot_mapping = (
        batch.block_table[rep_slots, positions // bs].astype(np.int64) * bs + positions % bs
    )
    max_seq_len = int(end.max())
    block_table = batch.block_table[slots, : -(-max_seq_len // bs)]  # [B, nb]
    sample_mask = end >= known
    meta = AttentionMetadata(
        query_start_loc=_dev(qsl.astype(np.int32), device),
        seq_lens=_dev(end.astype(np.int32), device),
        block_table=_dev(block_table, device),
        slot_mapping=_dev(slot_mapping, device),
        query_start_loc_cpu=qsl.tolist(),
        seq_lens_cpu=end.tolist(),
        max_query_len=int(n.max()),
        max_seq_len=max_seq_len,
    )
    return StepInputs(
        input_ids=_dev(input_ids, device),
        positions=_dev(positions, device),
        attn_metadata=meta,
        req_ids=req_ids,
        slots=slots,
        sample_mask=sample_mask,
        sample_hidden_rows=_dev(qsl[1:][sample_mask] - 1, device),
        prompt_logprobs=_plan_prompt_logprobs(batch, slots, req_ids, start, end, qsl),
    )


def _plan_prompt_logprobs(
    batch: InputBatch,
    slots: np.ndarray,
    req_ids: list[str],
    start: np.ndarray,
    end: np.ndarray,
    qsl: np.ndarray,
) -> list[PromptLogprobsPlan]:
    """Rows whose logits score a prompt token: position p predicts token p + 1.

    Only for requests still in their prompt (no outputs yet): a resumed request recomputing
    its prompt already reported these.
    """
    plans = []
    for b, slot in enumerate(slots.tolist()):
        p = batch.params[slot]
        assert p is not None
        n_prompt = int(batch.num_prompt_tokens[slot])
        if p.prompt_logprobs is None or batch.num_tokens[slot] != n_prompt:
            continue
        pos = np.arange(start[b], min(int(end[b]), n_prompt - 1))
        plans.append(
            PromptLogprobsPlan(
                req_id=req_ids[b],
                hidden_rows=qsl[b] + pos - start[b],
                target_token_ids=batch.token_ids[slot, pos + 1],
                k=p.prompt_logprobs,
            )
        )
    return plans


def _dev(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """Host array -> device tensor (async from pinned memory on CUDA is the GPU path's job)."""
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)
