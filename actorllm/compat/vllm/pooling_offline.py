"""``LLM``'s pooling methods (vLLM's ``pooling/offline.py``): ``encode``, ``embed``,
``classify`` and ``score`` on a pooling model, each blocking until the batch is done and
returning vLLM's output types in input order.

    llm = LLM("/models/all-MiniLM-L6-v2")            # runner "pooling", found from the model
    [e.outputs.embedding for e in llm.embed(["a", "b"])]
    llm.score("query", ["doc 1", "doc 2"])            # cosine (bi-encoder) or cross-encoder
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from actorllm.compat.vllm.not_built import check_options
from actorllm.compat.vllm.offline_prompts import Prompt, as_prompt_list, per_prompt
from actorllm.compat.vllm.offline_requests import UseTqdm, progress_bar
from actorllm.core.errors import InvalidRequestError
from actorllm.core.pooling_params import PoolingParams
from actorllm.engine.api.pooling_outputs import (
    ClassificationRequestOutput,
    EmbeddingRequestOutput,
    PoolingOutput,
    PoolingRequestOutput,
    ScoringRequestOutput,
)
from actorllm.engine.api.pooling_requests import check_front_door_task
from actorllm.engine.api.scoring import check_scoring_model, encode_many, score

if TYPE_CHECKING:
    from actorllm.compat.vllm.engine_thread import EngineThread
    from actorllm.engine.api.async_engine import AsyncEngine
    from actorllm.engine.config.pooling_model import PoolingModel

# the pooling task each way of scoring runs (vLLM's SCORE_TYPE_MAP, reversed)
_SCORE_TASKS = {"cross": "classify", "bi": "embed", "late": "token_embed"}

# vLLM 0.32's words (its pooling/offline.py)
_TASK_REQUIRED = """pooling_task required for `LLM.encode`.
Please use one of the more specific methods or set the pooling_task when using `LLM.encode`:
  - For embeddings, use `LLM.embed(...)` or `pooling_task="embed"`.
  - For classification logits, use `LLM.classify(...)` or `pooling_task="classify"`.
  - For similarity scores, use `LLM.score(...)`.
  - For rewards, `pooling_task="classify"` or `pooling_task="token_classify"`.
  - For token classification, use `pooling_task="token_classify"`.
  - For multi-vector retrieval, use `pooling_task="token_embed"`."""


def _check_encode_task(pm: PoolingModel, task: str | None, model_name: str) -> None:
    """vLLM's ``LLM.encode`` checks, in its order: a task is required, an API the model
    lacks says how to convert it, and only the model's one pooling task is served."""
    if task is None:
        raise ValueError(_TASK_REQUIRED)
    if task in ("embed", "token_embed") and task not in pm.tasks:
        raise ValueError(
            "Embedding API is not supported by this model. "
            "Try converting the model using `--convert embed`."
        )
    if task in ("classify", "token_classify") and task not in pm.tasks:
        raise ValueError(
            "Classification API is not supported by this model. "
            "Try converting the model using `--convert classify`."
        )
    check_front_door_task(pm, task, model_name, offline=True)


class PoolingMethods:
    """Mixed into ``LLM``: needs its ``engine`` and its engine ``_thread``."""

    engine: AsyncEngine
    _thread: EngineThread
    _request_ids: Iterator[int]  # the LLM's counter (vLLM's request ids "0", "1", ...)

    def encode(
        self,
        prompts: Prompt | Sequence[Prompt],
        pooling_params: PoolingParams | Sequence[PoolingParams] | None = None,
        *,
        use_tqdm: Any = True,
        lora_request: Any = None,
        pooling_task: str | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
    ) -> list[PoolingRequestOutput[PoolingOutput]]:
        """The pooled result of every prompt, named by the LLM's request counter as vLLM's
        (``"0"``, ``"1"``, ...). ``pooling_task`` is required and must be the model's
        pooling task (vLLM's rule: ``PoolerConfig(task=...)`` picks another).
        ``lora_request`` and ``tokenization_kwargs`` (other than ``truncate_prompt_tokens``)
        must be None."""
        kwargs = dict(tokenization_kwargs or {})
        truncate = kwargs.pop("truncate_prompt_tokens", None)
        check_options("LLM.encode", lora_request=lora_request, tokenization_kwargs=kwargs or None)
        pm = self.engine.pooling_model
        if pm is None:  # vLLM's words (its ValueError)
            raise InvalidRequestError(
                "LLM.encode() is only supported for pooling models. Try passing "
                "`--runner pooling` to use the model as a pooling model.",
                param="model",
            )
        _check_encode_task(pm, pooling_task, self.engine.model_name)
        items = as_prompt_list(prompts)
        params = per_prompt(pooling_params, len(items), PoolingParams(), "pooling params")
        for p in params:  # vLLM's PoolingParams.verify: a set task is never replaced
            if p.task is not None and p.task != pooling_task:
                raise ValueError(
                    f"You cannot overwrite self.task={p.task!r} with task={pooling_task!r}!"
                )
        params = [p.clone(task=pooling_task) for p in params]
        jobs = list(zip(items, params, strict=True))
        outs = self._thread.call(self._encode_all, jobs, truncate, use_tqdm)
        for out in outs:  # named as vLLM's LLM names its requests, in input order
            out.request_id = str(next(self._request_ids))
        return outs

    async def _encode_all(
        self, jobs: list[tuple[Any, PoolingParams]], truncate: int | None, use_tqdm: UseTqdm
    ) -> list[PoolingRequestOutput[PoolingOutput]]:
        bar = progress_bar(use_tqdm, len(jobs), "Processed prompts")
        try:
            return await encode_many(
                self.engine, jobs, on_done=lambda: bar.update(1), truncate_prompt_tokens=truncate
            )
        finally:
            bar.close()

    def embed(
        self,
        prompts: Prompt | Sequence[Prompt],
        *,
        use_tqdm: Any = True,
        pooling_params: PoolingParams | Sequence[PoolingParams] | None = None,
        lora_request: Any = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
    ) -> list[EmbeddingRequestOutput]:
        """One embedding per prompt (``outputs.embedding``)."""
        outs = self.encode(
            prompts, pooling_params, use_tqdm=use_tqdm, lora_request=lora_request,
            pooling_task="embed", tokenization_kwargs=tokenization_kwargs,
        )  # fmt: skip
        return [EmbeddingRequestOutput.from_base(o) for o in outs]

    def classify(
        self,
        prompts: Prompt | Sequence[Prompt],
        *,
        pooling_params: PoolingParams | Sequence[PoolingParams] | None = None,
        use_tqdm: Any = True,
        lora_request: Any = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
    ) -> list[ClassificationRequestOutput]:
        """Class probabilities per prompt (``outputs.probs``)."""
        outs = self.encode(
            prompts, pooling_params, use_tqdm=use_tqdm, lora_request=lora_request,
            pooling_task="classify", tokenization_kwargs=tokenization_kwargs,
        )  # fmt: skip
        return [ClassificationRequestOutput.from_base(o) for o in outs]

    def score(
        self,
        data_1: str | Sequence[str],
        data_2: str | Sequence[str],
        /,
        *,
        use_tqdm: Any = True,
        pooling_params: PoolingParams | None = None,
        lora_request: Any = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
    ) -> list[ScoringRequestOutput]:
        """One score per pair (1:1, 1:N, N:N): a cross-encoder's probability, or the cosine
        of two embeddings. Text inputs only (vLLM's multimodal score inputs are refused).
        Named as vLLM names them from the LLM's request counter: a cross-encoder's pair by
        its own number; a bi-encoder's ``"<query's>_<document's>"``, its texts numbered
        ``data_1``'s first, then ``data_2``'s."""
        kwargs = dict(tokenization_kwargs or {})
        truncate = kwargs.pop("truncate_prompt_tokens", None)
        check_options(
            "LLM.score",
            lora_request=lora_request,
            tokenization_kwargs=kwargs or None,
            chat_template=chat_template,
        )
        if pooling_params is not None and (pooling_params.dimensions is not None):
            raise ValueError("LLM.score: pooling_params.dimensions is not supported for scoring")
        kind = check_scoring_model(self.engine)
        if pooling_params is not None and pooling_params.task is not None:
            task = _SCORE_TASKS[kind]
            if pooling_params.task != task:  # vLLM's words: the scoring task is not replaced
                raise ValueError(
                    f"You cannot overwrite pooling_params.task={pooling_params.task!r} with "
                    f"pooling_task={task!r}!"
                )
        first, second = _score_side(data_1), _score_side(data_2)
        params = pooling_params or PoolingParams()
        cross = kind == "cross"
        outs = self._thread.call(self._score, first, second, params, truncate, use_tqdm, cross)
        for out, name in zip(
            outs, _score_ids(self._request_ids, cross, first, second), strict=True
        ):
            out.request_id = name
        return outs

    async def _score(
        self,
        first: list[str],
        second: list[str],
        params: PoolingParams,
        truncate: int | None,
        use_tqdm: UseTqdm,
        cross: bool,
    ) -> list[ScoringRequestOutput]:
        # the engine requests: one per pair (cross-encoder) or per distinct text
        total = max(len(first), len(second))
        if not cross and all(isinstance(t, str) for t in [*first, *second]):
            total = len(dict.fromkeys([*first, *second]))  # (other inputs are refused)
        bar = progress_bar(use_tqdm, total, "Processed prompts")
        try:
            return await score(
                self.engine,
                first,
                second,
                use_activation=params.use_activation,
                truncate_prompt_tokens=truncate,
                skip_reading_prefix_cache=params.skip_reading_prefix_cache,
                on_done=lambda: bar.update(1),
            )
        finally:
            bar.close()


def _score_side(data: Any) -> list[Any]:
    """One side of ``LLM.score``: a text, or a list of them. A mapping (vLLM's
    ``ScoreMultiModalParam``, a prompt dict) is one input, which scoring then refuses by
    type: iterating it would score its keys ("content") as texts."""
    return [data] if isinstance(data, str | Mapping) else list(data)


def _score_ids(
    counter: Iterator[int], cross: bool, first: list[Any], second: list[Any]
) -> list[str]:
    """vLLM 0.32's ids of the pairs' outputs (``entrypoints/pooling``): a cross-encoder runs
    one request per pair, named by the counter; a bi-encoder one per text, ``first``'s
    then ``second``'s (a 1:N query once), and names a pair by its two texts' requests."""
    if cross:
        return [str(next(counter)) for _ in second]
    queries = [next(counter) for _ in first]
    docs = [next(counter) for _ in second]
    return [f"{queries[0 if len(queries) == 1 else i]}_{doc}" for i, doc in enumerate(docs)]
