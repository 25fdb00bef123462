"""Sampling parameters on vLLM's wire: what ``/render`` writes and ``/inference/v1/generate``
reads.

vLLM serialises its ``SamplingParams`` (a msgspec struct with ``omit_defaults``) after its
``__post_init__`` normalised them: ``stop``, ``stop_token_ids`` and ``bad_words`` are always
lists, ``skip_reading_prefix_cache`` is always a bool, ``output_text_buffer_length`` is
derived from the stop strings, greedy sampling resets ``top_p``/``min_p``/``top_k``. Its
omission compares by identity, so the float knobs the request path sets explicitly
(penalties, temperature, top_p, min_p) are written even at their default value; the
rest appear only when they differ from vLLM's default. :func:`to_wire` reproduces that
shape; :func:`from_wire` reads it (vLLM's or ours) into actorllm's ``SamplingParams``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsParams
from actorllm.entrypoints.openai.errors import APIError, bad_request

# vLLM 0.32's SamplingParams fields, in its declaration order, with its defaults.
VLLM_FIELDS: dict[str, Any] = {
    "n": 1,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "temperature": 1.0,
    "watermarking": None,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "seed": None,
    "stop": None,
    "stop_token_ids": None,
    "ignore_eos": False,
    "max_tokens": 16,
    "min_tokens": 0,
    "logprobs": None,
    "prompt_logprobs": None,
    "prompt_logprob_token_ids": None,
    "prompt_logprob_start": None,
    "logprob_token_ids": None,
    "flat_logprobs": False,
    "detokenize": True,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "output_kind": 0,
    "stream_interval": None,
    "skip_clone": False,
    "output_text_buffer_length": 0,
    "structured_outputs": None,
    "logit_bias": None,
    "allowed_token_ids": None,
    "extra_args": None,
    "bad_words": None,
    "skip_reading_prefix_cache": None,
    "thinking_token_budget": None,
    "repetition_detection": None,
    "routed_experts_prompt_start": 0,
    "trace_decode_token_ids": None,
}
# Set explicitly by vLLM's request path, so written even at their default value.
_ALWAYS = ("presence_penalty", "frequency_penalty", "repetition_penalty", "temperature",
           "top_p", "min_p")  # fmt: skip
# Derived by vLLM, not sampling knobs: read and dropped.
_DERIVED = ("output_text_buffer_length",)
# vLLM's StructuredOutputsParams, in its order (its private backend fields included).
_STRUCTURED = ("json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace",
               "disable_additional_properties", "whitespace_pattern", "structural_tag")  # fmt: skip
_GREEDY_EPS = 1e-5


def _structured(so: StructuredOutputsParams) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(so, name) for name in _STRUCTURED}
    out["json_object"] = so.json_object
    out["_backend"] = so.backend
    out["_backend_was_auto"] = False
    return out


def _normalised(p: SamplingParams) -> dict[str, Any]:
    """``p``'s values as vLLM's ``__post_init__`` leaves them."""
    stop = [p.stop] if isinstance(p.stop, str) else list(p.stop or [])
    values: dict[str, Any] = {name: getattr(p, name, None) for name in VLLM_FIELDS}
    values["stop"] = stop
    values["stop_token_ids"] = list(dict.fromkeys(p.stop_token_ids or []))
    values["bad_words"] = list(dict.fromkeys(p.bad_words or []))
    values["output_kind"] = int(p.output_kind)
    values["output_text_buffer_length"] = (
        max(len(s) for s in stop) - 1 if stop and not p.include_stop_str_in_output else 0
    )
    if p.skip_reading_prefix_cache is None:
        values["skip_reading_prefix_cache"] = p.prompt_logprobs is not None
    if p.seed == -1:
        values["seed"] = None
    if p.top_k == -1:
        values["top_k"] = 0
    if p.structured_outputs is not None:
        values["structured_outputs"] = _structured(p.structured_outputs)
    if p.logit_bias is not None:
        values["logit_bias"] = {str(k): v for k, v in p.logit_bias.items()}
    return values


def to_wire(p: SamplingParams) -> dict[str, Any]:
    """``p`` as vLLM serialises its sampling parameters (the ``sampling_params`` of a
    rendered request). Raises APIError (400) for what vLLM's wire cannot carry."""
    if p.bad_words_token_ids:
        # token-id bans (a harmony model's tool_choice required) have no vLLM field
        raise bad_request(
            "this request bans token ids (tool_choice required on a harmony model), which "
            "the rendered sampling_params cannot carry.",
            "tool_choice",
        )
    values = _normalised(p)
    greedy = values["temperature"] < _GREEDY_EPS
    out: dict[str, Any] = {}
    for name, default in VLLM_FIELDS.items():
        value = values[name]
        if greedy and name in ("top_p", "min_p", "top_k"):
            continue  # reset to vLLM's defaults for greedy sampling
        if name in _ALWAYS or value != default:
            out[name] = value
    return out


def from_wire(raw: Any, field: str = "sampling_params") -> tuple[SamplingParams, set[str]]:
    """vLLM's serialised sampling parameters as actorllm's, and the keys the caller gave
    (``max_tokens`` left out is sized to the room the prompt leaves, as vLLM does).
    Raises APIError (400) naming the field for anything that does not fit."""
    if not isinstance(raw, dict):
        raise bad_request(f"{field} must be an object.", field)
    given = set(raw)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _DERIVED:
            continue
        if key not in VLLM_FIELDS:
            raise bad_request(f"{field}.{key} is not a sampling parameter.", f"{field}.{key}")
        values[key] = value
    so = values.get("structured_outputs")
    if isinstance(so, dict):
        backend = so.get("_backend")
        so = {k: v for k, v in so.items() if not k.startswith("_")}
        so.setdefault("backend", backend)
        values["structured_outputs"] = so
    if isinstance(values.get("logit_bias"), dict):
        try:
            values["logit_bias"] = {int(k): v for k, v in values["logit_bias"].items()}
        except (TypeError, ValueError):
            message = f"{field}.logit_bias keys must be token ids."
            raise bad_request(message, f"{field}.logit_bias") from None
    try:
        params = msgspec.convert(values, SamplingParams, strict=False)
    except msgspec.ValidationError as exc:
        raise APIError(400, f"{field}: {exc}", field) from None
    except (TypeError, ValueError) as exc:
        raise APIError(400, str(exc), field) from None
    return params, given
