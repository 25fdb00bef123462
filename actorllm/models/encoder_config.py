"""An encoder-only checkpoint's configuration (BERT, RoBERTa, XLM-RoBERTa, and ColBERT's
BERT with its projection) and its pooling, read from config.json and the
sentence-transformers files; no torch (the engine reads it, models/bert.py builds the
model)."""

from __future__ import annotations

import json
import struct
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
    # ColBERT (vLLM's ColBERTModel): a BERT saved as ``bert.*`` beside ``linear.weight``, a
    # bias-free projection of every token's hidden state (answerai-colbert-small-v1)
    "HF_ColBERT": ("bert", False),
}
# ColBERT architectures: token embeddings only (late interaction), projected
COLBERT_ARCHITECTURES = ("HF_ColBERT",)
# config.json keys that may give ColBERT's projection width, in vLLM's order; without them
# it is the rows of the checkpoint's linear.weight
_COLBERT_DIM_KEYS = ("colbert_dim", "dim", "projection_dim")
COLBERT_WEIGHT = "linear.weight"
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
    # ColBERT: the width each token's hidden state is projected to (0: no projection)
    projection_dim: int = 0
    eos_token_ids: list[int] = msgspec.field(default_factory=list)
    max_model_len: int = 0  # set by the runner

    @property
    def position_offset(self) -> int:
        """RoBERTa numbers positions from ``pad_token_id + 1``."""
        return self.pad_token_id + 1 if self.family == "roberta" else 0

    @property
    def max_positions(self) -> int:
        return self.max_position_embeddings - self.position_offset

    @property
    def output_size(self) -> int:
        """The width of the rows the model returns (its projection's, for ColBERT)."""
        return self.projection_dim or self.hidden_size


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
        projection_dim=_colbert_dim(Path(path), raw) if arch in COLBERT_ARCHITECTURES else 0,
    )


def _colbert_dim(path: Path, raw: dict[str, Any]) -> int:
    """ColBERT's projection width: config.json's, else the rows of ``linear.weight`` in the
    safetensors checkpoint (read from the file's JSON header: no tensor is loaded)."""
    for key in _COLBERT_DIM_KEYS:
        if raw.get(key):
            return int(raw[key])
    index = path / "model.safetensors.index.json"
    name = "model.safetensors"
    if index.is_file():
        name = json.loads(index.read_text())["weight_map"].get(COLBERT_WEIGHT, name)
    try:
        with (path / name).open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        return int(header[COLBERT_WEIGHT]["shape"][0])
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(
            f"HF_ColBERT checkpoint in {path}: no {COLBERT_WEIGHT} in {name} and no "
            f"{' / '.join(_COLBERT_DIM_KEYS)} in config.json ({exc!r})"
        ) from None


def encoder_pooler_spec(
    path: str | Path, config: EncoderConfig, overrides: dict[str, Any] | None
) -> PoolerSpec:
    """An encoder's pooling: its sentence-transformers files, else CLS (BERT's own), with
    ``--pooler-config`` on top."""
    colbert = config.architecture in COLBERT_ARCHITECTURES
    return read_pooler_spec(
        path,
        default_type="CLS",
        # ColBERT's token embeddings are unit vectors (its MaxSim sums cosines)
        default_normalize=colbert,
        num_labels=config.num_labels if config.classifier else 0,
        problem_type=config.problem_type,
        overrides=overrides,
    )
