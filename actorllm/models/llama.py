"""The shared decoder: Llama 2/3/3.x, Mistral, Qwen2/3, Phi-3, Granite, Gemma 1/2/3, OLMo 2/3,
SmolLM3, ERNIE 4.5, Arcee, EXAONE 4, GLM / GLM-4, Seed-OSS, StarCoder 2, StableLM, Apertus,
Cohere (Command R: attention and MLP side by side), OPT, GPT-2 and GPTBigCode (learned
positions), Phi, GPT-NeoX, GPT-J, Falcon, and the MoE families (Mixtral, Qwen2/3-MoE,
OLMoE, GraniteMoE, PhiMoE).

These families differ only in switches read from :class:`CheckpointConfig` (set per family in
``models/families.py``): bias on the projections, q/k norms (per head, or over the whole
projection), sliding windows, head_dim, tied embeddings, which norms a layer has
(``norm_layout``), Gemma's ``(1 + w)`` norms and scaled embeddings, soft-capping,
Granite's multipliers, RoPE skipped on some layers (NoPE), GPT-J-style (interleaved)
RoPE, an MLP without a gate (``layers.UngatedMLP``), LayerNorm instead of RMSNorm, learned
absolute positions instead of RoPE, a biased LM head, and a sparse MoE MLP
(``models/moe.py``) instead of the dense one. A switch a family leaves off costs the
forward nothing: each is resolved once per layer at build time. The layers and their
norm layouts are ``models/decoder_layer.py``, their attention ``models/decoder_attention.py``.
Projections are fused: ``qkv_proj`` packs q|k|v rows and ``gate_up_proj`` packs gate|up
rows (Phi-3's checkpoints already are; GPT-NeoX's ``query_key_value`` keeps its own
per-head order, ``qkv_head_major``); :data:`PACKED_MODULES` tells the loader how HF's
separate tensors map onto them.

The batch is flat: ``forward(input_ids [T], positions [T], meta, kv_caches) -> [T, H]``;
``compute_logits`` then runs the LM head only on the rows that need logits.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from actorllm.kernels.ops import Ops
from actorllm.kernels.rotary import rope_table
from actorllm.models.attention import AttentionMetadata
from actorllm.models.base import CausalLM, KVCaches
from actorllm.models.config import CheckpointConfig
from actorllm.models.decoder_layer import layer_class
from actorllm.models.families import FUSED_QKV
from actorllm.models.family_names import TRANSPOSED, family_name
from actorllm.models.layers import Norm, RMSNorm, make_norm
from actorllm.models.moe import STACKED_NAMES
from actorllm.models.parallel import TPComm, vocab_shard
from actorllm.models.pipeline import (
    PipeLink,
    PPMissingLayer,
    is_first_stage,
    is_last_stage,
    stage_layers,
)

__all__ = ["PACKED_MODULES", "KVCaches", "LlamaForCausalLM", "RMSNorm"]

# HF tensor name fragment -> (our packed param fragment, shard index).
PACKED_MODULES: dict[str, tuple[str, int]] = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}
# Arcee's MLP has no gate: its up_proj is its own linear, only q/k/v are packed.
PACKED_QKV = {k: v for k, v in PACKED_MODULES.items() if v[0] == "qkv_proj"}

# GraniteMoE's checkpoint names: experts stacked [E, 2I, H] (gate | up) and [E, H, I].
_GRANITE_MOE_NAMES = {
    ".mlp.input_linear.weight": ".mlp.experts.w13",
    ".mlp.output_linear.weight": ".mlp.experts.w2",
    ".mlp.router.layer.weight": ".mlp.gate.weight",
}
_GRANITE_MOE = ("input_linear.weight", "output_linear.weight", "router.layer.weight")
_STACKED = re.compile(r"\.experts\.(" + "|".join(STACKED_NAMES) + r")$")


class VocabParallelEmbedding(nn.Module):
    """This rank's ``ceil(V / N)`` rows of the embedding; ids outside them embed to zeros,
    and the all-reduce sums the ranks' rows into the full lookup."""

    def __init__(self, cfg: CheckpointConfig) -> None:
        super().__init__()
        rows = vocab_shard(cfg)
        self.start = cfg.tp_rank * rows
        self.weight = nn.Parameter(torch.empty(rows, cfg.embed_size))  # [V/N, E]
        self.comm: TPComm | None = None  # set with the model's (bind_comm)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: [T] int64 -> [T, H]."""
        local = ids - self.start  # [T]
        mine = (local >= 0) & (local < self.weight.shape[0])
        x = F.embedding(local.clamp(0, self.weight.shape[0] - 1), self.weight)  # [T, H]
        x = x * mine.unsqueeze(-1).to(x.dtype)
        assert self.comm is not None, "a sharded embedding runs with its ranks"
        return self.comm.all_reduce(x)


