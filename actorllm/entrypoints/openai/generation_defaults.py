"""Requests' default sampling parameters, as vLLM sets them: from the model's
``generation_config.json`` (``--generation-config auto``, the default), from another
directory's, or none (``vllm``: OpenAI's defaults), with ``--override-generation-config``
on top. A request's own value always wins; only the fields it leaves out take these.

    >>> sampling_defaults("vllm", {"temperature": 0.5}, None)
    {'temperature': 0.5}
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger("actorllm.server")

# The generation_config.json fields vLLM takes as request defaults; max_new_tokens caps
# the output of a request that gives no max_tokens (served as "max_tokens").
SAMPLING_KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")


def _read(directory: Path) -> dict[str, Any]:
    path = directory / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--generation-config: cannot read {path}: {exc}") from exc
    return raw if isinstance(raw, dict) else {}


def sampling_defaults(
    source: str, override: Mapping[str, Any] | None, model_dir: Path | None
) -> dict[str, float]:
    """The default sampling fields: ``source`` is ``auto`` (``model_dir``'s
    generation_config.json), ``vllm`` (none) or a directory; ``override`` goes on top.
    Raises ``ValueError`` naming the flag for a key that is no sampling field."""
    if source == "vllm":
        found: dict[str, Any] = {}
    elif source == "auto":
        found = _read(model_dir) if model_dir is not None else {}
    else:
        directory = Path(source).expanduser()
        if not directory.is_dir():
            raise ValueError(f"--generation-config {source}: not auto, vllm or a directory.")
        found = _read(directory)
    out = {k: found[k] for k in SAMPLING_KEYS if isinstance(found.get(k), int | float)}
    for key, value in (override or {}).items():
        if key not in SAMPLING_KEYS:
            raise ValueError(
                f"--override-generation-config: {key!r} is not one of {', '.join(SAMPLING_KEYS)}."
            )
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"--override-generation-config: {key} must be a number.")
        out[key] = value
    if "max_new_tokens" in out:
        out["max_tokens"] = int(out.pop("max_new_tokens"))
    if out:
        logger.info("default sampling parameters (requests' own win): %s", out)
    return out
