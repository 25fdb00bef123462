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

import torch
from torch import nn

from actorllm.kernels.ops import Ops
from actorllm.models.attention import AttentionMetadata
from actorllm.models.base import CausalLM, KVCaches
from actorllm.models.config import CheckpointConfig
from actorllm.models.layers import RMSNorm
from actorllm.models.llama import DecoderLayer, LlamaForCausalLM
from actorllm.models.pipeline import PPMissingLayer

# The speculators library's names -> vLLM's (and ours).
_RENAMES = {
    "fusion_fc.weight": "fc.weight",
    "fusion_fc.bias": "fc.bias",
    "pre_lm_head_layernorm.weight": "hidden_states_layernorm.weight",
}


class EagleLlamaForCausalLM(LlamaForCausalLM):
    """An EAGLE head over a target model. Build it with :func:`eagle_class` (which reads
    what the checkpoint holds), load it with ``load_model(model_class=...)``, then
    :meth:`share` the target's embedding and head before :meth:`draft`."""

    fc_bias = False  # the checkpoint has fc.bias
    hass = False  # HASS: embedding_layernorm and hidden_states_layernorm before the fusion

    def __init__(self, cfg: CheckpointConfig, ops: Ops) -> None:
        super().__init__(cfg, ops)
        h = cfg.hidden_size
        # Shared with the target (share()): no weights of its own here.
        self.model.embed_tokens = PPMissingLayer()
        self.lm_head = PPMissingLayer()  # type: ignore[assignment]
        self.model.norm = PPMissingLayer()  # EAGLE ends on x + residual, unnormed
        first = self.model.layers[0]
        assert isinstance(first, DecoderLayer)
        first.norm_names = {**first.norm_names, "pre_attn": None}
        del first.input_layernorm
        self.fc = nn.Linear(2 * h, h, bias=self.fc_bias)
        if self.hass:
            self.embedding_layernorm = RMSNorm(ops, h, cfg.rms_norm_eps, cfg.norm_offset)
            self.hidden_states_layernorm = RMSNorm(ops, h, cfg.rms_norm_eps, cfg.norm_offset)
        self._target: tuple[nn.Module, CausalLM] | None = None  # (embedding, model)

    def checkpoint_name(self, name: str) -> str | None:
        name = _RENAMES.get(name, name).removeprefix("model.")
        if name.startswith(("embed_tokens.", "lm_head.")):
            return None  # the target's are used
        if name.startswith("layers."):
            name = "model." + name
        return super().checkpoint_name(name)

    def share(self, target: CausalLM) -> None:
        """Use ``target``'s token embedding and LM head (not copied: the same tensors)."""
        self._target = (target.input_embeddings(), target)

    def forward(self, *args: object, **kwargs: object) -> torch.Tensor:
        raise TypeError("an EAGLE head drafts from hidden states: call draft()")

    def draft(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: AttentionMetadata,
        kv_caches: KVCaches,
        hidden_states: torch.Tensor,
    ) -> torch.Tensor:
        """input_ids, positions: [T]; hidden_states: [T, H] (the target's at each position,
        or the head's own output for a further draft) -> [T, H], the LM head's input."""
        assert self._target is not None, "share() the target's embedding and head first"
        embed = self._target[0](input_ids)  # [T, H]
        hidden = hidden_states.to(embed.dtype)
        if self.hass:
            embed = self.embedding_layernorm(embed)
            hidden = self.hidden_states_layernorm(hidden)
        x = self.fc(torch.cat((embed, hidden), dim=-1))  # [T, 2H] -> [T, H]
        residual: torch.Tensor | None = None
        for layer, kv_cache in zip(self.model.layers, kv_caches, strict=True):
            x, residual = layer(positions, x, residual, self.cos_sin_cache, kv_cache, attn_metadata)
        assert residual is not None
        return x + residual

    def compute_logits(self, hidden: torch.Tensor, float32: bool = True) -> torch.Tensor:
        assert self._target is not None, "share() the target's embedding and head first"
        return self._target[1].compute_logits(hidden, float32)


def eagle_class(path: str | Path | None) -> type[EagleLlamaForCausalLM]:
    """:class:`EagleLlamaForCausalLM` shaped for the checkpoint at ``path`` (None: random
    weights): whether its fusion has a bias, whether it is a HASS head."""
    names: set[str] = set()
    raw: dict[str, object] = {}
    if path is not None:
        from actorllm.models.loader import iter_names

        names = {_RENAMES.get(n, n).removeprefix("model.") for n in iter_names(Path(path))}
        raw = json.loads((Path(path) / "config.json").read_text())
    return type(
        "EagleLlamaForCausalLM",
        (EagleLlamaForCausalLM,),
        {"fc_bias": "fc.bias" in names, "hass": bool(raw.get("add_para_norm", False))},
    )
