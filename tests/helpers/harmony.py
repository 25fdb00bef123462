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


def long_answer(turns: int) -> str:
    """A long gpt-oss output as the server sees it (the first header's ``<|start|>assistant``
    is the prompt's) with every kind of message in each turn: reasoning, a preamble, calls
    (the recipient after or before the channel, one on ``analysis``), a tool's answer, text
    between messages, a restarted header, token-like text inside content, a header a stop
    token cut off; it ends inside the final answer, in the middle of a token's name."""
    parts = []
    for i in range(turns):
        parts += [
            f"<|start|>assistant<|channel|>analysis<|message|>Turn {i}: the user wants "
            f"<|the weather|> in city {i}; a < b and a|>b.<|end|>",
            f"<|start|>assistant<|channel|>commentary<|message|>Checking city {i}...<|end|>",
            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
            f'<|message|>{{"city": "C{i}", "days": [1, 2]}}<|call|>',
            "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
            f'{{"sunny": {i % 2}}}<|end|>',
            "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>"
            '{"q": "<|end"}<|call|>',
            "stray text between messages",
            f"<|start|>assistant<|channel|>analysis to=functions.note<|message|>note {i}<|call|>",
            "<|start|>assistant<|channel|>fin<|start|>assistant<|channel|>final<|message|>"
            f"City {i} is sunny.\nMore: <|start|> is text here.<|end|>",
            f"<|start|>assistant<|channel|>final  forgot the message token {i}<|end|>",
        ]
    parts.append("<|start|>assistant<|channel|>final<|message|>Done <|retu")
    return "".join(parts)[len("<|start|>assistant") :]
