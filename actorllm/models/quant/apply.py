"""Choose the quantized linears at load: which of a model's linears the checkpoint stores
quantized (``QuantSpec.quantizes``), built in place of their ``nn.Linear`` before any
weight is read, and repacked for the forward once every tensor is in.

MoE experts are built as :class:`QuantExperts` (``experts.py``) when the checkpoint
quantizes every expert's projections; the router (``gate``) and Qwen2-MoE's
``shared_expert_gate`` always stay unquantized (as vLLM builds them). gpt-oss's mxfp4
checkpoints quantize only their MoE experts (``models/quant/mxfp4.py``).

GPTQ and AWQ checkpoints written with ``lm_head: true`` store the LM head quantized too
(vLLM's ``lm_head_quantized``): it is built as their packed linear over this rank's
vocabulary rows (``models/parallel.py`` splits its packed tensors as it splits the float
head). A head tied to the embedding cannot be both. The checkpoint's lists of what it
quantizes may name the head ``lm_head`` or as the family saves it (GPT-NeoX's
``embed_out``): :func:`head_names`.

What is not built is refused here by name: GPT-2 but for GPTQ and GGUF, Phi-3's and GLM's fused
checkpoints, a quantized head tied to the embedding, compressed-tensors' quantized
``lm_head``, fused projections whose parts disagree on being quantized, experts of which
only some are quantized, and, with tensor parallelism, splits that cut a scale group,
block or packed word (``models/quant/shards.py``; a GGUF file's:
``models/gguf/shards.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from actorllm.models.base import CausalLM
from actorllm.models.config import CheckpointConfig
from actorllm.models.families import FUSED_CHECKPOINTS
from actorllm.models.family_names import hf_module_name
from actorllm.models.meta_init import on_meta
from actorllm.models.moe import FusedExperts, SparseMoeBlock
from actorllm.models.parallel import split_kind
from actorllm.models.quant.experts import QuantExperts
from actorllm.models.quant.linear import QUANT_LINEARS, quant_linear
from actorllm.models.quant.shards import check_shard_alignment
from actorllm.models.quant.spec import QuantizationError, QuantSpec, resolve_quantization


def checkpoint_quantization(cfg: CheckpointConfig, requested: str | None) -> QuantSpec | None:
    """The checkpoint's quantization with the ``quantization`` argument, checked against
    what this model can run; raises :class:`QuantizationError` naming what is not."""
    spec = resolve_quantization(cfg.quantization_config, requested)
    if spec is None:
        return None
    if spec.scheme == "mxfp4":
        return _check_mxfp4(cfg, spec)
    problems = []
    if cfg.model_type == "gpt2" and spec.method not in ("gptq", "gguf"):
        # GPTQ's packer transposes a Conv1D weight into nn.Linear's layout and a GGUF file
        # holds the converter's linear rows; other methods' layout of one is not known here.
        problems.append(f"GPT-2's Conv1D weights in a {spec.method} checkpoint")
    if cfg.model_type in FUSED_CHECKPOINTS and spec.method != "gguf":  # GGUF reads them whole
        problems.append(FUSED_CHECKPOINTS[cfg.model_type])
    if cfg.model_type == "granitemoe":
        problems.append("GraniteMoE's stacked experts (input_linear / output_linear)")
    heads = head_names(cfg.model_type)
    if spec.method == "compressed-tensors" and spec.quantizes_any(heads):
        problems.append("a quantized lm_head (not in the checkpoint's ignore list)")
    if spec.quantizes_head(heads) and cfg.tie_word_embeddings:
        problems.append(
            "a quantized lm_head (lm_head=true) tied to the embedding (tie_word_embeddings=true)"
        )
    if problems:
        raise QuantizationError(
            f"quantization method {spec.method!r} is not supported with " + "; ".join(problems)
        )
    return spec


def head_names(model_type: str) -> tuple[str, ...]:
    """The names a checkpoint's quantization lists may give the LM head: ``lm_head`` and
    the family's own (GPT-NeoX's ``embed_out``), as the loader reads its tensors under
    either (``models/family_names.py``)."""
    own = hf_module_name(model_type, "lm_head")
    return ("lm_head",) if own == "lm_head" else (own, "lm_head")


def _check_mxfp4(cfg: CheckpointConfig, spec: QuantSpec) -> QuantSpec:
    """mxfp4 quantizes MoE experts only, the layout gpt-oss's checkpoints have."""
    if cfg.model_type != "gpt_oss":
        raise QuantizationError(
            f"quantization method 'mxfp4' is supported for gpt-oss's MoE experts only, "
            f"not {cfg.architecture}"
        )
    if cfg.tp_size > 1:
        raise QuantizationError(
            f"quantization method 'mxfp4' is not supported with tensor_parallel_size="
            f"{cfg.tp_size} (quantized weights are not split over ranks)"
        )
    return spec


