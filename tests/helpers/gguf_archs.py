"""What llama.cpp's converter writes for the architectures beyond the Llama shape, for
``gguf_checkpoints.write_gguf``: the metadata keys of each (``convert_hf_to_gguf.py``'s
``set_gguf_parameters``) and Gemma's norm weights stored with 1 added."""

from __future__ import annotations

from typing import Any

import gguf
import numpy as np

# Our test family -> gguf.MODEL_ARCH member.
ARCHS = {"llama": "LLAMA", "qwen2": "QWEN2", "qwen3": "QWEN3", "mixtral": "LLAMA",
         "qwen3_moe": "QWEN3MOE", "qwen2_moe": "QWEN2MOE", "phi3": "PHI3",
         "gemma2": "GEMMA2", "gemma3": "GEMMA3", "stablelm": "STABLELM",
         "starcoder2": "STARCODER2", "gpt2": "GPT2"}  # fmt: skip
GEMMA = ("gemma2", "gemma3")
LAYER_NORM = {"stablelm": "layer_norm_eps", "starcoder2": "norm_epsilon"}


def head_dim(cfg: Any) -> int:
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def full_rope(cfg: Any) -> dict[str, Any]:
    """The (full-attention layers') rope parameters."""
    params = dict(cfg.rope_parameters)
    return dict(params.get("full_attention", params))


def write_metadata(w: Any, family: str, cfg: Any) -> None:
    """The shape keys (``{arch}.*``) of ``cfg`` as llama.cpp writes them for ``family``."""
    if family == "gpt2":  # no rope, no kv heads: GPT2Model.set_gguf_parameters
        w.add_block_count(cfg.n_layer)
        w.add_context_length(cfg.n_positions)
        w.add_embedding_length(cfg.n_embd)
        w.add_feed_forward_length(cfg.n_inner or 4 * cfg.n_embd)
        w.add_head_count(cfg.n_head)
        w.add_layer_norm_eps(cfg.layer_norm_epsilon)
        w.add_vocab_size(cfg.vocab_size)
        w.add_eos_token_id(0)
        return
    hd = head_dim(cfg)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(hd)
    w.add_value_length(hd)
    rope = full_rope(cfg)
    partial = rope.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0))
    w.add_rope_dimension_count(int(hd * partial))
    w.add_rope_freq_base(float(rope["rope_theta"]))
    if rope.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rope["factor"]))
    if family in LAYER_NORM:
        w.add_layer_norm_eps(float(getattr(cfg, LAYER_NORM[family])))
    else:
        w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if family in (*GEMMA, "starcoder2", "phi3") and getattr(cfg, "sliding_window", None):
        w.add_sliding_window(cfg.sliding_window)
    if family == "gemma2":
        w.add_float32("gemma2.attn_logit_softcapping", cfg.attn_logit_softcapping)
        w.add_float32("gemma2.final_logit_softcapping", cfg.final_logit_softcapping)
    w.add_vocab_size(cfg.vocab_size)
    w.add_eos_token_id(0)


def stored_vector(family: str, name: str, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(what the file holds for 1-D tensor ``name``, what a reader takes back from it):
    Gemma's norms are stored with 1 added and read back minus 1 (transformers' GGUF
    reader; float32 rounding may make that differ from ``a`` in its last bit)."""
    if family in GEMMA and name.endswith("norm.weight"):
        stored = a + np.float32(1)
        return stored, stored - np.float32(1)
    return a, a
