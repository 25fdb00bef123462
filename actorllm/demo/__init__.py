"""The embedded demo model: a shipped byte-level BPE tokenizer and a tiny random Llama built
beside it in a cache directory on first use (``ACTORLLM_CACHE`` moves the cache)."""

from __future__ import annotations

from pathlib import Path


def demo_tokenizer_path() -> Path:
    """Directory of the shipped demo tokenizer (tokenizer.json + tokenizer_config.json)."""
    from actorllm.demo.tokenizer import demo_tokenizer_path as _path

    return _path()


def demo_model_path() -> Path:
    """Directory of the demo model, built on first use; safe to call concurrently."""
    from actorllm.demo.model import demo_model_path as _path

    return _path()


__all__ = ["demo_model_path", "demo_tokenizer_path"]
