"""The shipped demo tokenizer: a 4096-token byte-level BPE with a ChatML chat template.

The files in ``actorllm/demo/tokenizer/`` are produced by ``scripts/train_demo_tokenizer.py``
(deterministic, offline: Python stdlib docstrings plus a short multilingual text). Special
tokens: ``<|endoftext|>`` (id 0: eos and pad; there is no bos), ``<|im_start|>`` (1) and
``<|im_end|>`` (2). Load it with ``transformers.AutoTokenizer.from_pretrained(path)`` or, for
the raw ``tokenizers.Tokenizer``, ``Tokenizer.from_file(str(path / "tokenizer.json"))``.

    >>> (demo_tokenizer_path() / "tokenizer.json").is_file()
    True
"""

from __future__ import annotations

from pathlib import Path

_DIR = Path(__file__).resolve().parent / "tokenizer"


def demo_tokenizer_path() -> Path:
    """Directory of the shipped demo tokenizer (tokenizer.json + tokenizer_config.json).

    Raises FileNotFoundError if the package was installed without its data files.
    """
    if not (_DIR / "tokenizer.json").is_file():
        raise FileNotFoundError(f"demo tokenizer files missing from {_DIR}")
    return _DIR
