"""Build a model from a GGUF file: every linear (the LM head too) a :class:`GGUFLinear`
over the file's blocks repacked at load (``blocks.py``), the rest (norms, biases, a float
embedding) read as floats into the model dtype. MoE experts (``blk.N.ffn_*_exps``, 3-D) are
split per expert into :class:`GGUFExperts`' linears, still in their blocks; the routers
(``ffn_gate_inp``, Qwen2-MoE's ``ffn_gate_inp_shexp``) are read as floats, dequantized if
the file quantized them (they are [E, H], tiny).

Names: llama.cpp's (``blk.N.attn_q.weight``) from the ``gguf`` package's own map of HF
names (``get_tensor_name_map``), the one its converter writes with. Llama's ``attn_q`` /
``attn_k`` rows come back in HF's order (the converter's permutation undone on the
quantized rows: each output row's blocks move whole). A tensor of a type without a kernel
is refused by name; a quantized token embedding keeps its blocks (:class:`GGUFEmbedding`,
sharing a tied head's). Every tensor of the file must find its place (and every parameter
its tensor), or the load fails naming them.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from actorllm.models.base import CausalLM
from actorllm.models.config import CheckpointConfig
from actorllm.models.gguf.archs import NORM_PLUS_ONE, hf_name
from actorllm.models.gguf.blocks import FLOAT_TYPES, BlockWeight, check_type, float_rows, repack
from actorllm.models.gguf.config import PERMUTED_QK, architecture, open_reader
from actorllm.models.gguf.embedding import GGUFEmbedding
from actorllm.models.gguf.experts import GGUFExperts
from actorllm.models.gguf.linear import GGUFLinear, Part
from actorllm.models.gguf.shards import part_shape, rank_part
from actorllm.models.llama import VocabParallelEmbedding
from actorllm.models.materialize import materialize
from actorllm.models.meta_init import on_meta
from actorllm.models.moe import FusedExperts, SparseMoeBlock
from actorllm.models.parallel import TensorParallelError, rank_piece
from actorllm.models.pipeline import owns_weight
from actorllm.models.quant.apply import ROUTERS
from actorllm.models.registry import resolve_model_class

log = logging.getLogger(__name__)


class GGUFLoadError(RuntimeError):
    """The GGUF file's tensors do not fit the model its metadata describes."""


def _rows_cols(t: Any) -> tuple[int, int]:
    """A reader tensor's [rows, columns] (GGUF lists dimensions innermost first)."""
    dims = [int(d) for d in t.shape]
    if len(dims) == 1:
        return dims[0], 1
    if len(dims) != 2:
        raise GGUFLoadError(f"GGUF tensor {t.name!r}: {len(dims)} dimensions, expected 1 or 2")
    return dims[1], dims[0]


def qk_unpermute(rows: int, n_head: int) -> torch.Tensor:
    """Row order that undoes llama.cpp's Q/K permutation: ``w_hf = w_gguf[index]``
    (the converter's ``reshape(n_head, 2, d, ...).swapaxes(1, 2)``, inverted)."""
    d = rows // n_head // 2
    return torch.arange(rows).view(n_head, d, 2).transpose(1, 2).reshape(rows)


