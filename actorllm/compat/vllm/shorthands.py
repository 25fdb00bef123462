"""vLLM 0.32's shorthands: engine arguments that set part of a setting which has a name of
its own here, applied after the fields (:func:`args._merge`, precedence step 3).

* ``spec_method`` / ``spec_model`` / ``spec_tokens`` (``--spec-method ngram --spec-tokens
  4``): the ``method``, ``model`` and ``num_speculative_tokens`` keys of
  ``speculative_config``; giving a key both ways is an error, as in vLLM.
* ``max_num_active_seqs``: the most requests running at once. vLLM keeps its runner sized by
  ``max_num_seqs`` and admits fewer; here one setting does both, so it lowers
  ``max_num_seqs``. It may not exceed ``max_num_seqs`` (given, else the ``EngineConfig``
  being changed, else the default, vLLM's 256 of an offline CPU engine): vLLM's
  ``ValueError`` and words (``SchedulerConfig``'s check).
* ``max_num_scheduled_tokens``: the most tokens one step schedules: here that is
  ``max_num_batched_tokens`` (which it may not exceed when both are given).
* ``distributed_timeout_seconds`` / ``cpu_distributed_timeout_seconds``: the timeout of the
  tensor-parallel collectives, ``tp_collective_timeout_s`` (all of them are gloo groups,
  so the CPU one wins when both are given; the field's own name wins over both).

    >>> shorthand_kwargs({"spec_method": "ngram", "spec_tokens": 4}, {})
    {'speculative_config': {'method': 'ngram', 'num_speculative_tokens': 4}}
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from typing import Any

from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError

# {shorthand: its key in speculative_config}
SPEC_KEYS = {
    "spec_method": "method",
    "spec_model": "model",
    "spec_tokens": "num_speculative_tokens",
}
# The timeouts, the winning one last.
_TIMEOUTS = ("distributed_timeout_seconds", "cpu_distributed_timeout_seconds")
SHORTHANDS = frozenset({*SPEC_KEYS, "max_num_active_seqs", "max_num_scheduled_tokens", *_TIMEOUTS})


def shorthand_kwargs(
    given: Mapping[str, Any], out: Mapping[str, Any], base: EngineConfig | None = None
) -> dict[str, Any]:
    """The fields the shorthands in ``given`` change, over ``out`` (the fields so far) and
    ``base`` (the config ``out`` will replace fields of; None: the defaults)."""
    changes: dict[str, Any] = {}
    spec = {key: given[name] for name, key in SPEC_KEYS.items() if given.get(name) is not None}
    if spec:
        changes["speculative_config"] = _speculative(spec, out.get("speculative_config"))
    active = given.get("max_num_active_seqs")
    if active is not None:
        changes["max_num_seqs"] = _at_most(
            "max_num_active_seqs", int(active), "max_num_seqs", out, base
        )
    scheduled = given.get("max_num_scheduled_tokens")
    if scheduled is not None:
        changes["max_num_batched_tokens"] = _at_most(
            "max_num_scheduled_tokens", int(scheduled), "max_num_batched_tokens", out, base
        )
    if "tp_collective_timeout_s" not in given:
        for name in _TIMEOUTS:
            if given.get(name) is not None:
                changes["tp_collective_timeout_s"] = float(given[name])
    return changes


def _speculative(spec: dict[str, Any], config: Any) -> dict[str, Any]:
    if isinstance(config, str):
        config = json.loads(config)
    merged = dict(config or {})
    for key, value in spec.items():
        if key in merged:
            name = next(n for n, k in SPEC_KEYS.items() if k == key)
            raise EngineConfigError(
                name, f"and speculative_config's {key!r} are mutually exclusive (as in vLLM)."
            )
        merged[key] = value
    return merged


def _at_most(
    name: str, value: int, field: str, out: Mapping[str, Any], base: EngineConfig | None
) -> int:
    """``value``, checked against ``field``: given in ``out``, else ``base``'s, else the
    default."""
    if value < 1:
        raise EngineConfigError(name, f"must be at least 1, got {value}.")
    limit = out.get(field, _default(field) if base is None else getattr(base, field))
    if limit is not None and value > limit:
        raise EngineConfigError(name, f"{name} ({value}) cannot be greater than {field} ({limit}).")
    return value


def _default(field: str) -> Any:
    return EngineConfig.__struct_defaults__[EngineConfig.__struct_fields__.index(field)]


_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(text: str) -> int:
    """vLLM's human-readable integers: ``2048``, ``1k`` (1000), ``1K`` (1024), ``25.6k``."""
    text = text.strip()
    match = _HUMAN.fullmatch(text)
    if match is None:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not an integer: {text!r} (e.g. 2048, 2k, 2K)"
            ) from None
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise argparse.ArgumentTypeError(f"no decimals with binary suffixes: {text!r}")
    return int(number) * _BINARY[suffix]
