"""A launched step whose results may still be on the device, and turning it into output.

Theory of operation: :meth:`ModelRunner.launch` enqueues a step's kernels and the
device -> host copies of what the host needs (sampled ids into pinned memory, logprobs
rows), records one event after them, and returns a :class:`PendingStep` at once. Its
:meth:`PendingStep.result` blocks on *that event only* (``event.synchronize()``: a wait
for this step's copies, not a device-wide synchronize), writes the sampled tokens into the
input batch and builds the :class:`ModelRunnerOutput`. Steps resolve in launch order
(``result()`` of step N+1 first resolves step N), because tokens append to the host batch
in order.

On CPU the event is a no-op and the "host copies" are the tensors themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from actorllm.core.model_runner_output import ModelRunnerOutput, TokenLogprobs
from actorllm.core.routed_experts import RoutedRows
from actorllm.worker.device_streams import DONE, Event
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.sampler import LogprobsTensors
from actorllm.worker.spec_decode.verify import accept_runs


@dataclass
class TargetHidden:
    """A step's hidden states, kept for an EAGLE head (spec_decode/eagle.py)."""

    hidden: torch.Tensor  # [T, H] final (EAGLE) or [T, 3H] auxiliary (EAGLE-3), on the device
    slots: np.ndarray  # [B] each request's slot
    gens: np.ndarray  # [B] its generation at launch (a re-added request is another one)
    first: np.ndarray  # [B] the position of its first row
    query_start_loc: np.ndarray  # [B + 1] its rows in `hidden`


@dataclass
class RoutedStep:
    """A step's routed experts (--enable-return-routed-experts)."""

    ids: torch.Tensor  # [T, L, K] uint8 or int32, host copy once `event` is done
    dtype: str  # what the rows travel as: "uint8" | "uint16"
    spans: list[tuple[str, int, int, int]]  # (req_id, first position, first row, end row)

    def rows(self) -> dict[str, RoutedRows]:
        arr = self.ids.numpy().astype(self.dtype, copy=False)  # [T, L, K]
        _, layers, top_k = arr.shape
        return {
            req_id: RoutedRows(
                start=pos, layers=layers, top_k=top_k, dtype=self.dtype, data=arr[lo:hi].tobytes()
            )
            for req_id, pos, lo, hi in self.spans
        }


@dataclass
class LaunchedStep:
    """What a step left for the host to read once its event completes."""

    step_id: int
    req_ids: list[str]  # [B] scheduled requests, batch order
    sample_rows: list[int]  # [N] batch row of each sampling request
    sample_gens: list[tuple[str, int]]  # [N] (req_id, generation) that sampled
    sampled: torch.Tensor | None  # [N] int64 on the host (pinned on CUDA) once `event` is done
    num_logprobs: list[int | None]  # [N] SamplingParams.num_logprobs (top-k or given ids)
    logprobs: LogprobsTensors | None  # host copies
    prompt_logprobs: dict[str, LogprobsTensors | None]  # host copies; None: no rows
    t0: float
    event: Event = DONE
    output: ModelRunnerOutput | None = None  # set once resolved
    # Speculative decoding: [N] rows of each sampling request (drafts + 1) in `sampled`
    # (then [R]) and `logprobs`, and [N] its drafts; None: one row each, no drafts.
    sample_counts: list[int] | None = None
    drafts: list[list[int]] | None = None
    target_hidden: TargetHidden | None = None  # an EAGLE head drafts from it
    # [N, V] bool host copy of each sampling row's mask (--return-sampling-mask), or None
    sampling_mask: torch.Tensor | None = None
    routed: RoutedStep | None = None


def to_host(t: torch.Tensor) -> torch.Tensor:
    """Device -> pinned host, non-blocking (the step's event covers it); CPU: ``t``."""
    if t.device.type == "cpu":
        return t
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    out.copy_(t, non_blocking=True)
    return out


def logprobs_to_host(t: LogprobsTensors) -> LogprobsTensors:
    return LogprobsTensors(to_host(t.token_ids), to_host(t.logprobs), to_host(t.ranks))


# Drafts for the next step of the requests in the given slots (speculative decoding).
# (batch, slots that sampled, the step's hidden states if kept) -> {req_id: drafts}
Propose = Callable[[InputBatch, list[int], TargetHidden | None], dict[str, list[int]]]


