"""A decoder model served as a pooling model (``--runner pooling --convert embed|classify``):
the model runner's step runs the forward over the paged KV cache as usual (chunked
prefill, prefix-cache hits for last-token pooling), then pools instead of sampling.

A chunk that does not end its prompt leaves its rows with the :class:`PoolingHead` (only
what the pooling type reads); the last chunk pools. A classifier's head is the
checkpoint's ``score`` matrix (``*ForSequenceClassification``), applied to the pooled row.
A reward model's is its two-layer ``score`` head (``score.0``, ReLU, ``score.2``) on every
row, in float32 (vLLM's head dtype for pooling models).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.pooling_params import PoolingParams
from actorllm.models.base import CausalLM, KVCaches
from actorllm.models.checkpoint_files import weight_files
from actorllm.models.checkpoint_tensors import select_tensors
from actorllm.models.load_errors import MissingCheckpointError
from actorllm.models.pooler_spec import REWARD_MODELS, decoder_pooler_spec, reward_pooler_spec
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.pooling_head import PoolingHead
from actorllm.worker.step_inputs import InputPlan, SchedulerProtocolError, plan_to_device


def _weight_files(path: Path) -> list[Path]:
    """The checkpoint's weight files; none where it has none (the head is then refused
    as absent)."""
    try:
        return weight_files(path)
    except MissingCheckpointError:
        return []


def score_head(path: Path, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The checkpoint's ``score.weight`` [num_labels, H]; a refusal naming convert when it
    has none (a ``*ForCausalLM`` checkpoint carries no classifier)."""
    for _, t in select_tensors(_weight_files(path), lambda n: n == "score.weight"):
        return t.to(device=device, dtype=dtype)
    raise ValueError(
        f"convert='classify' needs a classification head (score.weight) in {path}; this "
        "checkpoint has none (a *ForSequenceClassification checkpoint has one)."
    )


def _checkpoint_tensors(
    path: Path, names: list[str], device: torch.device
) -> dict[str, torch.Tensor]:
    """The named tensors of the checkpoint's weight files (float32); a refusal naming
    those it lacks."""
    found = {
        name: t.to(device=device, dtype=torch.float32)
        for name, t in select_tensors(_weight_files(path), lambda n: n in names)
    }
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"the checkpoint in {path} lacks the reward head's {', '.join(missing)}")
    return found


def reward_head(
    path: Path, architecture: str, overrides: dict[str, Any] | None, device: torch.device
) -> PoolingHead:
    """A reward model's head on every row: [n, H] -> [n, num_labels] logits (float32)."""
    reward = REWARD_MODELS[architecture]
    w = _checkpoint_tensors(
        path, ["score.0.weight", "score.0.bias", "score.2.weight", "score.2.bias"], device
    )
    h = w["score.0.weight"].shape[1]
    if w["score.2.weight"].shape != (reward.num_labels, h):
        raise ValueError(
            f"{architecture}'s score.2.weight must be [{reward.num_labels}, {h}], got "
            f"{list(w['score.2.weight'].shape)}"
        )

    def score(rows: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.linear(rows.float(), w["score.0.weight"], w["score.0.bias"])
        return torch.nn.functional.linear(x.relu(), w["score.2.weight"], w["score.2.bias"])

    return PoolingHead(reward_pooler_spec(path, reward, overrides), None, token_classifier=score)


def decoder_pooling_head(
    path: Path, convert: str, overrides: dict[str, Any] | None, dtype: torch.dtype,
    device: torch.device,
) -> PoolingHead:  # fmt: skip
    arch = json.loads((path / "config.json").read_text()).get("architectures", [""])[0]
    if arch in REWARD_MODELS:
        return reward_head(path, arch, overrides, device)
    spec = decoder_pooler_spec(path, convert, overrides)
    if convert != "classify":
        return PoolingHead(spec, None)
    weight = score_head(path, dtype, device)  # [L, H]

    def classify(rows: torch.Tensor) -> torch.Tensor:
        return rows.to(weight.dtype) @ weight.t()  # [N, H] -> [N, L]

    return PoolingHead(spec, classify, token_classifier=classify)


def _prompt_ids(batch: InputBatch, slot: int) -> list[int]:
    """The prompt token ids of the request in ``slot`` (STEP pooling reads them)."""
    return batch.token_ids[slot, : int(batch.num_prompt_tokens[slot])].tolist()


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
        prompts: list[list[int] | None] = []
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
            prompts.append(
                _prompt_ids(batch, int(plan.slots[b])) if pooling.step_tag_id is not None else None
            )
        pooled = (
            head.pool(hidden, done_ids, done_starts, done_lens, params, prompts) if done_ids else {}
        )
    batch.num_computed_tokens[plan.slots] += plan.num_scheduled
    return ModelRunnerOutput(
        step_id=step_id,
        req_ids=plan.req_ids,
        sampled_token_ids=[[] for _ in plan.req_ids],
        pooled=pooled,
        execute_time_s=time.perf_counter() - t0,
    )
