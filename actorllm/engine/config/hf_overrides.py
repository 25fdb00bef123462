"""vLLM's ``hf_overrides``: keys merged into the model's ``config.json`` before anything
reads it (e.g. ``{"matryoshka_dimensions": [256]}`` for an embedder whose config lacks it,
``{"rope_scaling": ...}``).

Everything that reads the model reads its directory (``EngineConfig.resolved_model``), so
the overrides are applied as a directory: a temporary one holding a link to each of the
model's files and a ``config.json`` with the overrides merged in (a dict value updates a
dict in the config key by key, as vLLM updates sub-configs; any other value replaces it).
One per (model, overrides) in this process, removed at exit.

    >>> merged({"a": 1, "text_config": {"b": 2, "c": 3}}, {"text_config": {"c": 4}, "d": 5})
    {'a': 1, 'text_config': {'b': 2, 'c': 4}, 'd': 5}
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any


def merged(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``overrides`` on top (dicts merged key by key, recursively)."""
    out = dict(config)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def overlaid(model: Path, overrides: dict[str, Any]) -> Path:
    """The directory to read ``model`` from with ``overrides`` applied. Raises ValueError
    when ``model`` has no config.json to apply them to (a GGUF file, say)."""
    return _overlay(model.resolve(), json.dumps(overrides, sort_keys=True))


@functools.cache
def _overlay(model: Path, overrides_json: str) -> Path:
    config = model / "config.json"
    if not config.is_file():
        raise ValueError(f"{model} has no config.json to apply the overrides to.")
    out = Path(tempfile.mkdtemp(prefix="actorllm-hf-overrides-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    for f in model.iterdir():
        if f.name != "config.json":
            (out / f.name).symlink_to(f)
    raw = json.loads(config.read_text())
    (out / "config.json").write_text(json.dumps(merged(raw, json.loads(overrides_json))))
    return out
