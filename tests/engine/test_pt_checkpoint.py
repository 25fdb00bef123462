"""An engine over a PyTorch .bin checkpoint (--load-format pt, and auto falling back to it)
gives its safetensors twin's greedy tokens, with the .bin as its own speculative draft too."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from actorllm import LLM, SamplingParams
from actorllm.demo import demo_tokenizer_path
from tests.helpers.models import make_tiny_checkpoint

PROMPTS = ["The quick brown fox jumps over the lazy dog", "Once upon a time"]
SMALL: dict[str, Any] = dict(
    dtype="float32", max_model_len=128, kv_cache_memory_bytes=2**20,
    max_num_batched_tokens=64, enable_prefix_caching=False,
)  # fmt: skip


def _twin(root: Path, safe_serialization: bool) -> Path:
    path = make_tiny_checkpoint(
        root, "qwen3", vocab_size=4096, eos_token_id=0, max_position_embeddings=1024,
        safe_serialization=safe_serialization,
    )  # fmt: skip
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return path


def _greedy(model: Path, **kw: Any) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=10)
    with LLM(str(model), **SMALL, **kw) as llm:
        return [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params, use_tqdm=False)]


@pytest.mark.parametrize("load_format", ["auto", "pt"])
def test_a_bin_checkpoint_serves_its_twins_tokens(tmp_path: Path, load_format: str) -> None:
    st, pt = _twin(tmp_path / "st", True), _twin(tmp_path / "pt", False)
    want = _greedy(st)
    assert _greedy(pt, load_format=load_format) == want
    if load_format == "pt":  # the .bin as a draft model
        spec = {"method": "draft_model", "model": str(pt), "num_speculative_tokens": 3}
        assert _greedy(pt, load_format="pt", speculative_config=spec) == want
