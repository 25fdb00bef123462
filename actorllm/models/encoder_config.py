"""An encoder-only checkpoint's configuration (BERT, RoBERTa, XLM-RoBERTa) and its pooling,
read from config.json and the sentence-transformers files; no torch (the engine reads it,
models/bert.py builds the model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from actorllm.models.pooler_spec import PoolerSpec, read_pooler_spec

ENCODER_ARCHITECTURES: dict[str, tuple[str, bool]] = {
    # architecture: (family, has a sequence-classification head)
    "BertModel": ("bert", False),
    "BertForSequenceClassification": ("bert", True),
    "RobertaModel": ("roberta", False),
    "RobertaForSequenceClassification": ("roberta", True),
    "XLMRobertaModel": ("roberta", False),
    "XLMRobertaForSequenceClassification": ("roberta", True),
}
# hidden_act values the encoder implements (models/bert.py)
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


class EncoderConfig(msgspec.Struct, frozen=True, kw_only=True):
    architecture: str
    family: str  # "bert" | "roberta"
    classifier: bool
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str
    pad_token_id: int
    num_labels: int
    id2label: dict[int, str]
    problem_type: str | None
    eos_token_ids: list[int] = msgspec.field(default_factory=list)
    max_model_len: int = 0  # set by the runner

    @property
    def position_offset(self) -> int:
        """RoBERTa numbers positions from ``pad_token_id + 1``."""
        return self.pad_token_id + 1 if self.family == "roberta" else 0

    @property
    def max_positions(self) -> int:
        return self.max_position_embeddings - self.position_offset


def is_encoder_architecture(architecture: str) -> bool:
    return architecture in ENCODER_ARCHITECTURES


def read_encoder_config(path: str | Path) -> EncoderConfig:
    raw: dict[str, Any] = json.loads((Path(path) / "config.json").read_text())
    arch = (raw.get("architectures") or ["BertModel"])[0]
    family, classifier = ENCODER_ARCHITECTURES[arch]
    id2label = {int(k): str(v) for k, v in (raw.get("id2label") or {}).items()}
    num_labels = int(raw.get("num_labels") or len(id2label) or 2)
    act = raw.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ValueError(f"hidden_act {act!r} is not supported for {arch}")
    quant = raw.get("quantization_config")
    if quant:  # the encoder's loader reads float weights only: never run them as numbers
        method = quant.get("quant_method", "?") if isinstance(quant, dict) else "?"
        raise ValueError(f"quantized encoder models ({method!r}) are not supported yet: {arch}")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"position_embedding_type {raw['position_embedding_type']!r} is not supported "
            "(absolute only)"
        )
    return EncoderConfig(
        architecture=arch,
        family=family,
        classifier=classifier,
        vocab_size=int(raw["vocab_size"]),
        hidden_size=int(raw["hidden_size"]),
        num_layers=int(raw["num_hidden_layers"]),
        num_heads=int(raw["num_attention_heads"]),
        intermediate_size=int(raw["intermediate_size"]),
        max_position_embeddings=int(raw.get("max_position_embeddings", 512)),
        type_vocab_size=int(raw.get("type_vocab_size", 2)),
        layer_norm_eps=float(raw.get("layer_norm_eps", 1e-12)),
        hidden_act=act,
        pad_token_id=int(raw.get("pad_token_id") or 0),
        num_labels=num_labels,
        id2label=id2label,
        problem_type=raw.get("problem_type"),
    )


def encoder_pooler_spec(
    path: str | Path, config: EncoderConfig, overrides: dict[str, Any] | None
) -> PoolerSpec:
    """An encoder's pooling: its sentence-transformers files, else CLS (BERT's own), with
    ``--pooler-config`` on top."""
    return read_pooler_spec(
        path,
        default_type="CLS",
        default_normalize=False,
        num_labels=config.num_labels if config.classifier else 0,
        problem_type=config.problem_type,
        overrides=overrides,
    )
