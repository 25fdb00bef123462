"""Tiny GGUF files written with the ``gguf`` package (``GGUFWriter``, ``gguf.quants``) from a
tiny random Hugging Face model, each with its reference: the same HF model holding the
weights ``gguf.quants.dequantize`` reads back from the file (so a correct loader gives the
reference's tokens).

Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 weights are quantized with ``gguf.quants.quantize``; the
package has no K-quant quantizer, so Q2_K ... Q6_K tensors are random valid blocks (the
reference is their dequantized values). Llama's q/k rows are permuted as llama.cpp's
converter writes them; the reference undoes it with an inverse computed here (``argsort``
of the forward permutation), independently of the loader.

    ref_dir, gguf_file = write_gguf(tmp_path, "qwen3", qtype="Q4_K", overrides={"v_proj": "Q6_K"})

MoE families (mixtral, qwen3_moe, qwen2_moe) are written as llama.cpp's converter writes
them: transformers' stacked ``experts.gate_up_proj`` [E, 2I, H] split into
``blk.N.ffn_gate_exps`` / ``ffn_up_exps`` [E, I, H] and ``down_proj`` into
``ffn_down_exps`` [E, H, I] (quantized along their rows, ``overrides`` keys ``"experts"``),
the routers (``ffn_gate_inp``, ``ffn_gate_inp_shexp``) in F32; Mixtral as architecture
llama with ``llama.expert_count``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from actorllm.testing.random_gguf import random_blocks
from tests.helpers.gguf_archs import ARCHS, stored_vector, write_metadata
from tests.helpers.models import make_tiny_checkpoint

ROUTERS = ("gate", "shared_expert_gate")
CONV1D = ("c_attn", "c_proj", "c_fc")  # GPT-2's [in, out] weights
K_QUANTS = tuple(gguf.GGMLQuantizationType[f"Q{b}_K"] for b in range(2, 7))
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Sizes the K-quants take (rows of whole 256-value super-blocks).
SHAPE: dict[str, Any] = dict(
    hidden_size=256, intermediate_size=512, vocab_size=256, num_heads=4, num_kv_heads=2,
    head_dim=64, eos_token_id=0,
)  # fmt: skip


def converter_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute (rows of q / k)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def write_gguf(
    directory: Path,
    family: str = "qwen3",
    *,
    qtype: str = "Q8_0",
    overrides: dict[str, str] | None = None,
    embed_type: str = "F32",
    head_type: str | None = None,
    router_type: str = "F32",
    tie_word_embeddings: bool = False,
    seed: int = 0,
    **config: Any,
) -> tuple[Path, Path]:
    """(reference HF directory, GGUF file): every linear in ``qtype`` (or ``overrides``
    ``{"v_proj": "Q6_K"}``), the embedding in ``embed_type``, the head in ``head_type``
    (default ``qtype``), MoE routers in ``router_type``, norms (and biases) in F32."""
    import transformers

    T = gguf.GGMLQuantizationType
    overrides = overrides or {}
    shape = {**SHAPE, **config, "tie_word_embeddings": tie_word_embeddings}
    src = make_tiny_checkpoint(directory / "src", family, seed=seed, **shape)  # type: ignore[arg-type]
    model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    cfg = model.config
    arch = gguf.MODEL_ARCH[ARCHS[family]]
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    path = directory / f"model-{qtype}.gguf"
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    write_metadata(w, family, cfg)
    experts = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
        if family != "mixtral":
            w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
        if family == "qwen2_moe":
            w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    rng = np.random.default_rng(seed)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("inv_freq")}
    ref: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        if ".experts." in name:
            ref[name] = _write_experts(w, name, tensor, T[overrides.get("experts", qtype)], rng)
            continue
        gname = names.get_name(name, try_suffixes=(".weight", ".bias"))
        a = tensor.numpy().astype(np.float32)
        if a.ndim == 1:
            stored, back = stored_vector(family, name, a)
            w.add_tensor(gname, stored)
            ref[name] = torch.from_numpy(back)
            continue
        module = name.rsplit(".", 2)[-2]
        conv1d = family == "gpt2" and module in CONV1D  # [in, out]: the converter transposes
        if conv1d:
            a = np.ascontiguousarray(a.T)
        if name in ("model.embed_tokens.weight", "transformer.wte.weight"):
            kind = embed_type
        elif name == "transformer.wpe.weight":
            kind = "F32"
        elif module in ROUTERS:
            kind = router_type  # llama.cpp's converter keeps them F32
        elif name == "lm_head.weight":
            kind = head_type or qtype
        else:
            kind = overrides.get(module, qtype)
        permuted = ARCHS[family] == "LLAMA" and module in ("q_proj", "k_proj")
        n_head = 0
        if permuted:
            n_head = cfg.num_attention_heads if module == "q_proj" else cfg.num_key_value_heads
        if permuted:
            a = converter_permute(a, n_head)
        t = T[kind]
        if kind == "F32":
            data, stored = a, a
        elif t in K_QUANTS:
            data = random_blocks(a.shape[0], a.shape[1], t, rng)
            stored = gguf.quants.dequantize(data, t)
        else:
            data = gguf.quants.quantize(a, t)
            stored = gguf.quants.dequantize(data, t)
        w.add_tensor(gname, data, raw_dtype=None if kind == "F32" else t)
        if name == "transformer.wte.weight":  # GPT-2's converter writes the tied head too
            w.add_tensor("output.weight", data, raw_dtype=None if kind == "F32" else t)
        back = torch.from_numpy(np.ascontiguousarray(stored, dtype=np.float32))
        if permuted:
            forward = converter_permute(np.arange(a.shape[0]), n_head)
            back = back[torch.from_numpy(np.argsort(forward))]
        ref[name] = back.t().contiguous() if conv1d else back
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if cfg.tie_word_embeddings:
        ref["lm_head.weight"] = ref.get(
            "model.embed_tokens.weight", ref.get("transformer.wte.weight")
        )
    model.load_state_dict(ref, strict=False)
    ref_dir = directory / "ref"
    model.save_pretrained(ref_dir)
    return ref_dir, path


def _write_experts(
    w: Any, name: str, tensor: torch.Tensor, t: Any, rng: np.random.Generator
) -> torch.Tensor:
    """transformers' stacked expert tensor ``name`` -> llama.cpp's 3-D tensors in ``t``
    (quantized with gguf.quants, K-quants random blocks); returns what the file holds, in
    ``name``'s layout."""

    layer = int(name.split(".")[2])
    a = tensor.numpy().astype(np.float32)  # [E, 2I, H] or [E, H, I]
    if name.endswith("gate_up_proj"):
        inter = a.shape[1] // 2
        pieces = {"ffn_gate_exps": a[:, :inter], "ffn_up_exps": a[:, inter:]}
    else:
        pieces = {"ffn_down_exps": a}
    back = []
    for gname, piece in pieces.items():
        if t in K_QUANTS:
            e, rows, cols = piece.shape
            data = random_blocks(e * rows, cols, t, rng).reshape(e, rows, -1)
        else:
            data = gguf.quants.quantize(np.ascontiguousarray(piece), t)
        plain = t in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
        w.add_tensor(f"blk.{layer}.{gname}.weight", data, raw_dtype=None if plain else t)
        back.append(gguf.quants.dequantize(data, t))
    return torch.from_numpy(np.ascontiguousarray(np.concatenate(back, axis=1), dtype=np.float32))


