"""vLLM's pooling result types (``vllm.outputs``): ``PoolingRequestOutput`` and its
embedding / classification / scoring views, with vLLM 0.32's names and fields.

``PoolingOutput.data`` is a torch tensor (float32, on the host), as in vLLM; the core
carries the values as :class:`~actorllm.core.pooling_params.PooledData`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from actorllm.core.outputs import RequestOutput
from actorllm.core.pooling_params import PooledData

if TYPE_CHECKING:  # torch loads with the first pooled result (LLM's import stays light)
    import torch


def pooled_tensor(data: PooledData) -> torch.Tensor:
    """The core's float32 bytes as a host tensor of their shape."""
    import torch

    arr = np.frombuffer(data.data, dtype="<f4").reshape(data.shape)
    return torch.from_numpy(arr.copy())


@dataclass
class PoolingOutput:
    """One pooled result: ``data`` [dim] (or [num_tokens, dim] for token tasks)."""

    data: torch.Tensor

    def __repr__(self) -> str:
        return f"PoolingOutput(data={self.data})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, self.__class__) and bool((self.data == other.data).all())


_O = TypeVar("_O")


class PoolingRequestOutput(Generic[_O]):
    """A pooling request's result (vLLM's fields)."""

    def __init__(
        self,
        request_id: str,
        outputs: _O,
        prompt_token_ids: list[int],
        num_cached_tokens: int,
        finished: bool,
        *,
        error: Any = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.num_cached_tokens = num_cached_tokens
        self.finished = finished
        self.outputs = outputs
        self.error = error

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(request_id={self.request_id!r}, "
            f"outputs={self.outputs!r}, prompt_token_ids={self.prompt_token_ids}, "
            f"num_cached_tokens={self.num_cached_tokens}, finished={self.finished})"
        )

    @staticmethod
    def from_request_output(out: RequestOutput) -> PoolingRequestOutput[PoolingOutput]:
        if out.pooled is None:
            raise ValueError(f"request {out.request_id!r} has no pooled result ({out.error})")
        return PoolingRequestOutput(
            request_id=out.request_id,
            outputs=PoolingOutput(pooled_tensor(out.pooled)),
            prompt_token_ids=out.prompt_token_ids,
            num_cached_tokens=out.num_cached_tokens,
            finished=out.finished,
        )


@dataclass
class EmbeddingOutput:
    embedding: list[float]

    @staticmethod
    def from_base(pooling_output: PoolingOutput) -> EmbeddingOutput:
        if pooling_output.data.ndim != 1:
            raise ValueError("pooled_data should be a 1-D embedding vector")
        return EmbeddingOutput(pooling_output.data.tolist())

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)

    def __repr__(self) -> str:
        return f"EmbeddingOutput(hidden_size={self.hidden_size})"


class EmbeddingRequestOutput(PoolingRequestOutput[EmbeddingOutput]):
    @staticmethod
    def from_base(request_output: PoolingRequestOutput[PoolingOutput]) -> EmbeddingRequestOutput:
        return EmbeddingRequestOutput(
            request_id=request_output.request_id,
            outputs=EmbeddingOutput.from_base(request_output.outputs),
            prompt_token_ids=request_output.prompt_token_ids,
            num_cached_tokens=request_output.num_cached_tokens,
            finished=request_output.finished,
        )


@dataclass
class ClassificationOutput:
    probs: list[float]

    @staticmethod
    def from_base(pooling_output: PoolingOutput) -> ClassificationOutput:
        if pooling_output.data.ndim != 1:
            raise ValueError("pooled_data should be a 1-D probability vector")
        return ClassificationOutput(pooling_output.data.tolist())

    @property
    def num_classes(self) -> int:
        return len(self.probs)

    def __repr__(self) -> str:
        return f"ClassificationOutput(num_classes={self.num_classes})"


class ClassificationRequestOutput(PoolingRequestOutput[ClassificationOutput]):
    @staticmethod
    def from_base(
        request_output: PoolingRequestOutput[PoolingOutput],
    ) -> ClassificationRequestOutput:
        return ClassificationRequestOutput(
            request_id=request_output.request_id,
            outputs=ClassificationOutput.from_base(request_output.outputs),
            prompt_token_ids=request_output.prompt_token_ids,
            num_cached_tokens=request_output.num_cached_tokens,
            finished=request_output.finished,
        )


@dataclass
class ScoringOutput:
    score: float

    @staticmethod
    def from_base(pooling_output: PoolingOutput) -> ScoringOutput:
        data = pooling_output.data.squeeze()
        if data.ndim != 0:
            raise ValueError("pooled_data should be a scalar score")
        return ScoringOutput(float(data.item()))

    def __repr__(self) -> str:
        return f"ScoringOutput(score={self.score})"


class ScoringRequestOutput(PoolingRequestOutput[ScoringOutput]):
    @staticmethod
    def from_base(request_output: PoolingRequestOutput[PoolingOutput]) -> ScoringRequestOutput:
        return ScoringRequestOutput(
            request_id=request_output.request_id,
            outputs=ScoringOutput.from_base(request_output.outputs),
            prompt_token_ids=request_output.prompt_token_ids,
            num_cached_tokens=request_output.num_cached_tokens,
            finished=request_output.finished,
        )
