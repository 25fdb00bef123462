"""What the loader and the model runner need from every causal LM, whatever its family.

A model runs a flat batch: ``forward(input_ids [T], positions [T], meta, kv_caches) ->
hidden [T, H]``; ``compute_logits`` runs the LM head on the rows that need logits. The
loader builds it on the ``meta`` device, maps checkpoint names through
:meth:`CausalLM.checkpoint_name` / :meth:`CausalLM.checkpoint_tensor`, then calls
:meth:`CausalLM.init_rotary` on the real device.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from actorllm.models.attention import AttentionMetadata
from actorllm.models.config import CheckpointConfig
from actorllm.models.parallel import TensorParallelError, TPComm
from actorllm.models.pipeline import PipelineParallelError, PipeLink

KVCaches = list[tuple[torch.Tensor, torch.Tensor]]


class CausalLM(nn.Module):
    # HF tensor name fragment -> (our packed param fragment, shard index); see loader.py.
    packed_modules: dict[str, tuple[str, int]] = {}
    config: CheckpointConfig
    lm_head: nn.Linear
    # forward takes ``prompt_embeds`` (rows fed as embeddings: --enable-prompt-embeds).
    supports_prompt_embeds: bool = False
    # EAGLE-3 drafting (LlamaForCausalLM): layers whose incoming residual stream a forward
    # keeps in ``aux_hidden``; empty for every other model.
    aux_layers: tuple[int, ...] = ()
    aux_hidden: list[torch.Tensor]
    # Checkpoint tensors (our names) stored [in, out], the transpose of nn.Linear's (GPT-2's
    # Conv1D); the loader reads them whole and transposes them before a rank's cut.
    transposed_weights: re.Pattern[str] | None = None

    def init_rotary(self, device: torch.device | str, max_positions: int | None = None) -> None:
        """Build device-side tables (RoPE cos/sin, scales) once the weights are in place."""
        raise NotImplementedError

    def input_embeddings(self) -> nn.Embedding:
        """The token embedding (what a tied LM head shares)."""
        raise NotImplementedError

    def tie_weights(self) -> None:
        """Share the LM head with the embedding again (after weights were replaced)."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.input_embeddings().weight

    def bind_comm(self, comm: TPComm) -> None:
        """Run as one rank of a tensor-parallel group (models/parallel.py); a family
        without tensor-parallel layers refuses."""
        raise TensorParallelError(f"{type(self).__name__} has no tensor-parallel layers")

    def bind_pipe(self, pipe: PipeLink) -> None:
        """Run as one stage of a pipeline (models/pipeline.py); a family without
        pipeline stages refuses."""
        raise PipelineParallelError(f"{type(self).__name__} has no pipeline stages")

    def checkpoint_name(self, name: str) -> str | None:
        """A checkpoint tensor's name in this model's naming (None: not a weight we use)."""
        return name

    def checkpoint_tensor(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """The checkpoint tensor ``name`` (already renamed) in our layout."""
        return tensor

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: AttentionMetadata,
        kv_caches: KVCaches,
    ) -> torch.Tensor:
        raise NotImplementedError

    def compute_logits(self, hidden: torch.Tensor, float32: bool = True) -> torch.Tensor:
        """hidden: [N, H] -> logits [N, V] float32; ``float32=False``: may stay in the
        model's dtype (the sampler widens them where a stage needs float32; a bfloat16
        [128, 32000] widening costs ~5 ms of a CPU decode step in cache misses)."""
        raise NotImplementedError