def rewrite_gguf(src: Path, dst: Path, *, arch: str | None = None, qtype: Any = None,
                 extra: str | None = None, keys: dict[str, int] | None = None,
                 drop: str | None = None) -> Path:  # fmt: skip
    """A copy of GGUF ``src``: another architecture name, ffn_down of layer 0 in
    ``qtype`` (quantized with gguf.quants), an extra F32 tensor ``extra``, uint32 metadata
    ``keys`` added or replaced, or the metadata key ``drop`` left out."""

    keys = keys or {}
    r = gguf.GGUFReader(str(src))
    name = arch or str(r.get_field("general.architecture").contents())
    w = gguf.GGUFWriter(str(dst), name)
    for f in r.fields.values():
        if f.name.startswith(("general.architecture", "GGUF.")) or f.name in (*keys, drop):
            continue
        key = f.name.replace(
            str(r.get_field("general.architecture").contents()) + ".", name + ".", 1
        )
        w.add_key_value(key, f.contents(), f.types[0], f.types[-1] if len(f.types) > 1 else None)
    for t in r.tensors:
        if qtype is not None and t.name == "blk.0.ffn_down.weight":
            floats = gguf.quants.dequantize(t.data, t.tensor_type)
            w.add_tensor(t.name, gguf.quants.quantize(floats, qtype), raw_dtype=qtype)
        else:
            raw = None if t.tensor_type == gguf.GGMLQuantizationType.F32 else t.tensor_type
            w.add_tensor(t.name, np.array(t.data), raw_dtype=raw)
    for k, v in keys.items():
        w.add_uint32(k, v)
    if extra is not None:
        w.add_tensor(extra, np.ones(32, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst
