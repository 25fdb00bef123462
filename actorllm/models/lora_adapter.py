"""Read a LoRA adapter in PEFT's format and map it onto our model's projections.

Theory of operation
-------------------
PEFT saves ``adapter_config.json`` (``r``, ``lora_alpha``, ``use_rslora``, ...) and
``adapter_model.safetensors`` (or ``adapter_model.bin`` with ``safe_serialization=False``,
read with ``torch.load(weights_only=True)`` only) with, for every adapted ``nn.Linear``
``W`` [out, in], two tensors ``<module>.lora_A.weight`` ``A`` [r, in] and
``<module>.lora_B.weight`` ``B`` [out, r]; the adapted layer computes
``x W^T + s * (x A^T) B^T`` with ``s = alpha / r`` (``alpha / sqrt(r)`` under rsLoRA).
The module names are HF's (``base_model.model.model.layers.0.self_attn.q_proj``); ours
fuse q|k|v into ``qkv_proj`` and gate|up into ``gate_up_proj`` (``models/llama.py``), so
an adapter of ``k_proj`` becomes *slice 1* of ``qkv_proj``: its own ``A``, and a ``B``
whose rows land in k's output columns. ``s`` is folded into ``B`` once, here. Under tensor
parallelism each rank keeps its part (``models/parallel.py``'s :func:`lora_pair_piece`:
B's rows of a column-parallel projection, A's columns of a row-parallel one), after
checking the whole tensors.

Everything an adapter asks that we do not apply is refused by name
(:class:`LoRAAdapterError`, a ``ValueError`` naming the adapter and the reason): a
directory without the two files, a rank above ``max_lora_rank``, DoRA, LoRA biases,
``modules_to_save`` / embedding adapters, MoE expert adapters, per-module rank or alpha
patterns, modules our model lacks, and shapes of another base model.

    w = read_adapter("sql", "/adapters/sql", model, max_rank=16, dtype=torch.float32)
    w.modules["model.layers.0.self_attn.qkv_proj"]  # [LoRASlice(shard=0, ...), ...]
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from actorllm.models.base import CausalLM
from actorllm.models.layers import UngatedMLP
from actorllm.models.load_errors import WeightLoadError
from actorllm.models.parallel import full_weight_shape, lora_pair_piece
from actorllm.models.pt_weights import load_pt

CONFIG_FILE = "adapter_config.json"
# PEFT's weight files, safe_serialization=True (its default) then False; the first wins.
WEIGHTS_FILES = ("adapter_model.safetensors", "adapter_model.bin")
# Our projections an adapter may target (after packing): attention and MLP; and both
# linears of an MLP without a gate (Arcee's up_proj, StarCoder 2's c_fc / c_proj).
TARGETABLE = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
_TENSOR = re.compile(r"^(?P<module>.+)\.lora_(?P<ab>A|B)\.weight$")
_EXPERT = re.compile(r"\.experts\.")
_PREFIX = "base_model.model."
# PEFT's init_lora_weights that only set the adapter's first weights: a saved adapter of
# them is a plain LoRA. The others (PiSSA, OLoRA, CorDA, LoftQ) change the base model's
# weights when PEFT loads the adapter, which serving the adapter alone would not do.
_PLAIN_INITS = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")
# adapter_config.json keys whose non-default values we would otherwise ignore (the phrases
# vLLM's refusals hold: "does not yet support DoRA", "Unsupported modules_to_save"). Not
# fan_in_fan_out, which PEFT sets for GPT-2's Conv1D bases: it changes only how PEFT
# merges; lora_A / lora_B are stored as nn.Linear's either way.
_REFUSED_KEYS: dict[str, str] = {
    "use_dora": "actorllm does not yet support DoRA (use_dora=true)",
    "modules_to_save": "Unsupported modules_to_save: {value} (fully trained extra modules "
    "are not applied)",
    "trainable_token_indices": "trainable_token_indices is not supported",
    "use_qalora": "QA-LoRA (use_qalora=true) is not supported",
    "lora_bias": "LoRA biases (lora_bias=true) are not supported",
}


class LoRAAdapterError(ValueError):
    """An adapter that cannot be served; the message names the adapter and the reason."""

    def __init__(self, name: str, reason: str) -> None:
        self.adapter = name
        self.reason = reason
        super().__init__(f"LoRA adapter {name!r}: {reason}")


@dataclass(frozen=True)
class LoRASlice:
    """One adapted piece of a (possibly packed) projection."""

    shard: int | None  # index into the owner's shard_sizes (q/k/v, gate/up); None: all
    a: torch.Tensor  # [r, in]
    b: torch.Tensor  # [out_shard, r], the scaling folded in


@dataclass
class LoRAWeights:
    """An adapter read and checked against one model: ready to copy into a slot."""

    name: str
    rank: int  # the largest of its modules' ranks
    scaling: float  # the last module's (every module's unless rank/alpha patterns differ)
    # {our Linear's module name: its adapted slices}
    modules: dict[str, list[LoRASlice]] = field(default_factory=dict)

    def nbytes(self) -> int:
        return sum(s.a.nbytes + s.b.nbytes for sl in self.modules.values() for s in sl)


def read_adapter(
    name: str, path: str | Path, model: CausalLM, *, max_rank: int, dtype: torch.dtype
) -> LoRAWeights:
    """Read and check the adapter at local directory ``path`` (``~`` expanded, as vLLM
    resolves adapter paths) against ``model``; raises :class:`LoRAAdapterError`."""
    path = Path(path).expanduser()
    cfg = _read_config(name, path)
    default_rank = int(cfg.get("r", 8))
    default_alpha = float(cfg.get("lora_alpha", 8))
    tensors = _read_tensors(name, path)
    pairs = _pair(name, tensors)
    out = LoRAWeights(name=name, rank=0, scaling=0.0)
    for hf_module, (a, b) in sorted(pairs.items()):
        # PEFT's per-module overrides: the first pattern matching the module's name.
        rank = int(_pattern(cfg.get("rank_pattern"), hf_module, default_rank))
        alpha = float(_pattern(cfg.get("alpha_pattern"), hf_module, default_alpha))
        if rank > max_rank:
            raise LoRAAdapterError(
                name,
                f"LoRA rank {rank} is greater than max_lora_rank={max_rank} (start with a "
                "larger one)",
            )
        scaling = alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank
        out.rank, out.scaling = max(out.rank, rank), scaling
        ours, target, shard, in_size, out_size = _target(name, model, hf_module)
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != rank or b.shape[1] != rank:
            raise LoRAAdapterError(
                name, f"{hf_module}: lora_A {tuple(a.shape)} / lora_B {tuple(b.shape)} "
                f"do not have rank r={rank}"
            )  # fmt: skip
        # Tensor parallel: the checkpoint's whole projection is checked, this rank's part kept.
        full_out, full_in = full_weight_shape(model.config, ours, out_size, in_size)
        if a.shape[1] != full_in or b.shape[0] != full_out:
            raise LoRAAdapterError(
                name,
                f"{hf_module}: adapter shapes A {tuple(a.shape)}, B {tuple(b.shape)} do not "
                f"fit this model's [{full_out}, {full_in}] projection (an adapter "
                "for another base model?)",
            )
        b = b.float() * scaling
        a, b = lora_pair_piece(model.config, ours, a, b, out_size, in_size)
        sl = LoRASlice(shard=shard, a=a.to(dtype).contiguous(), b=b.to(dtype).contiguous())
        out.modules.setdefault(target, []).append(sl)
    if not out.modules:
        raise LoRAAdapterError(name, "its weights hold no lora_A / lora_B tensors")
    return out


def _pattern(patterns: object, module: str, default: float) -> float:
    """PEFT's rank_pattern / alpha_pattern lookup: a key matches the module's name or any
    dotted suffix of it (as a regular expression)."""
    if not isinstance(patterns, dict):
        return default
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return float(value)
    return default


def _read_config(name: str, path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise LoRAAdapterError(name, f"{str(path)!r} is not a local directory")
    cfg_file = path / CONFIG_FILE
    if not cfg_file.is_file() or _weights_file(path) is None:
        raise LoRAAdapterError(
            name, f"{str(path)!r} is not a PEFT adapter directory ({CONFIG_FILE} and "
            f"{' or '.join(WEIGHTS_FILES)} expected)"
        )  # fmt: skip
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as exc:
        raise LoRAAdapterError(name, f"unreadable {CONFIG_FILE}: {exc}") from None
    if not isinstance(cfg, dict):
        raise LoRAAdapterError(name, f"{CONFIG_FILE} is not a JSON object")
    peft_type = str(cfg.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise LoRAAdapterError(name, f"peft_type {peft_type} is not LoRA")
    for key, reason in _REFUSED_KEYS.items():
        if cfg.get(key):
            raise LoRAAdapterError(name, reason.format(value=cfg[key]))
    init = cfg.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in _PLAIN_INITS:
        raise LoRAAdapterError(
            name, f"init_lora_weights={init!r} is not supported: inits such as PiSSA, "
            "OLoRA, CorDA and LoftQ change the base model's weights when PEFT loads the "
            "adapter (convert it to a plain LoRA adapter with PEFT's "
            "path_initial_model_for_weight_conversion)"
        )  # fmt: skip
    if cfg.get("bias", "none") != "none":
        raise LoRAAdapterError(name, f"bias={cfg['bias']!r}: LoRA biases are not supported")
    return cfg


def _weights_file(path: Path) -> Path | None:
    return next((path / f for f in WEIGHTS_FILES if (path / f).is_file()), None)


def _read_tensors(name: str, path: Path) -> dict[str, torch.Tensor]:
    f = _weights_file(path)
    assert f is not None  # _read_config checked
    if f.suffix == ".bin":
        try:
            return load_pt(f, mmap=False)  # the adapter outlives the read
        except WeightLoadError as exc:  # names the file; a pickle needing code is refused
            raise LoRAAdapterError(name, str(exc)) from None
    try:
        return load_file(str(f), device="cpu")
    except Exception as exc:  # a corrupt or truncated file: safetensors' own errors
        raise LoRAAdapterError(name, f"unreadable {f.name}: {exc}") from None


def _pair(name: str, tensors: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, ...]]:
    """{HF module name: (A, B)}; any other tensor refused by name."""
    a_of: dict[str, torch.Tensor] = {}
    b_of: dict[str, torch.Tensor] = {}
    for key, t in tensors.items():
        if "lora_embedding_" in key:
            raise LoRAAdapterError(name, f"embedding adapters are not supported ({key})")
        if "lora_magnitude_vector" in key:
            raise LoRAAdapterError(name, f"DoRA is not supported ({key})")
        m = _TENSOR.match(key)
        if m is None:
            raise LoRAAdapterError(
                name, f"tensor {key} is not a lora_A / lora_B weight (modules_to_save, "
                "biases and trained embeddings are not supported)"
            )  # fmt: skip
        module = m.group("module").removeprefix(_PREFIX)
        (a_of if m.group("ab") == "A" else b_of)[module] = t
    unpaired = sorted(set(a_of) ^ set(b_of))
    if unpaired:
        raise LoRAAdapterError(name, f"lora_A without lora_B (or back) for {unpaired[0]}")
    return {m: (a_of[m], b_of[m]) for m in a_of}


def is_projection(module: nn.Module) -> bool:
    """What an adapter's A and B add to: a float linear (oneDNN's prepacked ones are
    ``nn.Linear`` too) or a quantized one (GPTQ, AWQ, compressed-tensors, fp8, GGUF: the
    adapter stays float beside the packed weight, as vLLM's LoRA over quantized models),
    sized by its ``in_features`` / ``out_features``."""
    return isinstance(module, nn.Linear) or getattr(module, "quantized_projection", False)


def is_target(model: nn.Module, name: str, module: nn.Module) -> bool:
    """Whether module ``name`` of ``model`` takes adapters: a projection that is one of
    :data:`TARGETABLE`, or a linear of an un-gated MLP."""
    if not is_projection(module):
        return False
    owner_name, _, leaf = name.rpartition(".")
    return leaf in TARGETABLE or isinstance(model.get_submodule(owner_name), UngatedMLP)


def _target(name: str, model: CausalLM, hf_module: str) -> tuple[str, str, int | None, int, int]:
    """HF module name -> (our weight's name before packing, our Linear's name, shard or
    None, the Linear's input columns and the rows it adapts, on this rank)."""
    ours = model.checkpoint_name(hf_module + ".weight")
    if ours is None or _EXPERT.search(ours):
        raise LoRAAdapterError(
            name, f"{hf_module}: MoE expert adapters are not supported (attention only)"
        )
    target, shard = ours.removesuffix(".weight"), None
    for frag, (packed, idx) in model.packed_modules.items():
        if target.endswith(f".{frag}"):
            target, shard = target.removesuffix(frag) + packed, idx
            break
    try:
        linear = model.get_submodule(target)
    except AttributeError:
        raise LoRAAdapterError(
            name,
            f"target module {hf_module}: this model has no such module (an adapter "
            "for another base model?)",
        ) from None
    if not is_target(model, target, linear):
        raise LoRAAdapterError(
            name, f"target module {hf_module} is not an attention or MLP projection of this "
            f"model (adaptable: {', '.join(TARGETABLE)} and their unfused q/k/v, gate/up)"
        )  # fmt: skip
    n_in, n_out = int(linear.in_features), int(linear.out_features)  # type: ignore[arg-type]
    if shard is None:
        return ours, target, None, n_in, n_out
    owner = model.get_submodule(target.rsplit(".", 1)[0])
    sizes: list[int] = owner.shard_sizes  # type: ignore[assignment]
    return ours, target, shard, n_in, sizes[shard]
