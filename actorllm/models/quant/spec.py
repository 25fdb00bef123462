"""What a checkpoint's ``quantization_config`` asks for, read as vLLM reads it, or a
refusal that names the method and what about it is not run here.

Every ``quantization_config`` either becomes a :class:`QuantSpec` (the linears of the
decoder layers are then built as quantized linears, ``models/quant/linear.py``) or raises
:class:`QuantizationError` at start: nothing quantized ever runs silently in another
precision. The ``quantization`` engine argument (vLLM's ``--quantization``) must name the
checkpoint's method (vLLM's aliases count: ``gptq_marlin`` for a GPTQ checkpoint, ...).

    >>> spec = resolve_quantization({"quant_method": "gptq", "bits": 4, "group_size": 128,
    ...     "desc_act": False, "sym": True}, None)
    >>> spec.scheme, spec.bits, spec.group_size
    ('gptq', 4, 128)
    >>> resolve_quantization({"quant_method": "bitsandbytes"}, None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    actorllm.models.quant.spec.QuantizationError: quantization method 'bitsandbytes' ...
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

Scheme = Literal["gptq", "awq", "w8a8_int8", "pack_quantized", "fp8", "gguf", "mxfp4"]
RUN_HERE = (
    "gptq (4/8-bit), awq (4-bit GEMM), compressed-tensors (W8A8 int8 with dynamic per-token "
    "activations; W4A16/W8A16 pack-quantized), fp8 (per-tensor or block scales, dynamic "
    "activations), mxfp4 (gpt-oss's MoE experts)"
)
# vLLM's spellings of ``--quantization`` that mean the checkpoint's own method.
ALIASES: dict[str, tuple[str, ...]] = {
    "gptq": ("gptq", "gptq_marlin", "auto_gptq", "marlin"),
    "awq": ("awq", "awq_marlin", "auto_awq"),
    "compressed-tensors": ("compressed-tensors", "compressed_tensors"),
    "fp8": ("fp8",),
    "mxfp4": ("mxfp4", "gpt_oss_mxfp4"),
    "gguf": ("gguf",),  # a .gguf file (models/gguf/); vLLM's name before v0.32 dropped it
}
# vLLM's --quantization choices (QUANTIZATION_METHODS, v0.32): a name outside them is
# unknown; inside them, it must be the checkpoint's method.
VLLM_METHODS = (
    "awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4",
    "modelopt_mxfp8", "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin",
    "humming", "compressed-tensors", "experts_int8", "quark", "moe_wna16", "torchao", "inc",
    "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8", "online", "fp8_per_tensor", "fp8_per_block",
    "fp8_per_channel", "int8_per_channel_weight_only", "nvfp4_per_token", "mxfp8",
)  # fmt: skip
# Group sizes the kernels run (-1: one group over the whole input row).
GROUP_SIZES = (-1, 32, 64, 128, 256, 512, 1024)


class QuantizationError(ValueError):
    """The checkpoint's quantization (or the ``quantization`` argument) cannot be run."""

    param = "quantization"


class QuantSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One checkpoint's quantization, as the linears need it."""

    method: str  # the checkpoint's quant_method: gptq, awq, compressed-tensors
    scheme: Scheme  # which on-disk layout the linears read
    bits: int  # weight bits: 4 or 8
    group_size: int  # input rows per scale (-1: the whole row)
    sym: bool  # symmetric: no stored zero points (GPTQ stores them anyway)
    desc_act: bool = False  # GPTQ activation order: g_idx maps input rows to groups
    zero_offset: int = 0  # GPTQ v1 stores zero - 1 ("the +1 convention"); v2 stores zero
    # Module names (HF, e.g. "model.layers.0.mlp.down_proj") left unquantized: exact
    # names, suffixes, or "re:" patterns (compressed-tensors' ignore).
    ignore: tuple[str, ...] = ()
    # GPTQ's modules_in_block_to_quantize: only these (name suffixes) are quantized.
    only: tuple[str, ...] = ()
    # fp8: the weight_block_size [rows, columns] of weight_scale_inv (None: per tensor).
    block: tuple[int, int] | None = None
    fp8_channel: bool = False  # fp8 with one scale per output row (compressed-tensors)
    # GPTQ / AWQ ``lm_head: true``: the LM head is stored quantized too (vLLM's
    # lm_head_quantized); still subject to ``ignore`` and ``only`` (quantizes("lm_head")).
    lm_head: bool = False

    def quantizes(self, hf_module: str) -> bool:
        """Whether the linear ``hf_module`` (HF name, no ``.weight``) is stored quantized."""
        return self.quantizes_any((hf_module,))

    def quantizes_any(self, names: tuple[str, ...]) -> bool:
        """Whether the linear that the checkpoint's lists may name by any of ``names`` is
        stored quantized: ignored under none of them, and listed under one of them where
        the config lists what it quantizes."""
        if any(self._ignores(name) for name in names):
            return False
        if self.only:
            # GPTQ's modules_in_block_to_quantize: vLLM (is_layer_gptq_quantized) takes
            # a module when an entry is a substring of its name, so "self_attn.q_proj",
            # "model.layers.0.self_attn.q_proj" and "mlp" all name what they say.
            return any(s in name for s in self.only for name in names)
        return True

    def _ignores(self, hf_module: str) -> bool:
        for pattern in self.ignore:
            if pattern.startswith("re:"):
                if re.match(pattern[3:], hf_module):
                    return True
            elif hf_module == pattern or _ignored_by_name(self.method, pattern, hf_module):
                return True
        return False

    def quantizes_head(self, names: tuple[str, ...] = ("lm_head",)) -> bool:
        """Whether the LM head, named ``names`` in the checkpoint (GPT-NeoX's
        ``embed_out``, or ``lm_head``), is stored quantized (vLLM: ``lm_head_quantized``
        and the head not skipped by ``modules_to_not_convert`` /
        ``modules_in_block_to_quantize``)."""
        return self.lm_head and self.quantizes_any(names)


def _ignored_by_name(method: str, pattern: str, hf_module: str) -> bool:
    """A plain (not ``re:``) ignore entry naming ``hf_module``, each method as vLLM
    reads its list: fp8's ``ignored_layers`` exactly; AWQ's ``modules_to_not_convert``
    as a substring of the name (AutoAWQ skips a module whose name contains an entry when
    quantizing, and vLLM matches the same way: ``["self_attn"]`` leaves every attention
    projection in floats); the others (compressed-tensors' ``ignore``) as a suffix."""
    if method == "fp8":
        return False
    if method == "awq":
        return pattern in hf_module
    return hf_module.endswith("." + pattern)


def resolve_quantization(raw: dict[str, Any] | None, requested: str | None) -> QuantSpec | None:
    """The checkpoint's ``quantization_config`` (None: unquantized) and the ``quantization``
    argument (None: the checkpoint's) -> what the linears run, or :class:`QuantizationError`."""
    if requested is not None and requested.lower() == "none":
        requested = None
    if requested is not None and requested not in VLLM_METHODS and requested != "gguf":
        raise QuantizationError(  # vLLM's message
            f"Unknown quantization method: {requested}. Must be one of {list(VLLM_METHODS)}."
        )
    if raw is None:
        if requested is not None:
            raise QuantizationError(
                f"quantization={requested!r}: the checkpoint has no quantization_config and "
                "quantizing a model at load (online quantization) is not supported; use a "
                "checkpoint quantized ahead of time (GPTQ, AWQ, compressed-tensors)"
            )
        return None
    method = str(raw.get("quant_method", "")).lower()
    if requested is not None and requested not in ALIASES.get(method, (method,)):
        # vLLM's message (config/model.py, _verify_quantization).
        raise QuantizationError(
            f"Quantization method specified in the model config ({method}) does not match "
            f"the quantization method specified in the `quantization` argument ({requested})."
        )
    if method == "gptq":
        return _gptq(raw)
    if method == "awq":
        return _awq(raw)
    if method == "compressed-tensors":
        return _compressed_tensors(raw)
    if method == "fp8":
        return _fp8(raw)
    if method == "mxfp4":  # gpt-oss: only the MoE experts (models/quant/mxfp4.py)
        ignore = tuple(str(m) for m in raw.get("modules_to_not_convert") or ())
        return QuantSpec(
            method="mxfp4", scheme="mxfp4", bits=4, group_size=32, sym=True, ignore=ignore
        )
    if method == "gguf":  # set by models/gguf/config.py for a .gguf file, never on disk
        return QuantSpec(method="gguf", scheme="gguf", bits=0, group_size=-1, sym=True)
    raise QuantizationError(
        f"quantization method {method!r} (config.json quantization_config.quant_method) is "
        f"not supported; actorllm runs {RUN_HERE}"
    )


def _refuse(method: str, what: str) -> QuantizationError:
    return QuantizationError(f"quantization method {method!r}: {what} is not supported")


