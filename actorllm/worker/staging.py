"""Pinned host staging buffers and persistent device input buffers for the step inputs.

Theory of operation: every step input has a fixed maximum size (``max_num_batched_tokens``
rows for the token-wise inputs, ``max_num_seqs`` for the request-wise ones), so the worker
allocates them once, twice over (two *sets*, used by alternate steps), and a step only
writes a prefix of each and slices it. Per step no device memory is allocated for inputs.

A step writes its :class:`InputPlan` into its set's host buffers (pinned on CUDA: the copy
can then be truly asynchronous), and :meth:`StepBuffers.upload` copies the used prefixes on
the copy stream into the set's device buffers. Two sets make reuse safe without stalls:

* the host may rewrite set ``i`` only after the copy stream has finished reading it
  (``set.uploaded``, recorded two steps ago: normally long complete, so the
  ``synchronize()`` in :meth:`StepBuffers.stage` returns at once);
* the copy stream may overwrite set ``i``'s device buffers only after the compute stream
  is done with the step that read them (``set.consumed``, recorded by the runner after the
  step's last kernel that reads inputs).

On CPU the "device" buffers are host tensors and the streams are no-ops; the runner does not
use this class there (``torch.from_numpy`` is free), but tests do, to check the logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from actorllm.worker.device_streams import DONE, DeviceStreams, Event
from actorllm.worker.step_inputs import InputPlan, StepInputs, step_inputs_from_tensors

# name -> (dtype, rows: "tokens" | "seqs" | "seqs+1" | "table")
_FIELDS: dict[str, tuple[torch.dtype, str]] = {
    "input_ids": (torch.int64, "tokens"),
    "positions": (torch.int64, "tokens"),
    "slot_mapping": (torch.int64, "tokens"),
    "query_start_loc": (torch.int32, "seqs+1"),
    "seq_lens": (torch.int32, "seqs"),
    "block_table": (torch.int32, "table"),  # flat [max_num_seqs * max_blocks]
    "sample_hidden_rows": (torch.int64, "seqs"),
    "fill_rows": (torch.int64, "seqs"),
    "fill_src": (torch.int64, "seqs"),
}


@dataclass
class _BufferSet:
    host: dict[str, torch.Tensor]  # {name: pinned host buffer}
    host_np: dict[str, np.ndarray]  # {name: numpy view of the same memory}
    dev: dict[str, torch.Tensor]  # {name: persistent device buffer}
    uploaded: Event = DONE  # the copy stream finished reading `host`
    consumed: Event = DONE  # the compute stream finished reading `dev`
    lengths: dict[str, int] = field(default_factory=dict)  # {name: used prefix this step}


@dataclass(frozen=True)
class StagedStep:
    """A step's inputs on the device: slices of one buffer set."""

    inputs: StepInputs
    fill_rows: torch.Tensor  # [F] int64 rows of input_ids to take from the token feed
    fill_src: torch.Tensor  # [F] int64 slots of the device token buffer
    buffer_set: int  # which set: the runner marks it consumed after the step


class StepBuffers:
    """Two sets of pinned staging + persistent device buffers. Worker thread only.

    Raises ``ValueError`` from :meth:`stage` when a plan exceeds the sizes given here.
    """

    def __init__(
        self,
        streams: DeviceStreams,
        max_num_tokens: int,
        max_num_seqs: int,
        max_blocks_per_seq: int,
    ) -> None:
        self.streams = streams
        self.max_num_tokens = max_num_tokens
        self.max_num_seqs = max_num_seqs
        self.max_blocks_per_seq = max_blocks_per_seq
        self.sets = [self._alloc() for _ in range(2)]
        self.steps = 0  # statistics; also picks the set (steps % 2)

    def _alloc(self) -> _BufferSet:
        sizes = {
            "tokens": self.max_num_tokens,
            "seqs": self.max_num_seqs,
            "seqs+1": self.max_num_seqs + 1,
            "table": self.max_num_seqs * self.max_blocks_per_seq,
        }
        device = self.streams.device
        pin = device.type == "cuda"
        host = {
            name: torch.zeros(sizes[rows], dtype=dtype, pin_memory=pin)
            for name, (dtype, rows) in _FIELDS.items()
        }
        dev = {
            name: torch.zeros(sizes[rows], dtype=dtype, device=device)
            for name, (dtype, rows) in _FIELDS.items()
        }
        return _BufferSet(host, {k: v.numpy() for k, v in host.items()}, dev)

    def fits(self, plan: InputPlan) -> bool:
        """Whether ``plan`` fits these buffers (else the runner copies it plainly). A hybrid
        model's extra block tables are not staged: its plans are copied plainly."""
        return (
            not plan.group_block_tables
            and plan.num_tokens <= self.max_num_tokens
            and len(plan.seq_lens) <= self.max_num_seqs
            and len(plan.sample_hidden_rows) <= self.max_num_seqs  # drafts add rows
            and plan.block_table.shape[1] <= self.max_blocks_per_seq
        )

    def stage(self, plan: InputPlan) -> StagedStep:
        """Write ``plan`` into the next set's host buffers and upload the used prefixes.

        Blocks the host only if that set's upload from two steps ago is still running.
        """
        b, t = len(plan.seq_lens), plan.num_tokens  # padded sizes for a graph batch
        if t > self.max_num_tokens or b > self.max_num_seqs:
            raise ValueError(
                f"step of {t} tokens / {b} requests exceeds the staging buffers "
                f"({self.max_num_tokens} / {self.max_num_seqs})"
            )
        nb = plan.block_table.shape[1]
        if nb > self.max_blocks_per_seq:
            raise ValueError(f"{nb} blocks per request exceed {self.max_blocks_per_seq}")
        index = self.steps % 2
        bset = self.sets[index]
        # Deliberate host wait (normally instant): the copy from two steps ago must be done
        # reading these pinned buffers before the host overwrites them.
        bset.uploaded.synchronize()
        arrays = {
            "input_ids": plan.input_ids,
            "positions": plan.positions,
            "slot_mapping": plan.slot_mapping,
            "query_start_loc": plan.query_start_loc,
            "seq_lens": plan.seq_lens,
            "block_table": plan.block_table.reshape(-1),  # [B * nb], row-major
            "sample_hidden_rows": plan.sample_hidden_rows,
            "fill_rows": plan.fill_rows,
            "fill_src": plan.fill_src,
        }
        pairs = []
        for name, a in arrays.items():
            n = len(a)
            bset.host_np[name][:n] = a
            bset.lengths[name] = n
            if n:
                pairs.append((bset.dev[name][:n], bset.host[name][:n]))
        bset.uploaded = self.streams.upload(pairs, after=bset.consumed)
        self.steps += 1
        d = {name: bset.dev[name][: bset.lengths[name]] for name in _FIELDS}
        inputs = step_inputs_from_tensors(
            plan,
            d["input_ids"],
            d["positions"],
            d["query_start_loc"],
            d["seq_lens"],
            d["block_table"].view(b, nb),
            d["slot_mapping"],
            d["sample_hidden_rows"],
        )
        return StagedStep(inputs, d["fill_rows"], d["fill_src"], index)

    def mark_consumed(self, buffer_set: int, event: Event) -> None:
        """The compute stream is done reading ``buffer_set``'s device buffers at ``event``."""
        self.sets[buffer_set].consumed = event

    def statistics(self) -> dict[str, int]:
        return {"steps": self.steps, "max_num_tokens": self.max_num_tokens}
