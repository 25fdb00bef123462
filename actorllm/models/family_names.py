"""Checkpoint tensor names of the families whose HF modules are not named like Llama's,
mapped onto the shared decoder's (``models/llama.py``) by :func:`family_name` (the loader;
LoRA, whose PEFT names are the same modules'), and back by :func:`hf_module_name` (a
quantized checkpoint's lists of what it quantizes name the checkpoint's modules).

OPT (``OPTForCausalLM`` saves ``model.decoder.*``; facebook/opt-* were saved from
``OPTModel``, so ``decoder.*``)::

    model.decoder.layers.{i}.self_attn.out_proj -> model.layers.{i}.self_attn.o_proj
    model.decoder.layers.{i}.fc1 / fc2          -> model.layers.{i}.mlp.fc1 / fc2
    model.decoder.final_layer_norm              -> model.norm
    model.decoder.embed_positions               -> model.embed_positions

Per-layer norms keep their names (``norm_layout`` "opt" names them as OPT does).

Phi: ``self_attn.dense`` -> ``self_attn.o_proj``, ``model.final_layernorm`` ->
``model.norm``.

    >>> family_name("opt", "decoder.layers.3.fc1.weight")
    'model.layers.3.mlp.fc1.weight'
    >>> hf_module_name("opt", "model.layers.3.mlp.fc1")
    'model.decoder.layers.3.fc1'
"""

from __future__ import annotations

import re

_Renames = tuple[tuple[re.Pattern[str], str], ...]


def _compile(*pairs: tuple[str, str]) -> _Renames:
    return tuple((re.compile(pattern), repl) for pattern, repl in pairs)


# Applied in order, each to the result of the one before.
_RENAMES: dict[str, _Renames] = {
    "opt": _compile(
        (r"^(model\.)?decoder\.final_layer_norm\.", "model.norm."),
        (r"^(model\.)?decoder\.", "model."),
        (r"\.self_attn\.out_proj\.", ".self_attn.o_proj."),
        (r"(\.layers\.\d+)\.(fc1|fc2)\.", r"\1.mlp.\2."),
    ),
    "phi": _compile(
        (r"^model\.final_layernorm\.", "model.norm."),
        (r"\.self_attn\.dense\.", ".self_attn.o_proj."),
    ),
}

# Our module names (no ``.weight``) -> the checkpoint's, in order.
_MODULES: dict[str, _Renames] = {
    "opt": _compile(
        (r"^model\.", "model.decoder."),
        (r"^model\.decoder\.norm$", "model.decoder.final_layer_norm"),
        (r"\.self_attn\.o_proj$", ".self_attn.out_proj"),
        (r"\.mlp\.(fc1|fc2)$", r".\1"),
    ),
    "phi": _compile(
        (r"^model\.norm$", "model.final_layernorm"),
        (r"\.self_attn\.o_proj$", ".self_attn.dense"),
    ),
}


def family_name(model_type: str, name: str) -> str:
    """Checkpoint tensor ``name`` of a ``model_type`` checkpoint -> the decoder's name."""
    for pattern, repl in _RENAMES.get(model_type, ()):
        name = pattern.sub(repl, name)
    return name


def hf_module_name(model_type: str, module: str) -> str:
    """Our module name (``model.layers.0.mlp.fc1``) -> the checkpoint's."""
    for pattern, repl in _MODULES.get(model_type, ()):
        module = pattern.sub(repl, module)
    return module
