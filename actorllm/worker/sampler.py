"""The sampler: logits [N, V] -> one token per row, plus the logprobs rows asked for.

Order (vLLM V1's): the structured-outputs grammar bitmask first (vLLM applies it to the
logits before its sampler, so logprobs reflect it: forbidden tokens get -inf and the rest
renormalize); then raw logprobs, from ``log_softmax`` of those logits — before penalties,
biases, other masks and temperature (vLLM's default ``logprobs_mode="raw_logprobs"``).
Then the additive mask (allowed_token_ids, bad_words,
min_tokens, logit_bias), then penalties, then :func:`sample_from_logits` (greedy argmax,
or temperature + min-p + top-k + top-p and one inverse-CDF draw per row: a single
uniform per row instead of V exponentials, 18x cheaper on CPU).

Determinism: a seeded row's uniform is a hash of ``(seed, output position)``
(:func:`seeded_uniforms`), so the same request replayed after a preemption or a crash
redraws the same tokens, whatever else is in the batch. Unseeded rows share one generator.

Backends: with ``sample_seeded`` (the Triton backend's ``Ops.sample_seeded``), the noise is
drawn inside the kernel from Philox keyed on the row's seed with counter = output position,
so no [N, V] noise tensor is built and nothing syncs; unseeded rows get a fresh 64-bit seed
per step from a host generator seeded with the runner's seed. The Philox stream differs from
torch's generator: the same (seed, position) gives the same token on replay within a backend,
but not the same token on the torch backend as on the Triton one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from actorllm.core.seeds import MASK64, mix_seed
from actorllm.core.watermark_config import WatermarkConfig
from actorllm.kernels.sampling import (
    apply_penalties,
    filtered_scaled_logits,
    sample_from_logits,
    sample_inverse_cdf,
    token_counts,
    token_mask,
    weights_from_filtered,
)
from actorllm.kernels.token_bitmask import apply_token_bitmask, masks_in_place
from actorllm.worker.device_streams import to_device
from actorllm.worker.sampling_metadata import SamplingMetadata
from actorllm.worker.watermark_draw import WatermarkDraw

# Exp(1) draws of exactly 0 would turn a masked token's 0/0 into NaN (which argmax picks).


def seed_for_position(seed: int, position: int) -> int:
    """A 64-bit value from (request seed, output position): :func:`seeded_uniforms`' hash."""
    return mix_seed(seed, position)


def seeded_uniforms(seeds: list[int], positions: list[int]) -> np.ndarray:
    """[N] float32 U[0, 1) draws, row i's a pure function of (seeds[i], positions[i]): the
    top 24 bits of :func:`seed_for_position` (``core/seeds.py``), all rows at once (a
    generator built per row cost ~5 us a row). 24 bits: exact in float32, below 1."""
    with np.errstate(over="ignore"):
        x = np.asarray(seeds, dtype=np.int64).view(np.uint64)
        p = np.asarray(positions, dtype=np.uint64) + np.uint64(1)
        x = x ^ (p * np.uint64(0x9E3779B97F4A7C15))
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)


@dataclass(frozen=True)
class LogprobsTensors:
    token_ids: torch.Tensor  # [N, K + 1] int64: the sampled token, then the top-K
    logprobs: torch.Tensor  # [N, K + 1] float32
    ranks: torch.Tensor  # [N] int64, 1-based rank of the sampled token


@dataclass(frozen=True)
class SamplerOutput:
    sampled_token_ids: torch.Tensor  # [N] int64
    logprobs: LogprobsTensors | None  # rows for every N; K = the largest request's k
    # [N, V] bool, the tokens each row's draw could pick (--return-sampling-mask), else None
    sampling_mask: torch.Tensor | None = None


