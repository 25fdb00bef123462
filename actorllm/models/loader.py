"""Build a model and fill its weights: safetensors or PyTorch ``.bin`` / ``.pt`` files (one
file or sharded; models/checkpoint_files.py picks them per ``--load-format``) or dummy.

Theory of operation: the model is built on the ``meta`` device (no memory), cast to the
target dtype, then materialized empty on the target device (``materialize``, ``to_empty``
without its import cost). Checkpoint tensors are streamed by models/checkpoint_tensors.py
(safetensors one tensor at a time, memory-mapped; a pickle one file at a time, through
``torch.load(weights_only=True)``) and copied into their parameters; HF's separate q/k/v
and gate/up tensors are copied into their row ranges of our packed ``qkv_proj`` /
``gate_up_proj``. Every parameter row range must be written exactly once, or
:class:`MissingWeightsError` names what the checkpoint lacks.

    model = load_model("/path/to/ckpt", CheckpointConfig.from_pretrained(p), dtype=torch.float32)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import torch

from actorllm.kernels.ops import Ops, get_ops
from actorllm.models.base import CausalLM
from actorllm.models.checkpoint_files import safetensors_files as safetensors_files
from actorllm.models.checkpoint_files import weight_files
from actorllm.models.checkpoint_tensors import iter_checkpoint as iter_checkpoint
from actorllm.models.checkpoint_tensors import tensor_names
from actorllm.models.config import CheckpointConfig
from actorllm.models.gguf.config import is_gguf
from actorllm.models.kv_scales import SCALE_SUFFIXES
from actorllm.models.load_errors import MissingCheckpointError as MissingCheckpointError
from actorllm.models.load_errors import UnsafePickleError as UnsafePickleError
from actorllm.models.load_errors import WeightLoadError as WeightLoadError
from actorllm.models.load_format import LoadFormat as LoadFormat
from actorllm.models.materialize import materialize
from actorllm.models.meta_init import on_meta
from actorllm.models.moe import EXPERT_SLOTS, FusedExperts
from actorllm.models.onednn_linear import invalidate_packed
from actorllm.models.parallel import rank_piece
from actorllm.models.pipeline import PPMissingLayer, owns_weight
from actorllm.models.quant.apply import (
    checkpoint_quantization,
    finish_quantized,
    optional_param,
    quantize_linears,
)
from actorllm.models.quant.experts import EXPERT_LINEARS, QuantExperts
from actorllm.models.quant.linear import QUANT_LINEARS
from actorllm.models.quant.mxfp4 import quantize_experts_mxfp4
from actorllm.models.quant.spec import QuantizationError as QuantizationError
from actorllm.models.registry import resolve_model_class

log = logging.getLogger(__name__)

# --dtype's names (vLLM's, its aliases "half" and "float" included)
DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "half": torch.float16,
}
# Tensors some checkpoints carry that we recompute instead, and the KV cache scales (read
# by models/kv_scales.py when the cache is fp8).
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq", *SCALE_SUFFIXES)
# A decoder pooling checkpoint's head (a classifier's score.weight, a reward model's
# score.0 / score.2): read by the pooling head (worker/decoder_pooling.py), not the body's
# load (a weight update naming them is refused: the body has no such parameter).
_POOLING_HEAD_PREFIXES = ("score.",)


class MissingWeightsError(WeightLoadError):
    """Some parameters received no tensor from the checkpoint; ``missing`` names them."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        super().__init__(f"checkpoint lacks {len(missing)} tensor(s): {shown}")


def resolve_dtype(
    dtype: str | torch.dtype, cfg: CheckpointConfig, device: torch.device | str | None = None
) -> torch.dtype:
    """ "auto" -> the checkpoint's dtype; else a name ("float32", "bfloat16", "float16").

    With a CPU ``device``, "auto" runs a float32 or float16 checkpoint in bfloat16 where the
    CPU has native bf16 (AVX512-BF16 or AMX): its matmuls run 2-2.5x faster. vLLM's CPU
    platform downcasts a float32 checkpoint on every x86 host (to bfloat16; a pooling model
    to float16) and keeps float16 ones; without native bf16 a bf16 GEMM is emulated, so
    here such a host keeps float32 (docs/cpu_performance.md) and ``--dtype bfloat16`` asks
    for bf16 (run through float32 GEMMs on the widened weights).
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    name = cfg.dtype if dtype == "auto" else dtype
    if dtype == "auto" and device is not None and torch.device(device).type == "cpu":
        from actorllm.kernels.cpu_features import native_bf16

        if name in ("float32", "float", "float16", "half") and native_bf16():
            name = "bfloat16"
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r} (expected one of {sorted(DTYPES)})") from None


def iter_names(path: Path) -> Iterator[str]:
    """The names of the checkpoint's tensors at ``path`` (safetensors: headers only)."""
    return tensor_names(weight_files(path))


