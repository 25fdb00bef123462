"""Sampling parameters, with vLLM's names, defaults and ranges.

A :class:`SamplingParams` is validated when it is built: every value a user can get wrong
raises a :class:`ValueError` naming the field, so the HTTP layer can turn it into a 400.

    >>> SamplingParams(temperature=0.0, max_tokens=8).is_greedy
    True
    >>> SamplingParams(top_p=0.0)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    actorllm.core.sampling_params.SamplingParamsError: top_p must be in (0, 1], got 0.0.
"""

from __future__ import annotations

import copy
import enum
from typing import Any

import msgspec

from actorllm.core.errors import InvalidRequestError
from actorllm.core.pooling_params import PoolingParams
from actorllm.core.repetition import RepetitionDetectionParams
from actorllm.core.structured_outputs_params import StructuredOutputsParams
from actorllm.core.thinking_budget import ThinkingMarkers

_GREEDY_EPS = 1e-5
# OpenAI clamps logit_bias to this range; so do we.
_MAX_LOGIT_BIAS = 100.0
# vLLM's MAX_LOGPROB_TOKEN_IDS: the most token ids ``logprob_token_ids`` may name.
MAX_LOGPROB_TOKEN_IDS = 128


class RequestOutputKind(enum.IntEnum):
    """How a request's outputs are reported while it runs."""

    CUMULATIVE = 0  # every output carries everything generated so far
    DELTA = 1  # every output carries only what is new since the previous one
    FINAL_ONLY = 2  # one output, when the request finishes


