"""Named workloads for the side-by-side CPU table against vLLM (benchmarks/README.md).

A :class:`Preset` fixes everything a row depends on: the model's shape (a transformers
config written to a cache directory, weights ``dummy`` on both engines: speed does not
depend on them), the dtype, the requests (token-id prompts, lengths uniform in closed
ranges, seeded), the sampling (temperature 0.6, ``ignore_eos``) and the scheduler limits
both engines get. ``actorllm bench throughput --preset NAME`` runs one row;
``actorllm bench cpu-vs-vllm`` runs them all.

    >>> p = PRESETS["llama-1l-128-256req"]
    >>> len(p.requests())
    256
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actorllm.bench.datasets import BenchRequest

KV_CACHE_BYTES = 2 * 2**30  # both engines: VLLM_CPU_KVCACHE_SPACE=2 (GiB)


def _llama(hidden: int, layers: int, heads: int, kv_heads: int, inter: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 4096,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads,
        "intermediate_size": inter,
        "tie_word_embeddings": False,
    }


# 75M parameters: 32000 x 768 tied embedding (24.6M) + 8 layers of 6.3M.
_QWEN3_75M: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 32000,
    "hidden_size": 768,
    "num_hidden_layers": 8,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "intermediate_size": 2048,
    "tie_word_embeddings": True,
}
# Qwen3-0.6B: 28 layers of 1024 wide, 16 query / 8 KV heads of 128, tied 151936 embedding
# (0.6B parameters, 1.2 GB in bf16: decode reads all of it every step).
_QWEN3_06B: dict[str, Any] = {
    **_QWEN3_75M,
    "vocab_size": 151936,
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
}
# Llama-3.2-1B: 16 layers of 2048 wide, 32 query / 8 KV heads of 64, tied 128256 embedding.
_LLAMA32_1B: dict[str, Any] = {
    **_llama(2048, 16, 32, 8, 8192),
    "vocab_size": 128256,
    "tie_word_embeddings": True,
}
_LLAMA_4L_256 = _llama(256, 4, 4, 2, 768)  # the demo model's shape
_LLAMA_1L_128 = _llama(128, 1, 4, 2, 384)  # head_dim 32: vLLM CPU's smallest


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    model_name: str  # cache directory name of the model
    model_config: dict[str, Any]
    dtype: str
    num_prompts: int
    input_len: tuple[int, int]  # closed range, uniform
    output_len: tuple[int, int]
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    temperature: float = 0.6
    seed: int = 0

    def requests(self) -> list[BenchRequest]:
        """The workload: lengths uniform in the closed ranges, ids uniform below the vocab."""
        rng = random.Random(self.seed)
        vocab = int(self.model_config["vocab_size"])
        reqs = []
        for _ in range(self.num_prompts):
            n_in = rng.randint(*self.input_len)
            n_out = rng.randint(*self.output_len)
            reqs.append(BenchRequest([rng.randrange(vocab) for _ in range(n_in)], n_out))
        return reqs

    def max_model_len(self) -> int:
        return self.input_len[1] + self.output_len[1]

    def model_dir(self) -> Path:
        return preset_model_dir(self.model_name, self.model_config)


# Quick rows first: an interrupted table run keeps them.
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "llama-4l-256",
            "4-layer 256-wide Llama (the demo shape), float32",
            "llama-4l-256",
            _LLAMA_4L_256,
            "float32",
            48,
            (32, 160),
            (32, 160),
        ),
        Preset(
            "llama-1l-128-256req",
            "1-layer 128-wide Llama (engine overhead dominates), 256 requests, float32",
            "llama-1l-128",
            _LLAMA_1L_128,
            "float32",
            256,
            (100, 200),
            (100, 200),
        ),
        Preset(
            "llama-1l-128-1024req",
            "1-layer 128-wide Llama, 1024 requests all running at once, float32",
            "llama-1l-128",
            _LLAMA_1L_128,
            "float32",
            1024,
            (100, 200),
            (100, 200),
            max_num_seqs=1024,
            max_num_batched_tokens=4096,
        ),
        Preset(
            "qwen3-75m-fp32",
            "75M Qwen3 shape, float32",
            "qwen3-75m",
            _QWEN3_75M,
            "float32",
            128,
            (64, 256),
            (64, 256),
        ),
        Preset(
            "qwen3-75m-bf16",
            "75M Qwen3 shape (hidden 768, 8 layers, 12/4 heads, vocab 32000), bf16",
            "qwen3-75m",
            _QWEN3_75M,
            "bfloat16",
            128,
            (64, 256),
            (64, 256),
        ),
        # Real sizes (issue 45): decode-heavy (all 32 requests running, decode bound by
        # reading the weights) and prefill-heavy (2,048-token prompts: bound by GEMM).
        Preset(
            "qwen3-0.6b-bf16-decode",
            "Qwen3-0.6B shape (hidden 1024, 28 layers, 16/8 heads of 128, vocab 151936), bf16, "
            "32 requests, in/out U[64,192]",
            "qwen3-0.6b",
            _QWEN3_06B,
            "bfloat16",
            32,
            (64, 192),
            (64, 192),
        ),
        Preset(
            "qwen3-0.6b-bf16-prefill",
            "Qwen3-0.6B shape, bf16, 8 requests of 2,048 prompt tokens, 16 output tokens",
            "qwen3-0.6b",
            _QWEN3_06B,
            "bfloat16",
            8,
            (2048, 2048),
            (16, 16),
        ),
        Preset(
            "llama-3.2-1b-bf16-decode",
            "Llama-3.2-1B shape (hidden 2048, 16 layers, 32/8 heads of 64, vocab 128256), bf16, "
            "32 requests, in/out U[64,192]",
            "llama-3.2-1b",
            _LLAMA32_1B,
            "bfloat16",
            32,
            (64, 192),
            (64, 192),
        ),
        Preset(
            "llama-3.2-1b-bf16-prefill",
            "Llama-3.2-1B shape, bf16, 4 requests of 2,048 prompt tokens, 16 output tokens",
            "llama-3.2-1b",
            _LLAMA32_1B,
            "bfloat16",
            4,
            (2048, 2048),
            (16, 16),
        ),
    )
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})") from None


def preset_model_dir(name: str, shape: dict[str, Any]) -> Path:
    """``$ACTORLLM_CACHE/bench-models/NAME``: config.json (+ the demo tokenizer's files, which
    actorllm loads at start; token-id prompts never use them), built once, atomically."""
    from actorllm.demo import demo_tokenizer_path
    from actorllm.demo.model import cache_dir

    config = _full_config(shape)
    target = cache_dir() / "bench-models" / name
    if (target / "config.json").is_file():
        if json.loads((target / "config.json").read_text()) == config:
            return target
        shutil.rmtree(target, ignore_errors=True)  # an older recipe
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        for f in demo_tokenizer_path().iterdir():
            if f.is_file() and f.suffix in (".json", ".jinja", ".txt"):
                shutil.copy2(f, tmp / f.name)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _full_config(shape: dict[str, Any]) -> dict[str, Any]:
    """The preset's config.json: its shape on a Llama base (never the demo model's, so a
    preset does not change with it)."""
    from actorllm.models.config import llama_config_json

    return {**llama_config_json(shape), "max_position_embeddings": 4096}
