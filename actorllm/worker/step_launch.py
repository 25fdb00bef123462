"""Launching one planned step on the device: inputs, token feed, forward (graph or eager),
sampling, and the device -> host copies the host will wait for.

:class:`StepLauncher` owns the per-device machinery of the worker: the streams
(``device_streams.py``), the staging buffers (``staging.py``, CUDA by default), the
device token buffer (``device_feed.py``), the decode graphs (``cuda_graphs.py``) and the
pinned buffers that receive sampled ids. :meth:`StepLauncher.launch` enqueues everything
and returns a :class:`LaunchedStep` without waiting for the device; the only host waits it
can make are the staging-buffer reuse check (normally instant) and, on the torch reference
path, the reference kernels' own planning syncs.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol

import numpy as np
import torch

from actorllm.core.scheduler_output import GrammarBitmask
from actorllm.models.base import CausalLM, KVCaches
from actorllm.models.routed_capture import RoutingRecorder
from actorllm.worker.cuda_graphs import DecodeGraphs, pad_decode_plan
from actorllm.worker.device_feed import TokenFeed
from actorllm.worker.device_streams import DeviceStreams, to_device
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.sampler import LogprobsTensors, Sampler, compute_logprobs
from actorllm.worker.sampling_metadata import build_sampling_metadata
from actorllm.worker.staging import StepBuffers
from actorllm.worker.step_inputs import InputPlan, PromptLogprobsPlan, StepInputs, plan_to_device
from actorllm.worker.step_output import (
    LaunchedStep,
    RoutedStep,
    TargetHidden,
    logprobs_to_host,
    to_host,
)

# Called with the step's final device inputs just before the forward, and the rows whose
# logits the step computes, in order (tensor parallel: rank 0 sends them to the others).
BeforeForward = Callable[[StepInputs, list[torch.Tensor]], None]
# Pipeline parallel, rank 0 (the last stage): post the receive of a step's hidden states
# from the stage before, given its token count; returns what says they have arrived.
Prefetch = Callable[[int], "Arrival"]


class Arrival(Protocol):
    arrived: threading.Event


class DeferredForward:
    """The event of a step whose forward waits for the previous pipeline stage: ready
    (``query``) once that stage's hidden states have arrived; ``synchronize`` runs this
    stage's forward and sampling (once), on the worker thread, in launch order."""

    def __init__(self, arrival: Arrival, finish: Callable[[], None]) -> None:
        self._arrival = arrival
        self._finish: Callable[[], None] | None = finish

    def query(self) -> bool:
        return self._finish is None or self._arrival.arrived.is_set()

    def synchronize(self) -> None:
        finish, self._finish = self._finish, None
        if finish is not None:
            finish()  # raises what the receive raised (a stage died or hung)


P = ParamSpec("P")


def _on_compute_stream(
    launch: Callable[Concatenate[StepLauncher, P], LaunchedStep],
) -> Callable[Concatenate[StepLauncher, P], LaunchedStep]:
    """``launch`` run on the compute stream under ``inference_mode``, and counted."""

    @functools.wraps(launch)
    def on_stream(self: StepLauncher, /, *args: P.args, **kwargs: P.kwargs) -> LaunchedStep:
        with self.streams.compute_scope(), torch.inference_mode():
            step = launch(self, *args, **kwargs)
        self.num_launched += 1
        return step

    return on_stream


