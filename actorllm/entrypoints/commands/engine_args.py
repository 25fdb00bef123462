"""The engine's command-line flags, shared by serve / generate / chat / bench.

They are generated from ``EngineConfig`` (fields, types, docstrings, section comments: see
:mod:`struct_flags`), so a new field is a new flag with nothing else to edit. Beside them,
the few spellings vLLM uses for the same settings:

* ``MODEL`` positional (``serve``) or ``--model``;
* ``-tp`` / ``-pp`` / ``-dp`` for the parallel sizes;
* ``--kv-transfer-config JSON`` (vLLM's KV connector form) and ``--kv-offloading-size GIB``
  set the ``kv_connector`` / ``kv_offload_*`` fields.
* ``--structured-outputs-config JSON`` (vLLM's nested form), its dotted
  ``--structured-outputs-config.backend`` and the older ``--guided-decoding-backend`` set
  the ``structured_outputs_*`` fields (``engine/structured_outputs_config.py``).

``engine_kwargs(args)`` returns only what the user set, so ``EngineConfig``'s own defaults
apply to the rest; :func:`engine_config` validates them (``EngineConfigError`` names the
field; :func:`describe_error` turns that into the flag).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from actorllm.engine.config import EngineConfig, EngineConfigError
from actorllm.entrypoints.commands.struct_flags import Groups, add_struct_flags, flag_for, given

_SHORT = {
    "tensor_parallel_size": ("-tp",),
    "pipeline_parallel_size": ("-pp",),
    "data_parallel_size": ("-dp",),
}
# vLLM's connector names that mean our host/disk offload tier.
_OFFLOAD_CONNECTORS = ("offload", "OffloadingConnector")
# kv_connector_extra_config keys -> EngineConfig fields (sizes in bytes or "1GiB").
_EXTRA_KEYS = {
    "host_bytes": "kv_offload_host_bytes",
    "disk_dir": "kv_offload_disk_dir",
    "disk_bytes": "kv_offload_disk_bytes",
    "write_through": "kv_offload_write_through",
    "enabled": "kv_connector_enabled",
}


def kv_transfer_config(text: str) -> dict[str, Any]:
    """vLLM's ``--kv-transfer-config`` JSON -> EngineConfig kwargs.

    ``{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
    "kv_connector_extra_config": {"host_bytes": "1GiB", "disk_dir": "/tmp/kv"}}``.
    Anything we cannot honour is an ``argparse.ArgumentTypeError`` naming it.
    """
    from actorllm.engine.config import parse_size

    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    raw = dict(raw)
    connector = raw.pop("kv_connector", None)
    if connector not in _OFFLOAD_CONNECTORS:
        raise argparse.ArgumentTypeError(
            f"kv_connector {connector!r} is not supported (use one of {_OFFLOAD_CONNECTORS})"
        )
    role = raw.pop("kv_role", "kv_both")
    if role != "kv_both":
        raise argparse.ArgumentTypeError(f"kv_role {role!r}: only kv_both is supported")
    extra = raw.pop("kv_connector_extra_config", {}) or {}
    if raw or not isinstance(extra, dict):
        raise argparse.ArgumentTypeError(f"unsupported keys: {sorted(raw)}")
    out: dict[str, Any] = {"kv_connector": "offload"}
    for key, value in extra.items():
        if key not in _EXTRA_KEYS:
            raise argparse.ArgumentTypeError(
                f"kv_connector_extra_config key {key!r} is not supported "
                f"(known: {sorted(_EXTRA_KEYS)})"
            )
        field = _EXTRA_KEYS[key]
        out[field] = parse_size(value) if field.endswith("_bytes") else value
    return out


def structured_outputs_config(text: str) -> dict[str, Any]:
    """vLLM's ``--structured-outputs-config`` JSON -> EngineConfig kwargs; a key we cannot
    honour is an ``argparse.ArgumentTypeError`` naming it."""
    from actorllm.engine.structured_outputs_config import structured_outputs_config_kwargs

    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    try:
        return structured_outputs_config_kwargs(raw)
    except EngineConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _gib(text: str) -> int:
    return int(float(text) * 2**30)


def add_engine_arguments(parser: argparse.ArgumentParser, *, model_positional: bool = True) -> None:
    groups: Groups = {}
    if model_positional:
        parser.add_argument(
            "model_tag",
            nargs="?",
            default=None,
            metavar="MODEL",
            help="a model directory or hub id (same as --model; default: the demo model)",
        )
    add_struct_flags(parser, EngineConfig, groups=groups, aliases=_SHORT)
    kv = groups.get("KVTransferConfig") or parser.add_argument_group("KVTransferConfig")
    kv.add_argument(
        "--kv-transfer-config",
        type=kv_transfer_config,
        default=argparse.SUPPRESS,
        metavar="JSON",
        help="vLLM's KV connector form: "
        '\'{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", '
        '"kv_connector_extra_config": {"host_bytes": "1GiB", "disk_dir": "/tmp/kv"}}\'',
    )
    kv.add_argument(
        "--kv-offloading-size",
        type=_gib,
        default=argparse.SUPPRESS,
        metavar="GIB",
        help="vLLM's offloading size in GiB: the offload connector with this much host memory",
    )
    kv.add_argument(
        "--kv-offloading-backend",
        choices=("native",),
        default=argparse.SUPPRESS,
        help="vLLM's offloading backend: native is the built-in host/disk tier",
    )
    so = groups.get("StructuredOutputsConfig") or parser.add_argument_group(
        "StructuredOutputsConfig"
    )
    so.add_argument(
        "--structured-outputs-config",
        type=structured_outputs_config,
        default=argparse.SUPPRESS,
        metavar="JSON",
        help='vLLM\'s nested form: \'{"backend": "xgrammar", "disable_any_whitespace": true}\'',
    )
    so.add_argument(
        "--structured-outputs-config.backend",
        "--guided-decoding-backend",
        dest="structured_outputs_config_backend",
        choices=("auto", "xgrammar", "guidance"),
        default=argparse.SUPPRESS,
        help="vLLM's spellings of --structured-outputs-backend",
    )


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """EngineConfig keyword arguments for the flags the user gave."""
    values = vars(args)
    out: dict[str, Any] = dict(values.get("kv_transfer_config") or {})
    if "kv_offloading_size" in values:
        out |= {"kv_connector": "offload", "kv_offload_host_bytes": values["kv_offloading_size"]}
    out |= values.get("structured_outputs_config") or {}
    if "structured_outputs_config_backend" in values:
        out["structured_outputs_backend"] = values["structured_outputs_config_backend"]
    out |= given(args, EngineConfig)  # the fields' own flags win over the composite forms
    tag = values.get("model_tag")
    if tag is not None:
        if out.get("model", tag) != tag:
            raise EngineConfigError("model", f"given twice: {tag!r} and --model {out['model']!r}")
        out["model"] = tag
    return out


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(**engine_kwargs(args))


def describe_error(exc: Exception) -> str:
    """``EngineConfigError`` names a field; the user typed a flag: say the flag."""
    if isinstance(exc, EngineConfigError):
        message = str(exc).removeprefix(f"{exc.param}: ")
        return f"{flag_for(exc.param)}: {message}"
    return str(exc)
