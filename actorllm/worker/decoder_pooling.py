"""A decoder model served as a pooling model (``--runner pooling --convert embed|classify``):
the model runner's step runs the forward over the paged KV cache as usual (chunked
prefill, prefix-cache hits for last-token pooling), then pools instead of sampling.

A chunk that does not end its prompt leaves its rows with the :class:`PoolingHead` (only
what the pooling type reads); the last chunk pools. A classifier's head is the
checkpoint's ``score`` matrix (``*ForSequenceClassification``), applied to the pooled row.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.pooling_params import PoolingParams
from actorllm.models.base import CausalLM, KVCaches
from actorllm.models.pooler_spec import decoder_pooler_spec
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.pooling_head import PoolingHead
from actorllm.worker.step_inputs import InputPlan, SchedulerProtocolError, plan_to_device


def score_head(path: Path, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The checkpoint's ``score.weight`` [num_labels, H]; a refusal naming convert when it
    has none (a ``*ForCausalLM`` checkpoint carries no classifier)."""
    from safetensors import safe_open

    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            if "score.weight" in st.keys():  # noqa: SIM118 - safe_open is not a dict
                return st.get_tensor("score.weight").to(device=device, dtype=dtype)
    raise ValueError(
        f"convert='classify' needs a classification head (score.weight) in {path}; this "
        "checkpoint has none (a *ForSequenceClassification checkpoint has one)."
    )


def decoder_pooling_head(
    path: Path, convert: str, overrides: dict[str, Any] | None, dtype: torch.dtype,
    device: torch.device,
) -> PoolingHead:  # fmt: skip
    spec = decoder_pooler_spec(path, convert, overrides)
    if convert != "classify":
        return PoolingHead(spec, None)
    weight = score_head(path, dtype, device)  # [L, H]

    def classify(rows: torch.Tensor) -> torch.Tensor:
        return rows.to(weight.dtype) @ weight.t()  # [N, H] -> [N, L]

    return PoolingHead(spec, classify, token_classifier=classify)


def run_pooling_step(
    model: CausalLM,
    kv_caches: KVCaches,
    batch: InputBatch,
    head: PoolingHead,
    plan: InputPlan,
    step_id: int,
    device: torch.device,
) -> ModelRunnerOutput:
    """One pooling step, computed at once (no sampling, nothing left on the device)."""
    t0 = time.perf_counter()
    step, _, _ = plan_to_device(plan, device)
    with torch.inference_mode():
        hidden = model(step.input_ids, step.positions, step.attn_metadata, kv_caches)  # [T, H]
        starts = np.concatenate([[0], np.cumsum(plan.num_scheduled)[:-1]]).tolist()
        lens = plan.num_scheduled.tolist()
        done_ids: list[str] = []
        done_starts: list[int] = []
        done_lens: list[int] = []
        params: list[PoolingParams] = []
        for b, rid in enumerate(plan.req_ids):
            s, n = int(starts[b]), int(lens[b])
            p = batch.params[int(plan.slots[b])]
            pooling = p.pooling_params if p is not None else None
            if not plan.sample_mask[b]:
                head.add_chunk(rid, hidden[s : s + n], pooling.task if pooling else None)
                continue
            if pooling is None:
                raise SchedulerProtocolError(
                    f"request {rid} is not a pooling request: this model only pools"
                )
            if not plan.sample_mask[b]:  # an earlier chunk of its prompt
                head.add_chunk(rid, hidden[s : s + n], pooling.task)
                continue
            done_ids.append(rid)
            done_starts.append(s)
            done_lens.append(n)
            params.append(pooling)
        pooled = head.pool(hidden, done_ids, done_starts, done_lens, params) if done_ids else {}
    batch.num_computed_tokens[plan.slots] += plan.num_scheduled
    return ModelRunnerOutput(
        step_id=step_id,
        req_ids=plan.req_ids,
        sampled_token_ids=[[] for _ in plan.req_ids],
        pooled=pooled,
        execute_time_s=time.perf_counter() - t0,
    )
