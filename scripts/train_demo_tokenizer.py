"""Train the shipped demo tokenizer (actorllm/demo/tokenizer/) from an offline corpus.

Theory of operation: the corpus is built without any network access from

* the docstrings (module, class and function) and some source lines of a fixed, sorted
  list of Python standard-library modules, read with ``ast`` (nothing is imported, so no
  module side effects), and
* a short multilingual text written here (English prose, accented Latin, Greek, Cyrillic,
  CJK, emoji, ChatML-looking chat turns).

A byte-level BPE (GPT-2 style: ``ByteLevel`` pre-tokenizer and decoder, no normalizer, so
``decode(encode(s)) == s`` for every string) is trained on it with ``BpeTrainer`` to
``VOCAB_SIZE`` tokens, the three special tokens first (ids 0, 1, 2) and the 256 byte symbols
always present. Training is deterministic for a given corpus; the corpus depends on the
stdlib sources, so re-running with another CPython 3.11 patch release may move a few merges.

Usage::

    .venv/bin/python scripts/train_demo_tokenizer.py [--out actorllm/demo/tokenizer]
"""

from __future__ import annotations

import argparse
import ast
import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB_SIZE = 4096  # a multiple of 64, special tokens included
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MODEL_MAX_LENGTH = 4096

# Sorted and fixed: the corpus must not depend on what happens to be installed.
STDLIB_MODULES = sorted(
    [
        "argparse", "ast", "asyncio/base_events", "asyncio/tasks", "base64", "bisect",
        "calendar", "collections/__init__", "concurrent/futures/_base", "contextlib", "csv",
        "dataclasses", "datetime", "decimal", "difflib", "email/message", "enum",
        "fractions", "ftplib", "functools", "gettext", "gzip", "heapq", "hmac",
        "html/parser", "http/client", "http/server", "imaplib", "inspect", "ipaddress",
        "json/__init__", "json/decoder", "locale", "logging/__init__", "mailbox",
        "multiprocessing/pool", "numbers", "operator", "optparse", "os", "pathlib",
        "pdb", "pickle", "pprint", "queue", "random", "re/__init__", "sched", "secrets",
        "selectors", "shlex", "shutil", "smtplib", "socket", "statistics", "string",
        "subprocess", "tarfile", "tempfile", "textwrap", "threading", "timeit",
        "tokenize", "traceback", "turtle", "typing", "unittest/case", "urllib/parse",
        "urllib/request", "uuid", "warnings", "weakref", "xml/dom/minidom", "zipfile",
    ]
)  # fmt: skip

MULTILINGUAL = """\
The quick brown fox jumps over the lazy dog. A language model reads text one token at a
time and predicts the next one; a tokenizer decides what a token is. Byte-level BPE starts
from the 256 bytes and merges the most frequent pairs until the vocabulary is full, so every
string can be encoded, even one it has never seen.

Once upon a time, in a small town by the sea, there lived an old clockmaker. Every morning
he opened his shop at seven o'clock, wound the clocks on the wall, and waited for visitors.
"Time is the one thing nobody can make more of," he liked to say, "but we can all waste less."

Français : Le cœur a ses raisons que la raison ne connaît point. Où est la bibliothèque ?
Español: ¿Dónde está la estación? El niño comió una manzana y después jugó al fútbol.
Deutsch: Übung macht den Meister. Die Straße ist schön, und das Wetter ist größtenteils gut.
Português: A educação é a arma mais poderosa que você pode usar para mudar o mundo.
Italiano: Chi va piano va sano e va lontano. È più facile a dirsi che a farsi.
Polski: Zażółć gęślą jaźń. Čeština: Příliš žluťoučký kůň úpěl ďábelské ódy.
Türkçe: Bugün hava çok güzel; şehirde yürüyüş yapalım mı? Tiếng Việt: Xin chào thế giới.
Ελληνικά: Η γνώση είναι δύναμη. Русский: Съешь же ещё этих мягких французских булок.
Українська: Доброго ранку! Як справи? עברית: שלום עולם. العربية: مرحبا بالعالم.
हिन्दी: नमस्ते दुनिया। 한국어: 안녕하세요, 세계! 오늘 날씨가 좋네요.
中文：你好，世界！今天天气很好，我们去公园散步吧。机器学习是人工智能的一个分支。
语言模型一次读取一个词元，并预测下一个词元。北京是中国的首都，上海是最大的城市。
日本語：こんにちは、世界！今日はいい天気ですね。東京は日本の首都です。ありがとうございます。
カタカナとひらがなと漢字を組み合わせて文章を書きます。猫が好きです。
Emoji: 😀 😃 😄 😁 😆 🙂 🙃 😉 😊 😇 🥰 😍 🤩 😘 🤔 🤖 👍 👋 🎉 🚀 ✨ 🔥 💡 ❤️ 🌍
👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs up, 🇫🇷 🇯🇵 🇧🇷 flags. Math: ∑ ∫ √ ≈ ≠ ≤ ≥ ∞ π ∂ ∇ ∈ ∀ ∃.
Symbols: © ® ™ € £ ¥ ° ± × ÷ → ← ↑ ↓ • … « » „ “ ” ‘ ’ — –.
"""

CHAT_SAMPLES = """\
<|im_start|>system
You are a helpful assistant.<|im_end|>
<|im_start|>user
What is the capital of France?<|im_end|>
<|im_start|>assistant
The capital of France is Paris.<|im_end|>
<|im_start|>user
Write a haiku about the sea.<|im_end|>
<|im_start|>assistant
Waves fold into foam,
salt wind carries gull voices,
the tide keeps its time.<|im_end|>
"""

# ChatML. Content may be a string or a list of OpenAI-style parts ({"type": "text", ...}).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}"
    "{{- message['content'] }}"
    "{%- else %}"
    "{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)


def stdlib_texts() -> Iterator[str]:
    """Docstrings, then the first source lines, of each module in STDLIB_MODULES."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for name in STDLIB_MODULES:
        source = (root / f"{name}.py").read_text(encoding="utf-8")
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    yield doc
        # Some code, so that indentation and Python keywords get tokens of their own.
        yield "\n".join(source.splitlines()[:400])


def corpus() -> list[str]:
    texts = list(stdlib_texts())
    # The hand-written text is small next to the stdlib: repeat it so its merges happen.
    texts += [MULTILINGUAL] * 30 + [CHAT_SAMPLES] * 10
    return texts


def train() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    assert tok.get_vocab_size() == VOCAB_SIZE, tok.get_vocab_size()
    return tok


def tokenizer_config() -> dict[str, object]:
    added = {
        str(i): {
            "content": tok,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, tok in enumerate(SPECIAL_TOKENS)
    }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL_MAX_LENGTH,
        "chat_template": CHAT_TEMPLATE,
    }


def main() -> None:
    default_out = Path(__file__).resolve().parents[1] / "actorllm" / "demo" / "tokenizer"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    tok = train()
    tok.save(str(out / "tokenizer.json"), pretty=False)
    config = json.dumps(tokenizer_config(), indent=2, ensure_ascii=False) + "\n"
    (out / "tokenizer_config.json").write_text(config, encoding="utf-8")
    print(f"wrote {out} (vocab {tok.get_vocab_size()})")


if __name__ == "__main__":
    main()