class SamplingParams(msgspec.Struct, kw_only=True):
    """What to sample and when to stop. Field semantics follow vLLM's ``SamplingParams``."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: no top-k
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] | str | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    max_tokens: int | None = 16  # None: up to max_model_len
    min_tokens: int = 0
    logprobs: int | None = None  # number of top logprobs per sampled token (plus the sampled one)
    prompt_logprobs: int | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    detokenize: bool = True
    # Keep only the last k prompt tokens (-1: the last max_model_len - 1); None: no truncation.
    truncate_prompt_tokens: int | None = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    # Streaming (DELTA, CUMULATIVE): batch this many new tokens into each output, raising
    # the engine's stream_interval (a smaller value is clamped up to it). The first and the
    # final output are sent at once. None: the engine's value.
    stream_interval: int | None = None
    # vLLM fields this engine cannot honour yet: accepted only at their "off" values, so a
    # script written for vLLM runs unchanged unless it relies on them (then a clear error).
    best_of: int | None = None  # None or n: one candidate per returned sample
    logits_processors: list[Any] | None = None
    extra_args: dict[str, Any] | None = None
    # Constrained decoding: the output must match this JSON schema / regex / choice /
    # grammar (``actorllm.structured_output`` compiles it; the sampler masks the logits).
    structured_outputs: StructuredOutputsParams | None = None
    # vLLM <= 0.10's name for the same (``guided_decoding=GuidedDecodingParams(...)``):
    # folded into ``structured_outputs`` when built, so nothing reads it after that.
    guided_decoding: StructuredOutputsParams | None = None
    # Filled by the input processor, not by users: bad_words tokenized (each word with and
    # without a leading space), so the sampler needs no tokenizer. The server may put
    # token sequences of its own here first; the words are added beside them.
    bad_words_token_ids: list[list[int]] | None = None
    # Filled by the input processor, not by users: the reasoning markers' token ids that
    # thinking_token_budget counts between and forces (set only with a budget).
    thinking_markers: ThinkingMarkers | None = None
    # clone() makes a shallow copy instead of a deep one (vLLM: the params are this
    # request's own, so nothing else sees a change).
    skip_clone: bool = False
    # Take no prefix-cache hits (the request still fills the cache for others). None: True
    # when prompt_logprobs is asked (they need every prompt position computed), else False.
    skip_reading_prefix_cache: bool | None = None
    # Stop early when the output ends in a repeated N-gram (finish_reason "repetition").
    repetition_detection: RepetitionDetectionParams | None = None
    # Logprobs of exactly these token ids at each output position, besides the sampled
    # token's (instead of the top-k; ``logprobs``, if set, must equal their number).
    logprob_token_ids: list[int] | None = None
    # Outputs carry logprobs as a FlatLogprobs (vLLM's; it reads as the list form does).
    flat_logprobs: bool = False
    # Sample with the engine's watermark (--watermark-config): None (vLLM's default) and
    # True ask for it, False opts out; the input processor stores the resolved bool
    # (core/watermarking.py). Without a watermark configured, True runs unwatermarked
    # with vLLM's warning.
    watermarking: bool | None = None
    # End the reasoning section once it is this many tokens long (forcing its end marker;
    # core/thinking_budget.py). -1: unlimited (vLLM), same as None. Needs a reasoning config
    # (--reasoning-parser or --reasoning-config): the input processor refuses it without.
    thinking_token_budget: int | None = None
    # vLLM fields not built here: accepted at their default, refused by name otherwise
    # (see _verify_unbuilt).
    trace_decode_token_ids: list[int] | None = None
    prompt_logprob_token_ids: Any = None  # vLLM: [rows, ids] array or nested lists
    prompt_logprob_start: int | None = None
    routed_experts_prompt_start: int = 0
    # Set by the engine's encode path, not by users: this is a pooling request
    # (prefill-only; the runner returns a pooled vector instead of sampling; see
    # core/pooling_params.py). The other fields are then the engine's fixed ones.
    pooling_params: PoolingParams | None = None

    def __post_init__(self) -> None:
        if self.guided_decoding is not None:
            if self.structured_outputs not in (None, self.guided_decoding):
                raise SamplingParamsError(
                    "guided_decoding", "set structured_outputs or guided_decoding, not both."
                )
            self.structured_outputs, self.guided_decoding = self.guided_decoding, None
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        elif self.stop is None:
            self.stop = []
        else:
            self.stop = list(self.stop)
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        else:
            self.stop_token_ids = list(self.stop_token_ids)
        if self.top_k == -1:
            self.top_k = 0
        if self.seed == -1:
            self.seed = None  # vLLM: -1 is "no seed" (a fresh random stream per request)
        if self.thinking_token_budget == -1:
            self.thinking_token_budget = None  # vLLM: -1 is "unlimited"
        if self.skip_reading_prefix_cache is None:
            self.skip_reading_prefix_cache = self.prompt_logprobs is not None
        self._verify()
        self._verify_unbuilt()
        if self.temperature < _GREEDY_EPS:
            # Greedy: the truncation parameters cannot change the argmax.
            self.top_p = 1.0
            self.top_k = 0
            self.min_p = 0.0

    def _verify(self) -> None:
        _check(self.n >= 1, "n", f"must be at least 1, got {self.n}.")
        _check(
            -2.0 <= self.presence_penalty <= 2.0,
            "presence_penalty",
            f"must be in [-2, 2], got {self.presence_penalty}.",
        )
        _check(
            -2.0 <= self.frequency_penalty <= 2.0,
            "frequency_penalty",
            f"must be in [-2, 2], got {self.frequency_penalty}.",
        )
        _check(
            0.0 < self.repetition_penalty <= 2.0**31,
            "repetition_penalty",
            f"must be greater than 0, got {self.repetition_penalty}.",
        )
        _check(
            self.temperature >= 0.0, "temperature", f"must be non-negative, got {self.temperature}."
        )
        _check(0.0 < self.top_p <= 1.0, "top_p", f"must be in (0, 1], got {self.top_p}.")
        _check(
            self.top_k >= 0,
            "top_k",
            f"must be -1 (disable), 0 (disable) or at least 1, got {self.top_k}.",
        )
        _check(0.0 <= self.min_p <= 1.0, "min_p", f"must be in [0, 1], got {self.min_p}.")
        budget = self.thinking_token_budget
        _check(
            budget is None or (type(budget) is int and budget >= 0),
            "thinking_token_budget",
            "`thinking_token_budget` must be a non-negative integer or -1 for unlimited.",
            named=False,
        )
        if self.seed is not None:
            _check(-(2**63) <= self.seed < 2**64, "seed", f"must fit in 64 bits, got {self.seed}.")
        if self.max_tokens is not None:
            _check(
                self.max_tokens >= 1, "max_tokens", f"must be at least 1, got {self.max_tokens}."
            )
        _check(self.min_tokens >= 0, "min_tokens", f"must be non-negative, got {self.min_tokens}.")
        if self.max_tokens is not None:
            _check(
                self.min_tokens <= self.max_tokens,
                "min_tokens",
                f"must be at most max_tokens={self.max_tokens}, got {self.min_tokens}.",
            )
        # -1: the whole vocabulary (vLLM), resolved by verify_logprobs.
        if self.logprobs is not None:
            _check(
                self.logprobs >= -1, "logprobs", f"must be non-negative or -1, got {self.logprobs}."
            )
        if self.prompt_logprobs is not None:
            _check(
                self.prompt_logprobs >= -1,
                "prompt_logprobs",
                f"must be non-negative or -1, got {self.prompt_logprobs}.",
            )
        assert isinstance(self.stop, list)
        _check(
            all(isinstance(s, str) and s for s in self.stop),
            "stop",
            "must not contain empty strings.",
        )
        assert self.stop_token_ids is not None
        _check(
            all(t >= 0 for t in self.stop_token_ids),
            "stop_token_ids",
            "must be non-negative token ids.",
        )
        if self.logit_bias is not None:
            for tok, bias in self.logit_bias.items():
                _check(tok >= 0, "logit_bias", f"token id {tok} is negative.")
                _check(
                    -_MAX_LOGIT_BIAS <= bias <= _MAX_LOGIT_BIAS,
                    "logit_bias",
                    f"bias for token {tok} must be in [-100, 100], got {bias}.",
                )
        if self.allowed_token_ids is not None:
            _check(len(self.allowed_token_ids) > 0, "allowed_token_ids", "must not be empty.")
            _check(
                all(t >= 0 for t in self.allowed_token_ids),
                "allowed_token_ids",
                "must be non-negative token ids.",
            )
        if self.truncate_prompt_tokens is not None:
            _check(
                self.truncate_prompt_tokens == -1 or self.truncate_prompt_tokens >= 1,
                "truncate_prompt_tokens",
                f"must be -1 or at least 1, got {self.truncate_prompt_tokens}.",
            )
        _check(
            self.best_of is None or self.best_of == self.n,
            "best_of",
            f"other than n is not supported (got best_of={self.best_of}, n={self.n}).",
        )
        _check(
            not self.logits_processors,
            "logits_processors",
            "(per-request callables) are not supported, as in vLLM V1: configure batch-level "
            "LogitsProcessor classes with --logits-processors and pass them arguments in "
            "extra_args.",
        )
        if self.stream_interval is not None:
            _check(
                type(self.stream_interval) is int and self.stream_interval >= 1,
                "stream_interval",
                f"must be an integer of at least 1, got {self.stream_interval!r}.",
            )
        if self.bad_words is not None:
            _check(
                all(isinstance(w, str) and w for w in self.bad_words),
                "bad_words",
                "must not contain empty strings.",
            )

        if self.logprob_token_ids is not None:
            self._verify_logprob_token_ids(self.logprob_token_ids)
        _check(
            not (self.prompt_logprobs is not None and self.skip_reading_prefix_cache is False),
            "skip_reading_prefix_cache",
            "must not be False when prompt_logprobs is set: prompt logprobs need every "
            "prompt position computed, so such a request reads no cached prefix.",
        )

    def _verify_logprob_token_ids(self, ids: list[int]) -> None:
        """vLLM's checks and messages (the vocabulary is checked in :meth:`verify_vocab`)."""
        n = len(ids)
        _check(
            n <= MAX_LOGPROB_TOKEN_IDS,
            "logprob_token_ids",
            f"of length {n} requested, which is greater than max allowed: {MAX_LOGPROB_TOKEN_IDS}",
        )
        _check(
            self.logprobs is None or self.logprobs == n,
            "logprob_token_ids",
            "and logprobs are both set, so logprobs must equal len(logprob_token_ids). "
            f"Got logprobs={self.logprobs}, len(logprob_token_ids)={n}.",
        )

    def _verify_unbuilt(self) -> None:
        """vLLM fields this engine does not build: only their defaults are accepted."""
        unsupported = "is not supported by this engine"
        for name in ("trace_decode_token_ids", "prompt_logprob_token_ids", "prompt_logprob_start"):
            _check(getattr(self, name) is None, name, f"{unsupported}; leave it None.")

    # -- derived views ------------------------------------------------------------------

    @property
    def is_greedy(self) -> bool:
        return self.temperature < _GREEDY_EPS

    @property
    def num_logprobs(self) -> int | None:
        """Logprobs per output position besides the sampled token's, or None (vLLM's):
        ``logprobs``, else the number of ``logprob_token_ids``."""
        if self.logprobs is not None:
            return self.logprobs
        return len(self.logprob_token_ids) if self.logprob_token_ids else None

    @property
    def stop_strings(self) -> list[str]:
        assert isinstance(self.stop, list)
        return self.stop

    def all_stop_token_ids(self, eos_token_id: int | None) -> set[int]:
        """Token ids that end the request: stop_token_ids, and EOS unless ignore_eos."""
        ids = set(self.stop_token_ids or ())
        if eos_token_id is not None and not self.ignore_eos:
            ids.add(eos_token_id)
        return ids

    def truncate_prompt(self, prompt_token_ids: list[int], max_model_len: int) -> list[int]:
        """The prompt as ``truncate_prompt_tokens`` asks: its last k tokens (vLLM's rule)."""
        k = self.truncate_prompt_tokens
        if k is None:
            return prompt_token_ids
        if k == -1:
            k = max_model_len - 1  # leave room for at least one output token
        return prompt_token_ids[-k:] if len(prompt_token_ids) > k else prompt_token_ids

    def clone(self, **changes: Any) -> SamplingParams:
        """vLLM's ``clone()``: a deep copy, or a shallow one when ``skip_clone``.

        With ``changes`` (actorllm's): a shallow copy with those fields changed, validated
        again (the engine's own copies: cheap, and the lists it shares it never mutates).
        """
        if not changes:
            return copy.copy(self) if self.skip_clone else copy.deepcopy(self)
        if "prompt_logprobs" in changes:  # the derived default follows the new value
            changes.setdefault("skip_reading_prefix_cache", None)
        return msgspec.structs.replace(self, **changes)

    def verify_logprobs(self, max_logprobs: int, vocab_size: int) -> SamplingParams:
        """These params with a logprobs count of -1 made the vocabulary size; raises
        SamplingParamsError (vLLM's message) for more than ``max_logprobs`` (the engine's
        ``--max-logprobs``; -1: the vocabulary size). Called by the input processor."""
        limit = vocab_size if max_logprobs == -1 else max_logprobs
        changes: dict[str, int] = {}
        for name, kind in (("logprobs", "sample"), ("prompt_logprobs", "prompt")):
            k = getattr(self, name)
            if not k:
                continue
            k = vocab_size if k == -1 else k
            if k > limit:
                raise SamplingParamsError(
                    name,
                    f"Requested {kind} logprobs of {k}, which is greater than max allowed: {limit}",
                    named=False,
                )
            if k != getattr(self, name):
                changes[name] = k
        return self.clone(**changes) if changes else self

    def verify_vocab(self, vocab_size: int) -> None:
        """Check token ids against the model's vocabulary (called by the input processor)."""

        def bad(ids: Any) -> list[int]:
            return [t for t in ids if not 0 <= t < vocab_size]

        if self.logit_bias and (b := bad(self.logit_bias)):
            raise SamplingParamsError(  # vLLM's words, naming the keys
                "logit_bias",
                f"contains out-of-vocab token id(s) {b[:5]}. Vocabulary size: {vocab_size}",
            )
        if self.allowed_token_ids and (b := bad(self.allowed_token_ids)):
            raise SamplingParamsError(
                "allowed_token_ids", f"token ids {b[:5]} are out of vocabulary (size {vocab_size})."
            )
        if self.logprob_token_ids and (b := bad(self.logprob_token_ids)):
            raise SamplingParamsError(
                "logprob_token_ids",
                f"contains out-of-vocab token id(s) {b[:5]}. Vocabulary size: {vocab_size}",
            )
        if self.stop_token_ids and (b := bad(self.stop_token_ids)):
            raise SamplingParamsError(
                "stop_token_ids", f"token ids {b[:5]} are out of vocabulary (size {vocab_size})."
            )


class SamplingParamsError(InvalidRequestError):
    """An invalid sampling parameter; ``param`` names the field (OpenAI's error ``param``).
    A request error like the others (vLLM raises ``VLLMValidationError`` for both)."""

    def __init__(self, param: str, message: str, *, named: bool = True) -> None:
        # named=False: the message is vLLM's own sentence, which does not start with the field
        super().__init__(f"{param} {message}" if named else message, param=param)


def _check(ok: bool, param: str, message: str, *, named: bool = True) -> None:
    if not ok:
        raise SamplingParamsError(param, message, named=named)