class DecoderModel(nn.Module):
    """Pipeline parallel (``cfg.pp_layers``): the layers, embedding and norm of other
    stages are :class:`PPMissingLayer` (models/pipeline.py); the embedding stays on the last
    stage too when the LM head is tied to it."""

    def __init__(self, cfg: CheckpointConfig, ops: Ops) -> None:
        super().__init__()
        first, last = is_first_stage(cfg), is_last_stage(cfg)
        self.embed_tokens: nn.Embedding | VocabParallelEmbedding | PPMissingLayer
        if not first and not (last and cfg.tie_word_embeddings):
            self.embed_tokens = PPMissingLayer()
        elif cfg.tp_size == 1:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.embed_size)
        else:
            self.embed_tokens = VocabParallelEmbedding(cfg)
        start, end = stage_layers(cfg)
        layer = layer_class(cfg)
        self.layers = nn.ModuleList(
            layer(cfg, ops, i) if start <= i < end else PPMissingLayer()
            for i in range(cfg.num_layers)
        )
        self.norm: Norm | PPMissingLayer | None = (
            None if not cfg.final_norm  # OPT-350m
            else make_norm(cfg, ops, cfg.hidden_size) if last else PPMissingLayer()
        )  # fmt: skip
        # OPT: learned positions [max_positions + offset, H], added on the first stage.
        self.embed_positions: nn.Embedding | None = None
        if cfg.learned_positions and first:
            rows = cfg.max_position_embeddings + cfg.learned_position_offset
            self.embed_positions = nn.Embedding(rows, cfg.hidden_size)
        # OPT-350m: [E] embeddings widened to [H] before the layers, narrowed back after.
        self.project_in: nn.Linear | None = None
        self.project_out: nn.Linear | None = None
        if cfg.word_embed_proj_dim and first:
            self.project_in = nn.Linear(cfg.word_embed_proj_dim, cfg.hidden_size, bias=False)
        if cfg.word_embed_proj_dim and last:
            self.project_out = nn.Linear(cfg.hidden_size, cfg.word_embed_proj_dim, bias=False)


