"""vLLM's engine arguments turned into one ``EngineConfig``: the only translation.

vLLM spells engine settings three ways, and all three come through here:

* keywords: ``LLM(model, max_model_len=512, trust_remote_code=True)`` (:func:`engine_config`);
* ``EngineArgs`` / ``AsyncEngineArgs`` objects (``create_engine_config`` calls
  :func:`translate`);
* a command-line namespace (``vllm serve`` flags; :func:`namespace_kwargs`).

Every name is one of:

* an ``EngineConfig`` field: passed on, validated by ``EngineConfig``;
* a vLLM spelling of some fields (:data:`SPELLINGS`): ``structured_outputs_config``,
  ``guided_decoding_*``, ``kv_transfer_config``, ``kv_offloading_size`` /
  ``kv_offloading_backend``, ``data_parallel_size_local``, ``weight_transfer_config``,
  ``profiler_config``;
* a tool-calling setting of the server (:data:`FRONTEND`): accepted as before (an
  ``EngineArgs`` carries it), checked, and left out of ``EngineConfig``: the server's
  ``AppSettings`` holds these, the engine never reads them;
* a vLLM 0.32 shorthand for part of a field (:mod:`shorthands`: ``spec_model``,
  ``max_num_active_seqs``, ...), applied after the fields;
* ``hf_token``: not an engine setting but the process's Hugging Face token. It never
  reaches ``EngineConfig``; whoever starts an engine passes it to :func:`export_hf_token`
  (the bridge under ``LLM``/``AsyncLLM``, the command line before a command runs);
* one of vLLM's arguments with no setting here (:mod:`foreign_flags`): quietly accepted
  when it asks for what actorllm does anyway, accepted with a warning when it has no
  meaning here, refused (``EngineConfigError`` naming it) when it asks for a missing feature;
* anything else: ``TypeError`` naming it.

Precedence, the same for all three forms:

1. ``EngineConfig``'s defaults;
2. the spellings, applied in the order of :data:`SPELLINGS` (a later one overrides an
   earlier one on the fields both set: ``kv_offloading_size`` sets the host size over
   ``kv_transfer_config``'s);
3. fields given by their own names win over any spelling that also sets them
   (``structured_outputs_backend="guidance"`` over ``structured_outputs_config``'s backend);
   then the shorthands change the fields they name (``spec_tokens`` sets a key of
   ``speculative_config``, ``max_num_active_seqs`` lowers ``max_num_seqs``);
4. keywords given with an ``EngineConfig`` (``LLM(config, max_num_seqs=8)``) replace that
   config's fields.

Two names that must agree raise ``EngineConfigError`` when they do not:
``data_parallel_size_local`` and ``data_parallel_size`` (every replica runs on this node).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from actorllm.compat.vllm.foreign_flags import FOREIGN, Foreign
from actorllm.compat.vllm.profiler_config import profiler_config_kwargs
from actorllm.compat.vllm.shorthands import SHORTHANDS, shorthand_kwargs
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.engine.config.sizes import parse_size
from actorllm.engine.config.structured_outputs_config import structured_outputs_config_kwargs
from actorllm.engine.config.weight_transfer import WEIGHT_TRANSFER_BACKENDS

FIELDS = frozenset(EngineConfig.__struct_fields__)
# vLLM's connector names that mean the host/disk offload tier.
OFFLOAD_CONNECTORS = ("offload", "OffloadingConnector")
# kv_connector_extra_config keys -> EngineConfig fields (sizes in bytes or "1GiB").
_EXTRA_KEYS = {
    "host_bytes": "kv_offload_host_bytes",
    "disk_dir": "kv_offload_disk_dir",
    "disk_bytes": "kv_offload_disk_bytes",
    "write_through": "kv_offload_write_through",
    "enabled": "kv_connector_enabled",
}
_BACKENDS = ("auto", "xgrammar", "guidance")
# vLLM's grammar backends that are not built here: refused, never silently swapped.
_OTHER_BACKENDS = ("outlines", "lm-format-enforcer")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
# Marks "auto without its guidance fallback" until every spelling is applied.
_NO_FALLBACK = "_disable_fallback"


def _as_dict(value: Any, name: str) -> dict[str, Any]:
    """A JSON object's text, a dict, a dataclass or a plain object, as a dict."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise EngineConfigError(name, f"not JSON: {exc}") from None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "__dict__") and not isinstance(value, str | int | float | list):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    raise EngineConfigError(name, f"must be a JSON object, got {type(value).__name__}.")


