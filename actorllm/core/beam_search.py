"""Beam search over one-token requests, as vLLM does it (the bookkeeping only; no I/O).

Every step, each live beam asks the engine for one token with ``2 * beam_width`` logprobs
(HF transformers' rule: enough candidates that ``beam_width`` survive the EOS ones). The
candidates of all beams are ranked by cumulative logprob; the best ``beam_width`` go on,
a candidate ending in EOS is set aside as completed. At the end the completed and the live
beams are ranked by ``cum_logprob / len ** length_penalty`` and the best ``beam_width`` are
the answer. The engine's own sampled token is a candidate too (vLLM's behaviour: with a
temperature above 0 it may lie outside the top ``2 * beam_width``).

    >>> from actorllm.core.logprob_types import Logprob
    >>> s = BeamSearchState([1, 2], BeamSearchParams(beam_width=2, max_tokens=4), 0)
    >>> top = {5: Logprob(logprob=-0.1, rank=1), 0: Logprob(logprob=-2.5, rank=2)}
    >>> s.advance([StepResult(5, top)])
    >>> [b.tokens for b in s.beams], [b.tokens for b in s.completed]
    ([[1, 2, 5]], [[1, 2, 0]])
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import msgspec

from actorllm.core.logprob_types import Logprob
from actorllm.core.sampling_params import (
    RequestOutputKind,
    SamplingParams,
    SamplingParamsError,
)
from actorllm.core.structured_outputs_params import StructuredOutputsParams


class BeamSearchParams(msgspec.Struct, omit_defaults=True, kw_only=True):
    """vLLM's ``BeamSearchParams`` (``vllm.sampling_params``), with its defaults."""

    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputsParams | None = None
    skip_special_tokens: bool = True
    watermarking: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.beam_width, int) or self.beam_width < 1:
            raise SamplingParamsError("beam_width", f"must be at least 1, got {self.beam_width}.")
        if self.max_tokens < 1:
            raise SamplingParamsError("max_tokens", f"must be at least 1, got {self.max_tokens}.")
        if self.temperature < 0:
            raise SamplingParamsError(
                "temperature", f"must be non-negative, got {self.temperature}."
            )
        # Never silently ignored: vLLM's field that is not built here. (watermarking is
        # accepted: beam search runs unwatermarked with vLLM's warning, core/watermarking.py.)
        if self.structured_outputs is not None:
            raise SamplingParamsError(
                "structured_outputs",
                "with beam search is not supported (constrain a sampled request instead).",
            )

    @property
    def candidates(self) -> int:
        """Logprobs asked per step: ``2 * beam_width`` (vLLM's and HF's rule)."""
        return 2 * self.beam_width

    def step_params(self, logprobs: int | None = None) -> SamplingParams:
        """One step's request: one token, ``logprobs`` (at least :attr:`candidates`)."""
        return SamplingParams(
            max_tokens=1,
            temperature=self.temperature,
            logprobs=max(self.candidates, logprobs or 0),
            ignore_eos=True,  # EOS is a candidate like any other; this module ends beams
            skip_special_tokens=self.skip_special_tokens,
            output_kind=RequestOutputKind.FINAL_ONLY,
            watermarking=False,  # vLLM's beam steps are never watermarked
        )


@dataclass(slots=True)
class BeamSearchSequence:
    """One beam: ``tokens`` (the prompt's, then the generated ones), the logprobs of each
    generated position, the running sum. ``text`` is filled when it is returned."""

    tokens: list[int]
    logprobs: list[dict[int, Logprob]] = field(default_factory=list)
    lora_request: Any = None
    cum_logprob: float = 0.0
    text: str | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass(slots=True)
