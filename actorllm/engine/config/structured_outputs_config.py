"""vLLM's ``structured_outputs_config`` (``LLM(..., structured_outputs_config={...})``,
``--structured-outputs-config JSON``) as ``EngineConfig`` fields.

Every key vLLM's ``StructuredOutputsConfig`` has is honoured or refused with an error
naming it; none is dropped:

=================================  ===================================================
``backend``                        ``structured_outputs_backend`` (auto, xgrammar,
                                   guidance; vLLM's outlines / lm-format-enforcer are
                                   refused)
``disable_fallback``               with ``auto``: xgrammar only, no fallback
``disable_any_whitespace``         ``structured_outputs_disable_any_whitespace``
``disable_additional_properties``  ``structured_outputs_disable_additional_properties``
``reasoning_parser``               ``reasoning_parser``
``enable_in_reasoning``            ``structured_outputs_enable_in_reasoning``
``reasoning_parser_plugin``        refused unless empty (no reasoning parser plugins)
=================================  ===================================================

    >>> structured_outputs_config_kwargs({"backend": "guidance", "disable_any_whitespace": True})
    {'structured_outputs_backend': 'guidance', 'structured_outputs_disable_any_whitespace': True}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from actorllm.engine.config.engine_config import EngineConfigError

FIELD = "structured_outputs_config"
_BACKENDS = ("auto", "xgrammar", "guidance")
_FLAGS = {
    "disable_any_whitespace": "structured_outputs_disable_any_whitespace",
    "disable_additional_properties": "structured_outputs_disable_additional_properties",
    "enable_in_reasoning": "structured_outputs_enable_in_reasoning",
}


def structured_outputs_config_kwargs(value: Any) -> dict[str, Any]:
    """``EngineConfig`` keyword arguments for vLLM's ``structured_outputs_config`` (a dict,
    or an object with those attributes). Raises ``EngineConfigError`` naming the key."""
    if value is None:
        return {}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    elif not isinstance(value, Mapping):
        value = {k: v for k, v in vars(value).items() if not k.startswith("_")}
    raw = dict(value)
    out: dict[str, Any] = {}
    backend = raw.pop("backend", None)
    if backend is not None:
        if backend not in _BACKENDS:
            raise EngineConfigError(
                f"{FIELD}.backend",
                f"must be one of {', '.join(_BACKENDS)}, got {backend!r} "
                "(outlines and lm-format-enforcer are not available here).",
            )
        out["structured_outputs_backend"] = backend
    no_fallback = raw.pop("disable_fallback", False)
    if no_fallback and out.get("structured_outputs_backend", "auto") == "auto":
        out["structured_outputs_backend"] = "xgrammar"  # auto's first choice, no fallback
    for key, field in _FLAGS.items():
        if key in raw:
            flag = raw.pop(key)
            if not isinstance(flag, bool):
                raise EngineConfigError(f"{FIELD}.{key}", f"must be a boolean, got {flag!r}.")
            out[field] = flag
    parser = raw.pop("reasoning_parser", None)
    if parser:
        out["reasoning_parser"] = parser
    plugin = raw.pop("reasoning_parser_plugin", None)
    if plugin:
        raise EngineConfigError(
            f"{FIELD}.reasoning_parser_plugin", "reasoning parser plugins are not supported."
        )
    if raw:
        key = sorted(raw)[0]
        raise EngineConfigError(f"{FIELD}.{key}", "is not a structured outputs setting.")
    return out