def load_model(
    path: str | Path,
    cfg: CheckpointConfig,
    *,
    dtype: str | torch.dtype = "auto",
    device: torch.device | str = "cpu",
    ops: Ops | None = None,
    load_format: LoadFormat = "auto",
    seed: int = 0,
    max_positions: int | None = None,
    progress: bool | None = None,
    quantization: str | None = None,
    model_class: type[CausalLM] | None = None,
) -> CausalLM:
    """Build ``cfg.architecture`` (or ``model_class``: a draft head that is not a model of
    its own) on ``device`` in ``dtype`` and fill its weights.

    ``load_format="dummy"`` fills random weights from ``seed`` (same weights on any device)
    and reads nothing but config.json; auto, safetensors and pt read the weight files
    models/checkpoint_files.py picks. ``progress=None`` shows a bar only for big
    checkpoints. Raises :class:`UnsupportedArchitectureError`, :class:`MissingCheckpointError`,
    :class:`UnsafePickleError` or :class:`MissingWeightsError`; a ``quantization_config``
    (or ``quantization``, vLLM's ``--quantization``) builds quantized linears
    (``models/quant/``) or raises :class:`QuantizationError` naming what is not run.
    """
    cls = model_class or resolve_model_class(cfg.architecture)
    torch_dtype = resolve_dtype(dtype, cfg)
    spec = checkpoint_quantization(cfg, quantization)
    ops = ops or get_ops("auto", device)
    if is_gguf(path):  # a .gguf file: its linears keep their blocks (models/gguf/)
        if load_format not in ("auto", "gguf"):
            raise ValueError(f"load_format={load_format!r} with a GGUF file (auto or gguf)")
        from actorllm.models.gguf.load import load_gguf

        return load_gguf(
            path, cfg, dtype=torch_dtype, device=device, ops=ops, max_positions=max_positions
        )
    with on_meta():
        model = cls(cfg, ops)
    model = model.to(dtype=torch_dtype)
    if spec is not None and spec.scheme == "gguf":
        raise QuantizationError(
            "quantization_config quant_method 'gguf' in config.json: GGUF weights are read "
            "from a .gguf file (give its path as the model)"
        )
    if spec is not None and spec.scheme == "mxfp4":  # gpt-oss: the MoE experts only
        quantize_experts_mxfp4(model, torch_dtype)
    elif spec is not None:
        quantize_linears(model, spec, torch_dtype)  # packed layers, still on meta
    model = materialize(model, device)
    model.tie_weights()
    if load_format == "dummy":
        init_dummy_weights(model, seed)
        if spec is not None:  # random weights in the packed layouts, then repacked
            gen = torch.Generator().manual_seed(seed)
            for module in model.modules():
                if isinstance(module, QUANT_LINEARS):
                    module.init_dummy(gen)
            finish_quantized(model, {})
    elif load_format in ("auto", "safetensors", "pt"):
        load_weights(model, weight_files(path, load_format), progress=progress)
    else:
        raise ValueError(
            f"unknown load_format {load_format!r} (expected auto, safetensors, pt or dummy)"
        )
    model.init_rotary(device, max_positions)
    return model.eval()


def load_weights(model: CausalLM, files: list[Path], progress: bool | None = None) -> None:
    """Copy every checkpoint tensor into ``model`` (packing q/k/v, gate/up and experts)."""
    params = dict(model.named_parameters(remove_duplicate=False))
    # {param name: set of shard keys written} (None = the whole tensor).
    written: dict[str, set[ShardKey]] = {}
    saw_lm_head = False
    quantized = any(isinstance(m, QUANT_LINEARS) for m in model.modules())
    with torch.no_grad():
        # Tensor parallel: each rank reads only its slices; pipeline parallel: each stage
        # only its layers' tensors (safetensors; a pickle shard is loaded whole).
        lazy = model.config.tp_size > 1 or model.config.pp_layers is not None
        for hf_name, tensor in iter_checkpoint(files, progress, lazy=lazy):
            if hf_name.startswith(_POOLING_HEAD_PREFIXES):
                continue  # the pooling head's (read on its own)
            name = _copy_one(model, params, hf_name, tensor, written, strict=quantized)
            saw_lm_head = saw_lm_head or (name or "").startswith("lm_head.")
    if (
        not saw_lm_head
        and not model.config.tie_word_embeddings
        and isinstance(model.lm_head, torch.nn.Linear)  # a float head, not a quantized one
        and _holds(model.input_embeddings())
    ):
        # No head in the checkpoint: the embedding doubles as the head (tied).
        log.info("lm_head.weight absent from the checkpoint: tying it to embed_tokens")
        model.lm_head.weight = model.input_embeddings().weight
        written["lm_head.weight"] = {None}
    missing = _missing(model, params, written)
    if missing:
        raise MissingWeightsError(missing)
    if quantized:
        finish_quantized(model, written)  # repack for the forward, drop the disk layouts


