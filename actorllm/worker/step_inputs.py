"""Turn the input batch + a ``SchedulerOutput`` into one step's flat model inputs.

All index arithmetic runs vectorized on the host (numpy) over the batch's preallocated
arrays (:func:`plan_step` -> :class:`InputPlan`); then the arrays go to the device, either as
plain copies (:func:`prepare_step_inputs`, the CPU path) or through pinned staging buffers
on a copy stream (``staging.py``, the CUDA path).

For scheduled request ``b`` (in slot order) with ``start = num_computed_tokens`` and
``n = num_scheduled_tokens``, rows ``[qsl[b], qsl[b] + n)`` of the step hold positions
``start .. start + n - 1``; the request samples when ``start + n`` reaches its known tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from actorllm.models.attention import AttentionMetadata
from actorllm.worker.device_streams import to_device
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
class InputPlan:
    """One step's inputs on the host (numpy), before they go to the device."""

    req_ids: list[str]  # [B] scheduled requests, batch (slot) order
    slots: np.ndarray  # [B] their slots
    num_scheduled: np.ndarray  # [B] int64 tokens computed this step
    input_ids: np.ndarray  # [T] int64 (0 where the token is still on the device)
    positions: np.ndarray  # [T] int64
    slot_mapping: np.ndarray  # [T] int64
    query_start_loc: np.ndarray  # [B + 1] int32
    seq_lens: np.ndarray  # [B] int32
    block_table: np.ndarray  # [B, nb] int32
    sample_mask: np.ndarray  # [B] bool, request samples this step
    sample_hidden_rows: np.ndarray  # [N] int64, last row of each sampling request
    # Async scheduling: input rows whose token was sampled by an earlier step and is still
    # on the device, and the slot of the runner's device token buffer that holds it.
    fill_rows: np.ndarray  # [F] int64
    fill_src: np.ndarray  # [F] int64
    prompt_logprobs: list[PromptLogprobsPlan]
    max_query_len: int
    max_seq_len: int
    prompt_lens: np.ndarray  # [B] int64, each request's prompt tokens
    # Hybrid models: the block table ([B, nb] int32) and slot mapping ([T] int64) of each
    # KV cache group after the first (block_table / slot_mapping above are group 0's).
    group_block_tables: tuple[np.ndarray, ...] = ()
    group_slot_mappings: tuple[np.ndarray, ...] = ()
    # Speculative decoding: [N] logits rows of each sampling request (its drafts + 1), whose
    # rows in ``sample_hidden_rows`` are consecutive; None: one row each.
    sample_counts: np.ndarray | None = None
    # Embedding prompts: the [R] rows of the step that are prompt positions of such a
    # request and the [R, H] embeddings they take instead of their placeholder tokens'.
    prompt_embeds: tuple[np.ndarray, torch.Tensor] | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def is_decode(self) -> bool:
        """Every request computes exactly one token (a CUDA-graph candidate)."""
        return self.max_query_len == 1


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
    # [R] int64 rows and their [R, H] embeddings (embedding prompts), on the device.
    prompt_embeds: tuple[torch.Tensor, torch.Tensor] | None = None

    def model_kwargs(self) -> dict[str, Any]:
        """The model call's optional arguments: the embedding prompts' rows, if any."""
        return {} if self.prompt_embeds is None else {"prompt_embeds": self.prompt_embeds}


class PendingInputError(SchedulerProtocolError):
    """An input token is pending on the device but is not the latest one sampled: the caller
    must resolve pending tokens to the host and plan again."""