def as_bool(value: Any, name: str) -> bool:
    """vLLM's ``type=bool`` flags take a value (``--x true``); keywords take a bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise EngineConfigError(name, f"not a boolean: {value!r} (true or false).")


# -- the spellings, one function each: value -> EngineConfig keyword arguments -------------


def _structured_outputs_config(value: Any) -> dict[str, Any]:
    return structured_outputs_config_kwargs(_as_dict(value, "structured_outputs_config"))


def _backend(name: str) -> dict[str, Any]:
    name = name.strip()
    if name in _OTHER_BACKENDS:
        raise EngineConfigError(
            "guided_decoding_backend",
            f"backend {name!r} is not built here (use one of {', '.join(_BACKENDS)}).",
        )
    if name not in _BACKENDS:
        raise EngineConfigError(
            "guided_decoding_backend", f"backend {name!r}: must be one of {', '.join(_BACKENDS)}."
        )
    return {"structured_outputs_backend": name}


def _guided_decoding_backend(text: str) -> dict[str, Any]:
    """A backend name, with vLLM's older ``name:option,option`` form
    (``xgrammar:disable-any-whitespace``, ``no-fallback``)."""
    name, _, options = str(text).partition(":")
    out = _backend(name)
    for option in filter(None, (o.strip() for o in options.split(","))):
        if option == "disable-any-whitespace":
            out["structured_outputs_disable_any_whitespace"] = True
        elif option == "no-fallback":
            out[_NO_FALLBACK] = True
        else:
            raise EngineConfigError(
                "guided_decoding_backend", f"backend option {option!r} is not supported."
            )
    return out


def _guided_decoding_disable_any_whitespace(value: Any) -> dict[str, Any]:
    flag = as_bool(value, "guided_decoding_disable_any_whitespace")
    return {"structured_outputs_disable_any_whitespace": flag}


def _guided_decoding_disable_fallback(value: Any) -> dict[str, Any]:
    # auto falls back from xgrammar to guidance; without fallback it is xgrammar alone.
    return {_NO_FALLBACK: as_bool(value, "guided_decoding_disable_fallback")}


def _kv_transfer_config(value: Any) -> dict[str, Any]:
    """``{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
    "kv_connector_extra_config": {"host_bytes": "1GiB", "disk_dir": "/tmp/kv"}}``."""
    name = "kv_transfer_config"
    raw = _as_dict(value, name)
    connector = raw.pop("kv_connector", None)
    if connector not in OFFLOAD_CONNECTORS:
        raise EngineConfigError(
            name, f"kv_connector {connector!r} is not supported (use one of {OFFLOAD_CONNECTORS})."
        )
    role = raw.pop("kv_role", "kv_both")
    if role != "kv_both":
        raise EngineConfigError(name, f"kv_role {role!r}: only kv_both is supported.")
    extra = raw.pop("kv_connector_extra_config", None) or {}
    if raw or not isinstance(extra, dict):
        raise EngineConfigError(name, f"unsupported keys: {sorted(raw)}.")
    out: dict[str, Any] = {"kv_connector": "offload"}
    for key, item in extra.items():
        if key not in _EXTRA_KEYS:
            raise EngineConfigError(
                name,
                f"kv_connector_extra_config key {key!r} is not supported "
                f"(known: {sorted(_EXTRA_KEYS)}).",
            )
        field = _EXTRA_KEYS[key]
        out[field] = parse_size(item) if field.endswith("_bytes") else item
    return out


def _kv_offloading_size(gib: Any) -> dict[str, Any]:
    return {"kv_connector": "offload", "kv_offload_host_bytes": int(float(gib) * 2**30)}


def _kv_offloading_backend(value: Any) -> dict[str, Any]:
    if value != "native":
        raise EngineConfigError(
            "kv_offloading_backend", f"only native (the built-in tier), got {value!r}."
        )
    return {}


def _data_parallel_size_local(value: Any) -> dict[str, Any]:
    return {}  # checked against data_parallel_size once every name is applied


# {vLLM name: its translation}, in the order they apply (precedence step 2).
def _weight_transfer_config(value: Any) -> dict[str, Any]:
    """vLLM's ``{"backend": "gloo"}`` (or a ``WeightTransferConfig``)."""
    name = "weight_transfer_config"
    if not isinstance(value, Mapping | str) and hasattr(value, "backend"):
        value = {"backend": value.backend}  # a WeightTransferConfig (ours or vLLM's)
    raw = _as_dict(value, name)
    backend = raw.pop("backend", "nccl")
    if raw:
        raise EngineConfigError(name, f"unknown key(s) {sorted(raw)}: only backend is read.")
    if backend not in WEIGHT_TRANSFER_BACKENDS:
        raise EngineConfigError(
            name,
            f"backend {backend!r} is not built (use one of {', '.join(WEIGHT_TRANSFER_BACKENDS)}).",
        )
    return {"weight_transfer_backend": backend}


