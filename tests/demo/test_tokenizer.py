"""The shipped demo tokenizer: loads with transformers, round-trips, renders ChatML."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from actorllm.demo import demo_tokenizer_path
from tests.helpers.tokenizers import (
    ENDOFTEXT_ID,
    IM_END_ID,
    IM_START_ID,
    VOCAB_SIZE,
    demo_tokenizer,
    hf_demo_tokenizer,
)

SAMPLES = [
    "Hello, world!",
    "  leading spaces and trailing  ",
    "def f(x):\n    return x + 1\n",
    "中文：你好，世界！今天天气很好。",
    "日本語のテキスト、한국어 텍스트",
    "Emoji 😀🤖🎉 and a family 👨‍👩‍👧‍👦 and flags 🇫🇷🇯🇵",
    "Accents: café, naïve, Übung, Zażółć gęślą jaźń",
    "rare: 龘 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \x00 \t\r\n",
]


def test_files_are_shipped_and_small() -> None:
    path = demo_tokenizer_path()
    assert (path / "tokenizer.json").is_file()
    assert (path / "tokenizer.json").stat().st_size < 400_000
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert "<|im_start|>" in config["chat_template"]


def test_vocab_and_special_tokens() -> None:
    hf = hf_demo_tokenizer()
    assert len(hf) == VOCAB_SIZE
    assert VOCAB_SIZE % 64 == 0
    assert hf.eos_token == "<|endoftext|>" and hf.eos_token_id == ENDOFTEXT_ID
    assert hf.pad_token_id == ENDOFTEXT_ID
    assert hf.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [IM_START_ID, IM_END_ID]
    raw = demo_tokenizer()
    assert raw.get_vocab_size() == VOCAB_SIZE
    # Special tokens are matched whole in text, never split into bytes.
    assert raw.encode("<|im_start|>user").ids[0] == IM_START_ID


def test_round_trip_samples_with_both_apis() -> None:
    hf, raw = hf_demo_tokenizer(), demo_tokenizer()
    for text in SAMPLES:
        ids = hf.encode(text, add_special_tokens=False)
        assert ids == raw.encode(text, add_special_tokens=False).ids
        assert hf.decode(ids) == text
        assert raw.decode(ids) == text


def test_cjk_and_emoji_are_split_into_byte_tokens() -> None:
    # A rare character is encoded as several byte-level tokens (what the detokenizer tests
    # rely on): no single token decodes to it.
    raw = demo_tokenizer()
    ids = raw.encode("龘").ids
    assert len(ids) > 1
    assert raw.decode(ids) == "龘"


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40))
def test_round_trip_any_text(text: str) -> None:
    raw = demo_tokenizer()
    assert raw.decode(raw.encode(text, add_special_tokens=False).ids) == text


def test_chat_template_renders_chatml() -> None:
    hf = hf_demo_tokenizer()
    conversation = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi 👋"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": [{"type": "text", "text": "Again"}]},
    ]
    text = hf.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi 👋<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nAgain<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    encoded = hf.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True)
    ids = list(encoded["input_ids"])
    assert ids[0] == IM_START_ID
    assert ids.count(IM_END_ID) == 4
    assert hf.decode(ids) == text
    no_prompt = hf.apply_chat_template(conversation, tokenize=False, add_generation_prompt=False)
    assert no_prompt.endswith("Again<|im_end|>\n")