class LlamaForCausalLM(CausalLM):
    """Causal LM over a flat token batch with a paged KV cache, for every family above.

    Build it anywhere (the loader builds it on the ``meta`` device), then call
    :meth:`init_rotary` on the real device before the first forward.
    """

    packed_modules = PACKED_MODULES
    supports_prompt_embeds = True

    def __init__(self, cfg: CheckpointConfig, ops: Ops) -> None:
        super().__init__()
        self.config = cfg
        self.ops = ops
        if not cfg.mlp_gated:
            self.packed_modules = PACKED_QKV
        if cfg.model_type in FUSED_QKV:  # GPT-NeoX's query_key_value, BigCode's c_attn
            self.packed_modules = {}
        self.transposed_weights = TRANSPOSED.get(cfg.model_type)  # GPT-2's Conv1D
        self.model = DecoderModel(cfg, ops)
        # Tensor parallel: this rank's vocabulary rows (models/parallel.py).
        vocab = cfg.vocab_size if cfg.tp_size == 1 else vocab_shard(cfg)
        self.lm_head = nn.Linear(cfg.embed_size, vocab, bias=cfg.lm_head_bias)
        if not is_last_stage(cfg):  # pipeline parallel: the last stage's
            self.lm_head = PPMissingLayer()  # type: ignore[assignment]
        self.comm: TPComm | None = None  # gathers the ranks' logits (bind_comm)
        # Pipeline parallel: the link to the neighbouring stages (bind_pipe).
        self.pipe: PipeLink | None = None
        self.first_stage, self.last_stage = is_first_stage(cfg), is_last_stage(cfg)
        self.stage_start, self.stage_end = stage_layers(cfg)
        self.tie_weights()
        # [max_positions, rot_dim] cos | sin, float32; filled by init_rotary on the device.
        self.cos_sin_cache = torch.empty(0)
        # Gemma 3's sliding layers: their own RoPE base (None: they use cos_sin_cache).
        self.cos_sin_cache_local: torch.Tensor | None = None
        # Gemma / Granite: embeddings times this (Gemma rounds it to the model dtype first).
        self.embed_scale = cfg.embedding_multiplier
        # EAGLE-3 drafting: the layers whose incoming residual stream each forward keeps in
        # aux_hidden ([T, H] each, in this order); empty: nothing kept.
        self.aux_layers: tuple[int, ...] = ()
        self.aux_hidden: list[torch.Tensor] = []

    def init_rotary(self, device: torch.device | str, max_positions: int | None = None) -> None:
        """Build the RoPE tables for positions ``[0, max_positions)`` on ``device``."""
        cfg = self.config
        if cfg.learned_positions and (max_positions or 0) > cfg.max_position_embeddings:
            raise ValueError(
                f"{cfg.architecture} has learned positions for {cfg.max_position_embeddings} "
                f"tokens; cannot serve {max_positions}"
            )
        n = max(max_positions or 0, cfg.max_position_embeddings)
        rot_dim = int(cfg.head_dim * cfg.partial_rotary_factor)
        limits = dict(
            max_position_embeddings=cfg.max_position_embeddings, max_model_len=cfg.max_model_len
        )
        table = rope_table(rot_dim, cfg.rope_theta, cfg.rope_scaling, n, **limits)
        self.cos_sin_cache = table.to(device)
        if cfg.local_rope_theta is not None:
            local = rope_table(rot_dim, cfg.local_rope_theta, cfg.local_rope_scaling, n, **limits)
            self.cos_sin_cache_local = local.to(device)
        dtype = next(self.parameters()).dtype
        self.embed_scale = float(torch.tensor(cfg.embedding_multiplier, dtype=dtype))

    def input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens  # type: ignore[return-value]  # or its vocab shard

    def tie_weights(self) -> None:
        """A tied head shares the embedding (on a stage that holds both)."""
        embed = self.model.embed_tokens
        head = self.lm_head
        tied = self.config.tie_word_embeddings
        if tied and not isinstance(embed, PPMissingLayer) and not isinstance(head, PPMissingLayer):
            head.weight = embed.weight

    def bind_pipe(self, pipe: PipeLink) -> None:
        """Run as one stage of a pipeline: hidden states come from and go to ``pipe``."""
        self.pipe = pipe

    def bind_comm(self, comm: TPComm) -> None:
        """Run as one rank of a tensor-parallel group: every module that sums or gathers
        across ranks gets ``comm``."""
        for module in self.modules():
            if hasattr(module, "comm"):
                setattr(module, "comm", comm)  # noqa: B010 (nn.Module's typed __setattr__)

    def checkpoint_name(self, name: str) -> str | None:
        renamed = family_name(self.config.model_type, name)  # OPT's, Phi's, GPT-NeoX's names
        if renamed is None:
            return None
        name = renamed
        # Mixtral calls its MoE MLP block_sparse_moe; transformers 5 stacks experts itself.
        name = name.replace(".block_sparse_moe.", ".mlp.")
        if name.endswith(_GRANITE_MOE):  # GraniteMoE's own stacked experts and router
            for theirs, ours in _GRANITE_MOE_NAMES.items():
                name = name.replace(theirs, ours)
            return name
        m = _STACKED.search(name)
        if m is not None:
            name = name[: m.start(1)] + STACKED_NAMES[m.group(1)]
        return name

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: AttentionMetadata,
        kv_caches: KVCaches,
        prompt_embeds: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """input_ids, positions: [T] int64 -> hidden states [T, H] (final norm applied).
        ``prompt_embeds``: [R] rows and the [R, E] inputs they take instead of their
        tokens' embeddings (embedding prompts: after the embedding scale, before OPT's
        position embeddings and project_in, like HF's ``inputs_embeds``; E is H but for
        OPT-350m's narrower embeddings)."""
        residual: torch.Tensor | None = None
        if self.first_stage:
            x = self.model.embed_tokens(input_ids)  # [T, E]
            if self.embed_scale != 1.0:
                x = x * self.embed_scale
            if prompt_embeds is not None:
                rows, values = prompt_embeds  # [R], [R, E]
                x = x.index_copy(0, rows, values.to(x.dtype))  # [T, E]
            if self.model.project_in is not None:  # OPT-350m
                x = self.model.project_in(x)  # [T, H]
            if self.model.embed_positions is not None:  # OPT: also under prompt embeds
                offset = self.config.learned_position_offset
                x = x + self.model.embed_positions(positions + offset)  # [T, H]
        else:  # pipeline parallel: the previous stage's residual stream
            assert self.pipe is not None, "a later pipeline stage runs with its link"
            shape = (2, int(input_ids.shape[0]), self.config.hidden_size)
            stream = self.pipe.recv_stage(shape, next(self.parameters()).dtype)  # [2, T, H]
            x, residual = stream[0], stream[1]
        local = self.cos_sin_cache_local
        layers = self.model.layers[self.stage_start : self.stage_end]
        aux = self.aux_layers
        kept: dict[int, torch.Tensor] = {}
        for i, (layer, kv_cache) in enumerate(zip(layers, kv_caches, strict=True)):
            if aux and self.stage_start + i in aux:
                kept[self.stage_start + i] = x if residual is None else x + residual
            cos_sin = local if local is not None and layer.is_sliding else self.cos_sin_cache
            x, residual = layer(positions, x, residual, cos_sin, kv_cache, attn_metadata)
        if aux:
            self.aux_hidden = [kept[i] for i in aux]
        if not self.last_stage:
            assert self.pipe is not None, "an earlier pipeline stage runs with its link"
            rest = torch.zeros_like(x) if residual is None else residual  # OPT-350m: none
            self.pipe.send_stage(torch.stack([x, rest]))  # [2, T, H]
            return x
        norm = self.model.norm
        assert not isinstance(norm, PPMissingLayer)  # the last stage's
        if norm is None:  # OPT-350m: its last layer's norm was the last
            return x if residual is None else x + residual
        if residual is None:
            return norm(x)
        x, _ = norm.forward_residual(x, residual)
        return x

    def compute_logits(self, hidden: torch.Tensor, float32: bool = True) -> torch.Tensor:
        """hidden: [N, H] -> logits [N, V] float32 (Granite's scale, Gemma 2's soft cap);
        ``float32=False``: in the LM head's dtype unless the soft cap needs float32.
        Tensor parallel: a collective; rank 0 gets the logits, the other ranks [N, 0]."""
        if self.model.project_out is not None:  # OPT-350m: the head reads [N, E]
            hidden = self.model.project_out(hidden)
        logits = self.lm_head(hidden)  # [N, V] (tensor parallel: [N, V/N], this rank's)
        if self.comm is not None:
            gathered = self.comm.gather_last_dim(logits)  # rank 0: [N, N_ranks * V/N]
            if gathered is None:
                return logits[:, :0]
            logits = gathered[:, : self.config.vocab_size]  # the last rank's padding cut
        if self.config.logits_multiplier != 1.0:
            logits = logits * self.config.logits_multiplier
        cap = self.config.final_logit_softcap
        if not float32 and cap is None:
            return logits
        logits = logits.float()
        if cap is not None:  # in place: logits is this call's own fresh tensor
            logits = logits.div_(cap).tanh_().mul_(cap)
        return logits
