"""Per-step sampling inputs for the rows that sample, gathered from the :class:`InputBatch`.

Everything here is built from the batch's preallocated arrays; the rare parameters
(logit_bias, allowed_token_ids, bad_words, min_tokens, thinking_token_budget) fold into one
additive [N, V] mask that is only materialized when some row uses one of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import GrammarBitmask
from actorllm.core.thinking_budget import ThinkingMarkers
from actorllm.core.watermark_config import WatermarkConfig
from actorllm.kernels.sampling import GREEDY_EPS
from actorllm.worker.device_streams import to_device
from actorllm.worker.input_batch import InputBatch
from actorllm.worker.watermark_rows import WatermarkRows, watermark_rows


@dataclass(frozen=True)
class Penalties:
    prompt_token_ids: torch.Tensor  # [N, Lp] int64, padded with vocab_size
    output_token_ids: torch.Tensor  # [N, Lo] int64, padded with vocab_size
    presence: torch.Tensor  # [N] float32
    frequency: torch.Tensor  # [N] float32
    repetition: torch.Tensor  # [N] float32


@dataclass(frozen=True)
class SamplingMetadata:
    """What the sampler needs for N rows (one per sampling request, in logits order)."""

    temperature: torch.Tensor  # [N] float32
    top_k: torch.Tensor  # [N] int32, 0 = off
    top_p: torch.Tensor  # [N] float32, 1.0 = off
    min_p: torch.Tensor  # [N] float32, 0 = off
    all_greedy: bool
    # Additive [N, V] float32 (-inf bans, logit_bias adds); None when no row needs it.
    logit_adjust: torch.Tensor | None
    penalties: Penalties | None
    random_rows: list[int]  # rows that sample (not greedy), computed on the host
    seeds: list[int | None]  # per row; None = the shared generator
    output_positions: list[int]  # per row: outputs generated so far (the seed's counter)
    num_logprobs: list[int | None]  # per row: top-k logprobs (SamplingParams.logprobs)
    # Structured outputs: [R, W] int32 allowed-token bitmask rows and [N] int64 the row of
    # each logits row (-1: unconstrained); both None when no row is constrained.
    grammar_bitmask: torch.Tensor | None = None
    grammar_rows: torch.Tensor | None = None
    # Per row: SamplingParams.logprob_token_ids (these ids' logprobs instead of the top-k);
    # None when no row asks.
    logprob_token_ids: list[list[int] | None] | None = None
    # Custom logits processors (worker/logitsprocs/): f(logits [N, V] float32, all_greedy)
    # -> logits; None when none are configured.
    custom: Callable[[torch.Tensor, bool], torch.Tensor] | None = None
    # The rows drawn with the engine's watermark and their contexts (worker/
    # watermark_rows.py); None when the engine has none or no row is watermarked.
    watermark: WatermarkRows | None = None

    @property
    def max_num_logprobs(self) -> int | None:
        """The top-k width (vLLM's: rows with logprob_token_ids do not count)."""
        ks = [k for k in self.num_logprobs if k is not None]
        return max(ks) if ks else None

    @property
    def wants_logprobs(self) -> bool:
        """Some row asks for logprobs: the top-k or given token ids."""
        return self.max_num_logprobs is not None or self.logprob_token_ids is not None


def build_sampling_metadata(
    batch: InputBatch,
    slots: np.ndarray,
    vocab_size: int,
    device: torch.device,
    grammar: GrammarBitmask | None = None,
    offsets: np.ndarray | None = None,
    watermark: WatermarkConfig | None = None,
) -> SamplingMetadata:
    """Gather sampling inputs for ``slots`` ([N] slot indices, in logits order);
    ``grammar``: the step's structured-outputs bitmask rows, by request id;
    ``watermark``: the engine's watermark, if any.

    ``offsets`` (speculative decoding): [N] int64, how many of the request's drafts
    (written in ``batch.token_ids`` after its known tokens) precede each row; a slot
    repeats once per verified position. Every per-position input (output count: seeds,
    min_tokens; output history: penalties, bad_words) then reads the outputs as if those
    drafts were accepted, which they are whenever that row's token is emitted."""
    params = [batch.params[int(i)] for i in slots]
    assert all(p is not None for p in params)
    temperature = batch.temperature[slots]
    # Pending tokens (still on the device under async scheduling) count as outputs.
    known = batch.num_tokens[slots] + batch.num_pending[slots]
    if offsets is not None:
        known = known + offsets
    num_outputs = (known - batch.num_prompt_tokens[slots]).tolist()

    def dev(a: np.ndarray) -> torch.Tensor:
        return to_device(a, device)  # pinned + non-blocking on CUDA

    rows, bitmask = _grammar_rows(batch, slots, num_outputs, grammar)
    return SamplingMetadata(
        temperature=dev(temperature),
        top_k=dev(batch.top_k[slots]),
        top_p=dev(batch.top_p[slots]),
        min_p=dev(batch.min_p[slots]),
        all_greedy=bool((temperature < GREEDY_EPS).all()),
        logit_adjust=_logit_adjust(batch, slots, num_outputs, vocab_size, device, rows),
        penalties=_penalties(batch, slots, vocab_size, dev, offsets),
        random_rows=np.flatnonzero(temperature >= GREEDY_EPS).tolist(),
        seeds=[p.seed for p in params],  # type: ignore[union-attr]
        output_positions=num_outputs,
        num_logprobs=[None if p.logprob_token_ids else p.logprobs for p in params],  # type: ignore[union-attr]
        logprob_token_ids=_logprob_token_ids(params),  # type: ignore[arg-type]
        grammar_bitmask=None if bitmask is None else dev(bitmask),
        grammar_rows=None if rows is None else dev(rows),
        custom=_custom(batch, slots),
        watermark=_watermark(batch, slots, params, temperature, watermark),  # type: ignore[arg-type]
    )


def _watermark(
    batch: InputBatch,
    slots: np.ndarray,
    params: list[SamplingParams],
    temperature: np.ndarray,
    config: WatermarkConfig | None,
) -> WatermarkRows | None:
    """The watermarked rows (speculative decoding, which would add ``offsets``, is refused
    with a watermark: ``engine/config/engine_checks.py``). The batch's tokens are all on
    the host: a watermarked row needs its history (:func:`needs_token_history`)."""
    wants = [
        bool(p.watermarking) and t >= GREEDY_EPS for p, t in zip(params, temperature, strict=True)
    ]
    if config is None or not any(wants):
        return None
    # A watermarked row's step is planned after the runner resolved its pending tokens.
    assert not batch.num_pending[slots][wants].any(), "watermarked rows need their history"
    ends = batch.num_tokens[slots].tolist()
    tokens = [batch.token_ids[int(s), :e] for s, e in zip(slots.tolist(), ends, strict=True)]
    prompt_lens = batch.num_prompt_tokens[slots].tolist()
    return watermark_rows(tokens, prompt_lens, wants, config)


def _custom(
    batch: InputBatch, slots: np.ndarray
) -> Callable[[torch.Tensor, bool], torch.Tensor] | None:
    procs = batch.logitsprocs
    if procs is None:
        return None
    return lambda logits, all_greedy: procs.apply(logits, slots, all_greedy)


def _logprob_token_ids(params: list[SamplingParams]) -> list[list[int] | None] | None:
    ids = [p.logprob_token_ids or None for p in params]
    return ids if any(ids) else None


def _grammar_rows(
    batch: InputBatch, slots: np.ndarray, num_outputs: list[int], grammar: GrammarBitmask | None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """[N] int64 bitmask row per logits row (-1: none) and the [R, W] bitmask, with
    min_tokens folded in: a row that must not stop yet loses its stop tokens' bits, unless
    the grammar allows nothing else (then the grammar wins: its output must stay valid)."""
    if grammar is None or not grammar.req_ids:
        return None, None
    index = {rid: i for i, rid in enumerate(grammar.req_ids)}
    rows = np.array([index.get(batch.req_ids[int(s)] or "", -1) for s in slots], dtype=np.int64)
    bitmask: np.ndarray = grammar.array()  # waits for a fill still running beside the forward
    copied = False
    for n, slot in enumerate(slots.tolist()):
        p = batch.params[slot]
        r = int(rows[n])
        if r < 0 or p is None or not p.min_tokens or num_outputs[n] >= p.min_tokens:
            continue
        row = bitmask[r].view(np.uint32).copy()  # [W]
        for t in p.all_stop_token_ids(batch.eos_token_id[slot]):
            if t // 32 < len(row):
                row[t // 32] &= np.uint32(~(1 << (t % 32)) & 0xFFFFFFFF)
        if row.any():
            if not copied:
                bitmask, copied = bitmask.copy(), True  # the scheduler's array stays as sent
            bitmask[r] = row.view(np.int32)
    return (rows, bitmask) if (rows >= 0).any() else (None, None)


def needs_token_history(batch: InputBatch, slots: np.ndarray) -> bool:
    """Whether sampling ``slots`` reads their output token ids on the host (penalties,
    bad_words, thinking_token_budget, custom logits processors, the watermark): then
    tokens still pending on the device must be resolved first."""
    if batch.logitsprocs is not None:
        return True
    if any(p is not None and p.watermarking for p in (batch.params[int(s)] for s in slots)):
        return True  # the watermark's context and deduplication read the outputs
    if ((batch.presence_penalty[slots] != 0).any() or (batch.frequency_penalty[slots] != 0).any()
            or (batch.repetition_penalty[slots] != 1).any()):  # fmt: skip
        return True
    return any(
        p.bad_words_token_ids or p.thinking_markers
        for p in (batch.params[int(s)] for s in slots)
        if p is not None
    )


def _penalties(
    batch: InputBatch,
    slots: np.ndarray,
    vocab_size: int,
    dev: Callable[[np.ndarray], torch.Tensor],
    offsets: np.ndarray | None = None,
) -> Penalties | None:
    presence = batch.presence_penalty[slots]
    frequency = batch.frequency_penalty[slots]
    repetition = batch.repetition_penalty[slots]
    if not ((presence != 0).any() or (frequency != 0).any() or (repetition != 1).any()):
        return None
    n_prompt = batch.num_prompt_tokens[slots]
    n_out = batch.num_tokens[slots] - n_prompt
    if offsets is not None:
        n_out = n_out + offsets  # the drafts before each row count as outputs
    prompt = _padded(batch, slots, np.zeros_like(n_prompt), n_prompt, vocab_size)
    output = _padded(batch, slots, n_prompt, n_out, vocab_size)
    return Penalties(
        prompt_token_ids=dev(prompt),
        output_token_ids=dev(output),
        presence=dev(presence),
        frequency=dev(frequency),
        repetition=dev(repetition),
    )


def _padded(
    batch: InputBatch, slots: np.ndarray, starts: np.ndarray, lens: np.ndarray, pad: int
) -> np.ndarray:
    """[N, max(lens)] token ids ``token_ids[slot, start:start+len]``, padded with ``pad``."""
    width = max(int(lens.max(initial=0)), 1)
    cols = np.arange(width)[None, :]  # [1, W]
    idx = np.minimum(starts[:, None] + cols, batch.max_model_len - 1)  # [N, W]
    out = batch.token_ids[slots[:, None], idx]
    return np.where(cols < lens[:, None], out, pad)


def _thinking_forced(
    batch: InputBatch, slot: int, end: int, markers: ThinkingMarkers, budget: int
) -> int | None:
    """``forced_token`` of the slot's first ``end`` tokens, from its scan: the known tokens
    not read yet are fed to it, the drafts after them (a speculative row's) only read."""
    scan = batch.thinking_scan(slot, markers)
    known = min(int(batch.num_tokens[slot]), end)
    start = scan.resume(known)
    if known > start:
        scan.feed(batch.token_ids[slot, start:known].tolist())
    return scan.forced(batch.token_ids[slot, known:end].tolist(), budget)


def _logit_adjust(
    batch: InputBatch,
    slots: np.ndarray,
    num_outputs: list[int],
    vocab_size: int,
    device: torch.device,
    grammar_rows: np.ndarray | None,
) -> torch.Tensor | None:
    """Additive mask for allowed_token_ids, bad_words, min_tokens and logit_bias
    (min_tokens of grammar-constrained rows is folded into their bitmask instead); a row
    whose thinking budget is spent allows only its end marker's next token, over all of
    these (so greedy and random sampling both write it)."""
    adjust: np.ndarray | None = None
    for row, slot in enumerate(slots.tolist()):
        p = batch.params[slot]
        assert p is not None
        ban: list[int] = []
        constrained = grammar_rows is not None and grammar_rows[row] >= 0
        if p.min_tokens and num_outputs[row] < p.min_tokens and not constrained:
            ban += sorted(p.all_stop_token_ids(batch.eos_token_id[slot]))
        # Prompt + outputs on the host (+ the drafts before a speculative row).
        end = int(batch.num_prompt_tokens[slot]) + num_outputs[row] - int(batch.num_pending[slot])
        if p.bad_words_token_ids:
            outputs = batch.token_ids[slot, int(batch.num_prompt_tokens[slot]) : end]
            ban += _bad_word_bans(p.bad_words_token_ids, outputs)
        forced = None
        if p.thinking_markers is not None and p.thinking_token_budget is not None:
            forced = _thinking_forced(batch, slot, end, p.thinking_markers, p.thinking_token_budget)
        if not (ban or p.allowed_token_ids or p.logit_bias or forced is not None):
            continue
        if adjust is None:
            adjust = np.zeros((len(slots), vocab_size), dtype=np.float32)
        if p.allowed_token_ids:
            keep = np.full(vocab_size, -np.inf, dtype=np.float32)
            keep[[t for t in p.allowed_token_ids if t < vocab_size]] = 0.0
            adjust[row] += keep
        if p.logit_bias:
            ids = [t for t in p.logit_bias if t < vocab_size]
            adjust[row, ids] += np.array([p.logit_bias[t] for t in ids], dtype=np.float32)
        if ban:
            adjust[row, [t for t in ban if t < vocab_size]] = -np.inf
        if forced is not None and forced < vocab_size:
            adjust[row] = -np.inf
            adjust[row, forced] = 0.0
    return None if adjust is None else to_device(adjust, device)


def _bad_word_bans(words: list[list[int]], outputs: np.ndarray) -> list[int]:
    """Last tokens of bad words whose prefix matches the end of the outputs (vLLM rule)."""
    bans: list[int] = []
    n = len(outputs)
    for w in words:
        if not w:
            continue
        prefix = w[:-1]
        k = len(prefix)
        if k == 0 or (k <= n and outputs[n - k :].tolist() == prefix):
            bans.append(w[-1])
    return bans