class BeamSearchOutput:
    """vLLM's ``BeamSearchOutput``: the best ``beam_width`` sequences, best first."""

    sequences: list[BeamSearchSequence]


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one beam's one-token request returned: the sampled token and the top logprobs
    of that position (``None``: the request ended without a token, e.g. aborted)."""

    token_id: int | None
    logprobs: dict[int, Logprob] | None
    finish_reason: str | None = None


def beam_score(
    tokens: list[int], cum_logprob: float, eos_token_id: int | None, length_penalty: float
) -> float:
    """HF's score: the cumulative logprob over ``len ** length_penalty`` (a final EOS does
    not count in the length)."""
    seq_len = len(tokens)
    if tokens and eos_token_id is not None and tokens[-1] == eos_token_id:
        seq_len -= 1
    # len ** penalty in log space, clamped: any float penalty ranks without overflowing.
    exponent = min(max(length_penalty * math.log(max(seq_len, 1)), -700.0), 700.0)
    return cum_logprob / math.exp(exponent)


class BeamSearchState:
    """The beams of one prompt while the search runs."""

    def __init__(
        self,
        prompt_token_ids: list[int],
        params: BeamSearchParams,
        eos_token_id: int | None,
        lora_request: Any = None,
    ) -> None:
        self.params = params
        self.prompt_len = len(prompt_token_ids)
        self.eos_token_id = eos_token_id
        self.beams = [BeamSearchSequence(list(prompt_token_ids), lora_request=lora_request)]
        self.completed: list[BeamSearchSequence] = []
        self.steps = 0

    @property
    def done(self) -> bool:
        return not self.beams or self.steps >= self.params.max_tokens

    def _is_candidate(self, token_id: int, entry: Logprob, sampled: int | None) -> bool:
        # The sampled token always; otherwise the top ``candidates`` (more may have been
        # asked for the caller's logprobs display).
        rank = entry.rank
        return token_id == sampled or rank is None or rank <= self.params.candidates

    def advance(self, results: list[StepResult]) -> None:
        """Fold one step's results (one per live beam, in order) into the beams."""
        if len(results) != len(self.beams):
            raise ValueError(f"{len(results)} step results for {len(self.beams)} beams")
        self.steps += 1
        if any(r.finish_reason == "abort" for r in results):
            for beam in self.beams:
                beam.finish_reason = "abort"
            self.completed.extend(self.beams)
            self.beams = []
            return
        eos, width = self.eos_token_id, self.params.beam_width
        # (cum_logprob, order, beam, token, position logprobs); order breaks ties stably
        candidates: list[tuple[float, int, BeamSearchSequence, int, dict[int, Logprob]]] = []
        for beam, result in zip(self.beams, results, strict=True):
            if result.logprobs is None:
                continue
            for token_id, entry in result.logprobs.items():
                if not self._is_candidate(token_id, entry, result.token_id):
                    continue
                cum = beam.cum_logprob + entry.logprob
                if token_id == eos and not self.params.ignore_eos:
                    self.completed.append(
                        BeamSearchSequence(
                            [*beam.tokens, token_id],
                            [*beam.logprobs, result.logprobs],
                            beam.lora_request,
                            cum,
                            finish_reason="stop",
                            stop_reason=token_id,
                        )
                    )
                else:
                    candidates.append((cum, len(candidates), beam, token_id, result.logprobs))
        best = heapq.nlargest(width, candidates, key=lambda c: (c[0], -c[1]))
        self.beams = [
            BeamSearchSequence([*b.tokens, t], [*b.logprobs, lp], b.lora_request, cum)
            for cum, _, b, t, lp in best
        ]

    def best(self) -> list[BeamSearchSequence]:
        """The answer: completed and live beams ranked by score, the best ``beam_width``.
        A live beam that ran out of steps keeps ``finish_reason`` None, as vLLM's
        ``LLM.beam_search`` returns it (the online answer calls it ``"length"``)."""
        pool = self.completed + self.beams
        eos, penalty = self.eos_token_id, self.params.length_penalty
        pool.sort(key=lambda b: beam_score(b.tokens, b.cum_logprob, eos, penalty), reverse=True)
        return pool[: self.params.beam_width]

    def generated(self, beam: BeamSearchSequence) -> list[int]:
        """The beam's generated tokens; a final EOS only with ``include_stop_str_in_output``
        (vLLM's online rule)."""
        out = beam.tokens[self.prompt_len :]
        if (
            out
            and beam.finish_reason == "stop"
            and out[-1] == self.eos_token_id
            and not self.params.include_stop_str_in_output
        ):
            out = out[:-1]
        return out
