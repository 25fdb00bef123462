"""What the scheduler asks the worker to compute in one step (scheduler -> executor).

This is the contract between ``core/`` and ``worker/``. The worker keeps a persistent
per-request state (token ids, block table, sampling state) and this message carries only
what changed since the previous step:

* ``scheduled_new_reqs``: requests the worker has never seen, or sees again after a
  preemption or an engine recovery. They carry every token known so far (prompt + outputs),
  their whole block table and how many tokens are already in the KV cache (a prefix-cache
  hit, or tokens loaded by the KV connector).
* ``scheduled_cached_reqs``: requests the worker already holds. They carry only the blocks
  appended this step and the scheduler's ``num_computed_tokens``. Their new tokens are not
  sent: the worker sampled them itself (on the device, under async scheduling).
* ``finished_req_ids`` / ``preempted_req_ids``: requests whose worker state must be
  dropped before this step runs.

Token positions computed for request ``r`` this step are
``[num_computed_tokens, num_computed_tokens + num_scheduled_tokens[r])``. A request is
sampled this step when that range reaches the end of its known tokens (the last prompt
token, or its last output token).
"""

from __future__ import annotations

from typing import Any

import msgspec

from actorllm.core.lora import LoRARequest
from actorllm.core.sampling_params import SamplingParams


class NewRequestData(msgspec.Struct, frozen=True, kw_only=True):
    req_id: str
    prompt_token_ids: list[int]
    # Outputs generated before a preemption or a crash: replayed (recomputed), not re-sampled.
    output_token_ids: list[int]
    sampling_params: SamplingParams
    # Physical KV block ids per KV cache group (one list per group; one group unless the
    # model mixes attention types), in order: block i holds positions [i*bs, (i+1)*bs).
    block_ids: tuple[list[int], ...]
    # Tokens whose KV is already in the cache (prefix-cache / connector hit).
    num_computed_tokens: int
    eos_token_id: int | None = None
    # The LoRA adapter its rows run with (None: the base model); the worker loads it from
    # ``lora_path`` when it does not hold it.
    lora_request: LoRARequest | None = None
    # An embedding prompt's rows, torch.Tensor [num_prompt_tokens, H] (typed Any: core/
    # imports no torch); the worker feeds them to the model in place of the token
    # embeddings of the prompt positions.
    prompt_embeds: Any = None
    # A mixed prompt's [num_prompt_tokens] mask of the positions read from those rows (the
    # rest embed their token ids as usual); None: every prompt position.
    prompt_embeds_mask: tuple[bool, ...] | None = None


class CachedRequestData(msgspec.Struct, frozen=True, kw_only=True):
    req_id: str
    new_block_ids: tuple[list[int], ...]  # per KV cache group, appended to its table
    num_computed_tokens: int


class GrammarBitmask(msgspec.Struct, frozen=True, kw_only=True):
    """Allowed next tokens for the structured-outputs requests that sample this step."""

    req_ids: list[str]  # one row each, in this order
    # [len(req_ids), ceil(vocab_size / 32)] int32 numpy array: bit t % 32 of word t // 32
    # set = token t allowed; or a future of one, still being filled while the step's
    # forward pass runs (vLLM overlaps the two the same way). Typed Any: core/ imports no
    # numpy. Start it with :meth:`start`, read it with :meth:`array`.
    bitmask: Any
    # Some row waits for a token still in flight (async scheduling): the worker must post
    # every earlier step's outcome before it waits for this bitmask, or nobody feeds it.
    waits_for_inflight: bool = False

    def start(self) -> None:
        """Start a pending fill beside the step's forward pass (worker thread, as the step
        arrives); without it :meth:`array` fills on the caller's thread."""
        start = getattr(self.bitmask, "start", None)
        if start is not None:
            start()

    def array(self) -> Any:
        """The bitmask array; blocks (worker thread) until a pending fill is done."""
        b = self.bitmask
        return b.result() if hasattr(b, "result") else b


class SchedulerOutput(msgspec.Struct, frozen=True, kw_only=True):
    step_id: int
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: list[CachedRequestData]
    # {req_id: tokens computed this step}, for every scheduled request.
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    finished_req_ids: list[str] = msgspec.field(default_factory=list)
    preempted_req_ids: list[str] = msgspec.field(default_factory=list)
    # Rows for the structured-outputs requests that sample this step; None if there are none.
    grammar_bitmask: GrammarBitmask | None = None
    # Speculative decoding: {req_id: draft tokens} of the requests that verify drafts this
    # step. Their scheduled tokens end with these drafts (positions after the last known
    # token), and they sample at every draft position plus one.
    scheduled_spec_decode_tokens: dict[str, list[int]] = msgspec.field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return self.total_num_scheduled_tokens == 0

    @classmethod
    def empty(cls, step_id: int, finished: list[str] | None = None) -> SchedulerOutput:
        return cls(
            step_id=step_id,
            scheduled_new_reqs=[],
            scheduled_cached_reqs=[],
            num_scheduled_tokens={},
            total_num_scheduled_tokens=0,
            finished_req_ids=finished or [],
        )
