"""The demo tokenizer for tests, loaded once per process.

``hf_demo_tokenizer()`` is the transformers tokenizer (chat template, special-token
attributes); ``demo_tokenizer()`` is the raw ``tokenizers.Tokenizer`` that ``core/`` takes.
"""

from __future__ import annotations

import functools
from typing import Any

from tokenizers import Tokenizer

from actorllm.demo import demo_tokenizer_path

# Ids fixed by scripts/train_demo_tokenizer.py.
ENDOFTEXT_ID = 0
IM_START_ID = 1
IM_END_ID = 2
VOCAB_SIZE = 4096


@functools.cache
def hf_demo_tokenizer() -> Any:
    """``transformers.AutoTokenizer`` on the shipped demo tokenizer (a TokenizersBackend),
    loaded once: the engine harness's own copy."""
    from actorllm.testing.engine_harness import demo_tokenizer as harness_tokenizer

    return harness_tokenizer()


@functools.cache
def demo_tokenizer() -> Tokenizer:
    """The raw ``tokenizers.Tokenizer`` of the demo tokenizer (shared: do not mutate it)."""
    return Tokenizer.from_file(str(demo_tokenizer_path() / "tokenizer.json"))
