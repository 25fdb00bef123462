"""What the worker returns for one step (executor -> scheduler).

Plain Python lists, no tensors: ``core/`` imports no torch.
"""

from __future__ import annotations

import msgspec

from actorllm.core.pooling_params import PooledData
from actorllm.core.routed_experts import RoutedRows


class TokenLogprobs(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """Logprobs at one position.

    ``token_ids[0]`` / ``logprobs[0]`` is the chosen token (sampled, or the actual prompt
    token for prompt logprobs); the rest are the top-k in descending order. ``rank`` is the
    chosen token's 1-based rank in the full distribution.
    """

    token_ids: list[int]
    logprobs: list[float]
    rank: int


class ModelRunnerOutput(msgspec.Struct, frozen=True, kw_only=True):
    step_id: int
    # Every request scheduled this step, in the worker's batch order.
    req_ids: list[str]
    # Per request: [] when the step ended inside its prompt (a partial prefill chunk),
    # else the sampled token; with speculative decoding, the accepted drafts and then the
    # target's own token (1 to k + 1 tokens).
    sampled_token_ids: list[list[int]]
    # {req_id: logprobs of the sampled token}, only for requests that asked (logprobs=k).
    logprobs: dict[str, TokenLogprobs] = msgspec.field(default_factory=dict)
    # {req_id: logprobs of the prompt positions computed this step}; position 0 of a prompt
    # has none, so the first chunk yields len(chunk) - 1 entries.
    prompt_logprobs: dict[str, list[TokenLogprobs]] = msgspec.field(default_factory=dict)
    # {req_id: pooled result}, for the pooling requests whose last prompt chunk ran this
    # step (they have no sampled token).
    pooled: dict[str, PooledData] = msgspec.field(default_factory=dict)
    # Seconds the worker spent on the step (model + sampling), for metrics.
    execute_time_s: float = 0.0
    # Speculative decoding: {req_id: logprobs of each token in sampled_token_ids[req]} for
    # the requests that asked and verified drafts (their ``logprobs`` entry is the first's).
    spec_logprobs: dict[str, list[TokenLogprobs]] = msgspec.field(default_factory=dict)
    # Speculative decoding: {req_id: draft tokens proposed for its next step}.
    draft_token_ids: dict[str, list[int]] = msgspec.field(default_factory=dict)
    # --return-sampling-mask: {req_id: the ascending vocabulary ids that survived the
    # sampler's filtering (temperature, min-p, top-k, top-p) for its sampled token}.
    sampling_masks: dict[str, list[int]] = msgspec.field(default_factory=dict)
    # Routed experts (--enable-return-routed-experts): {req_id: the expert ids of the
    # positions it ran this step}.
    routed_experts: dict[str, RoutedRows] = msgspec.field(default_factory=dict)
