"""The demo model: a tiny random Llama beside the shipped demo tokenizer, built on first use.

``demo_model_path()`` returns ``$ACTORLLM_CACHE/demo-model-v2`` (default cache
``~/.cache/actorllm``), building it the first time: config.json, generation_config.json,
model.safetensors (float32, seeded, so every machine gets the same bytes) and a copy of the
tokenizer files. transformers' ``AutoModelForCausalLM`` / ``AutoTokenizer`` load it too.

The build happens in a temporary directory beside the target and is renamed into place, so
a reader never sees a half-written model and concurrent callers (threads or processes) are
safe: the first rename wins and the others discard their copy.

    >>> path = demo_model_path()  # doctest: +SKIP
    >>> sorted(p.name for p in path.iterdir())  # doctest: +SKIP
    ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', ...]
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from actorllm.demo.tokenizer import demo_tokenizer_path

# Bump when the recipe below changes, so stale caches are not reused (v2: untied head).
DEMO_MODEL_NAME = "demo-model-v2"
_SEED = 0
_EOS, _IM_END = 0, 2  # <|endoftext|> and <|im_end|> in the demo tokenizer

DEMO_SHAPE: dict[str, int] = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 768,
    "max_position_embeddings": 4096,
}


def cache_dir() -> Path:
    """``$ACTORLLM_CACHE``, else ``~/.cache/actorllm``."""
    env = os.environ.get("ACTORLLM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "actorllm"


def demo_model_path() -> Path:
    """Directory of the demo model, built on first use (blocks for about a second then).

    Safe to call concurrently. Raises ``OSError`` if the cache directory is not writable.
    """
    target = cache_dir() / DEMO_MODEL_NAME
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{DEMO_MODEL_NAME}-", dir=target.parent))
    try:
        _build(tmp)
        # mkdtemp makes 0700: the cache may be shared, so open it up like a normal download.
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise  # not a lost race: a real error
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _vocab_size(tokenizer_dir: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).get_vocab_size(
        with_added_tokens=True
    )


def demo_config(vocab_size: int) -> dict[str, Any]:
    """config.json in transformers' Llama format (5.x ``rope_parameters`` and 4.x keys)."""
    s = DEMO_SHAPE
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        **s,
        "head_dim": s["hidden_size"] // s["num_attention_heads"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "attention_bias": False,
        "mlp_bias": False,
        # Untied: with a tied head a random model's greedy output repeats its input token.
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": _EOS,
        "pad_token_id": _EOS,
        "dtype": "float32",
        "initializer_range": 0.02,
    }


def _weights(cfg: dict[str, Any]) -> dict[str, torch.Tensor]:
    """HF-named tensors: N(0, 0.02) matrices, unit norms, seeded."""
    g = torch.Generator().manual_seed(_SEED)
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d

    def rand(*shape: int) -> torch.Tensor:
        return torch.empty(shape).normal_(0.0, 0.02, generator=g)

    out = {"model.embed_tokens.weight": rand(v, h), "model.norm.weight": torch.ones(h)}
    out["lm_head.weight"] = rand(v, h)
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out |= {
            p + "input_layernorm.weight": torch.ones(h),
            p + "post_attention_layernorm.weight": torch.ones(h),
            p + "self_attn.q_proj.weight": rand(q, h),
            p + "self_attn.k_proj.weight": rand(kv, h),
            p + "self_attn.v_proj.weight": rand(kv, h),
            p + "self_attn.o_proj.weight": rand(h, q),
            p + "mlp.gate_proj.weight": rand(i, h),
            p + "mlp.up_proj.weight": rand(i, h),
            p + "mlp.down_proj.weight": rand(h, i),
        }
    return out


def _build(directory: Path) -> None:
    tok_dir = demo_tokenizer_path()
    cfg = demo_config(_vocab_size(tok_dir))
    (directory / "config.json").write_text(json.dumps(cfg, indent=2))
    gen = {"eos_token_id": [_EOS, _IM_END], "pad_token_id": _EOS}
    (directory / "generation_config.json").write_text(json.dumps(gen, indent=2))
    save_file(_weights(cfg), str(directory / "model.safetensors"), metadata={"format": "pt"})
    for f in tok_dir.iterdir():
        if f.is_file() and f.suffix in (".json", ".jinja", ".txt"):
            shutil.copy2(f, directory / f.name)