def _profiler_config(value: Any) -> dict[str, Any]:
    return profiler_config_kwargs(_as_dict(value, "profiler_config"))


SPELLINGS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "structured_outputs_config": _structured_outputs_config,
    "guided_decoding_backend": _guided_decoding_backend,
    "guided_decoding_disable_any_whitespace": _guided_decoding_disable_any_whitespace,
    "guided_decoding_disable_fallback": _guided_decoding_disable_fallback,
    "kv_transfer_config": _kv_transfer_config,
    "kv_offloading_size": _kv_offloading_size,
    "kv_offloading_backend": _kv_offloading_backend,
    "data_parallel_size_local": _data_parallel_size_local,
    "weight_transfer_config": _weight_transfer_config,
    "profiler_config": _profiler_config,
}
HF_TOKEN = "hf_token"
# The server's tool-calling settings, with their defaults: accepted among vLLM's keywords,
# never part of an EngineConfig.
FRONTEND: Mapping[str, Any] = {
    "enable_auto_tool_choice": False,
    "tool_call_parser": None,
    "tool_parser_plugin": None,
}


def spelling(name: str, value: Any) -> dict[str, Any]:
    """One spelling's ``EngineConfig`` keyword arguments (the command line checks each flag
    with it as it parses). Raises ``EngineConfigError`` naming the key."""
    return SPELLINGS[name](value)


def translate(given: Mapping[str, Any], base: EngineConfig | None = None) -> dict[str, Any]:
    """``EngineConfig`` keyword arguments for ``given`` (fields and spellings, already
    classified), by the module's precedence; ``base``: the config they will replace fields
    of (its fields bound the shorthands as given ones do). A spelling given as None asks
    for nothing (``dataclasses.asdict`` of unset arguments); ``hf_token`` is left out."""
    pieces = [fn(given[name]) for name, fn in SPELLINGS.items() if given.get(name) is not None]
    return _merge(pieces, given, base)


def _merge(
    pieces: list[dict[str, Any]], given: Mapping[str, Any], base: EngineConfig | None = None
) -> dict[str, Any]:
    """The precedence: the spellings' pieces in order, then the fields in ``given``; then
    the checks of names that must agree."""
    out: dict[str, Any] = {}
    for piece in pieces:
        out |= piece
    if out.pop(_NO_FALLBACK, False) and out.get("structured_outputs_backend", "auto") == "auto":
        out["structured_outputs_backend"] = "xgrammar"  # auto's first choice, no fallback
    out |= {k: v for k, v in given.items() if k in FIELDS}  # fields win (step 3)
    out |= shorthand_kwargs(given, out, base)
    local = given.get("data_parallel_size_local")
    if local is not None and out.setdefault("data_parallel_size", local) != local:
        raise EngineConfigError(
            "data_parallel_size_local",
            f"data_parallel_size_local {local} differs from data_parallel_size "
            f"{out['data_parallel_size']}: every replica runs on this node.",
        )
    if out.get("model") is not None:
        out["model"] = str(out["model"])
    if given.get("enable_auto_tool_choice") and not given.get("tool_call_parser"):
        raise EngineConfigError(
            "enable_auto_tool_choice", "needs tool_call_parser (which format to parse)."
        )
    return out


