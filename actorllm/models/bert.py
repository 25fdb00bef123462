"""Encoder-only models: BERT (``BertModel``, ``BertForSequenceClassification``) and
RoBERTa / XLM-RoBERTa (``RobertaModel``, ``XLMRobertaModel``, their
``ForSequenceClassification``).

Bidirectional attention over each whole sequence, absolute learned positions, token types,
post-LayerNorm blocks. Nothing is cached: an encoder runs a request's prompt in one
forward and keeps no KV. A step's sequences arrive flat (``[T]`` token ids, sequence
lengths) and are padded to ``[B, S]`` for ``scaled_dot_product_attention`` with a key mask.

Module names follow transformers' own, so a checkpoint loads with ``load_state_dict``
(a ``bert.`` / ``roberta.`` prefix stripped).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from actorllm.models.encoder_config import EncoderConfig

_ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


class _Embeddings(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        # ids, pos, types: [B, S] -> [B, S, H]
        x = self.word_embeddings(ids) + self.position_embeddings(pos)
        return self.LayerNorm(x + self.token_type_embeddings(types))


class _SelfAttention(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)


class _DenseNorm(nn.Module):
    def __init__(self, n_in: int, c: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(n_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _DenseNorm(c.hidden_size, c)
        self.num_heads = c.num_heads

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # x: [B, S, H]; mask: [B, 1, 1, S] bool, True = a real key
        b, s, h = x.shape
        nh = self.num_heads

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, nh, h // nh).transpose(1, 2)  # [B, nh, S, D]

        q, k, v = heads(self.self.query(x)), heads(self.self.key(x)), heads(self.self.value(x))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, nh, S, D]
        return self.output(o.transpose(1, 2).reshape(b, s, h), x)


class _Intermediate(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.act = _ACTIVATIONS[c.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _DenseNorm(c.intermediate_size, c)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class _Encoder(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c.num_layers))


class _BertPooler(nn.Module):
    """BERT's pooler: tanh(dense(h[CLS])); the classifier reads it."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(cls))


class _RobertaHead(nn.Module):
    """RoBERTa's classification head: out_proj(tanh(dense(h[CLS])))."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.out_proj = nn.Linear(c.hidden_size, c.num_labels)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        return self.out_proj(torch.tanh(self.dense(cls)))


class EncoderModel(nn.Module):
    """An encoder over a flat batch of whole sequences.

    ``forward(input_ids [T], token_types [T], seq_lens) -> hidden [T, H]``;
    ``classify(cls_rows [N, H]) -> logits [N, num_labels]`` (classifier checkpoints only).
    """

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.config = c
        self.embeddings = _Embeddings(c)
        self.encoder = _Encoder(c)
        self.pooler: _BertPooler | None = None
        self.classifier: nn.Module | None = None
        if c.classifier and c.family == "bert":
            self.pooler = _BertPooler(c)
            self.classifier = nn.Linear(c.hidden_size, c.num_labels)
        elif c.classifier:
            self.classifier = _RobertaHead(c)

    def forward(
        self, input_ids: torch.Tensor, token_types: torch.Tensor, seq_lens: list[int]
    ) -> torch.Tensor:
        device = input_ids.device
        b, s = len(seq_lens), max(seq_lens)
        lens = torch.tensor(seq_lens, device=device)  # [B]
        ar = torch.arange(s, device=device)  # [S]
        valid = ar[None, :] < lens[:, None]  # [B, S]
        ids = torch.full((b, s), self.config.pad_token_id, dtype=input_ids.dtype, device=device)
        types = torch.zeros((b, s), dtype=token_types.dtype, device=device)
        ids[valid] = input_ids
        types[valid] = token_types
        pos = (ar + self.config.position_offset)[None, :].expand(b, s)
        x = self.embeddings(ids, pos, types)  # [B, S, H]
        mask = valid[:, None, None, :]  # [B, 1, 1, S]
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return x[valid]  # [T, H], the sequences' rows in order

    def classify(self, cls_rows: torch.Tensor) -> torch.Tensor:
        if self.classifier is None:
            raise ValueError(f"{self.config.architecture} has no classification head")
        if self.pooler is not None:
            return self.classifier(self.pooler(cls_rows))  # [N, num_labels]
        return self.classifier(cls_rows)


def load_encoder(
    path: str | Path, config: EncoderConfig, dtype: torch.dtype, device: torch.device
) -> EncoderModel:
    """Build the model and load its safetensors weights (every tensor must be present;
    a base model's own ``pooler`` is unused and may be absent)."""
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {path}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    prefix = f"{config.family}."
    renamed = {}
    for name, t in state.items():
        if name.startswith(prefix):
            name = name[len(prefix) :]
        if name.endswith("position_ids") or name.startswith(("cls.", "lm_head.")):
            continue  # buffers, MLM heads: unused
        renamed[name] = t
    if not config.classifier:
        renamed = {k: v for k, v in renamed.items() if not k.startswith("pooler.")}
    model = EncoderModel(config)
    missing, unexpected = model.load_state_dict(renamed, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{config.architecture} checkpoint in {path} does not match: missing "
            f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    return model.to(device=device, dtype=dtype).eval()
