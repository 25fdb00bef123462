"""Which rows of a step draw with the watermark, and their contexts (vLLM 0.32's rules).

A row samples with the watermark when its request resolved ``watermarking`` to True (the
input processor's :func:`actorllm.core.watermarking.resolve_watermarking`), its
temperature is not 0 and its context is not a repeat. The context is the last
``context_width`` *generated* tokens (``-1`` before the first: vLLM's contexts never
reach into the prompt). A repeat (``deduplicate_contexts``) is a position of the searched
history, the generated tokens (``single_turn``) or prompt and generated tokens (``all``),
whose ``context_width`` tokens before it (``-1`` before the start) equal the context,
among the last ``deduplicate_contexts_max_history`` positions; ``all`` also skips rows
whose context still holds a ``-1``. A skipped row draws as an unwatermarked row does.

vLLM's reference is ``repeated_context_mask`` in ``vllm/v1/worker/gpu/sample/watermark.py``
(a Triton kernel with a per-token CPU loop beside it); here each row's search is one
vectorised numpy compare over its history, on the host where the batch's tokens are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from actorllm.core.watermark_config import WatermarkConfig


@dataclass(frozen=True)
class WatermarkRows:
    rows: list[int]  # logits rows that draw with the watermark
    contexts: np.ndarray  # [R, W] int64, the context of each of those rows


def context_of(generated: np.ndarray, width: int) -> np.ndarray:
    """[W] int64: the last ``width`` generated tokens, left-padded with -1."""
    tail = generated[max(0, len(generated) - width) :]
    return np.concatenate([np.full(width - len(tail), -1, dtype=np.int64), tail.astype(np.int64)])


def is_repeated(
    tokens: np.ndarray, prompt_len: int, context: np.ndarray, config: WatermarkConfig
) -> bool:
    """Whether ``context`` ([W]) already occurred in the searched history of ``tokens``
    (prompt then generated tokens, [L] int64) under ``config.deduplicate_contexts``."""
    scope, width = config.deduplicate_contexts, config.context_width
    if scope == "none":
        return False
    if scope == "all" and len(tokens) - prompt_len < width:
        return True  # vLLM's skip_partial_context
    history = tokens if scope == "all" else tokens[prompt_len:]
    n = len(history)
    if n == 0:
        return False
    start = (
        0
        if config.deduplicate_contexts_max_history is None
        else max(0, n - config.deduplicate_contexts_max_history)
    )
    padded = np.concatenate([np.full(width, -1, dtype=np.int64), history.astype(np.int64)])
    windows = sliding_window_view(padded, width)[start:n]  # [n - start, W]: before each pos
    return bool((windows == context).all(axis=1).any())


def watermark_rows(
    tokens: list[np.ndarray],
    prompt_lens: list[int],
    wants: list[bool],
    config: WatermarkConfig,
) -> WatermarkRows | None:
    """Per logits row: its request's tokens so far (prompt then outputs), prompt length,
    and whether it wants the watermark (resolved and not greedy) -> the rows drawn with
    the watermark and their contexts; None when there are none."""
    rows: list[int] = []
    contexts: list[np.ndarray] = []
    for row, (toks, plen, want) in enumerate(zip(tokens, prompt_lens, wants, strict=True)):
        if not want:
            continue
        context = context_of(toks[plen:], config.context_width)
        if is_repeated(toks, plen, context, config):
            continue
        rows.append(row)
        contexts.append(context)
    if not rows:
        return None
    return WatermarkRows(rows=rows, contexts=np.stack(contexts))
