"""The proposer a runner drafts with, chosen from its speculative options.

* no speculative tokens: none;
* no draft model: n-gram prompt lookup on the host (``ngram.py``), or suffix decoding
  on the host when ``suffix`` settings are given (``suffix.py``);
* ``draft_model``: a model of its own on the worker thread, drafting from the tokens, its KV
  cache beside the target's (``draft_model.py``);
* ``eagle`` / ``eagle3``: a head over the target's hidden states, its cache beside the
  target's (``eagle.py``); the runner's launcher then keeps each step's hidden states.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch

from actorllm.models.config import CheckpointConfig
from actorllm.models.load_format import LoadFormat
from actorllm.worker.spec_decode.draft_model import DraftModelError, DraftModelProposer
from actorllm.worker.spec_decode.eagle import EagleProposer
from actorllm.worker.spec_decode.ngram import NgramProposer
from actorllm.worker.spec_decode.propose import Proposer
from actorllm.worker.spec_decode.suffix import SuffixProposer, SuffixSettings

DraftMethod = Literal["draft_model", "eagle", "eagle3"]


def build_proposer(
    num_speculative_tokens: int,
    *,
    prompt_lookup_min: int,
    prompt_lookup_max: int,
    draft_model: str | Path | None,
    draft_method: DraftMethod,
    target: CheckpointConfig,
    num_kv_groups: int,
    dtype: torch.dtype,
    device: torch.device,
    kv_cache_dtype: str,
    attention_backend: str,
    block_size: int,
    max_model_len: int,
    seed: int,
    load_format: LoadFormat,
    suffix: SuffixSettings | None = None,
) -> Proposer | None:
    """The proposer (None: no speculative decoding). A draft model or head reads its config
    here and raises :class:`DraftModelError` when it cannot serve ``target`` (a target with
    more than one KV cache group, ``num_kv_groups``, included)."""
    if num_speculative_tokens <= 0:
        return None
    if suffix is not None:
        if draft_model is not None:
            raise DraftModelError("suffix decoding takes no draft model.")
        return SuffixProposer(num_speculative_tokens, suffix)
    if draft_model is None:
        return NgramProposer(num_speculative_tokens, prompt_lookup_min, prompt_lookup_max)
    drafter: dict[str, Any] = dict(
        target=target, dtype=dtype, device=device, kv_cache_dtype=kv_cache_dtype,
        attention_backend=attention_backend, block_size=block_size,
        max_model_len=max_model_len, seed=seed, load_format=load_format,
    )  # fmt: skip
    proposer: DraftModelProposer
    if draft_method in ("eagle", "eagle3"):
        proposer = EagleProposer(
            draft_model, num_speculative_tokens, method=draft_method, **drafter
        )
    else:
        proposer = DraftModelProposer(draft_model, num_speculative_tokens, **drafter)
    if num_kv_groups > 1:
        raise DraftModelError("a draft model for a hybrid-attention target is not built.")
    return proposer
