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
``model.norm``. Phi and StableLM: ``self_attn.q_layernorm`` / ``k_layernorm`` ->
``self_attn.q_norm`` / ``k_norm``.

GPT-NeoX (``embed_out`` in its checkpoints, ``lm_head`` as transformers 5 names it)::

    gpt_neox.embed_in                         -> model.embed_tokens
    gpt_neox.layers.{i}.attention.query_key_value -> model.layers.{i}.self_attn.qkv_proj
    gpt_neox.layers.{i}.attention.dense       -> model.layers.{i}.self_attn.o_proj
    gpt_neox.final_layer_norm                 -> model.norm
    embed_out                                 -> lm_head

GPT-J::

    transformer.wte                   -> model.embed_tokens
    transformer.h.{i}.ln_1            -> model.layers.{i}.input_layernorm
    transformer.h.{i}.attn.q_proj     -> model.layers.{i}.self_attn.q_proj (k, v alike)
    transformer.h.{i}.attn.out_proj   -> model.layers.{i}.self_attn.o_proj
    transformer.h.{i}.mlp.fc_in       -> model.layers.{i}.mlp.fc_in (fc_out alike)
    transformer.ln_f                  -> model.norm

GPT-2 and GPTBigCode (``nn.Linear`` weights where GPT-2 has Conv1D: :data:`TRANSPOSED`)::

    transformer.wpe                   -> model.embed_positions
    transformer.h.{i}.ln_1 / ln_2     -> model.layers.{i}.input_ / post_attention_layernorm
    transformer.h.{i}.attn.c_attn     -> model.layers.{i}.self_attn.qkv_proj
    transformer.h.{i}.attn.c_proj     -> model.layers.{i}.self_attn.o_proj
    transformer.h.{i}.mlp.c_fc        -> model.layers.{i}.mlp.c_fc (c_proj alike)

and ``wte`` / ``ln_f`` as GPT-J's. GPT-2 checkpoints saved from ``GPT2Model``
(openai-community/gpt2) have no ``transformer.`` prefix.

