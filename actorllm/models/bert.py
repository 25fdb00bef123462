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

from dataclasses import dataclass
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
        # ids, pos, types: [T] -> [T, H]
        x = self.word_embeddings(ids) + self.position_embeddings(pos)
        return self.LayerNorm(x + self.token_type_embeddings(types))


@dataclass(frozen=True)
class _Padding:
    """Where a step's packed rows sit in the padded [B, S] attention layout."""

    b: int
    s: int
    rows: torch.Tensor  # [T] int64, row t's index in the flat [B * S] layout
    mask: torch.Tensor | None  # [B, 1, 1, S] bool (True: a real key); None: no padding


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

    def forward(self, x: torch.Tensor, pad: _Padding) -> torch.Tensor:
        # x: [T, H] packed rows; projections run packed (no padding), only the attention
        # itself runs padded to [B, nh, S, D]
        h = x.shape[1]
        nh, b, s = self.num_heads, pad.b, pad.s

        def heads(y: torch.Tensor) -> torch.Tensor:
            if pad.mask is None:  # one layout: no scatter
                return y.view(b, s, nh, h // nh).transpose(1, 2)
            padded = y.new_zeros(b * s, h).index_copy_(0, pad.rows, y)  # [B*S, H]
            return padded.view(b, s, nh, h // nh).transpose(1, 2)  # [B, nh, S, D]

        q, k, v = heads(self.self.query(x)), heads(self.self.key(x)), heads(self.self.value(x))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=pad.mask)  # [B, nh, S, D]
        o = o.transpose(1, 2).reshape(b * s, h)
        if pad.mask is not None:
            o = o.index_select(0, pad.rows)  # [T, H]
        return self.output(o, x)


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

    def forward(self, x: torch.Tensor, pad: _Padding) -> torch.Tensor:
        x = self.attention(x, pad)
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
        """input_ids, token_types: [T] (the sequences back to back) -> hidden [T, H]."""
        device = input_ids.device
        b, s = len(seq_lens), max(seq_lens)
        lens = torch.tensor(seq_lens, device=device)  # [B]
        starts = torch.cumsum(lens, 0) - lens  # [B]
        seq_of_row = torch.repeat_interleave(torch.arange(b, device=device), lens)  # [T]
        pos_in_seq = torch.arange(input_ids.shape[0], device=device) - starts[seq_of_row]
        mask = None
        if min(seq_lens) != s:  # some padding: keys past a sequence's end are masked
            valid = torch.arange(s, device=device)[None, :] < lens[:, None]  # [B, S]
            mask = valid[:, None, None, :]
        pad = _Padding(b=b, s=s, rows=seq_of_row * s + pos_in_seq, mask=mask)
        x = self.embeddings(input_ids, pos_in_seq + self.config.position_offset, token_types)
        for layer in self.encoder.layer:
            x = layer(x, pad)
        return x  # [T, H]

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
