"""A pooling request's parameters checked against the model, and the engine's own
``SamplingParams`` that carry them (prefill-only: the runner pools instead of sampling).

Every refusal is an ``InvalidRequestError`` naming the field (HTTP 400), with vLLM's
messages where vLLM has one.
"""

from __future__ import annotations

from typing import Any

from actorllm.core.errors import InvalidRequestError
from actorllm.core.pooling_params import POOLING_TASKS, TOKEN_TASKS, PoolingParams
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.engine.config.pooling_model import PoolingModel

# vLLM's PoolingParams.valid_parameters: what a request may set for each task
VALID_PARAMETERS: dict[str, list[str]] = {
    "embed": ["dimensions", "use_activation"],
    "classify": ["use_activation"],
    "token_embed": ["dimensions", "use_activation"],
    "token_classify": ["use_activation"],
}
STEP_PARAMETERS = ("step_tag_id", "returned_token_ids")


def check_pooling(pm: PoolingModel | None, params: PoolingParams, model_name: str) -> PoolingParams:
    """``params`` with its task resolved (the model's default when unset), or a refusal.

    The engine runs every task the model has (vLLM's ``AsyncLLM.encode`` too); the front
    doors that serve only the model's default task ask :func:`check_front_door_task`."""
    if pm is None:
        raise InvalidRequestError(
            f"The model {model_name!r} is a text-generation model: it does not serve pooling "
            "requests (embeddings, classification, scores). Serve a pooling model, or this "
            "one with --runner pooling --convert embed|classify.",
            param="model",
        )
    task = params.task or pm.default_task
    _check_supported(pm, task, model_name)
    if params.dimensions is not None:
        if task not in ("embed", "token_embed"):
            raise InvalidRequestError(
                f"dimensions applies to embeddings, not to task {task!r}.", param="dimensions"
            )
        _check_dimensions(pm, params.dimensions, model_name)
    changes: dict[str, Any] = {"task": task, **_step_pooling(pm, params, task)}
    if params.skip_reading_prefix_cache is None:
        # Prefix-cache hits skip rows: only last-token pooling of a whole sequence can use
        # them (an encoder never caches).
        changes["skip_reading_prefix_cache"] = task in TOKEN_TASKS or pm.spec.pooling_type != "LAST"
    return params.clone(**changes)


def _check_supported(pm: PoolingModel, task: str, model_name: str) -> None:
    if task not in POOLING_TASKS or task not in pm.tasks:
        raise InvalidRequestError(
            f"Unsupported task: {task!r} (the model {model_name!r} supports: "
            f"{', '.join(pm.tasks)}).",
            param="task",
        )


def check_front_door_task(
    pm: PoolingModel, task: str | None, model_name: str, *, offline: bool = False
) -> None:
    """vLLM's rule for ``/pooling`` and ``LLM.encode``: they serve the model's one pooling
    task; another task the model has is refused with vLLM's words (how to switch), one it
    lacks as unsupported."""
    if task is None or task == pm.default_task:
        return
    _check_supported(pm, task, model_name)
    how = f'`PoolerConfig(task="{task}")`' if offline else f"--pooler-config.task {task}."
    raise InvalidRequestError(f"Try switching the model's pooling_task via {how}", param="task")


def _step_pooling(pm: PoolingModel, params: PoolingParams, task: str) -> dict[str, Any]:
    """vLLM's ``_verify_step_pooling``: STEP's parameters only on a model whose token
    pooling is STEP (refused in vLLM's words otherwise), where unset ones take
    ``--pooler-config``'s; returned_token_ids must index the head's logits."""
    spec = pm.spec
    if spec.tok_pooling_type != "STEP":
        bad = [k for k in STEP_PARAMETERS if getattr(params, k) is not None]
        if bad:
            raise InvalidRequestError(
                f"Task {task} only supports {VALID_PARAMETERS[task]} parameters, does not "
                f"support {bad} parameters",
                param=bad[0],
            )
        return {}
    changes: dict[str, Any] = {}
    if params.step_tag_id is None and spec.step_tag_id is not None:
        changes["step_tag_id"] = spec.step_tag_id
    if params.returned_token_ids is None and spec.returned_token_ids is not None:
        changes["returned_token_ids"] = list(spec.returned_token_ids)
    ids = params.returned_token_ids
    if ids is not None and not all(0 <= i < pm.num_labels for i in ids):
        raise InvalidRequestError(
            f"returned_token_ids must index the model's {pm.num_labels} logits (0 to "
            f"{pm.num_labels - 1}), got {ids}.",
            param="returned_token_ids",
        )
    return changes


def _check_dimensions(pm: PoolingModel, dims: int, model_name: str) -> None:
    size = pm.embedding_size
    if not pm.spec.is_matryoshka:
        raise InvalidRequestError(
            f"Model {model_name!r} does not support Matryoshka embeddings; dimensions must "
            f"be unset (received dimensions={dims}).",
            param="dimensions",
        )
    if not 1 <= dims <= size:
        raise InvalidRequestError(
            f"Model {model_name!r} only supports dimensions in range [1, {size}], got {dims}.",
            param="dimensions",
        )
    mds = pm.spec.matryoshka_dimensions
    if mds is not None and dims not in mds:
        raise InvalidRequestError(
            f"Model {model_name!r} only supports Matryoshka dimensions {mds}, got {dims}.",
            param="dimensions",
        )


def pooling_sampling_params(
    params: PoolingParams, truncate_prompt_tokens: int | None = None
) -> SamplingParams:
    """The engine's fixed SamplingParams for a (checked) pooling request."""
    if truncate_prompt_tokens is not None and (
        truncate_prompt_tokens < -1 or truncate_prompt_tokens == 0
    ):
        raise InvalidRequestError(
            f"truncate_prompt_tokens must be -1 or a positive integer, got "
            f"{truncate_prompt_tokens}.",
            param="truncate_prompt_tokens",
        )
    return SamplingParams(
        max_tokens=1,
        detokenize=False,
        output_kind=RequestOutputKind.FINAL_ONLY,
        truncate_prompt_tokens=truncate_prompt_tokens,
        skip_reading_prefix_cache=params.skip_reading_prefix_cache,
        pooling_params=params,
    )


def pair_prompt(tokenizer: Any, first: str, second: str) -> tuple[dict[str, Any], int | None]:
    """A (query, document) pair for a cross-encoder, tokenized as one sequence with its
    segments (``[CLS] q [SEP] d [SEP]``); returns the prompt and where segment 2 starts
    (None: the tokenizer has no token types, as RoBERTa's)."""
    enc = tokenizer(first, second)
    ids = list(enc["input_ids"])
    types = enc.get("token_type_ids")
    start = types.index(1) if types is not None and 1 in types else None
    return {"prompt_token_ids": ids}, start