Falcon: ``transformer.word_embeddings`` -> ``model.embed_tokens``,
``self_attention.query_key_value`` / ``dense`` -> ``self_attn.qkv_proj`` / ``o_proj``, the
new architecture's ``ln_attn`` / ``ln_mlp`` -> ``input_layernorm`` /
``post_attention_layernorm`` (``ln_f`` and ``h`` as GPT-J's).

Older GPT-NeoX and GPT-J checkpoints carry the causal-mask buffers ``attention.bias`` /
``attention.masked_bias`` (GPT-J: ``attn.*``): not weights (None).

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


_GPT2_NAMES = _compile(
    (r"^(transformer\.)?wte\.", "model.embed_tokens."),
    (r"^(transformer\.)?wpe\.", "model.embed_positions."),
    (r"^(transformer\.)?ln_f\.", "model.norm."),
    (r"^(transformer\.)?h\.", "model.layers."),
    (r"\.attn\.c_attn\.", ".self_attn.qkv_proj."),
    (r"\.attn\.c_proj\.", ".self_attn.o_proj."),
    (r"\.ln_1\.", ".input_layernorm."),
    (r"\.ln_2\.", ".post_attention_layernorm."),
)
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
        (r"\.self_attn\.(q|k)_layernorm\.", r".self_attn.\1_norm."),
    ),
    "stablelm": _compile(
        (r"\.self_attn\.(q|k)_layernorm\.", r".self_attn.\1_norm."),
    ),
    "gpt_neox": _compile(
        (r"^gpt_neox\.embed_in\.", "model.embed_tokens."),
        (r"^gpt_neox\.final_layer_norm\.", "model.norm."),
        (r"^gpt_neox\.", "model."),
        (r"\.attention\.query_key_value\.", ".self_attn.qkv_proj."),
        (r"\.attention\.dense\.", ".self_attn.o_proj."),
        (r"^embed_out\.", "lm_head."),
    ),
    "gptj": _compile(
        (r"^transformer\.wte\.", "model.embed_tokens."),
        (r"^transformer\.ln_f\.", "model.norm."),
        (r"^transformer\.h\.", "model.layers."),
        (r"\.attn\.out_proj\.", ".self_attn.o_proj."),
        (r"\.attn\.", ".self_attn."),
        (r"\.ln_1\.", ".input_layernorm."),
    ),
    "gpt_bigcode": _GPT2_NAMES,
    "gpt2": _GPT2_NAMES,
    "falcon": _compile(
        (r"^transformer\.word_embeddings\.", "model.embed_tokens."),
        (r"^transformer\.ln_f\.", "model.norm."),
        (r"^transformer\.h\.", "model.layers."),
        (r"\.self_attention\.query_key_value\.", ".self_attn.qkv_proj."),
        (r"\.self_attention\.dense\.", ".self_attn.o_proj."),
        (r"\.ln_attn\.", ".input_layernorm."),
        (r"\.ln_mlp\.", ".post_attention_layernorm."),
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
    "gpt_neox": _compile(
        (r"^model\.embed_tokens$", "gpt_neox.embed_in"),
        (r"^model\.norm$", "gpt_neox.final_layer_norm"),
        (r"^model\.", "gpt_neox."),
        (r"\.self_attn\.qkv_proj$", ".attention.query_key_value"),
        (r"\.self_attn\.o_proj$", ".attention.dense"),
        (r"^lm_head$", "embed_out"),
    ),
    "gptj": _compile(
        (r"^model\.embed_tokens$", "transformer.wte"),
        (r"^model\.norm$", "transformer.ln_f"),
        (r"^model\.layers\.", "transformer.h."),
        (r"\.self_attn\.o_proj$", ".attn.out_proj"),
        (r"\.self_attn\.", ".attn."),
        (r"\.input_layernorm$", ".ln_1"),
    ),
    "gpt_bigcode": _compile(
        (r"^model\.embed_tokens$", "transformer.wte"),
        (r"^model\.embed_positions$", "transformer.wpe"),
        (r"^model\.norm$", "transformer.ln_f"),
        (r"^model\.layers\.", "transformer.h."),
        (r"\.self_attn\.qkv_proj$", ".attn.c_attn"),
        (r"\.self_attn\.o_proj$", ".attn.c_proj"),
        (r"\.input_layernorm$", ".ln_1"),
        (r"\.post_attention_layernorm$", ".ln_2"),
    ),
}
_MODULES["gpt2"] = _MODULES["gpt_bigcode"]
_MODULES["falcon"] = _compile(
    (r"^model\.embed_tokens$", "transformer.word_embeddings"),
    (r"^model\.norm$", "transformer.ln_f"),
    (r"^model\.layers\.", "transformer.h."),
    (r"\.self_attn\.qkv_proj$", ".self_attention.query_key_value"),
    (r"\.self_attn\.o_proj$", ".self_attention.dense"),
)

# GPT-2's Conv1D weights, stored [in, out] (our names; their biases are as nn.Linear's).
TRANSPOSED = {"gpt2": re.compile(r"\.(qkv_proj|o_proj|c_fc|c_proj)\.weight$")}


# Checkpoint tensors that are not weights.
_SKIPPED = {
    "gpt_neox": re.compile(r"\.attention\.(bias|masked_bias)$"),
    "gptj": re.compile(r"\.attn\.(bias|masked_bias)$"),
    "gpt2": re.compile(r"\.attn\.(bias|masked_bias)$"),
}


def family_name(model_type: str, name: str) -> str | None:
    """Checkpoint tensor ``name`` of a ``model_type`` checkpoint -> the decoder's name
    (None: not a weight)."""
    skipped = _SKIPPED.get(model_type)
    if skipped is not None and skipped.search(name):
        return None
    for pattern, repl in _RENAMES.get(model_type, ()):
        name = pattern.sub(repl, name)
    return name


def hf_module_name(model_type: str, module: str) -> str:
    """Our module name (``model.layers.0.mlp.fc1``) -> the checkpoint's."""
    for pattern, repl in _MODULES.get(model_type, ()):
        module = pattern.sub(repl, module)
    return module
