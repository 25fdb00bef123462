"""vLLM 0.32's ``WatermarkConfig`` (``--watermark-config``): Gumbel-max text watermarking.

The fields, defaults and checks are vLLM's (``vllm/config/watermarking.py``, a pydantic
dataclass); a bad value raises :class:`WatermarkConfigError` naming the field with
pydantic's sentence, so ``--watermark-config '{"key": -1}'`` reads as vLLM's refusal does.
Values are coerced as pydantic's lax mode does where a JSON or CLI spelling needs it: a
key written as a string of digits, a whole float.

:func:`derive_watermark_key` is vLLM's sub-key derivation (``dual_key_gumbel``'s keys A
and B), kept byte for byte so vLLM's detector finds our text with the same secret.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

WatermarkingAlgorithm = Literal["gumbel", "dual_key_gumbel"]
WatermarkPRFName = Literal["philox"]
WatermarkContextScope = Literal["none", "single_turn", "all"]

# Below this many searched positions vLLM warns that repetition loops become likelier.
MIN_RECOMMENDED_DEDUP_HISTORY = 1024
MAX_KEY = 2**64 - 1

logger = logging.getLogger(__name__)
_warned: list[bool] = []  # the short-history warning was given (once per process)


class WatermarkConfigError(ValueError):
    """A bad ``watermark_config`` field: ``param`` names it; the message is pydantic's."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"1 validation error for WatermarkConfig\n{field}\n  {message}")
        self.param = field


def derive_watermark_key(key: int, domain: bytes) -> int:
    """vLLM's: the first 8 bytes of ``sha256(domain + key as 8 big-endian bytes)``."""
    digest = hashlib.sha256(domain + key.to_bytes(8, "big")).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True, kw_only=True)
class WatermarkConfig:
    """Configuration for text watermark generation (vLLM's docstrings, field by field)."""

    key: int
    """Secret key used to watermark generated text (never shown in ``repr``)."""
    algorithm: WatermarkingAlgorithm = "gumbel"
    """Algorithm used to watermark generated text."""
    alpha: float = 0.1
    """Probability of selecting key B for dual-key watermarking."""
    context_width: int = 4
    """Number of prior tokens used by the watermark PRF."""
    deduplicate_contexts: WatermarkContextScope = "single_turn"
    """Which history is searched for a repeated context before a token is sampled; a
    repeated context is sampled without the watermark. ``none`` disables the search,
    ``single_turn`` searches this request's generated tokens, ``all`` also the prompt (and
    samples the first ``context_width`` generated tokens without watermarking)."""
    deduplicate_contexts_max_history: int | None = 8192
    """Number of most recent history positions searched, or ``None`` for the whole scope."""
    prf: WatermarkPRFName = "philox"
    """Pseudorandom function used by the watermarking algorithm."""
    allow_target_only_watermarking: bool = False
    """Allow speculative decoding without watermarking draft tokens."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the coerced values replace the given ones
        set_(self, "key", _int("key", self.key, minimum=0))
        set_(self, "algorithm", _literal("algorithm", self.algorithm, WatermarkingAlgorithm))
        set_(self, "alpha", _float("alpha", self.alpha))
        set_(self, "context_width", _int("context_width", self.context_width, minimum=1))
        scope = _literal("deduplicate_contexts", self.deduplicate_contexts, WatermarkContextScope)
        set_(self, "deduplicate_contexts", scope)
        history = self.deduplicate_contexts_max_history
        if history is not None:
            history = _int("deduplicate_contexts_max_history", history, minimum=1)
        set_(self, "deduplicate_contexts_max_history", history)
        set_(self, "prf", _literal("prf", self.prf, WatermarkPRFName))
        allow = self.allow_target_only_watermarking
        if not isinstance(allow, bool):
            raise WatermarkConfigError(
                "allow_target_only_watermarking", "Input should be a valid boolean"
            )
        if self.key > MAX_KEY:
            raise WatermarkConfigError("key", "Value error, philox keys must fit in 64 bits")
        short = history is not None and history < MIN_RECOMMENDED_DEDUP_HISTORY
        if (scope == "none" or short) and not _warned:
            _warned.append(True)  # vLLM's warning_once(scope="global")
            logger.warning(
                "Gumbel-max watermarking with context deduplication disabled or limited to "
                "fewer than %d positions may increase the frequency of degenerate "
                "generations, including repetition loops. Use deduplicate_contexts="
                "'single_turn' or 'all' with deduplicate_contexts_max_history at least %d "
                "or null to mitigate this.",
                MIN_RECOMMENDED_DEDUP_HISTORY,
                MIN_RECOMMENDED_DEDUP_HISTORY,
            )

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)[1:])
        return f"WatermarkConfig({shown})"

    @property
    def supports_speculative_decoding(self) -> bool:
        return self.algorithm == "dual_key_gumbel"

    @classmethod
    def from_value(cls, value: WatermarkConfig | dict[str, Any]) -> WatermarkConfig:
        """A config object as it is, or vLLM's dict of fields (an unknown key refused)."""
        if isinstance(value, WatermarkConfig):
            return value
        if not isinstance(value, dict):
            raise WatermarkConfigError(
                "watermark_config", f"Input should be a dict or WatermarkConfig, got {value!r}"
            )
        if "key" not in value:
            raise WatermarkConfigError("key", "Field required")
        known = {f.name for f in fields(cls)}
        for name in value:
            if name not in known:
                raise WatermarkConfigError(name, "Unexpected keyword argument")
        return cls(**value)


def _int(field: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and value.is_integer()):
        value = int(value)
    elif isinstance(value, float):
        raise WatermarkConfigError(
            field, "Input should be a valid integer, got a number with a fractional part"
        )
    elif isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise WatermarkConfigError(
                field, "Input should be a valid integer, unable to parse string as an integer"
            ) from None
    if not isinstance(value, int):
        raise WatermarkConfigError(field, "Input should be a valid integer")
    if value < minimum:
        raise WatermarkConfigError(field, f"Input should be greater than or equal to {minimum}")
    return value


def _float(field: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise WatermarkConfigError(
                field, "Input should be a valid number, unable to parse string as a number"
            ) from None
    if not isinstance(value, int | float):
        raise WatermarkConfigError(field, "Input should be a valid number")
    if value < 0:
        raise WatermarkConfigError(field, "Input should be greater than or equal to 0")
    if value > 1:
        raise WatermarkConfigError(field, "Input should be less than or equal to 1")
    return float(value)


def _literal(field: str, value: Any, choices: Any) -> Any:
    allowed = get_args(choices)
    if value not in allowed:
        names = [repr(c) for c in allowed]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        raise WatermarkConfigError(field, f"Input should be {listed}")
    return value
