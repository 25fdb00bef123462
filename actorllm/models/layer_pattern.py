"""Per-layer attention pattern from config.json: which layers attend through a sliding
window, and which apply no RoPE at all (NoPE), by each family's HF config rules.

* Mistral (and any family not named below): ``sliding_window`` on every layer when set;
* Llama, Gemma 1, Granite (and MoE), OLMo 2, GPT-2, ERNIE 4.5, Arcee, GLM, Seed-OSS,
  StableLM, Apertus, Cohere, OPT, Phi, GPT-NeoX, GPT-J, GPTBigCode, Falcon: never sliding;
* Gemma 2 / 3, gpt-oss, OLMo 3, EXAONE 4, Cohere 2: per ``layer_types``, or the
  family's default pattern when the config has none;
* Qwen 2 / 3 (and MoE), SmolLM3: only with ``use_sliding_window``, then per ``layer_types``
  (Qwen: or layers >= ``max_window_layers``; SmolLM3: or its NoPE layers);
* NoPE: SmolLM3's ``no_rope_layers`` zeros; EXAONE 4's full-attention layers when it has a
  sliding window; Cohere 2's full-attention layers (every layer without a window); every
  layer of OPT, GPT-2 and GPTBigCode (learned positions).

    >>> nope_layers({"model_type": "smollm3", "no_rope_layers": [1, 1, 0, 1]}, 4)
    [False, False, True, False]
    >>> sliding_windows({"model_type": "olmo3", "sliding_window": 8}, 4)
    [8, 8, 8, None]
"""

from __future__ import annotations

from typing import Any

SLIDING, FULL = "sliding_attention", "full_attention"
LAYER_TYPES = (SLIDING, FULL)
NEVER_SLIDING = (
    "llama", "gemma", "granite", "granitemoe", "olmo2", "gpt2", "ernie4_5", "arcee", "glm",
    "glm4", "seed_oss", "stablelm", "apertus", "cohere", "opt", "phi", "gpt_neox",
    "gptj", "gpt_bigcode", "falcon",
)  # fmt: skip
LEARNED_POSITIONS = ("opt", "gpt_bigcode", "gpt2")
OPT_IN = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "smollm3")  # use_sliding_window
# HF's sliding_window default where config.json may leave it out.
DEFAULT_WINDOW = {"olmo3": 4096, "exaone4": 4096, "cohere2": 4096}


def window_of(raw: dict[str, Any]) -> Any:
    mt = raw.get("model_type", "")
    return raw.get("sliding_window", DEFAULT_WINDOW.get(mt))


def layer_types(raw: dict[str, Any], num_layers: int) -> list[str]:
    """``layer_types`` as config.json says, or as the family's HF config would fill it in."""
    given = raw.get("layer_types")
    if given:
        return [str(t) for t in given]
    mt = raw.get("model_type")
    if mt in ("gemma2", "gpt_oss"):  # sliding first, alternating
        return [SLIDING if i % 2 == 0 else FULL for i in range(num_layers)]
    if str(mt).startswith("qwen"):
        first = int(raw.get("max_window_layers", num_layers))
        return [SLIDING if i >= first else FULL for i in range(num_layers)]
    if mt == "smollm3":  # sliding exactly where RoPE is skipped
        return [SLIDING if nope else FULL for nope in nope_layers(raw, num_layers)]
    if mt == "olmo3":
        pattern = 4
    elif mt in ("exaone4", "cohere2"):
        pattern = int(raw.get("sliding_window_pattern") or 4)
    else:  # Gemma 3: one full layer in every sliding_window_pattern (6 by default)
        pattern = int(raw.get("sliding_window_pattern") or raw.get("_sliding_window_pattern") or 6)
    return [SLIDING if (i + 1) % pattern else FULL for i in range(num_layers)]


def sliding_windows(raw: dict[str, Any], num_layers: int) -> list[int | None]:
    """Per layer: the window in tokens, or None (full attention)."""
    window = window_of(raw)
    mt = raw.get("model_type")
    if window is None or mt in NEVER_SLIDING:
        return [None] * num_layers
    if mt in OPT_IN and not raw.get("use_sliding_window", False):
        return [None] * num_layers
    if mt in ("gemma2", "gemma3_text", "gemma3", "gpt_oss", "olmo3", "exaone4", "cohere2", *OPT_IN):
        return [int(window) if t == SLIDING else None for t in layer_types(raw, num_layers)]
    return [int(window)] * num_layers


def nope_layers(raw: dict[str, Any], num_layers: int) -> list[bool]:
    """Per layer: True where it applies no RoPE; empty where every layer does."""
    mt = raw.get("model_type")
    if mt == "smollm3":
        flags = raw.get("no_rope_layers")
        if flags is None:  # SmolLM3Config: a NoPE layer every no_rope_layer_interval
            interval = int(raw.get("no_rope_layer_interval") or 4)
            return [(i + 1) % interval == 0 for i in range(num_layers)]
        return [not bool(f) for f in list(flags)[:num_layers]]
    if mt == "exaone4" and window_of(raw) is not None:
        return [t != SLIDING for t in layer_types(raw, num_layers)]
    if mt == "cohere2":  # RoPE on the sliding layers only: none at all without a window
        window = window_of(raw)
        return [window is None or t != SLIDING for t in layer_types(raw, num_layers)]
    if mt in LEARNED_POSITIONS:  # positions are added to the embeddings instead
        return [True] * num_layers
    return []


NAMES = {
    "gpt_oss": "gpt-oss", "olmo3": "OLMo 3", "exaone4": "EXAONE 4", "smollm3": "SmolLM3",
    "cohere2": "Cohere 2",
}  # fmt: skip


def pattern_problems(raw: dict[str, Any], num_layers: int) -> list[str]:
    """What this module would otherwise read a way transformers does not, as messages."""
    mt = str(raw.get("model_type"))
    if mt not in NAMES:
        return []
    name, types = NAMES[mt], raw.get("layer_types") or []
    problems = []
    if types and len(types) != num_layers:
        problems.append(f"{name} layer_types has {len(types)} entries for {num_layers} layers")
    odd = sorted({str(t) for t in types} - set(LAYER_TYPES))
    if odd:
        problems.append(f"{name} layer_types {odd} are not supported ({', '.join(LAYER_TYPES)})")
    if mt == "smollm3" and len(raw.get("no_rope_layers") or [0] * num_layers) < num_layers:
        problems.append(f"SmolLM3 no_rope_layers has fewer entries than {num_layers} layers")
    if mt == "exaone4" and not problems and window_of(raw) is not None:
        problems += _exaone4_problems(raw, num_layers)
    if mt == "olmo3" and window_of(raw) is None and SLIDING in layer_types(raw, num_layers):
        problems.append("OLMo 3 sliding_attention layers without a sliding_window")
    return problems


def _exaone4_problems(raw: dict[str, Any], num_layers: int) -> list[str]:
    pattern = raw.get("sliding_window_pattern")
    if not raw.get("layer_types") and not isinstance(pattern, int | None):
        return [f"EXAONE 4 sliding_window_pattern {pattern!r} without layer_types is not supported"]
    if SLIDING not in layer_types(raw, num_layers):
        return [
            "EXAONE 4 with a sliding_window but no sliding_attention layer is not supported "
            "(transformers would run every layer without RoPE, vLLM with it)"
        ]
    return []
