"""A tiny random Llama whose greedy output soon loops (128 tokens), with the demo tokenizer
(its first 128 ids decode): n-gram lookups hit on it, for speculative decoding tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from actorllm.demo import demo_tokenizer_path
from tests.helpers.models import make_tiny_checkpoint

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
        "prompt_lookup_max": 3}  # fmt: skip
# Token-id prompts: the first repeats (lookups hit at once), the second does not.
PROMPT_IDS = [
    [5, 9, 17, 33, 5, 9, 17, 33, 5, 9, 17, 33, 5, 9],
    [3, 14, 15, 92, 65, 35, 89, 79, 32, 38],
]


def small_vocab_llama(directory: Path) -> str:
    path = make_tiny_checkpoint(
        directory, "llama", vocab_size=128, eos_token_id=0, max_position_embeddings=1024
    )
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)
