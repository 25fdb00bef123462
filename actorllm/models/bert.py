"""Encoder-only models: BERT (``BertModel``, ``BertForSequenceClassification``),
RoBERTa / XLM-RoBERTa (``RobertaModel``, ``XLMRobertaModel``, their
``ForSequenceClassification``) and ColBERT (``HF_ColBERT``: BERT whose every row goes
through ``linear``, a bias-free projection to ``projection_dim``).

Bidirectional attention over each whole sequence, absolute learned positions, token types,
post-LayerNorm blocks. Nothing is cached: an encoder runs a request's prompt in one
forward and keeps no KV. A step's sequences arrive flat (``[T]`` token ids, sequence
lengths); the linears run on the packed rows, the attention on each long sequence's own
rows and on the short ones padded together by length (``_layout``).

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
from actorllm.models.fused_linear import StackedLinears, linear_act, linear_add
from actorllm.models.onednn_linear import row_bucket

# config hidden_act -> fused_linear's activation
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
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


# A sequence at least this long attends alone, on strided views of the packed rows (no
# copy, no padding); shorter ones are padded together with a key mask, one call per width
# of PAD_WIDTHS. One padded [B, S] batch of uneven lengths spends most of its attention on
# padding (lengths spread over 8..256 cost 3x the real work), and a call per short
# sequence costs more in overhead than its padding would.
ALONE_MIN_LEN = 64
# The widths a short sequence is padded to: the first that holds it, set by its own
# length alone. SDPA's sums over a masked row change with the padded width (on torch's CPU
# kernel a row padded to 11 keys and to 16 differ in the last bits), so a width set by its
# partners (the longest of them) would make a request's result depend on the step it ran
# in, and a request replayed after a crash would not reproduce its first result.
PAD_WIDTHS = (16, 32, ALONE_MIN_LEN)


@dataclass(frozen=True)
class _Group:
    """The short sequences of a step that pad to one width S, in a [B, S] attention
    layout."""

    b: int
    s: int
    rows: torch.Tensor  # [N] int64, the group's rows in the packed [T] layout
    slots: torch.Tensor  # [N] int64, the same rows' indices in the flat [B * S] layout
    mask: torch.Tensor  # [B, 1, 1, S] bool (True: a real key)


@dataclass(frozen=True)
class _Layout:
    """How a step's sequences meet the attention: each long one alone, the rest grouped
    by the width they pad to."""

    alone: tuple[tuple[int, int], ...]  # (first packed row, length) of each long sequence
    groups: tuple[_Group, ...]


def _layout(seq_lens: list[int], device: torch.device) -> _Layout:
    spans = []  # (first packed row, length) of each sequence
    start = 0
    for n in seq_lens:
        spans.append((start, n))
        start += n
    alone = tuple((st, n) for st, n in spans if n >= ALONE_MIN_LEN)
    by_width: dict[int, list[tuple[int, int]]] = {}  # {width: its short spans}
    for st, n in spans:
        if n < ALONE_MIN_LEN:
            by_width.setdefault(next(w for w in PAD_WIDTHS if n <= w), []).append((st, n))
    return _Layout(alone, tuple(_group(w, short, device) for w, short in by_width.items()))


def _group(s: int, short: list[tuple[int, int]], device: torch.device) -> _Group:
    rows = [st + i for st, n in short for i in range(n)]
    slots = [j * s + i for j, (_, n) in enumerate(short) for i in range(n)]
    lens = torch.tensor([n for _, n in short], device=device)  # [B]
    # keys past a sequence's end are masked (always: the masked kernel's bits, whatever
    # the partners' lengths)
    mask = (torch.arange(s, device=device)[None, :] < lens[:, None])[:, None, None, :]
    return _Group(
        b=len(short),
        s=s,
        rows=torch.tensor(rows, device=device),
        slots=torch.tensor(slots, device=device),
        mask=mask,
    )


class _SelfAttention(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)
        # one matmul for the three where their packed oneDNN copies serve (prefill-sized
        # steps on CPU); not a module: the state dict keeps the three
        self.qkv = StackedLinears(self.query, self.key, self.value)


class _DenseNorm(nn.Module):
    def __init__(self, n_in: int, c: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(n_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(linear_add(self.dense, x, residual))


class _Attention(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _DenseNorm(c.hidden_size, c)
        self.num_heads = c.num_heads

    def forward(self, x: torch.Tensor, layout: _Layout) -> torch.Tensor:
        # x: [T, H] packed rows; the projections run packed, the attention per sequence
        # (long ones) or padded to [B, nh, S, D] (the short ones, by width)
        h = x.shape[1]
        nh, d = self.num_heads, h // self.num_heads
        q, k, v = self.self.qkv(x)  # [T, H] each (views of one [T, 3H] where stacked)
        o = torch.empty_like(q)  # [T, H]
        for start, n in layout.alone:
            # [n, H] -> [1, nh, n, D] views: SDPA takes the strides (4-D; a 3-D [nh, n, D]
            # view falls off its fast path)
            qs, ks, vs = (y[start : start + n].view(1, n, nh, d).transpose(1, 2) for y in (q, k, v))
            out = F.scaled_dot_product_attention(qs, ks, vs)  # [1, nh, n, D]
            o[start : start + n].view(1, n, nh, d).copy_(out.transpose(1, 2))
        for g in layout.groups:

            def padded(y: torch.Tensor, g: _Group = g) -> torch.Tensor:
                flat = y.new_zeros(g.b * g.s, h).index_copy_(0, g.slots, y.index_select(0, g.rows))
                return flat.view(g.b, g.s, nh, d).transpose(1, 2)  # [B, nh, S, D]

            out = F.scaled_dot_product_attention(padded(q), padded(k), padded(v), attn_mask=g.mask)
            flat = out.transpose(1, 2).reshape(g.b * g.s, h)  # [B*S, H]
            o.index_copy_(0, g.rows, flat.index_select(0, g.slots))
        return self.output(o, x)


class _Intermediate(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.act = _ACTIVATIONS[c.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_act(self.dense, x, self.act)  # the activation fused where it can be


class _Layer(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _DenseNorm(c.intermediate_size, c)

    def forward(self, x: torch.Tensor, layout: _Layout) -> torch.Tensor:
        x = self.attention(x, layout)
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

    ``forward(input_ids [T], token_types [T], seq_lens) -> hidden [T, H]`` (ColBERT:
    projected, [T, projection_dim]);
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
        # ColBERT's projection (checkpoint name ``linear.weight``, outside ``bert.``)
        self.linear: nn.Linear | None = None
        if c.projection_dim:
            self.linear = nn.Linear(c.hidden_size, c.projection_dim, bias=False)

    def forward(
        self, input_ids: torch.Tensor, token_types: torch.Tensor, seq_lens: list[int]
    ) -> torch.Tensor:
        """input_ids, token_types: [T] (the sequences back to back) -> hidden [T, H]."""
        device = input_ids.device
        lens = torch.tensor(seq_lens, device=device)  # [B]
        starts = torch.cumsum(lens, 0) - lens  # [B]
        seq_of_row = torch.repeat_interleave(torch.arange(len(seq_lens), device=device), lens)
        pos_in_seq = torch.arange(input_ids.shape[0], device=device) - starts[seq_of_row]  # [T]
        layout = _layout(seq_lens, device)
        pos = pos_in_seq + self.config.position_offset
        t = input_ids.shape[0]
        pad = row_bucket(t) - t if device.type == "cpu" else 0
        if pad:
            # [T] -> [T + pad]: rows of no sequence, so the linears run at a bucketed row
            # count whose oneDNN primitives are reused step after step; the attention
            # (layout) never reads them and they are cut off below; they hold index 0, a
            # valid token, position and type
            input_ids, pos, token_types = (
                F.pad(y, (0, pad)) for y in (input_ids, pos, token_types)
            )
        x = self.embeddings(input_ids, pos, token_types)
        for layer in self.encoder.layer:
            x = layer(x, layout)
        if self.linear is not None:
            x = self.linear(x[:t])  # [T, projection_dim]
        return x[:t]  # [T, H]

    def classify(self, cls_rows: torch.Tensor) -> torch.Tensor:
        if self.classifier is None:
            raise ValueError(f"{self.config.architecture} has no classification head")
        if self.pooler is not None:
            return self.classifier(self.pooler(cls_rows))  # [N, num_labels]
        return self.classifier(cls_rows)


def load_encoder(
    path: str | Path, config: EncoderConfig, dtype: torch.dtype, device: torch.device
) -> EncoderModel:
    """Build the model and load its weights (safetensors, else PyTorch ``.bin`` / ``.pt``;
    every tensor must be present; a base model's own ``pooler`` is unused and may be
    absent)."""
    from actorllm.models.checkpoint_files import weight_files
    from actorllm.models.checkpoint_tensors import select_tensors

    state = dict(select_tensors(weight_files(path), lambda _: True))
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
