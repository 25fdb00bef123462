"""A gpt-oss stand-in for server tests: the demo tokenizer with harmony's special tokens
added, and a model directory whose config.json says ``gpt_oss`` (what makes the server
speak harmony)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from actorllm.core.harmony import SPECIAL_TOKENS
from tests.helpers.tokenizers import hf_demo_tokenizer


def harmony_tokenizer() -> Any:
    tok = copy.deepcopy(hf_demo_tokenizer())
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    return tok


def gpt_oss_dir(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    return root