def copy_weights(model: CausalLM, named: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """Copy some checkpoint tensors (Hugging Face names) into ``model`` in place — a weight
    update, e.g. from an RLHF trainer. Returns the parameter names written. Raises
    :class:`WeightLoadError` for an unknown name or a shape mismatch."""
    if any(isinstance(m, QUANT_LINEARS) for m in model.modules()):
        raise NotImplementedError(
            "weight updates into a quantized model are not supported (its linears hold "
            "repacked quantized weights)"
        )
    params = dict(model.named_parameters(remove_duplicate=False))
    written: dict[str, set[ShardKey]] = {}
    try:
        with torch.no_grad():
            for hf_name, tensor in named:
                _copy_one(model, params, hf_name, tensor, written, strict=True)
    finally:
        invalidate_packed(model)  # even a partial write makes the packed copies stale
    return sorted(written)


def _copy_one(
    model: CausalLM,
    params: dict[str, torch.nn.Parameter],
    hf_name: str,
    tensor: Any,
    written: dict[str, set[ShardKey]],
    *,
    strict: bool,
) -> str | None:
    """Copy one checkpoint tensor into its parameter (or shard); returns our name for it,
    None when the checkpoint tensor has no place in the model. ``strict``: an unknown name
    raises instead of being ignored with a warning."""
    resolved = _resolve_one(model, params, hf_name, tensor, strict=strict)
    if resolved is None or isinstance(resolved, str):
        return resolved
    dst, staged = resolved
    dst.copy_(staged.tensor)
    written.setdefault(staged.target, set()).add(staged.shard)
    return staged.name


class StagedWeight(NamedTuple):
    """One checkpoint tensor checked against the model and cut to this rank's piece, not
    written yet (a staged weight update, worker/weight_receiver.py)."""

    hf_name: str
    name: str  # ours
    target: str  # the parameter it goes into
    shard: ShardKey  # its part of a packed parameter (None: all of it)
    tensor: torch.Tensor  # in the destination's shape; its dtype is cast on apply


def _resolve_one(
    model: CausalLM,
    params: dict[str, torch.nn.Parameter],
    hf_name: str,
    tensor: Any,
    *,
    strict: bool,
) -> tuple[torch.Tensor, StagedWeight] | str | None:
    """Where one checkpoint tensor goes: (the destination view, the checked tensor), or our
    name when nothing is written (a tied head, an unknown name not ``strict``), or None
    when it has no place in the model."""
    if hf_name.endswith(_IGNORED_SUFFIXES):
        return None
    name = model.checkpoint_name(hf_name)
    if name is None:
        return None
    if name == "lm_head.weight" and model.config.tie_word_embeddings:
        return name  # the embedding is the head
    if not owns_weight(model.config, name):
        return name  # pipeline parallel: another stage's tensor (not read)
    target, shard = _packed_target(model, name)
    param = params.get(target)
    if param is None:
        if strict:
            raise WeightLoadError(f"{hf_name}: the model has no such parameter{_hint(name)}")
        log.warning("ignoring checkpoint tensor %s (no such parameter)", hf_name)
        return name
    dst = param.data if shard is None else _shard_view(model, param.data, target, shard)
    if model.transposed_weights is not None and model.transposed_weights.search(name):
        whole = tensor if isinstance(tensor, torch.Tensor) else tensor[...]
        tensor = whole.t()  # [in, out] -> [out, in]
    # Tensor parallel: this rank's slice (read alone from a lazy safetensors slice).
    tensor = model.checkpoint_tensor(name, rank_piece(model.config, name, dst.shape, tensor))
    if tensor.numel() == 1 == dst.numel():  # a scalar scale stored as [] or [1]
        tensor = tensor.reshape(dst.shape)
    if tuple(dst.shape) != tuple(tensor.shape):
        raise WeightLoadError(
            f"{hf_name}: checkpoint shape {tuple(tensor.shape)} != expected {tuple(dst.shape)}"
        )
    if _changes_kind(tensor.dtype, dst.dtype):
        # Integer or 8-bit float values read as plain numbers would run silently wrong.
        raise WeightLoadError(
            f"{hf_name}: a {tensor.dtype} checkpoint tensor cannot fill a {dst.dtype} "
            "parameter (a quantized tensor the config.json's quantization_config does not "
            "describe?)"
        )
    return dst, StagedWeight(hf_name, name, target, shard, tensor)


def _hint(name: str) -> str:
    """Why a quantized checkpoint's tensor may have no parameter, where that is known."""
    if re.search(r"\.mlp\.(shared_expert_)?gate\.", name):
        return " (a quantized MoE router gate is not supported: it runs unquantized, as in vLLM)"
    return ""


# A packed parameter's shard: an index into shard_sizes (q/k/v, gate/up) or, for stacked
# experts, (expert, slot).
ShardKey = int | tuple[int, int] | None
_EXPERT = re.compile(r"\.experts\.(\d+)\.(\w+)\.(\w+)$")


def _packed_target(model: CausalLM, name: str) -> tuple[str, ShardKey]:
    """Our name -> (our param name, shard key or None)."""
    m = _EXPERT.search(name)
    if m is not None and m.group(2) in EXPERT_SLOTS:
        expert, proj, leaf = int(m.group(1)), m.group(2), m.group(3)
        owner = f"{name[: m.start()]}.experts"
        if isinstance(_submodule(model, owner), QuantExperts):  # one quantized linear each
            linear, shard = EXPERT_LINEARS[proj]
            return f"{owner}.{expert}.{linear}.{leaf}", shard
        if leaf == "weight":
            stacked, slot = EXPERT_SLOTS[proj]
            return f"{owner}.{stacked}", (expert, slot)
    for frag, (packed, shard) in model.packed_modules.items():
        if f".{frag}." in name:
            return name.replace(f".{frag}.", f".{packed}."), shard
    return name, None


def _submodule(model: CausalLM, name: str) -> torch.nn.Module | None:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


def _changes_kind(src: torch.dtype, dst: torch.dtype) -> bool:
    """Copying ``src`` values into ``dst`` would change what they mean: integers into
    floats (or back), or 8-bit floats (fp8 codes) into wider ones."""
    if src == dst:
        return False
    if src.is_floating_point != dst.is_floating_point:
        return True
    return src.is_floating_point and src.itemsize == 1


def _shard_view(model: CausalLM, data: torch.Tensor, target: str, shard: ShardKey) -> torch.Tensor:
    """The part of packed ``data`` that shard ``shard`` owns."""
    owner, leaf = target.rsplit(".", 1)
    linear = model.get_submodule(owner)
    if isinstance(linear, QUANT_LINEARS):  # packed layouts split along their own dims
        assert isinstance(shard, int)
        return linear.shard_view(leaf, data, shard)
    if isinstance(shard, tuple):
        experts = model.get_submodule(owner)
        assert isinstance(experts, FusedExperts)
        return experts.shard_view(leaf, data, shard)
    assert shard is not None
    module = model.get_submodule(owner.rsplit(".", 1)[0])  # the owner of the Linear
    sizes: list[int] = module.shard_sizes  # type: ignore[assignment]
    return data.narrow(0, sum(sizes[:shard]), sizes[shard])


def _missing(
    model: CausalLM,
    params: dict[str, torch.nn.Parameter],
    written: dict[str, set[ShardKey]],
) -> list[str]:
    tied = model.config.tie_word_embeddings or (
        isinstance(model.lm_head, torch.nn.Linear)
        and _holds(model.input_embeddings())
        and model.lm_head.weight is model.input_embeddings().weight
    )
    missing: list[str] = []
    for name in params:
        if tied and name == "lm_head.weight":
            continue
        got = written.get(name, set())
        if None in got:
            continue
        if not got and optional_param(model, name):
            continue
        owner, leaf = name.rsplit(".", 1)
        module = model.get_submodule(owner)
        if isinstance(module, FusedExperts):
            missing += [
                f"{owner}.{e}.{leaf}[{s}]" for e, s in module.shard_keys(leaf) if (e, s) not in got
            ]
            continue
        frags = [(f, s) for f, (p, s) in model.packed_modules.items() if f".{p}." in name]
        if frags:
            missing += [
                name.replace(_packed_name(f, model), f".{f}.") for f, s in frags if s not in got
            ]
        else:
            missing.append(name)
    return missing


def _holds(module: torch.nn.Module) -> bool:
    """Pipeline parallel: whether this stage holds ``module`` (not another stage's)."""
    return not isinstance(module, PPMissingLayer)


def _packed_name(frag: str, model: CausalLM) -> str:
    return f".{model.packed_modules[frag][0]}."


def init_dummy_weights(model: CausalLM, seed: int) -> None:
    """Random weights of the right shapes, the same for a given seed on any device.

    Matrices ~ N(0, 0.02) (HF's initializer_range), norm weights 1, biases 0, so activations
    stay in range and benchmarks exercise realistic numerics.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # shared (tied) params come once
            if p.dim() >= 2:
                w = torch.empty(p.shape, dtype=torch.float32).normal_(0.0, 0.02, generator=gen)
            elif name.endswith(".weight"):  # norms: 1 (Gemma stores w for 1 + w: 0)
                w = torch.full(p.shape, 1.0 - model.config.norm_offset)
            else:
                w = torch.zeros(p.shape)
            p.data.copy_(w)
