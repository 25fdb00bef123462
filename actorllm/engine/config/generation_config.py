"""Requests' default sampling parameters, as vLLM sets them (its
``ModelConfig.get_diff_sampling_param``): from the model's ``generation_config.json``
(``generation_config="auto"``, the default), from another directory's, or none (``vllm``:
``SamplingParams``'/OpenAI's defaults), with ``override_generation_config`` on top.

One implementation for every entry point: the server fills the fields a request leaves
out; ``LLM.generate``/``chat`` and ``AsyncEngine.generate``/``chat`` given no
``sampling_params`` use :func:`default_sampling_params`. A caller's own value always wins.

    >>> sampling_defaults("vllm", {"temperature": 0.5}, None)
    {'temperature': 0.5}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actorllm.core.sampling_params import SamplingParams

# The generation_config.json fields vLLM takes as request defaults; max_new_tokens caps
# the output of a request that gives no max_tokens (returned as "max_tokens").
SAMPLING_KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")


class GenerationConfigError(ValueError):
    """A bad ``generation_config`` / ``override_generation_config``; ``param`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field} (--{field.replace('_', '-')}): {message}")
        self.param = field
        self.detail = message


def check_override(override: Mapping[str, Any] | None) -> None:
    """Raises ``GenerationConfigError`` for a key that is no sampling field or a value that
    is no number (checked when the config is built, before any file is read)."""
    for key, value in (override or {}).items():
        if key not in SAMPLING_KEYS:
            raise GenerationConfigError(
                "override_generation_config",
                f"{key!r} is not one of {', '.join(SAMPLING_KEYS)}.",
            )
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise GenerationConfigError("override_generation_config", f"{key} must be a number.")


def _read(directory: Path) -> dict[str, Any]:
    path = directory / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GenerationConfigError("generation_config", f"cannot read {path}: {exc}") from exc
    return raw if isinstance(raw, dict) else {}


def sampling_defaults(
    source: str, override: Mapping[str, Any] | None, model_dir: Path | None
) -> dict[str, float]:
    """The default sampling fields: ``source`` is ``auto`` (``model_dir``'s
    generation_config.json), ``vllm`` (none) or a directory; ``override`` goes on top.
    ``max_new_tokens`` comes back as ``max_tokens``. Raises ``GenerationConfigError``."""
    check_override(override)
    if source == "vllm":
        found: dict[str, Any] = {}
    elif source == "auto":
        found = _read(model_dir) if model_dir is not None else {}
    else:
        directory = Path(source).expanduser()
        if not directory.is_dir():
            raise GenerationConfigError(
                "generation_config", f"{source!r} is not auto, vllm or a directory."
            )
        found = _read(directory)
    out = {k: found[k] for k in SAMPLING_KEYS if isinstance(found.get(k), int | float)}
    out.update(override or {})
    if "max_new_tokens" in out:
        out["max_tokens"] = int(out.pop("max_new_tokens"))
    return out


def default_sampling_params(defaults: Mapping[str, float]) -> SamplingParams:
    """``SamplingParams`` with ``defaults`` (from :func:`sampling_defaults`) over its own
    defaults, as vLLM's ``LLM.get_default_sampling_params()``."""
    fields: dict[str, Any] = dict(defaults)
    return SamplingParams(**fields)
