"""A GGUF file's metadata -> the Hugging Face config.json our models read.

llama.cpp writes the model's shape as ``{arch}.*`` keys (``llama.embedding_length``,
``qwen3.attention.head_count_kv``, ...); they map onto config.json's names as
transformers' GGUF integration maps them, except that ``{arch}.attention.key_length``
(the head size) is honoured for every architecture. Architectures run here: llama (also
what Mistral files say, and Mixtral's: llama with ``llama.expert_count``), qwen2, qwen3,
qwen3moe, qwen2moe, and phi3, gemma2, gemma3, stablelm, starcoder2, gpt2 (what each adds:
``archs.py``); others are refused by name, as is what the file holds that the model
would silently not apply (``rope_freqs``: Llama 3's per-dimension rope factors; Phi-3's
LongRoPE factors; partial rotary outside StableLM; unknown rope scaling; a gating
function other than softmax, scaled expert weights; expert tensors without
``expert_count`` or the reverse).

MoE routing follows llama.cpp's graph for each architecture (vLLM's GGUF models agree):
Mixtral and Qwen3-MoE renormalise their top-k weights, Qwen2-MoE does not; a file's
``{arch}.expert_weights_norm`` overrides that default.

    raw = gguf_config_dict(open_reader("model.gguf"))   # then CheckpointConfig.from_dict
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from actorllm.models.gguf.archs import (
    ARCHITECTURES,
    FIELDS,
    PARTIAL_ROTARY,
    SWA_PATTERN,
    ArchError,
)

if TYPE_CHECKING:
    from gguf import GGUFReader

# A llama file with experts is Mixtral (llama.cpp runs both as arch llama).
MIXTRAL = ("MixtralForCausalLM", "mixtral")
MOE_ARCHITECTURES = frozenset({"qwen3moe", "qwen2moe"})
# llama.cpp's build_moe_ffn norm_w per architecture: renormalise the top-k weights.
NORM_TOPK = {"llama": True, "qwen3moe": True, "qwen2moe": False}
GATING_SOFTMAX = 1  # LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX (the only one run here)
# llama.cpp's converter permutes attn_q / attn_k rows of these (its rotary pairs halves
# differently); the loader undoes it (transformers' LlamaTensorProcessor does the same).
PERMUTED_QK = frozenset({"llama"})
# Refused: tensors whose meaning the model would not apply.
UNSUPPORTED_TENSORS = {
    "rope_freqs.weight": "per-dimension rope frequency factors (Llama 3.1 rope scaling)",
    "rope_factors_long.weight": "Phi-3's LongRoPE factors",
}


class GGUFError(ValueError):
    """The GGUF file cannot be run: unreadable, or a feature named in the message."""

    param = "model"


def is_gguf(path: str | Path) -> bool:
    """A path naming a ``.gguf`` file (existing or not: the loader says which)."""
    return Path(path).suffix.lower() == ".gguf"


def open_reader(path: str | Path) -> GGUFReader:
    """A memory-mapped reader of ``path``; :class:`GGUFError` for a corrupt file."""
    from gguf import GGUFReader

    try:
        return GGUFReader(str(path))
    except Exception as exc:  # the reader raises ValueError, struct/numpy errors, ...
        raise GGUFError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})") from exc


def field(reader: GGUFReader, key: str) -> Any:
    """A metadata value (str, number, list) or None."""
    f = reader.get_field(key)
    return None if f is None else f.contents()


def architecture(reader: GGUFReader) -> str:
    arch = field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise GGUFError(
            f"GGUF architecture {arch!r} is not supported (run: {', '.join(ARCHITECTURES)})"
        )
    return str(arch)


def _one(value: Any, what: str) -> Any:
    """A per-layer list with one value -> that value (different values are refused)."""
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise GGUFError(f"GGUF {what} differs between layers ({value}); not supported")
        return value[0]
    return value


def gguf_config_dict(reader: GGUFReader) -> dict[str, Any]:
    """config.json's keys for the model in ``reader`` (with ``quantization_config``
    ``{"quant_method": "gguf"}``: its linears are built from the file's blocks)."""
    arch = architecture(reader)
    hf_arch, model_type = ARCHITECTURES[arch]
    names = {t.name for t in reader.tensors}

    def key(name: str, default: Any = None) -> Any:
        value = field(reader, f"{arch}.{name}")
        return default if value is None else value

    def need(name: str) -> Any:
        value = key(name)
        if value is None:
            raise GGUFError(f"GGUF metadata lacks {arch}.{name}")
        return value

    for tensor, what in UNSUPPORTED_TENSORS.items():
        if tensor in names:
            raise GGUFError(f"GGUF tensor {tensor!r} ({what}) is not supported")
    moe = _moe_fields(arch, key, names)
    if moe and arch == "llama":
        hf_arch, model_type = MIXTRAL
    # MoE files may leave out the dense width no layer uses.
    ffn = (
        key("feed_forward_length")
        or moe.get("moe_intermediate_size")
        or need("feed_forward_length")
    )
    hidden = int(need("embedding_length"))
    heads = int(_one(need("attention.head_count"), "attention.head_count"))
    kv_heads = int(_one(key("attention.head_count_kv", heads), "attention.head_count_kv"))
    head_dim = int(key("attention.key_length", hidden // heads))
    if int(key("attention.value_length", head_dim)) != head_dim:
        raise GGUFError("GGUF attention.value_length != key_length is not supported")
    rotary = int(key("rope.dimension_count", head_dim))
    if rotary != head_dim and arch not in PARTIAL_ROTARY:
        raise GGUFError(
            f"GGUF rope.dimension_count {key('rope.dimension_count')} != head size "
            f"{head_dim} (partial rotary) is not supported"
        )
    vocab = key("vocab_size")
    if vocab is None:
        tokens = field(reader, "tokenizer.ggml.tokens")
        vocab = len(tokens) if tokens else _embedding_rows(reader)
    theta = float(key("rope.freq_base", 10000.0))
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    scaling = key("rope.scaling.type")
    if scaling not in (None, "none"):
        if scaling != "linear":
            raise GGUFError(f"GGUF rope.scaling.type {scaling!r} is not supported (run: linear)")
        rope = {"rope_type": "linear", "rope_theta": theta,
                "factor": float(need("rope.scaling.factor"))}  # fmt: skip
    eos = field(reader, "tokenizer.ggml.eos_token_id")
    raw = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(_one(ffn, "feed_forward_length")),
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": theta,
        "rope_parameters": rope,
        "max_position_embeddings": int(key("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "hidden_act": "silu",
        "bos_token_id": field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": None if eos is None else int(eos),
        # Activations (and the embedding, norms) run in bfloat16, as vLLM runs GGUF on CPU.
        "dtype": "bfloat16",
        "quantization_config": {"quant_method": "gguf"},
        **moe,
    }
    if arch in PARTIAL_ROTARY:
        raw["partial_rotary_factor"] = rotary / head_dim
    if arch not in SWA_PATTERN and key("attention.sliding_window_pattern") is not None:
        raise GGUFError(f"GGUF {arch}.attention.sliding_window_pattern is not supported")
    if arch in FIELDS:
        try:
            raw.update(FIELDS[arch](key, names, raw))
        except ArchError as e:
            raise GGUFError(str(e)) from None
    return raw


def _moe_fields(arch: str, key: Any, names: set[str]) -> dict[str, Any]:
    """config.json's MoE keys ({} for a dense file); what would not be applied is refused."""
    count = int(key("expert_count") or 0)
    experts = sorted(n for n in names if "_exps." in n)
    if not count and not experts:
        if arch in MOE_ARCHITECTURES:
            raise GGUFError(f"GGUF metadata lacks {arch}.expert_count")
        return {}
    if not count or not experts:
        raise GGUFError(
            f"GGUF MoE experts ({arch}.expert_count={key('expert_count')}, tensors "
            f"{experts[:3]}): expert_count and the ffn_*_exps tensors come together; one "
            "without the other is not supported"
        )
    gating = key("expert_gating_func")
    if gating is not None and int(gating) != GATING_SOFTMAX:
        raise GGUFError(
            f"GGUF {arch}.expert_gating_func={gating} is not supported (run: softmax, 1)"
        )
    scale = key("expert_weights_scale")
    if scale is not None and float(scale) != 1.0:
        raise GGUFError(f"GGUF {arch}.expert_weights_scale={scale} is not supported (run: 1.0)")
    used = key("expert_used_count")
    if used is None:
        raise GGUFError(f"GGUF metadata lacks {arch}.expert_used_count")
    norm = key("expert_weights_norm")
    fields: dict[str, Any] = {
        "num_experts": count,
        "num_local_experts": count,  # Mixtral's name
        "num_experts_per_tok": int(used),
        "norm_topk_prob": NORM_TOPK[arch] if norm is None else bool(norm),
    }
    if arch == "llama":  # Mixtral: the experts are feed_forward_length wide
        if norm is not None and not norm:  # our Mixtral always renormalises
            raise GGUFError("GGUF llama.expert_weights_norm=false is not supported")
        return fields
    inter = key("expert_feed_forward_length")
    if inter is None:
        raise GGUFError(f"GGUF metadata lacks {arch}.expert_feed_forward_length")
    fields.update(moe_intermediate_size=int(inter), decoder_sparse_step=1, mlp_only_layers=[])
    if arch == "qwen2moe":
        shared = key("expert_shared_feed_forward_length")
        if shared is None:
            raise GGUFError(f"GGUF metadata lacks {arch}.expert_shared_feed_forward_length")
        fields["shared_expert_intermediate_size"] = int(shared)
    return fields


def _embedding_rows(reader: GGUFReader) -> int:
    for t in reader.tensors:
        if t.name == "token_embd.weight":
            return int(t.shape[-1])  # GGUF shapes are [columns, rows]
    raise GGUFError("GGUF file has neither a vocab_size nor a token_embd.weight")