class Sampler:
    """Stateless apart from the shared generator for unseeded rows. Worker thread only."""

    def __init__(
        self,
        vocab_size: int,
        device: torch.device,
        seed: int = 0,
        sample_seeded: Callable[..., torch.Tensor] | None = None,
        apply_token_bitmask: Callable[..., torch.Tensor] = apply_token_bitmask,
        watermark: WatermarkConfig | None = None,
        return_sampling_mask: bool = False,
    ) -> None:
        self.vocab_size = vocab_size
        # vLLM's --return-sampling-mask: every row draws through :meth:`_draw_with_mask`,
        # and logprobs are the processed ones (vLLM requires logprobs_mode
        # processed_logprobs with it).
        self.return_sampling_mask = return_sampling_mask
        self.device = device
        # Per-row uniforms for unseeded rows, drawn on the host (N values, uploaded with
        # the step).
        self.host_generator = torch.Generator().manual_seed(seed)
        self.sample_seeded = sample_seeded
        # The grammar bitmask (+ fused additive adjust): the backend's kernel or the reference.
        self.apply_token_bitmask = apply_token_bitmask
        # Fresh per-step seeds for unseeded rows on the seeded-kernel path.
        self.host_rng = np.random.default_rng(seed)
        # The engine's watermark (--watermark-config): the config the batch reads to pick
        # rows, and the draw that replaces their random one.
        self.watermark = watermark
        self.watermark_draw = WatermarkDraw(watermark) if watermark is not None else None

    def __call__(self, logits: torch.Tensor, meta: SamplingMetadata) -> SamplerOutput:
        """logits: [N, V] float32, or the model's dtype (widened here where a stage needs
        float32); consumed: may be modified in place."""
        logits = self._widened(logits, meta)
        adjust = meta.logit_adjust
        if meta.grammar_rows is not None:
            # The grammar mask comes first, so logprobs reflect it (vLLM masks before the
            # sampler); without logprobs the adjust is fused into the same pass.
            fuse = adjust if not meta.wants_logprobs else None
            logits = self.apply_token_bitmask(logits, meta.grammar_bitmask, meta.grammar_rows, fuse)
            if fuse is not None:
                adjust = None
        masked = self.return_sampling_mask
        raw_logprobs = logits.log_softmax(dim=-1) if meta.wants_logprobs and not masked else None
        if adjust is not None:
            logits = logits + adjust
        if meta.custom is not None:  # custom logits processors, after vLLM's built-in masks
            logits = meta.custom(logits, meta.all_greedy)
        if meta.penalties is not None:
            p = meta.penalties
            v = self.vocab_size
            prompt_mask = token_mask(p.prompt_token_ids, v)  # [N, V] bool
            out_counts = token_counts(p.output_token_ids, v)
            logits = apply_penalties(  # logits are ours: penalised in place
                logits, prompt_mask, out_counts, p.presence, p.frequency, p.repetition, True
            )
        if masked:
            sampled, mask, processed = self._draw_with_mask(logits, meta)
            return SamplerOutput(
                sampled_token_ids=sampled,
                logprobs=self._logprobs(processed, sampled, meta),
                sampling_mask=mask,
            )
        watermarked = self._watermarked(logits, meta)  # before the draw consumes the logits
        if self.sample_seeded is not None:
            seeds, positions = self._seeds(meta)
            sampled = self.sample_seeded(
                logits, meta.temperature, meta.top_k, meta.top_p, meta.min_p, seeds, positions
            )
        else:
            uniform = self._uniforms(meta, logits.shape[0])
            sampled = sample_from_logits(  # logits are ours (consumed): overwritten
                logits, meta.temperature, meta.top_k, meta.top_p, meta.min_p, None, uniform,
                consume=True,
            )  # fmt: skip
        if watermarked is not None:
            sampled = sampled.index_copy(0, *watermarked)
        return SamplerOutput(
            sampled_token_ids=sampled, logprobs=self._logprobs(raw_logprobs, sampled, meta)
        )

    def _logprobs(
        self, logprobs: torch.Tensor | None, sampled: torch.Tensor, meta: SamplingMetadata
    ) -> LogprobsTensors | None:
        """logprobs: [N, V] log_softmax rows (raw or processed), None when no row asked."""
        if logprobs is None:
            return None
        lp = compute_logprobs(logprobs, sampled, meta.max_num_logprobs or 0)
        if meta.logprob_token_ids is not None:
            lp = with_token_logprobs(lp, logprobs, meta.logprob_token_ids)
        return lp

    def _draw_with_mask(
        self, logits: torch.Tensor, meta: SamplingMetadata
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The draw of ``sample_from_logits``' filtered torch path, keeping what it filters:
        ([N] int64 tokens, [N, V] bool sampling mask, [N, V] processed logprobs or None).

        The mask and the processed logprobs read the very logits the inverse CDF draws
        from (temperature, then min-p, top-k, top-p), so a mask can never omit a token the
        draw could pick. Every row is random with top-k on (the input checks refuse
        temperature 0 and top_k 0 under --return-sampling-mask, as vLLM does), so this is
        the path ``sample_from_logits`` takes for these rows too, and the tokens are the
        same; the Triton backend's fused kernel filters where nothing can read it, so it
        is not used here."""
        logits = logits.float()  # [N, V]; a no-op on float32 (then ours to overwrite)
        rt = meta.temperature.reciprocal().unsqueeze(1)  # [N, 1]
        x = filtered_scaled_logits(logits, rt, meta.min_p, meta.top_k, meta.top_p, logits)
        mask = x > float("-inf")  # [N, V] bool
        processed = x.log_softmax(dim=-1) if meta.wants_logprobs else None  # [N, V]
        uniform = self._uniforms(meta, x.shape[0])  # [N]
        sampled = sample_inverse_cdf(weights_from_filtered(x), uniform)  # [N] int64
        return sampled, mask, processed

    def _watermarked(
        self, logits: torch.Tensor, meta: SamplingMetadata
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """([R] int64 rows, [R] int64 tokens) drawn with the watermark, or None."""
        rows = meta.watermark
        if rows is None or self.watermark_draw is None:
            return None
        index = torch.tensor(rows.rows, dtype=torch.int64, device=self.device)  # [R]
        contexts = to_device(rows.contexts, self.device)  # [R, W]

        def uniforms() -> list[float]:
            return self._uniforms(meta, logits.shape[0])[index].tolist()

        keys = self.watermark_draw.keys(len(rows.rows), uniforms)
        tokens = self.watermark_draw(
            logits.index_select(0, index), contexts, meta.temperature[index],
            meta.top_k[index], meta.top_p[index], meta.min_p[index], keys,
        )  # fmt: skip
        return index, tokens

    def _widened(self, logits: torch.Tensor, meta: SamplingMetadata) -> torch.Tensor:
        """float32 logits unless only ``sample_from_logits``'s plain draw reads them (greedy
        argmax and the native tempered draw read bfloat16 rows exactly as their float32
        widening, so the tokens are the same, without a [N, V] float32 copy)."""
        if logits.dtype == torch.float32:
            return logits
        needs = (
            (meta.grammar_rows is not None and not self._masks_in_place(logits))
            or meta.wants_logprobs
            or meta.logit_adjust is not None
            or meta.penalties is not None
            or meta.custom is not None
            or self.sample_seeded is not None
        )
        return logits.float() if needs else logits

    def _masks_in_place(self, logits: torch.Tensor) -> bool:
        """The grammar mask needs no float32 copy: the CPU bitmask kernel (the default
        ``apply_token_bitmask``) writes -inf into bfloat16 rows as they are."""
        return self.apply_token_bitmask is apply_token_bitmask and masks_in_place(logits)

    def _seeds(self, meta: SamplingMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """[N] int64 Philox keys and [N] int64 output positions for the seeded kernel."""
        n = len(meta.seeds)
        fresh = self.host_rng.integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64)
        seeds = np.array(
            [fresh[i] if s is None else _to_int64(s) for i, s in enumerate(meta.seeds)],
            dtype=np.int64,
        )
        positions = np.asarray(meta.output_positions, dtype=np.int64)
        return to_device(seeds, self.device), to_device(positions, self.device)

    def _uniforms(self, meta: SamplingMetadata, n: int) -> torch.Tensor:
        """[N] U[0, 1) draws, one per row (greedy rows get 0.5, unused): from the shared
        generator for unseeded rows, and from (seed, output position) for seeded rows, so a
        seeded row draws the same value whatever else is in the batch."""
        u = torch.full((n,), 0.5, dtype=torch.float32)
        if meta.all_greedy:
            return u.to(self.device)
        unseeded = [i for i in meta.random_rows if meta.seeds[i] is None]
        if unseeded:
            u[unseeded] = torch.rand(len(unseeded), generator=self.host_generator)
        seeded = [i for i in meta.random_rows if meta.seeds[i] is not None]
        if seeded:
            seeds = [_to_int64(meta.seeds[i]) for i in seeded]  # type: ignore[arg-type]
            positions = [meta.output_positions[i] for i in seeded]
            u[seeded] = torch.from_numpy(seeded_uniforms(seeds, positions))
        return u.to(self.device)


def _to_int64(seed: int) -> int:
    """Any Python int -> the signed 64-bit integer with the same low 64 bits."""
    x = seed & MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


def compute_logprobs(logprobs: torch.Tensor, chosen: torch.Tensor, k: int) -> LogprobsTensors:
    """logprobs: [N, V] log_softmax rows; chosen: [N] int64 -> chosen + top-k, and ranks."""
    chosen_lp = logprobs.gather(1, chosen.unsqueeze(1))  # [N, 1]
    ranks = (logprobs > chosen_lp).sum(dim=-1) + 1  # [N]
    if k > 0:
        top_lp, top_ids = logprobs.topk(k, dim=-1)  # [N, k], descending
        ids = torch.cat([chosen.unsqueeze(1), top_ids], dim=1)
        lps = torch.cat([chosen_lp, top_lp], dim=1)
    else:
        ids, lps = chosen.unsqueeze(1), chosen_lp
    return LogprobsTensors(token_ids=ids, logprobs=lps, ranks=ranks)


def with_token_logprobs(
    lp: LogprobsTensors, logprobs: torch.Tensor, token_ids: list[list[int] | None]
) -> LogprobsTensors:
    """``lp`` with the rows that name ``token_ids`` replaced by [chosen, those ids] and their
    logprobs (vLLM's ``logprob_token_ids``); rows are padded to one width (the padding is
    never read: each row is cut to its own count on the host)."""
    m = max(len(ids) for ids in token_ids if ids)
    width = max(m + 1, lp.token_ids.shape[1])
    n = len(token_ids)
    asked = torch.zeros((n, m), dtype=torch.int64)
    rows = [i for i, ids in enumerate(token_ids) if ids]
    for i in rows:
        ids = token_ids[i]
        assert ids is not None
        asked[i, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
    asked = asked.to(logprobs.device)
    ids_out = torch.zeros((n, width), dtype=torch.int64, device=logprobs.device)
    lps_out = torch.full((n, width), float("-inf"), device=logprobs.device)
    ids_out[:, : lp.token_ids.shape[1]] = lp.token_ids
    lps_out[:, : lp.logprobs.shape[1]] = lp.logprobs
    sel = torch.tensor(rows, dtype=torch.int64, device=logprobs.device)
    ids_out[sel, 1 : m + 1] = asked[sel]
    lps_out[sel, 1 : m + 1] = logprobs[sel].gather(1, asked[sel])
    lps_out[sel, m + 1 :] = float("-inf")
    ids_out[sel, m + 1 :] = 0
    return LogprobsTensors(token_ids=ids_out, logprobs=lps_out, ranks=lp.ranks)