class _File:
    """The reader's tensors by name, with the ones consumed so far."""

    def __init__(self, path: Path) -> None:
        self.reader = open_reader(path)
        self.arch = architecture(self.reader)
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.used: set[str] = set()

    def get(self, name: str) -> Any:
        t = self.tensors.get(name)
        if t is None:
            raise GGUFLoadError(f"GGUF file lacks tensor {name!r}")
        check_type(name, t.tensor_type)
        self.used.add(name)
        return t

    def whole(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as float32 in its own shape (a vector: [n])."""
        t = self.get(name)
        rows, cols = _rows_cols(t)
        out = float_rows(t.data, t.tensor_type, rows, cols)
        return out.view(rows) if len(t.shape) == 1 else out

    def part(self, name: str, dtype: torch.dtype) -> Part:
        """Weight ``name`` whole, as a linear's part (blocks stay quantized)."""
        t = self.get(name)
        rows, cols = _rows_cols(t)
        if t.tensor_type in FLOAT_TYPES:
            return float_rows(t.data, t.tensor_type, rows, cols).to(dtype)
        return repack(t.data, t.tensor_type, rows, cols)

    def expert_parts(self, name: str, n: int, dtype: torch.dtype) -> list[Part]:
        """3-D expert tensor ``name`` [n, rows, cols] -> one whole part per expert (blocks
        stay quantized: expert ``e`` is the ``e``-th slab of whole rows)."""
        t = self.get(name)
        dims = tuple(int(d) for d in reversed(t.shape))  # GGUF lists innermost first
        if len(dims) != 3 or dims[0] != n:
            raise GGUFLoadError(f"GGUF tensor {name!r}: shape {dims}, expected {n} experts")
        _n, rows, cols = dims
        if t.tensor_type in FLOAT_TYPES:
            w = float_rows(t.data, t.tensor_type, n * rows, cols).to(dtype).view(n, rows, cols)
            return [w[e].clone() for e in range(n)]
        data = np.asarray(t.data).reshape(n, rows, -1)  # [n, rows, bytes per row]
        return [repack(data[e], t.tensor_type, rows, cols) for e in range(n)]


def _local(
    cfg: CheckpointConfig, name: str, tensor: str, part: Part, local: tuple[int, int]
) -> Part:
    """This rank's piece of weight ``name`` (the file's ``tensor``), checked to be
    ``local`` [rows, cols]."""
    piece = rank_part(cfg, name, tensor, part, local)
    if part_shape(piece) != local:
        whole = part_shape(part)
        raise GGUFLoadError(
            f"GGUF tensor {tensor!r}: shape {whole} != expected {local}"
            if cfg.tp_size == 1
            else f"GGUF tensor {tensor!r}: shape {whole} does not split into this rank's "
            f"{local} (tensor_parallel_size={cfg.tp_size})"
        )
    return piece


def load_gguf(
    path: str | Path,
    cfg: CheckpointConfig,
    *,
    dtype: torch.dtype,
    device: torch.device | str,
    ops: Any,
    max_positions: int | None,
) -> CausalLM:
    """The model of GGUF file ``path`` (whose metadata gave ``cfg``) on ``device``."""
    f = _File(Path(path))
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    arch_id = next(k for k, v in MODEL_ARCH_NAMES.items() if v == f.arch)
    names = get_tensor_name_map(arch_id, cfg.num_layers)

    def gguf_name(hf: str) -> str:
        found = names.get_name(hf_name(f.arch, hf), try_suffixes=(".weight", ".bias"))
        if found is None:
            raise GGUFLoadError(f"no GGUF name for {hf!r} ({f.arch})")
        return str(found)

    with on_meta():
        model = resolve_model_class(cfg.architecture)(cfg, ops)
    model = model.to(dtype=dtype)
    moe: dict[int, GGUFExperts] = {}  # layer -> its experts
    for owner_name, owner in list(model.named_modules()):
        if isinstance(owner, SparseMoeBlock) and isinstance(owner.experts, FusedExperts):
            ex = owner.experts
            owner.experts = GGUFExperts(ex.num_experts, int(ex.w13.shape[2]), ex.inter,
                                        f"{owner_name}.experts")  # fmt: skip
            moe[_layer_index(owner_name)] = owner.experts
    fused: dict[str, list[str]] = {}
    for frag, (packed, _shard) in model.packed_modules.items():
        fused.setdefault(packed, []).append(frag)
    linears: dict[str, tuple[GGUFLinear, list[str]]] = {}
    for owner_name, owner in list(model.named_modules()):
        for child_name, child in list(owner.named_children()):
            if type(child) is not nn.Linear:
                continue
            if isinstance(owner, SparseMoeBlock) and child_name in ROUTERS:
                continue  # a float parameter, read below
            prefix = f"{owner_name}.{child_name}".removeprefix(".")
            frags = fused.get(child_name)
            hf = [f"{owner_name}.{fr}" for fr in frags] if frags else [prefix]
            layer = GGUFLinear(child.in_features, child.out_features, prefix)
            setattr(owner, child_name, layer)
            linears[prefix] = (layer, hf)
    model = materialize(model, device)
    types: Counter[str] = Counter()
    with torch.no_grad():
        for prefix, (layer, hf) in linears.items():
            _fill_linear(f, layer, hf, prefix, gguf_name, cfg, dtype, types)
        for index, experts in moe.items():
            _fill_experts(f, experts, index, cfg, dtype, types)
        embedding = _quantized_embedding(f, model, gguf_name, cfg, dtype)
        for name, p in model.named_parameters():
            _fill_param(f, p, name, gguf_name(name), cfg)
    unused = sorted(t for t in set(f.tensors) - f.used if owns_weight(cfg, _our_owner(t)))
    if unused:
        raise GGUFLoadError(f"GGUF tensors the model has no place for: {', '.join(unused[:8])}")
    model.to(device)  # the linears' buffers (built on the CPU) where the model is
    log.info(
        "GGUF %s (%s): linears keep their blocks (%s); the token embedding %s",
        Path(path).name, f.arch, ", ".join(f"{k} x{v}" for k, v in sorted(types.items())),
        f"keeps its blocks too ({embedding})" if embedding else "is in floats",
    )  # fmt: skip
    model.init_rotary(device, max_positions)
    return model.eval()


def _fill_linear(
    f: _File,
    layer: GGUFLinear,
    hf: list[str],
    prefix: str,
    gguf_name: Any,
    cfg: CheckpointConfig,
    dtype: torch.dtype,
    types: Counter[str],
) -> None:
    """Read the parts (fused q/k/v, gate/up: one per HF tensor) and biases of ``layer``."""
    if prefix == "lm_head" and cfg.tie_word_embeddings:
        hf = ["model.embed_tokens"]  # no output.weight: the head is the embedding
    sizes = _part_rows(cfg, hf, layer.out_features)
    if len(hf) > 1 and _stored_fused(f, prefix, hf, gguf_name):
        if cfg.tp_size > 1:  # the rank's rows of each part would be cut out of one tensor
            raise TensorParallelError(
                f"tensor_parallel_size={cfg.tp_size}: GGUF tensor "
                f"{gguf_name(prefix + '.weight')!r} stores {', '.join(hf)} fused; splitting "
                "it over ranks is not supported"
            )
        hf, sizes = [prefix], [layer.out_features]
    parts: list[Part] = []
    biases: list[torch.Tensor] = []
    for name, rows in zip(hf, sizes, strict=True):
        tname = gguf_name(f"{name}.weight")
        part = f.part(tname, dtype)
        types[part.qtype if isinstance(part, BlockWeight) else str(part.dtype)] += 1
        perm = _qk_permutation(f.arch, name, part_shape(part)[0], cfg)
        if perm is not None:  # on the whole tensor: the heads are the file's
            part = part.take_rows(perm) if isinstance(part, BlockWeight) else part[perm]
        parts.append(_local(cfg, f"{name}.weight", tname, part, (rows, layer.in_features)))
        bias_name = gguf_name(f"{name}.bias")
        if bias_name in f.tensors:
            b = f.whole(bias_name)
            b = b if perm is None else b[perm]
            biases.append(rank_piece(cfg, f"{name}.bias", (rows,), b))
    if biases and len(biases) != len(hf):
        raise GGUFLoadError(f"GGUF {prefix}: only some of {hf} have a bias")
    bias = torch.cat(biases).to(dtype) if biases else None
    layer.set_weights(parts, bias)


def _stored_fused(f: _File, prefix: str, hf: list[str], gguf_name: Any) -> bool:
    """Whether the file stores fused linear ``prefix`` as one tensor (Phi-3's ``attn_qkv``,
    its ``ffn_up`` holding gate and up) instead of one tensor per part ``hf``: the fused
    name is there and the first part's is not (a Llama file's ``ffn_up`` is up alone)."""

    def name(hf_name: str) -> str | None:
        try:
            return str(gguf_name(f"{hf_name}.weight"))
        except GGUFLoadError:  # the architecture has no such tensor (Phi-3: no ffn_gate)
            return None

    fused, first = name(prefix), name(hf[0])
    return fused in f.tensors and first not in f.tensors


def _quantized_embedding(
    f: _File, model: nn.Module, gguf_name: Any, cfg: CheckpointConfig, dtype: torch.dtype
) -> str | None:
    """A token embedding stored in blocks becomes a :class:`GGUFEmbedding` over them (this
    rank's vocabulary rows; the tied head's own tensors where it has the same rows).
    Returns its type, or None (a float embedding, or none on this pipeline stage)."""
    inner = getattr(model, "model", None)
    old = getattr(inner, "embed_tokens", None)
    tname = gguf_name("model.embed_tokens.weight")
    if not isinstance(old, nn.Embedding | VocabParallelEmbedding) or tname not in f.tensors:
        return None
    if f.tensors[tname].tensor_type in FLOAT_TYPES:
        return None
    local = (int(old.weight.shape[0]), int(old.weight.shape[1]))
    head = getattr(model, "lm_head", None)
    shared = (
        head.parts[0]
        if cfg.tie_word_embeddings and isinstance(head, GGUFLinear) and len(head.parts) == 1
        else None
    )
    if isinstance(shared, BlockWeight) and part_shape(shared) == local:
        f.get(tname)  # used: through the head's blocks
        weight = shared
    else:
        piece = _local(cfg, "model.embed_tokens.weight", tname, f.part(tname, dtype), local)
        assert isinstance(piece, BlockWeight)
        weight = piece
    start = int(getattr(old, "start", 0))
    setattr(inner, "embed_tokens", GGUFEmbedding(weight, start, dtype))  # noqa: B010
    return weight.qtype


def _fill_param(f: _File, p: torch.Tensor, name: str, tensor: str, cfg: CheckpointConfig) -> None:
    """A float parameter (embedding, norm, router, ...): this rank's piece of ``tensor``."""
    whole = f.whole(tensor)
    if f.arch in NORM_PLUS_ONE and tensor.endswith("norm.weight"):
        whole = whole - 1  # the converter stored Gemma's 1 + w
    if whole.numel() == p.numel():  # not split here (a [1, H] gate may be stored as [H])
        whole = whole.view(p.shape)
    piece = rank_piece(cfg, name, tuple(p.shape), whole)
    if piece.shape != p.shape:
        raise GGUFLoadError(
            f"GGUF tensor {tensor!r}: shape {tuple(whole.shape)} != expected {tuple(p.shape)}"
        )
    p.copy_(piece)


# llama.cpp's names outside the layers -> ours (what pipeline stages own them by).
_OUTSIDE_LAYERS = {"token_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight",
                   "output": "lm_head.weight",
                   "position_embd": "model.embed_positions.weight"}  # fmt: skip


def _our_owner(tensor: str) -> str:
    """A name of ours that a pipeline stage owns exactly when it owns GGUF ``tensor``:
    ``blk.N.*`` is layer N's; the embedding, final norm and head by their names."""
    found = re.match(r"blk\.(\d+)\.", tensor)
    if found:
        return f"model.layers.{found.group(1)}.{tensor}"
    return _OUTSIDE_LAYERS.get(tensor.split(".", 1)[0], tensor)


def _layer_index(module: str) -> int:
    found = re.search(r"layers\.(\d+)\.", module)
    if found is None:
        raise GGUFLoadError(f"no layer index in {module!r}")
    return int(found.group(1))


def _fill_experts(
    f: _File,
    experts: GGUFExperts,
    layer: int,
    cfg: CheckpointConfig,
    dtype: torch.dtype,
    types: Counter[str],
) -> None:
    """Split layer ``layer``'s 3-D expert tensors into ``experts``' linears (expert e's
    gate and up rows fused into its gate_up_proj)."""
    n, hidden, inter = experts.num_experts, experts.hidden, experts.inter
    names = {k: f"blk.{layer}.ffn_{k}_exps.weight" for k in ("gate", "up", "down")}
    whole = {k: f.expert_parts(t, n, dtype) for k, t in names.items()}
    ours = f"model.layers.{layer}.mlp.experts"

    def piece(kind: str, e: int, local: tuple[int, int]) -> Part:
        return _local(cfg, f"{ours}.{e}.{kind}_proj.weight", names[kind], whole[kind][e], local)

    for e in range(n):
        expert = experts.expert(e)
        gate_up = [piece("gate", e, (inter, hidden)), piece("up", e, (inter, hidden))]
        expert.gate_up_proj.set_weights(gate_up, None)
        expert.down_proj.set_weights([piece("down", e, (hidden, inter))], None)
    for parts in whole.values():
        p = parts[0]
        types[f"{p.qtype if isinstance(p, BlockWeight) else p.dtype} experts"] += 1


def _part_rows(cfg: CheckpointConfig, hf: list[str], out: int) -> list[int]:
    """Output rows of each HF tensor fused into one linear."""
    if len(hf) == 1:
        return [out]
    if hf[0].endswith("q_proj"):
        q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        return [q, kv, kv]
    return [out // len(hf)] * len(hf)  # gate / up


def _qk_permutation(arch: str, hf: str, rows: int, cfg: CheckpointConfig) -> torch.Tensor | None:
    if arch not in PERMUTED_QK:
        return None
    if hf.endswith("self_attn.q_proj"):  # the file's heads (tensor parallel: all of them)
        return qk_unpermute(rows, cfg.full_num_heads or cfg.num_heads)
    if hf.endswith("self_attn.k_proj"):
        return qk_unpermute(rows, cfg.full_num_kv_heads or cfg.num_kv_heads)
    return None