class StepLauncher:
    """Device-side step machinery. Worker thread only.

    ``staged``: upload inputs through pinned staging buffers on the copy stream (default on
    CUDA). ``max_num_tokens`` sizes those buffers (padded graph batches included).
    """

    def __init__(
        self,
        device: torch.device,
        *,
        max_num_tokens: int,
        max_num_seqs: int,
        max_blocks_per_seq: int,
        staged: bool,
    ) -> None:
        self.device = device
        self.streams = DeviceStreams.for_device(device)
        self.buffers = (
            StepBuffers(self.streams, max_num_tokens, max_num_seqs, max_blocks_per_seq)
            if staged
            else None
        )
        self.token_feed = TokenFeed(max_num_seqs, device)
        self.graphs: DecodeGraphs | None = None  # set by the runner after capture
        self.before_forward: BeforeForward | None = None  # tensor parallel, rank 0
        self.prefetch: Prefetch | None = None  # pipeline parallel, rank 0: steps deferred
        # Pinned host buffers for sampled ids, one per step that can be in flight.
        pin = device.type == "cuda"
        self._sampled_host = [
            torch.zeros(max_num_seqs, dtype=torch.int64, pin_memory=pin) for _ in range(2)
        ]
        self.num_launched = 0
        self.num_graph_steps = 0
        # An EAGLE head drafts from each step's hidden states: steps keep them.
        self.keep_hidden = False
        # --enable-return-routed-experts: the MoE blocks record into it (eager forwards
        # only: no decode graphs, no deferred pipeline-parallel forward).
        self.recorder: RoutingRecorder | None = None

    @_on_compute_stream
    def launch(
        self,
        model: CausalLM,
        kv_caches: KVCaches,
        batch: InputBatch,
        sampler: Sampler,
        plan: InputPlan,
        step_id: int,
        grammar: GrammarBitmask | None = None,
        drafts: dict[str, list[int]] | None = None,
    ) -> LaunchedStep:
        """Enqueue the step on the compute stream; update ``batch`` (computed counts, pending
        tokens); return what the host will read once the step's event completes.
        ``grammar``: the structured-outputs requests' allowed-token rows for this step.
        ``drafts``: the speculative requests' drafts (the plan's ``sample_counts``)."""
        t0 = time.perf_counter()
        size = None
        # (an EAGLE-3 head's auxiliary hidden states come from an eager forward only)
        if (
            self.graphs is not None
            and plan.is_decode
            and plan.prompt_embeds is None
            and not model.aux_layers
            and self.recorder is None
        ):
            size = self.graphs.size_for(len(plan.req_ids))
        step, fill_rows, fill_src, buffer_set = self._inputs(
            pad_decode_plan(plan, size) if size is not None else plan
        )
        self.token_feed.fill(step.input_ids, fill_rows, fill_src)  # placeholders, on device
        if size is not None and self.graphs is not None:
            hidden = self.graphs.replay(step)[: plan.num_tokens]  # [T, H]
            self.num_graph_steps += 1
        else:
            if self.before_forward is not None:
                self.before_forward(step, _logit_rows(plan, step))
            if (
                self.prefetch is not None
                and drafts is None
                and not self.keep_hidden
                and self.recorder is None
            ):
                return self._launch_deferred(
                    model, kv_caches, batch, sampler, plan, step, step_id, grammar, t0
                )
            if self.recorder is not None:
                self.recorder.clear()
            hidden = model(
                step.input_ids, step.positions, step.attn_metadata, kv_caches, **step.model_kwargs()
            )  # [T, H]
        routed = self._routed(plan)
        sample_slots = plan.slots[plan.sample_mask]  # [N]
        counts = plan.sample_counts  # [N] rows per sampling request (speculative), or None
        row_slots, offsets = sample_slots, None
        if counts is not None:
            row_slots = np.repeat(sample_slots, counts)  # [R]
            offsets = np.arange(len(row_slots)) - np.repeat(np.cumsum(counts) - counts, counts)
        sampled, lp, mask = self._sample(
            model, hidden, step, batch, sampler, row_slots, grammar, offsets
        )
        prompt = {p.req_id: _prompt_logprobs(model, hidden, p) for p in plan.prompt_logprobs}
        if self.buffers is not None and buffer_set is not None:
            # Every read of this set's device inputs is enqueued: its next upload may follow.
            self.buffers.mark_consumed(buffer_set, self.streams.record_compute())
        sampled_host = None
        if sampled is not None and counts is None:
            self.token_feed.record(to_device(sample_slots, self.device), sampled)
            sampled_host = self._download(sampled)
        elif sampled is not None:  # a run per request: its tokens are known on the host only
            sampled_host = to_host(sampled)
        event = self.streams.record_compute()  # covers every device -> host copy above
        batch.num_computed_tokens[plan.slots] += plan.num_scheduled
        rows = np.flatnonzero(plan.sample_mask).tolist()
        batch.add_pending(sample_slots, sample_slots)  # the feed holds each at its own slot
        gens = list(
            zip(
                [plan.req_ids[b] for b in rows],
                batch.generation[sample_slots].tolist(),
                strict=True,
            )
        )
        params = [batch.params[s] for s in sample_slots.tolist()]
        target = None
        if self.keep_hidden:
            qsl = plan.query_start_loc.astype(np.int64)
            kept = torch.cat(model.aux_hidden, dim=-1) if model.aux_layers else hidden  # [T, 3H]
            target = TargetHidden(
                hidden=kept, slots=plan.slots.copy(), gens=batch.generation[plan.slots].copy(),
                first=plan.positions[qsl[:-1]].copy(), query_start_loc=qsl,
            )  # fmt: skip
        return LaunchedStep(
            step_id=step_id,
            req_ids=plan.req_ids,
            sample_rows=rows,
            sample_gens=gens,
            sampled=sampled_host,
            num_logprobs=[p.num_logprobs if p is not None else None for p in params],
            logprobs=lp,
            prompt_logprobs=prompt,
            t0=t0,
            event=event,
            sampling_mask=mask,
            sample_counts=None if counts is None else counts.tolist(),
            drafts=None if drafts is None else [drafts.get(plan.req_ids[b], []) for b in rows],
            target_hidden=target,
            routed=routed,
        )

    def _launch_deferred(
        self,
        model: CausalLM,
        kv_caches: KVCaches,
        batch: InputBatch,
        sampler: Sampler,
        plan: InputPlan,
        step: StepInputs,
        step_id: int,
        grammar: GrammarBitmask | None,
        t0: float,
    ) -> LaunchedStep:
        """Pipeline parallel, the last stage: the step is out to the first stage; what
        needs this batch's state (the sampling inputs, the bookkeeping) is taken now, and
        the forward and sampling run when the step resolves (:class:`DeferredForward`),
        once the previous stage's hidden states are here, so the next step can go out to
        the first stage meanwhile. The next steps hold other requests (the scheduler
        keeps a request out until its token is back), so nothing they change is read."""
        arrival = self.prefetch(int(step.input_ids.shape[0])) if self.prefetch else None
        assert arrival is not None
        sample_slots = plan.slots[plan.sample_mask]  # [N]
        meta = None
        if len(sample_slots):
            meta = build_sampling_metadata(
                batch,
                sample_slots,
                sampler.vocab_size,
                self.device,
                grammar,
                None,
                sampler.watermark,
            )
        feed_slots = to_device(sample_slots, self.device)
        rows = np.flatnonzero(plan.sample_mask).tolist()
        gens = list(
            zip(
                [plan.req_ids[b] for b in rows],
                batch.generation[sample_slots].tolist(),
                strict=True,
            )
        )
        params = [batch.params[s] for s in sample_slots.tolist()]
        launched = LaunchedStep(
            step_id=step_id, req_ids=plan.req_ids, sample_rows=rows, sample_gens=gens,
            sampled=None, num_logprobs=[p.num_logprobs if p is not None else None for p in params],
            logprobs=None, prompt_logprobs={}, t0=t0,
        )  # fmt: skip

        def finish() -> None:
            with self.streams.compute_scope(), torch.inference_mode():
                hidden = model(
                    step.input_ids,
                    step.positions,
                    step.attn_metadata,
                    kv_caches,
                    **step.model_kwargs(),
                )  # [T, H]
                if meta is not None:
                    rows_h = hidden.index_select(0, step.sample_hidden_rows)  # [N, H]
                    out = sampler(model.compute_logits(rows_h, float32=False), meta)
                    self.token_feed.record(feed_slots, out.sampled_token_ids)
                    launched.sampled = out.sampled_token_ids  # [N] (CPU: on the host)
                    if out.logprobs is not None:
                        launched.logprobs = logprobs_to_host(out.logprobs)
                    if out.sampling_mask is not None:
                        launched.sampling_mask = to_host(out.sampling_mask)  # [N, V] bool
                launched.prompt_logprobs = {
                    p.req_id: _prompt_logprobs(model, hidden, p) for p in plan.prompt_logprobs
                }

        launched.event = DeferredForward(arrival, finish)
        batch.num_computed_tokens[plan.slots] += plan.num_scheduled
        batch.add_pending(sample_slots, sample_slots)  # the feed holds each at its own slot
        return launched

    def _routed(self, plan: InputPlan) -> RoutedStep | None:
        """The forward's routed experts, copied to the host (the step's event covers the
        copy), with each request's rows and first position."""
        if self.recorder is None:
            return None
        ids = self.recorder.take(plan.num_tokens)  # [T, L, K] on the device
        if ids is None:
            return None
        qsl = plan.query_start_loc.tolist()
        spans = [
            (req_id, int(plan.positions[qsl[b]]), qsl[b], qsl[b + 1])
            for b, req_id in enumerate(plan.req_ids)
            if qsl[b + 1] > qsl[b]
        ]
        return RoutedStep(to_host(ids), self.recorder.dtype_name, spans)

    def _inputs(self, plan: InputPlan) -> tuple[StepInputs, torch.Tensor, torch.Tensor, int | None]:
        """The plan's tensors on the device: staged (pinned + copy stream) or plain copies
        (CPU, or a step larger than the staging buffers)."""
        buffers = self.buffers
        if buffers is not None and buffers.fits(plan):
            staged = buffers.stage(plan)
            return staged.inputs, staged.fill_rows, staged.fill_src, staged.buffer_set
        step, fill_rows, fill_src = plan_to_device(plan, self.device)
        return step, fill_rows, fill_src, None

    def _download(self, sampled: torch.Tensor) -> torch.Tensor:
        """[N] int64 device -> host; on CUDA into a pinned buffer, non-blocking (the
        runner keeps at most two steps in flight, so two buffers alternate safely)."""
        if self.device.type == "cpu":
            return sampled
        buf = self._sampled_host[self.num_launched % 2][: sampled.shape[0]]
        buf.copy_(sampled, non_blocking=True)
        return buf

    def _sample(
        self,
        model: CausalLM,
        hidden: torch.Tensor,
        step: StepInputs,
        batch: InputBatch,
        sampler: Sampler,
        sample_slots: np.ndarray,
        grammar: GrammarBitmask | None,
        offsets: np.ndarray | None = None,
    ) -> tuple[torch.Tensor | None, LogprobsTensors | None, torch.Tensor | None]:
        """Sampled ids [N] (device), their logprobs and sampling masks ([N, V] bool; None
        without --return-sampling-mask) as host copies; speculative: [R], a row per verified
        position (``offsets``: the drafts before each)."""
        if len(sample_slots) == 0:
            return None, None, None
        rows = hidden.index_select(0, step.sample_hidden_rows)
        logits = model.compute_logits(rows, float32=False)  # [N, V]: the sampler widens
        meta = build_sampling_metadata(
            batch,
            sample_slots,
            sampler.vocab_size,
            self.device,
            grammar,
            offsets,
            sampler.watermark,
        )
        out = sampler(logits, meta)
        lp = logprobs_to_host(out.logprobs) if out.logprobs is not None else None
        # Non-blocking [N, V] bool copy, one byte a token (the step's event covers it): the
        # host turns each row into its ids when the step resolves.
        mask = to_host(out.sampling_mask) if out.sampling_mask is not None else None
        return out.sampled_token_ids, lp, mask

    def statistics(self) -> dict[str, object]:
        return {
            "launched": self.num_launched,
            "graph_steps": self.num_graph_steps,
            "streams": self.streams.statistics(),
            "staging": self.buffers.statistics() if self.buffers else None,
            "graphs": self.graphs.statistics() if self.graphs else None,
            "token_feed": self.token_feed.statistics(),
        }


def _logit_rows(plan: InputPlan, step: StepInputs) -> list[torch.Tensor]:
    """The hidden rows of each compute_logits call the step makes, in call order: the
    sampled rows (when any request samples), then each prompt-logprobs request's rows."""
    rows = [step.sample_hidden_rows] if plan.sample_mask.any() else []
    rows += [torch.from_numpy(p.hidden_rows) for p in plan.prompt_logprobs if len(p.hidden_rows)]
    return rows


def _prompt_logprobs(
    model: CausalLM, hidden: torch.Tensor, plan: PromptLogprobsPlan
) -> LogprobsTensors | None:
    """Host copies (non-blocking on CUDA) of the prompt rows' logprobs; None if no rows."""
    if len(plan.hidden_rows) == 0:
        return None
    device = hidden.device
    rows = to_device(plan.hidden_rows, device)
    logprobs = model.compute_logits(hidden.index_select(0, rows)).log_softmax(dim=-1)  # [M, V]
    targets = to_device(plan.target_token_ids, device)
    return logprobs_to_host(compute_logprobs(logprobs, targets, plan.k))