def foreign_arguments() -> dict[str, Foreign]:
    """{vLLM keyword: its entry} for vLLM's arguments that have no setting here."""
    return {
        flag[2:].replace("-", "_"): entry
        for entry in FOREIGN
        for flag in entry.flags
        if flag.startswith("--")
    }


def check_foreign(name: str, value: Any, entry: Foreign, stacklevel: int = 2) -> None:
    """Accept a foreign argument that asks for nothing; warn about one that has no meaning
    here; refuse (``EngineConfigError``) one that asks for a missing feature."""
    if entry.asks_nothing(value):
        return
    if entry.verdict == "refuse":
        raise EngineConfigError(name, f"{value!r} is not supported: {entry.reason}.")
    warnings.warn(
        f"{name}={value!r} has no effect in actorllm: {entry.reason}; ignoring it.",
        UserWarning,
        stacklevel=stacklevel + 1,
    )


def classify(name: str, value: Any, owner: str, error: type[Exception] = TypeError) -> bool:
    """True when ``name`` is a field, a spelling, a shorthand, a :data:`FRONTEND` setting or
    ``hf_token`` (to be kept); False for a foreign argument (checked by
    :func:`check_foreign`, then dropped). Raises ``error`` naming anything else."""
    if any(name in kept for kept in (FIELDS, SPELLINGS, SHORTHANDS, FRONTEND, (HF_TOKEN,))):
        return True
    entry = foreign_arguments().get(name)
    if entry is None:
        raise error(
            f"{owner}: {name!r} is not supported by actorllm (neither an engine setting "
            "here nor a vLLM engine argument it can honour); remove it."
        )
    check_foreign(name, value, entry, stacklevel=4)
    return False


def engine_config(
    model_or_config: str | Path | EngineConfig | None = None, **kwargs: Any
) -> EngineConfig:
    """The ``EngineConfig`` of ``LLM(model_or_config, **kwargs)``-style arguments: vLLM's
    keywords, classified and translated as :class:`EngineArgs` does them. With an
    ``EngineConfig``, the keywords replace its fields. ``disable_log_stats=True`` (vLLM
    ``LLM``'s default) is accepted; the periodic stats line belongs to the front doors."""
    if kwargs.pop("disable_log_stats", True) is not True:
        raise EngineConfigError(
            "disable_log_stats",
            "periodic stats logging is AsyncLLMEngine's (or `serve`'s); here read "
            "get_stats() / the metrics instead.",
        )
    kwargs.pop(HF_TOKEN, None)  # the caller exports it (export_hf_token)
    given = {k: v for k, v in kwargs.items() if classify(k, v, "LLM")}
    if isinstance(model_or_config, EngineConfig):
        changes = translate(given, model_or_config)
        return model_or_config.replace(**changes) if changes else model_or_config
    model = None if model_or_config is None else str(model_or_config)
    return EngineConfig(**translate({"model": model, **given}))


def namespace_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``EngineConfig`` keyword arguments for the flags the user gave (a namespace parsed by
    a parser ``cli_args.add_engine_arguments`` filled: each spelling's flag holds its
    :func:`spelling` already, translated as it was parsed). The ``MODEL`` positional and
    ``--model`` must agree."""
    values = vars(args)
    pieces = [
        values[name]
        for name in SPELLINGS
        if name != "data_parallel_size_local" and values.get(name) is not None
    ]
    out = _merge(pieces, values)
    tag = values.get("model_tag")
    if tag is not None:
        if out.get("model", tag) != tag:
            raise EngineConfigError("model", f"given twice: {tag!r} and --model {out['model']!r}")
        out["model"] = tag
    return out


def export_hf_token(token: Any) -> None:
    """Make ``token`` the Hugging Face token of this process's hub downloads (``HF_TOKEN``,
    read by huggingface_hub at each download). ``True`` or None: keep huggingface_hub's
    default (the token saved by ``hf auth login``)."""
    if isinstance(token, str):
        os.environ["HF_TOKEN"] = token