def plan_step(
    batch: InputBatch,
    num_scheduled: dict[str, int],
    spec: dict[str, list[int]] | None = None,
) -> InputPlan:
    """Plan the step on the host; raises :class:`SchedulerProtocolError` on an inconsistent
    schedule and :class:`PendingInputError` when an older pending token is needed.

    ``spec``: {req_id: drafts} (speculative decoding), already written into
    ``batch.token_ids`` after each request's known tokens; such a request's scheduled range
    ends with its drafts, and it samples at its last known token and at every draft."""
    slots, req_ids, n = _scheduled_rows(batch, num_scheduled)
    start = batch.num_computed_tokens[slots]
    end = start + n
    on_host = batch.num_tokens[slots]
    known = on_host + batch.num_pending[slots]
    num_spec = None
    if spec:
        num_spec = np.array([len(spec.get(r, ())) for r in req_ids], dtype=np.int64)  # [B]
        if (batch.num_pending[slots][num_spec > 0] > 0).any():
            raise PendingInputError("drafts follow a token still pending on the device")
        known = known + num_spec
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
    fill_rows = np.empty(0, dtype=np.int64)
    fill_src = fill_rows
    pending = batch.num_pending[slots]
    if (pending > 0).any() and (end > on_host).any():  # some inputs are still on the device
        rows = np.flatnonzero(positions >= np.repeat(on_host, n))
        if (positions[rows] != np.repeat(on_host + pending - 1, n)[rows]).any():
            raise PendingInputError("an input token older than the latest is still pending")
        fill_rows, fill_src = rows, batch.sampled_slot[rep_slots[rows]]
    block_idx, offset = positions // bs, positions % bs  # [T], [T]
    slot_mapping = batch.block_table[rep_slots, block_idx].astype(np.int64) * bs + offset
    max_seq_len = int(end.max())
    nb = -(-max_seq_len // bs)
    others = batch.block_tables[1:]  # hybrid models only
    sample_mask = end >= known
    sample_hidden_rows = qsl[1:][sample_mask] - 1  # [N]
    sample_counts = None
    if num_spec is not None:
        sample_counts = num_spec[sample_mask] + 1  # [N]
        first = sample_hidden_rows - sample_counts + 1  # [N] each request's first row
        group_start = np.cumsum(sample_counts) - sample_counts  # [N]
        within = np.arange(int(sample_counts.sum())) - np.repeat(group_start, sample_counts)
        sample_hidden_rows = np.repeat(first, sample_counts) + within  # [R]
    return InputPlan(
        req_ids=req_ids,
        slots=slots,
        num_scheduled=n,
        input_ids=input_ids,
        positions=positions,
        slot_mapping=slot_mapping,
        query_start_loc=qsl.astype(np.int32),
        seq_lens=end.astype(np.int32),
        block_table=batch.block_table[slots, :nb],  # [B, nb]
        sample_mask=sample_mask,
        sample_hidden_rows=sample_hidden_rows,
        fill_rows=fill_rows,
        fill_src=fill_src,
        prompt_logprobs=_plan_prompt_logprobs(batch, slots, req_ids, start, end, qsl),
        max_query_len=int(n.max()),
        max_seq_len=max_seq_len,
        prompt_lens=batch.num_prompt_tokens[slots],
        group_block_tables=tuple(t[slots, :nb] for t in others),  # each [B, nb]
        group_slot_mappings=tuple(
            t[rep_slots, block_idx].astype(np.int64) * bs + offset for t in others
        ),  # each [T]
        sample_counts=sample_counts,
        prompt_embeds=_plan_prompt_embeds(batch, req_ids, start, end, qsl)
        if batch.prompt_embeds
        else None,
    )


def _plan_prompt_embeds(
    batch: InputBatch, req_ids: list[str], start: np.ndarray, end: np.ndarray, qsl: np.ndarray
) -> tuple[np.ndarray, torch.Tensor] | None:
    """The step's rows at embedding-prompt positions and their embeddings (None: none).
    A mixed prompt's mask keeps only its embedded positions (its tokens embed as usual)."""
    rows: list[np.ndarray] = []
    parts: list[torch.Tensor] = []
    for b, rid in enumerate(req_ids):
        entry = batch.prompt_embeds.get(rid)
        if entry is None:
            continue
        embeds, mask = entry  # [T, H], [T] bool or None
        lo, hi = int(start[b]), min(int(end[b]), int(embeds.shape[0]))
        if lo >= hi:
            continue  # past its prompt: generated tokens embed as usual
        if mask is None:
            rows.append(np.arange(hi - lo, dtype=np.int64) + qsl[b])
            parts.append(embeds[lo:hi])  # [hi - lo, H]
            continue
        picked = np.flatnonzero(mask[lo:hi])  # [R_b], offsets into this step's chunk
        if picked.size:
            rows.append(picked + qsl[b])
            parts.append(embeds[lo:hi].index_select(0, torch.from_numpy(picked)))  # [R_b, H]
    if not rows:
        return None
    return np.concatenate(rows), torch.cat(parts)  # [R], [R, H]


def _scheduled_rows(
    batch: InputBatch, num_scheduled: dict[str, int]
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """The scheduled requests' [B] slots (ascending: batch order), ids and token counts."""
    count = batch.num_reqs
    if len(num_scheduled) == count == len(batch.req_id_to_index):
        # The common decode step: every request the (condensed) batch holds is scheduled,
        # so the batch is its slots in order, with no lookup or sort per request.
        held = [r for r in batch.req_ids[:count] if r is not None]
        try:
            n = [num_scheduled[r] for r in held]
        except KeyError:
            pass  # not that case after all: another request is scheduled
        else:
            if len(held) == count:  # (no hole)
                return np.arange(count, dtype=np.int64), held, np.array(n, dtype=np.int64)
    try:
        slots = np.array(sorted(batch.req_id_to_index[r] for r in num_scheduled), dtype=np.int64)
    except KeyError as e:
        raise SchedulerProtocolError(f"scheduled request {e} is unknown to the worker") from None
    ids = [r for r in (batch.req_ids[s] for s in slots.tolist()) if r is not None]
    return slots, ids, np.array([num_scheduled[r] for r in ids], dtype=np.int64)


def step_inputs_from_tensors(
    plan: InputPlan,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    slot_mapping: torch.Tensor,
    sample_hidden_rows: torch.Tensor,
    group_tables: tuple[tuple[torch.Tensor, torch.Tensor], ...] = (),
) -> StepInputs:
    """Wrap the plan's device tensors (however they got there) as :class:`StepInputs`;
    ``group_tables``: ``(block_table, slot_mapping)`` of each further KV cache group."""
    meta = AttentionMetadata(
        query_start_loc=query_start_loc,
        seq_lens=seq_lens,
        block_table=block_table,
        slot_mapping=slot_mapping,
        query_start_loc_cpu=plan.query_start_loc.tolist(),
        seq_lens_cpu=plan.seq_lens.tolist(),
        max_query_len=plan.max_query_len,
        max_seq_len=plan.max_seq_len,
        prompt_lens_cpu=plan.prompt_lens.tolist(),
    )
    if group_tables:  # hybrid: the same rows, each group's own table and plan cache
        others = tuple(
            dataclasses.replace(meta, block_table=t, slot_mapping=m, plan_cache={})
            for t, m in group_tables
        )
        meta = dataclasses.replace(meta, other_groups=others)
    embeds = None
    if plan.prompt_embeds is not None:
        rows, values = plan.prompt_embeds
        # On CUDA a copy from pageable host memory: it waits for the copy (prefill steps of
        # embedding prompts only; their rows are not staged in the pinned buffers).
        embeds = (_dev(rows, input_ids.device), values.to(input_ids.device))
    return StepInputs(
        input_ids=input_ids,
        positions=positions,
        attn_metadata=meta,
        req_ids=plan.req_ids,
        slots=plan.slots,
        sample_mask=plan.sample_mask,
        sample_hidden_rows=sample_hidden_rows,
        prompt_logprobs=plan.prompt_logprobs,
        prompt_embeds=embeds,
    )


def plan_to_device(
    plan: InputPlan, device: torch.device
) -> tuple[StepInputs, torch.Tensor, torch.Tensor]:
    """The plan's tensors on ``device`` as plain copies (CPU: ``torch.from_numpy`` shares
    memory, nothing is copied); returns the inputs and the [F] ``fill_rows`` / ``fill_src``."""
    step = step_inputs_from_tensors(
        plan,
        _dev(plan.input_ids, device),
        _dev(plan.positions, device),
        _dev(plan.query_start_loc, device),
        _dev(plan.seq_lens, device),
        _dev(plan.block_table, device),
        _dev(plan.slot_mapping, device),
        _dev(plan.sample_hidden_rows, device),
        tuple(
            (_dev(t, device), _dev(m, device))
            for t, m in zip(plan.group_block_tables, plan.group_slot_mappings, strict=True)
        ),
    )
    return step, _dev(plan.fill_rows, device), _dev(plan.fill_src, device)


def prepare_step_inputs(
    batch: InputBatch, num_scheduled: dict[str, int], device: torch.device
) -> StepInputs:
    """Plan the step and copy its inputs to ``device``. Raises as :func:`plan_step`;
    pending input tokens are not filled here (``device_feed.TokenFeed`` does that)."""
    return plan_to_device(plan_step(batch, num_scheduled), device)[0]


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
    """Host array -> device tensor (CPU: shares memory; CUDA: via pinned memory)."""
    return to_device(a, device)