def _group_size(method: str, value: Any) -> int:
    g = -1 if value is None else int(value)
    if g not in GROUP_SIZES:
        raise _refuse(method, f"group_size={g} (the kernels run {list(GROUP_SIZES)})")
    return g


def _gptq(raw: dict[str, Any]) -> QuantSpec:
    bits = int(raw.get("bits", 0))
    if bits not in (4, 8):
        raise _refuse("gptq", f"bits={bits} (the kernels run 4 and 8)")
    if raw.get("dynamic"):
        raise _refuse("gptq", "per-module overrides (dynamic)")
    fmt = str(raw.get("checkpoint_format") or "gptq").lower()
    if fmt not in ("gptq", "gptq_v2"):
        raise _refuse("gptq", f"checkpoint_format={fmt!r}")
    blocks = raw.get("modules_in_block_to_quantize") or []
    only = tuple(
        str(m) for block in blocks for m in (block if isinstance(block, list) else [block])
    )
    return QuantSpec(
        method="gptq",
        scheme="gptq",
        bits=bits,
        group_size=_group_size("gptq", raw.get("group_size")),
        sym=bool(raw.get("sym", True)),
        desc_act=bool(raw.get("desc_act", False)),
        zero_offset=1 if fmt == "gptq" else 0,
        only=only,
        lm_head=bool(raw.get("lm_head", False)),
    )


def _awq(raw: dict[str, Any]) -> QuantSpec:
    bits = int(raw.get("bits", raw.get("w_bit", 0)))
    if bits != 4:
        raise _refuse("awq", f"bits={bits} (AWQ runs 4-bit weights)")
    version = str(raw.get("version", "gemm")).lower()
    if version != "gemm":
        raise _refuse("awq", f"version={version!r} (the GEMM packing is read)")
    group = raw.get("group_size", raw.get("q_group_size"))
    zero_point = bool(raw.get("zero_point", True))
    return QuantSpec(
        method="awq",
        scheme="awq",
        bits=4,
        group_size=_group_size("awq", group),
        sym=not zero_point,
        ignore=tuple(raw.get("modules_to_not_convert") or ()),
        lm_head=bool(raw.get("lm_head", False)),
    )


def _fp8(raw: dict[str, Any]) -> QuantSpec:
    scheme = raw.get("activation_scheme")
    if scheme != "dynamic":
        raise _refuse("fp8", f"activation_scheme={scheme!r} (static input scales; dynamic runs)")
    fmt = str(raw.get("fmt") or "e4m3")
    if fmt != "e4m3":
        raise _refuse("fp8", f"fmt={fmt!r} (e4m3 weights run)")
    if raw.get("store_dtype"):
        raise _refuse("fp8", f"store_dtype={raw.get('store_dtype')!r}")
    block = raw.get("weight_block_size")
    if block is not None and (len(block) != 2 or min(int(b) for b in block) < 1):
        raise _refuse("fp8", f"weight_block_size={block!r}")
    ignore = raw.get("ignored_layers") or raw.get("modules_to_not_convert") or ()
    return QuantSpec(
        method="fp8",
        scheme="fp8",
        bits=8,
        group_size=-1,
        sym=True,
        ignore=tuple(str(m) for m in ignore),
        block=None if block is None else (int(block[0]), int(block[1])),
    )


