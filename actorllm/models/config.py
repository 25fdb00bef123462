"""``ModelConfig``: what the engine needs to know about a checkpoint, parsed from config.json.

Both config dialects are accepted:

* transformers 5.x writes ``rope_parameters = {"rope_type", "rope_theta", ...}``;
* transformers 4.x writes ``rope_theta`` at the top level and ``rope_scaling`` beside it.

``eos_token_id`` may be an int or a list in either config.json or generation_config.json;
generation_config.json wins when it has one (that is what ``generate()`` uses).

    >>> cfg = ModelConfig.from_dict({"architectures": ["LlamaForCausalLM"], "vocab_size": 32,
    ...     "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
    ...     "num_attention_heads": 2, "eos_token_id": [2, 3]})
    >>> cfg.head_dim, cfg.num_kv_heads, cfg.eos_token_ids
    (4, 2, [2, 3])
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec


class ModelConfigError(ValueError):
    """config.json is missing or lacks a field the model needs."""


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True):
    architecture: str
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    # HF rope scaling dict ({"rope_type": "llama3", "factor": ...}) or None for plain RoPE.
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool  # Qwen2: bias on q/k/v
    qk_norm: bool  # Qwen3: per-head RMSNorm on q and k before RoPE
    # Per layer: None (full attention) or the window in tokens.
    sliding_windows: list[int | None]
    # dtype name from the checkpoint ("float32", "bfloat16", "float16").
    dtype: str
    eos_token_ids: list[int]
    bos_token_id: int | None = None
    # Longest sequence the engine serves: max_position_embeddings unless the runner lowers it.
    max_model_len: int = 0

    def __post_init__(self) -> None:
        if self.max_model_len <= 0:
            msgspec.structs.force_setattr(self, "max_model_len", self.max_position_embeddings)

    @property
    def eos_token_id(self) -> int | None:
        """The primary EOS id (the first one), as the scheduler's ``Request`` wants it."""
        return self.eos_token_ids[0] if self.eos_token_ids else None

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ModelConfig:
        """Read ``config.json`` (and ``generation_config.json`` if present) from ``path``.

        Raises :class:`ModelConfigError` if config.json is missing or malformed.
        """
        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise ModelConfigError(f"no config.json in {path}")
        try:
            raw = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as e:
            raise ModelConfigError(f"{cfg_file} is not valid JSON: {e}") from e
        gen_file = path / "generation_config.json"
        gen = json.loads(gen_file.read_text()) if gen_file.is_file() else {}
        return cls.from_dict(raw, generation_config=gen)

    @classmethod
    def from_dict(
        cls, raw: dict[str, Any], generation_config: dict[str, Any] | None = None
    ) -> ModelConfig:
        def need(key: str) -> Any:
            if raw.get(key) is None:
                raise ModelConfigError(f"config.json lacks {key!r}")
            return raw[key]

        archs = raw.get("architectures") or []
        if not archs:
            raise ModelConfigError("config.json lacks 'architectures'")
        num_heads = int(need("num_attention_heads"))
        hidden = int(need("hidden_size"))
        num_layers = int(need("num_hidden_layers"))
        theta, scaling = _rope(raw)
        eos = _eos_ids((generation_config or {}).get("eos_token_id"))
        if not eos:
            eos = _eos_ids(raw.get("eos_token_id"))
        dtype = raw.get("dtype") or raw.get("torch_dtype") or "float32"
        return cls(
            architecture=str(archs[0]),
            model_type=str(raw.get("model_type", "")),
            vocab_size=int(need("vocab_size")),
            hidden_size=hidden,
            intermediate_size=int(need("intermediate_size")),
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or num_heads),
            head_dim=int(raw.get("head_dim") or hidden // num_heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v bias (its config has no switch); others say so explicitly.
            attention_bias=raw.get("model_type") == "qwen2" or bool(raw.get("attention_bias")),
            qk_norm=raw.get("model_type") == "qwen3",
            sliding_windows=_sliding_windows(raw, num_layers),
            dtype=str(dtype).removeprefix("torch."),
            eos_token_ids=eos,
            bos_token_id=raw.get("bos_token_id"),
        )


def _rope(raw: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling dict or None) from either the 5.x or the 4.x spelling."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and params:
        theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
        rope_type = params.get("rope_type", params.get("type", "default"))
        scaling = None if rope_type in (None, "default") else dict(params)
        return theta, scaling
    theta = float(raw.get("rope_theta", 10000.0))
    scaling = raw.get("rope_scaling")
    if isinstance(scaling, dict):
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type not in (None, "default"):
            return theta, dict(scaling)
    return theta, None


def _eos_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def _sliding_windows(raw: dict[str, Any], num_layers: int) -> list[int | None]:
    """Per-layer windows, following each family's HF config rules.

    Mistral: ``sliding_window`` applies to every layer when set. Qwen2/Qwen3: only with
    ``use_sliding_window``, and then per ``layer_types`` (or layers >= ``max_window_layers``).
    Llama: never.
    """
    window = raw.get("sliding_window")
    model_type = raw.get("model_type")
    if window is None or model_type == "llama":
        return [None] * num_layers
    if model_type in ("qwen2", "qwen3"):
        if not raw.get("use_sliding_window", False):
            return [None] * num_layers
        types = raw.get("layer_types")
        if types is None:
            first = int(raw.get("max_window_layers", num_layers))
            types = [
                "sliding_attention" if i >= first else "full_attention" for i in range(num_layers)
            ]
        return [int(window) if t == "sliding_attention" else None for t in types]
    return [int(window)] * num_layers
