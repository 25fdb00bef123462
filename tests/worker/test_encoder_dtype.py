"""The dtype an encoder (BERT-style pooling model) runs in, by --dtype's names."""

from __future__ import annotations

import pytest
import torch

from actorllm.worker.encoder_runner import encoder_dtype


@pytest.mark.parametrize(
    ("name", "dtype"),
    [("half", torch.float16), ("float16", torch.float16), ("float", torch.float32),
     ("float32", torch.float32), ("bfloat16", torch.bfloat16)],
)  # fmt: skip
def test_vllms_dtype_names_and_aliases(name: str, dtype: torch.dtype) -> None:
    """vLLM's --dtype takes "half" and "float" too (its cross-encoder tests pass half)."""
    assert encoder_dtype(name, "cpu") == dtype


def test_an_unknown_name_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'float8'"):
        encoder_dtype("float8", "cpu")