def _compressed_tensors(raw: dict[str, Any]) -> QuantSpec | None:
    m = "compressed-tensors"
    for key in ("sparsity_config", "transform_config"):
        if raw.get(key):
            raise _refuse(m, key)
    kv_scheme = raw.get("kv_cache_scheme")
    if kv_scheme:
        _check_kv_cache_scheme(kv_scheme)
    groups = raw.get("config_groups") or {}
    if not groups and kv_scheme:
        return None  # only the KV cache's scales: the linears are not quantized
    if not groups:
        raise _refuse(m, "a quantization_config without config_groups")
    schemes = {msgspec.json.encode(_scheme_key(g)) for g in groups.values()}
    if len(schemes) != 1:
        raise _refuse(m, "config_groups with different schemes for different layers")
    group = next(iter(groups.values()))
    targets = group.get("targets") or []
    if any(t != "Linear" for t in targets):
        raise _refuse(m, f"targets {targets} (only 'Linear' is run)")
    weights = group.get("weights") or {}
    acts = group.get("input_activations")
    if group.get("output_activations"):
        raise _refuse(m, "output_activations")
    bits, strategy = int(weights.get("num_bits", 0)), weights.get("strategy")
    fmt = str(raw.get("format", ""))
    ignore = tuple(str(p) for p in raw.get("ignore") or ())
    if weights.get("type", "int") == "float":
        return _compressed_fp8(weights, acts, fmt, ignore)
    if weights.get("type", "int") != "int":
        raise _refuse(m, f"weights of type {weights.get('type')!r}")
    if weights.get("dynamic") or weights.get("actorder"):
        raise _refuse(m, "dynamic or activation-ordered weights")
    if acts is not None:
        # W8A8: channel-wise symmetric int8 weights, dynamic per-token symmetric int8 inputs.
        ok_w = bits == 8 and strategy == "channel" and weights.get("symmetric", True)
        ok_a = (
            int(acts.get("num_bits", 0)) == 8 and acts.get("type", "int") == "int"
            and acts.get("strategy") == "token" and acts.get("dynamic") is True
            and acts.get("symmetric", True)
        )  # fmt: skip
        if not (ok_w and ok_a) or fmt not in ("int-quantized", "naive-quantized"):
            raise _refuse(
                m,
                f"the scheme weights={_brief(weights)}, input_activations={_brief(acts)}, "
                f"format={fmt!r} (run: W8A8 int8 with channel-wise symmetric weights and "
                "dynamic per-token symmetric activations, int-quantized)",
            )
        return QuantSpec(method=m, scheme="w8a8_int8", bits=8, group_size=-1, sym=True,
                         ignore=ignore)  # fmt: skip
    if fmt != "pack-quantized" or bits not in (4, 8) or strategy not in ("group", "channel"):
        raise _refuse(
            m,
            f"the weight-only scheme weights={_brief(weights)}, format={fmt!r} (run: "
            "pack-quantized 4/8-bit with group or channel strategy)",
        )
    group_size = weights.get("group_size") if strategy == "group" else -1
    return QuantSpec(
        method=m,
        scheme="pack_quantized",
        bits=bits,
        group_size=_group_size(m, group_size),
        sym=bool(weights.get("symmetric", True)),
        ignore=ignore,
    )


def _check_kv_cache_scheme(scheme: dict[str, Any]) -> None:
    """compressed-tensors' ``kv_cache_scheme``: fp8 with one static scale per tensor (the
    k / v projections' ``output_scale``, read for an fp8 KV cache by models/kv_scales.py)
    is run; any other is refused by name."""
    ok = (
        scheme.get("type") == "float" and int(scheme.get("num_bits", 0)) == 8
        and scheme.get("strategy") == "tensor" and not scheme.get("dynamic")
        and scheme.get("symmetric", True)
    )  # fmt: skip
    if not ok:
        raise _refuse(
            "compressed-tensors",
            f"kv_cache_scheme={_brief(scheme)} (run: float, 8 bits, strategy tensor, static: "
            "per-tensor scales for --kv-cache-dtype fp8)",
        )


def _compressed_fp8(
    weights: dict[str, Any], acts: dict[str, Any] | None, fmt: str, ignore: tuple[str, ...]
) -> QuantSpec:
    """FP8_DYNAMIC / W8A16-FP8: e4m3 weights with a scale per tensor or per output row;
    activations dynamic per token (or none)."""
    m = "compressed-tensors"
    ok_w = (
        int(weights.get("num_bits", 0)) == 8 and weights.get("strategy") in ("channel", "tensor")
        and weights.get("symmetric", True)
    )  # fmt: skip
    ok_a = acts is None or (
        acts.get("type") == "float" and int(acts.get("num_bits", 0)) == 8
        and acts.get("dynamic") is True and acts.get("strategy") == "token"
    )  # fmt: skip
    if not (ok_w and ok_a) or fmt != "float-quantized":
        shown = None if acts is None else _brief(acts)
        raise _refuse(
            m,
            f"the fp8 scheme weights={_brief(weights)}, input_activations={shown}, "
            f"format={fmt!r} (run: float-quantized e4m3 weights per channel or tensor, "
            "dynamic per-token or no activation quantization)",
        )
    return QuantSpec(
        method=m, scheme="fp8", bits=8, group_size=-1, sym=True, ignore=ignore,
        fp8_channel=weights.get("strategy") == "channel",
    )  # fmt: skip


def _scheme_key(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "targets"}


def _brief(args: dict[str, Any]) -> str:
    keys = ("num_bits", "type", "symmetric", "strategy", "dynamic", "group_size")
    return "{" + ", ".join(f"{k}={args.get(k)!r}" for k in keys if k in args) + "}"