def quantize_linears(model: CausalLM, spec: QuantSpec, dtype: torch.dtype) -> int:
    """Replace (on the meta device, before loading) every linear the checkpoint stores
    quantized with its quantized layer; returns how many."""
    fused: dict[str, list[str]] = {}
    for frag, (packed, _shard) in model.packed_modules.items():
        fused.setdefault(packed, []).append(frag)
    count = _quantize_head(model, spec, dtype)
    for owner_name, owner in list(model.named_modules()):
        if isinstance(owner, SparseMoeBlock) and isinstance(owner.experts, FusedExperts):
            count += _quantize_experts(model, owner, owner_name, spec, dtype)
        for child_name, child in list(owner.named_children()):
            if type(child) is not nn.Linear or child_name == "lm_head":
                continue
            if isinstance(owner, SparseMoeBlock) and child_name in ROUTERS:
                continue
            prefix = f"{owner_name}.{child_name}".removeprefix(".")
            frags = fused.get(child_name)
            ours = [f"{owner_name}.{f}" for f in frags] if frags else [prefix]
            hf = [hf_module_name(model.config.model_type, o) for o in ours]  # OPT's names
            flags = {spec.quantizes(h) for h in hf}
            if len(flags) > 1:
                raise QuantizationError(
                    f"quantization method {spec.method!r}: {', '.join(hf)} are fused into "
                    f"{prefix} but only some of them are quantized; that is not supported"
                )
            if not flags.pop():
                continue
            sizes: list[int] | None = getattr(owner, "shard_sizes", None) if frags else None
            cfg, kind = model.config, split_kind(ours[0])
            out_sizes = list(sizes or [child.out_features])
            check_shard_alignment(cfg, spec, prefix, kind, child.in_features, out_sizes)
            row = kind == "row" and cfg.tp_size > 1
            with on_meta():
                layer = quant_linear(
                    spec, child.in_features, child.out_features, child.bias is not None,
                    dtype, list(sizes) if sizes else None,
                    (cfg.tp_rank, cfg.tp_size) if row else None,
                )  # fmt: skip
            setattr(owner, child_name, layer)
            count += 1
    if count == 0:
        raise QuantizationError(
            f"quantization method {spec.method!r}: the quantization_config quantizes none "
            "of the model's linears"
        )
    return count


def _quantize_head(model: CausalLM, spec: QuantSpec, dtype: torch.dtype) -> int:
    """Build the LM head quantized when the checkpoint stores it so (1) or leave it (0)."""
    head = getattr(model, "lm_head", None)
    if type(head) is not nn.Linear or not spec.quantizes_head(head_names(model.config.model_type)):
        return 0  # float, or another pipeline stage's (PPMissingLayer)
    cfg = model.config
    # Vocab-parallel: each rank's ceil(V / N) rows are column-parallel outputs.
    check_shard_alignment(cfg, spec, "lm_head", "column", head.in_features, [head.out_features])
    with on_meta():
        model.lm_head = quant_linear(  # type: ignore[assignment]
            spec, head.in_features, head.out_features, head.bias is not None, dtype
        )
    return 1


# A MoE block's linears that route rather than compute: never quantized (vLLM builds them
# with quant_config=None); a checkpoint storing them quantized fails to load, named.
ROUTERS = ("gate", "shared_expert_gate")


def _quantize_experts(
    model: CausalLM, block: SparseMoeBlock, name: str, spec: QuantSpec, dtype: torch.dtype
) -> int:
    """Replace ``block``'s stacked experts by quantized ones when the checkpoint quantizes
    them (all of them: some quantized, some not is refused); returns the linears built."""
    experts = block.experts
    assert isinstance(experts, FusedExperts)
    hf_block, projs = name, ("gate_proj", "up_proj", "down_proj")
    if model.config.model_type in ("mixtral", "phimoe"):  # block_sparse_moe.experts.{e}.w1
        hf_block, projs = name.replace(".mlp", ".block_sparse_moe"), ("w1", "w3", "w2")
    names = [f"{hf_block}.experts.{e}.{p}" for e in range(experts.num_experts) for p in projs]
    flags = [spec.quantizes(n) for n in names]
    if not any(flags):
        return 0
    if not all(flags):
        plain = [n for n, f in zip(names, flags, strict=True) if not f]
        raise QuantizationError(
            f"quantization method {spec.method!r}: MoE experts of which only some are "
            f"quantized ({', '.join(plain[:3])}{' ...' if len(plain) > 3 else ''} are not) "
            "are not supported"
        )
    hidden, inter, cfg = experts.w13.shape[2], experts.inter, model.config
    row_shard = None
    if cfg.tp_size > 1:  # every expert has the same shapes: expert 0 is checked
        row_shard = (cfg.tp_rank, cfg.tp_size)
        first = f"{name}.experts.0"
        check_shard_alignment(cfg, spec, f"{first}.gate_up_proj", "column", hidden, [inter] * 2)
        check_shard_alignment(cfg, spec, f"{first}.down_proj", "row", inter, [hidden])
    with on_meta():
        block.experts = QuantExperts(experts.num_experts, hidden, inter, spec, dtype, row_shard)
    return 2 * experts.num_experts


def finish_quantized(model: nn.Module, written: Mapping[str, object]) -> None:
    """Repack every quantized linear for its forward (after all tensors were copied)."""
    for name, module in model.named_modules():
        if isinstance(module, QUANT_LINEARS):
            absent = frozenset(p for p in module.optional_params if f"{name}.{p}" not in written)
            module.finish_loading(absent)


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters and buffers (each storage once): what the weights
    hold resident, quantized linears at their packed size."""
    seen: set[int] = set()
    total = 0
    tensors = list(model.parameters()) + [b for b in model.buffers() if b is not None]
    for t in tensors:
        if t.device.type == "meta":
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        total += t.untyped_storage().nbytes()
    return total


def optional_param(model: nn.Module, name: str) -> bool:
    """Whether parameter ``name`` may be absent from the checkpoint (GPTQ's ``g_idx``)."""
    owner, _, leaf = name.rpartition(".")
    module = model.get_submodule(owner) if owner else model
    return leaf in getattr(module, "optional_params", ())


__all__ = [
    "QuantizationError",
    "checkpoint_quantization",
    "finish_quantized",
    "optional_param",
    "quantize_linears",
    "weight_bytes",
]