def resolve(
    step: LaunchedStep, batch: InputBatch, propose: Propose | None = None
) -> ModelRunnerOutput:
    """Wait for the step's copies, append its tokens to ``batch``, build its output.

    A request finished, preempted or re-added since the launch gets no token written (its
    slot no longer holds the incarnation that sampled it); its output still carries it.
    ``propose``: drafts for the requests that sampled, once their tokens are in ``batch``.
    """
    if step.output is not None:
        return step.output
    # Deliberate host wait on this step's device->host copies only (tokens go to the host).
    step.event.synchronize()
    if step.sample_counts is not None:
        return _resolve_runs(step, batch, propose)
    tokens = step.sampled.tolist() if step.sampled is not None else []
    sampled: list[list[int]] = [[] for _ in step.req_ids]
    logprobs: dict[str, TokenLogprobs] = {}
    lp_host = None
    if step.logprobs is not None:  # one conversion for all rows
        lp = step.logprobs
        lp_host = (lp.token_ids.tolist(), lp.logprobs.tolist(), lp.ranks.tolist())
    masks = _mask_ids(step)
    index = batch.req_id_to_index
    slots: list[int] = []  # of the requests the batch still holds, with their gens and tokens
    gens: list[int] = []
    live: list[int] = []
    for i, (b, (req_id, gen)) in enumerate(zip(step.sample_rows, step.sample_gens, strict=True)):
        slot = index.get(req_id)
        if slot is not None:
            slots.append(slot)
            gens.append(gen)
            live.append(tokens[i])
        sampled[b] = [tokens[i]]
        if lp_host is not None and (k := step.num_logprobs[i]) is not None:
            ids, lps, ranks = lp_host
            logprobs[req_id] = TokenLogprobs(
                token_ids=ids[i][: k + 1], logprobs=lps[i][: k + 1], rank=ranks[i]
            )
    batch.resolve_pending_many(slots, gens, live)
    step.output = ModelRunnerOutput(
        step_id=step.step_id,
        req_ids=step.req_ids,
        sampled_token_ids=sampled,
        logprobs=logprobs,
        prompt_logprobs={r: _prompt_rows(t) for r, t in step.prompt_logprobs.items()},
        execute_time_s=time.perf_counter() - step.t0,
        draft_token_ids=_drafts(step, batch, slots, propose),
        sampling_masks=masks,
        routed_experts={} if step.routed is None else step.routed.rows(),
    )
    return step.output


def _mask_ids(step: LaunchedStep) -> dict[str, list[int]]:
    """{req_id: the ascending token ids its row's draw could pick} (vLLM's sampling mask);
    empty without --return-sampling-mask."""
    if step.sampling_mask is None:
        return {}
    rows = step.sampling_mask.numpy()  # [N, V] bool, on the host since the step's event
    return {
        req_id: np.flatnonzero(rows[i]).tolist() for i, (req_id, _) in enumerate(step.sample_gens)
    }


def _resolve_runs(
    step: LaunchedStep, batch: InputBatch, propose: Propose | None
) -> ModelRunnerOutput:
    """:func:`resolve` of a speculative step: each sampling request verified its drafts
    (``spec_decode/verify.py``) and emits a run of 1..k+1 tokens."""
    assert step.sample_counts is not None and step.drafts is not None
    counts = step.sample_counts
    tokens = step.sampled.tolist() if step.sampled is not None else []  # [R]
    runs = accept_runs(tokens, counts, step.drafts)  # [N]
    sampled: list[list[int]] = [[] for _ in step.req_ids]
    logprobs: dict[str, TokenLogprobs] = {}
    spec_logprobs: dict[str, list[TokenLogprobs]] = {}
    lp_host = None
    if step.logprobs is not None:
        lp = step.logprobs
        lp_host = (lp.token_ids.tolist(), lp.logprobs.tolist(), lp.ranks.tolist())
    index = batch.req_id_to_index
    slots: list[int] = []
    gens: list[int] = []
    live: list[list[int]] = []
    r0 = 0
    for i, (b, (req_id, gen)) in enumerate(zip(step.sample_rows, step.sample_gens, strict=True)):
        run = runs[i]
        slot = index.get(req_id)
        if slot is not None:
            slots.append(slot)
            gens.append(gen)
            live.append(run)
        sampled[b] = run
        if lp_host is not None and (k := step.num_logprobs[i]) is not None:
            ids, lps, ranks = lp_host
            rows = [
                TokenLogprobs(token_ids=ids[r][: k + 1], logprobs=lps[r][: k + 1], rank=ranks[r])
                for r in range(r0, r0 + len(run))
            ]
            logprobs[req_id] = rows[0]
            spec_logprobs[req_id] = rows
        r0 += counts[i]
    batch.resolve_pending_runs(slots, gens, live)
    step.output = ModelRunnerOutput(
        step_id=step.step_id,
        req_ids=step.req_ids,
        sampled_token_ids=sampled,
        logprobs=logprobs,
        prompt_logprobs={r: _prompt_rows(t) for r, t in step.prompt_logprobs.items()},
        execute_time_s=time.perf_counter() - step.t0,
        spec_logprobs=spec_logprobs,
        draft_token_ids=_drafts(step, batch, slots, propose),
    )
    return step.output


def _prompt_rows(t: LogprobsTensors | None) -> list[TokenLogprobs]:
    if t is None:
        return []
    ids, lps, ranks = t.token_ids.tolist(), t.logprobs.tolist(), t.ranks.tolist()
    return [
        TokenLogprobs(token_ids=i, logprobs=lp, rank=r)
        for i, lp, r in zip(ids, lps, ranks, strict=True)
    ]


@dataclass
class PendingStep:
    """Handle to a launched step. ``result()`` blocks until its tokens are on the host
    (resolving earlier launched steps first) and returns its output; idempotent."""

    step: LaunchedStep
    _resolve: Callable[[LaunchedStep], ModelRunnerOutput] = field(repr=False)

    @property
    def step_id(self) -> int:
        return self.step.step_id

    def done(self) -> bool:
        """Whether ``result()`` would return without waiting on the device."""
        return self.step.output is not None or self.step.event.query()

    def result(self) -> ModelRunnerOutput:
        return self._resolve(self.step)


def _drafts(
    step: LaunchedStep, batch: InputBatch, slots: list[int], propose: Propose | None
) -> dict[str, list[int]]:
    """The next step's drafts. An EAGLE head reads every step's hidden states, the steps
    that sampled nothing included (a prefill chunk), so it is called for those too."""
    if propose is None or (not slots and step.target_hidden is None):
        return {}
    return propose(batch, slots, step.target_hidden)
