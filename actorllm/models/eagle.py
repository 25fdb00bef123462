"""EAGLE draft heads (vLLM's ``EagleLlamaForCausalLM``): a Llama decoder layer that drafts
from the target model's hidden states.

For position ``p`` the head takes the embedding of token ``p + 1`` and the target's final
(normed) hidden state at ``p``, fuses them, ``fc([embed; hidden])`` ([2H] -> [H]), runs its
decoder layers (the first without its input norm, as EAGLE trains it) and returns
``x + residual`` (no final norm); the target's LM head turns that into the logits of token
``p + 2``. Further drafts feed the head's own output back as the hidden state. The head has
no embedding or LM head of its own: it shares the target's (vLLM does the same without
pipeline parallelism).

Checkpoint layout (SafeAILab's EAGLE, ``yuhuili/EAGLE-*``, and the ``speculators`` names
vLLM maps): ``fc.weight`` (``fusion_fc.*``), an optional ``fc.bias``, ``layers.N.*``;
``embed_tokens.weight`` and ``lm_head.weight`` are ignored. HASS heads (``add_para_norm`` in
config.json) norm both inputs before the fusion.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from actorllm.kernels.ops import Ops
from actorllm.models.attention import AttentionMetadata
from actorllm.models.base import CausalLM, KVCaches
from actorllm.models.config import CheckpointConfig
from actorllm.models.decoder_layer import DecoderLayer
from actorllm.models.layers import RMSNorm
from actorllm.models.llama import LlamaForCausalLM
from actorllm.models.pipeline import PPMissingLayer

# The speculators library's names -> vLLM's (and ours).
_RENAMES = {
    "fusion_fc.weight": "fc.weight",
    "fusion_fc.bias": "fc.bias",
    "pre_lm_head_layernorm.weight": "hidden_states_layernorm.weight",
}


class _DraftHead(LlamaForCausalLM):
    """What both heads share: no forward of their own (they draft from hidden states), and
    the target's token embedding, and its model for the LM head, once :meth:`share`d."""

    own_embedding = False  # the checkpoint has embed_tokens (EAGLE-3 only)

    def __init__(self, cfg: CheckpointConfig, ops: Ops) -> None:
        super().__init__(cfg, ops)
        if not self.own_embedding:
            self.model.embed_tokens = PPMissingLayer()  # the target's (share())
        self._target: tuple[nn.Module, CausalLM] | None = None  # (embedding, model)

    def forward(self, *args: object, **kwargs: object) -> torch.Tensor:
        raise TypeError(f"{type(self).__name__} drafts from hidden states: call draft()")

    def share(self, target: CausalLM) -> None:
        """Use ``target``'s token embedding (unless the head has its own) and LM head
        where the head has none (not copied: the same tensors)."""
        embed = self.model.embed_tokens if self.own_embedding else target.input_embeddings()
        self._target = (embed, target)

    def _shared(self) -> tuple[nn.Module, CausalLM]:
        assert self._target is not None, "share() the target's embedding first"
        return self._target


class EagleLlamaForCausalLM(_DraftHead):
    """An EAGLE head over a target model. Build it with :func:`eagle_class` (which reads
    what the checkpoint holds), load it with ``load_model(model_class=...)``, then
    :meth:`share` the target's embedding and head before :meth:`draft`."""

    fc_bias = False  # the checkpoint has fc.bias
    hass = False  # HASS: embedding_layernorm and hidden_states_layernorm before the fusion

    def __init__(self, cfg: CheckpointConfig, ops: Ops) -> None:
        super().__init__(cfg, ops)
        h = cfg.hidden_size
        self.lm_head = PPMissingLayer()  # type: ignore[assignment]  # the target's (share())
        self.model.norm = PPMissingLayer()  # EAGLE ends on x + residual, unnormed
        first = self.model.layers[0]
        assert isinstance(first, DecoderLayer)
        first.norm_names = {**first.norm_names, "pre_attn": None}
        del first.input_layernorm
        self.fc = nn.Linear(2 * h, h, bias=self.fc_bias)
        if self.hass:
            self.embedding_layernorm = RMSNorm(ops, h, cfg.rms_norm_eps, cfg.norm_offset)
            self.hidden_states_layernorm = RMSNorm(ops, h, cfg.rms_norm_eps, cfg.norm_offset)

    def checkpoint_name(self, name: str) -> str | None:
        name = _RENAMES.get(name, name).removeprefix("model.")
        if name.startswith(("embed_tokens.", "lm_head.")):
            return None  # the target's are used
        if name.startswith("layers."):
            name = "model." + name
        return super().checkpoint_name(name)

    def draft(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: AttentionMetadata,
        kv_caches: KVCaches,
        hidden_states: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids, positions: [T]; hidden_states: [T, H] (the target's at each position,
        or the head's own output for a further draft) -> ([T, H] the LM head's input, [T, H]
        the hidden state a further draft takes): for EAGLE both are ``x + residual``."""
        embed = self._shared()[0](input_ids)  # [T, H]
        hidden = hidden_states.to(embed.dtype)
        if self.hass:
            embed = self.embedding_layernorm(embed)
            hidden = self.hidden_states_layernorm(hidden)
        x = self.fc(torch.cat((embed, hidden), dim=-1))  # [T, 2H] -> [T, H]
        residual: torch.Tensor | None = None
        for layer, kv_cache in zip(self.model.layers, kv_caches, strict=True):
            x, residual = layer(positions, x, residual, self.cos_sin_cache, kv_cache, attn_metadata)
        assert residual is not None
        out = x + residual
        return out, out

    def combine(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden states as the head reads them (EAGLE: as they are)."""
        return target_hidden

    def compute_logits(self, hidden: torch.Tensor, float32: bool = True) -> torch.Tensor:
        return self._shared()[1].compute_logits(hidden, float32)


class Eagle3LlamaForCausalLM(_DraftHead):
    """An EAGLE-3 head (vLLM's ``Eagle3LlamaForCausalLM``): drafts from three of the target's
    layers. ``fc`` [3H_t -> H] fuses the target's auxiliary hidden states (the residual
    stream entering those layers); the first layer attends over ``[input_norm(embed);
    hidden_norm(hidden)]`` ([2H] in), its residual being the fused hidden state (or its norm,
    ``norm_before_residual``); a final norm feeds the head's own LM head over its draft
    vocabulary, whose ids map to the target's through ``d2t`` (target = draft + d2t[draft]);
    the un-normed stream is the next draft's hidden state. Checkpoints name the first layer
    ``midlayer``; an absent ``embed_tokens`` or ``lm_head`` is the target's."""

    # What the checkpoint holds and its config says (eagle_class sets them; own_embedding
    # as well).
    own_head = True  # lm_head
    has_d2t = False  # d2t: a draft vocabulary smaller than the target's
    draft_vocab = 0  # config draft_vocab_size (0: the target's)
    target_hidden = 0  # config target_hidden_size (0: the head's)
    norm_before_residual = False

    def __init__(self, cfg: CheckpointConfig, ops: Ops) -> None:
        super().__init__(cfg, ops)
        h = cfg.hidden_size
        draft_vocab = self.draft_vocab or cfg.vocab_size
        self.lm_head = nn.Linear(h, draft_vocab, bias=False) if self.own_head else PPMissingLayer()  # type: ignore[assignment]
        first = self.model.layers[0]
        assert isinstance(first, DecoderLayer)
        attn = first.self_attn
        attn.qkv_proj = nn.Linear(2 * h, sum(attn.shard_sizes), bias=cfg.attention_bias)
        # checkpoints keep it in the first layer (midlayer.hidden_norm)
        self.hidden_norm = RMSNorm(ops, h, cfg.rms_norm_eps, cfg.norm_offset)
        self.fc = nn.Linear(3 * (self.target_hidden or h), h, bias=False)
        # [V_draft] offsets into the target's vocabulary: draft id i is target id i + d2t[i]
        self.d2t = (
            nn.Parameter(torch.zeros(draft_vocab, dtype=torch.long), requires_grad=False)
            if self.has_d2t
            else None
        )
        self._target_ids: torch.Tensor | None = None  # [V_draft] (None: the same ids)

    def checkpoint_name(self, name: str) -> str | None:
        name = name.removeprefix("model.").replace("midlayer.", "layers.0.")
        if name == "t2d" or name.startswith("mask_hidden"):
            return None  # the target -> draft map (unused), parallel drafting's mask
        if name == "layers.0.hidden_norm.weight":
            return "hidden_norm.weight"
        if name.startswith(("layers.", "embed_tokens.", "norm.")):
            name = "model." + name
        return super().checkpoint_name(name)

    def tie_weights(self) -> None:
        return None  # the head's LM head is its own or the target's, never its embedding

    def share(self, target: CausalLM) -> None:
        super().share(target)
        if self.d2t is not None:
            self._target_ids = torch.arange(len(self.d2t), device=self.d2t.device) + self.d2t

    def combine(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """[T, 3H_t] (the target's three auxiliary states, concatenated) -> [T, H]."""
        return self.fc(target_hidden.to(self.fc.weight.dtype))

    def draft(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: AttentionMetadata,
        kv_caches: KVCaches,
        hidden_states: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids, positions: [T]; hidden_states: [T, H] (:meth:`combine`'s output, or
        the head's own un-normed output) -> ([T, H] normed, for the LM head; [T, H] the
        un-normed stream, the next draft's hidden state)."""
        layers = list(self.model.layers)
        first = layers[0]
        assert isinstance(first, DecoderLayer)
        pre, post = first._norm("pre_attn"), first._norm("pre_mlp")  # input / post_attention
        assert pre is not None and post is not None
        embeds = pre(self._shared()[0](input_ids))  # [T, H]
        if self.norm_before_residual:
            hidden = self.hidden_norm(hidden_states)
            residual = hidden
        else:
            residual = hidden_states
            hidden = self.hidden_norm(hidden_states)
        x = torch.cat([embeds, hidden], dim=-1)  # [T, 2H]
        cos_sin = self.cos_sin_cache
        x = first.self_attn(positions, x, cos_sin, kv_caches[0], attn_metadata)  # [T, H]
        h, residual = post.forward_residual(x, residual)
        x = first.mlp(h)
        for layer, kv_cache in zip(layers[1:], kv_caches[1:], strict=True):
            x, residual = layer(positions, x, residual, cos_sin, kv_cache, attn_metadata)
        norm = self.model.norm
        assert isinstance(norm, RMSNorm)
        return norm.forward_residual(x, residual)

    def compute_logits(self, hidden: torch.Tensor, float32: bool = True) -> torch.Tensor:
        """[N, H] -> [N, V] logits over the target's vocabulary: the draft vocabulary's
        placed at their target ids, -inf elsewhere."""
        target = self._shared()[1]
        if not self.own_head:
            return target.compute_logits(hidden, float32)
        logits = self.lm_head(hidden).float()  # [N, V_draft]
        if self._target_ids is None:
            return logits
        full = logits.new_full((logits.shape[0], target.config.vocab_size), float("-inf"))
        full[:, self._target_ids] = logits  # [N, V]
        return full


def eagle_class(path: str | Path | None, eagle3: bool = False) -> type[LlamaForCausalLM]:
    """The head's class shaped for the checkpoint at ``path`` (None: random weights):
    EAGLE's fusion bias and HASS norms, EAGLE-3's own embedding, LM head and vocabulary map
    where the checkpoint has them, and their config fields."""
    names: set[str] = set()
    raw: dict[str, Any] = {}
    if path is not None:
        from actorllm.models.loader import iter_names

        names = {_RENAMES.get(n, n).removeprefix("model.") for n in iter_names(Path(path))}
        raw = json.loads((Path(path) / "config.json").read_text())
    if not eagle3:
        attrs: dict[str, Any] = {
            "fc_bias": "fc.bias" in names,
            "hass": bool(raw.get("add_para_norm")),
        }
        return type("EagleLlamaForCausalLM", (EagleLlamaForCausalLM,), attrs)
    attrs = {
        "own_embedding": "embed_tokens.weight" in names,
        "own_head": path is None or "lm_head.weight" in names,
        "has_d2t": "d2t" in names,
        "draft_vocab": int(raw.get("draft_vocab_size") or 0),
        "target_hidden": int(raw.get("target_hidden_size") or 0),
        "norm_before_residual": bool(raw.get("norm_before_residual")),
    }
    return type("Eagle3LlamaForCausalLM", (Eagle3LlamaForCausalLM,), attrs)
