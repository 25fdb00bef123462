"""The engine's command-line flags, shared by serve / generate / chat / bench.

They are generated from ``EngineConfig`` (fields, types, docstrings, section comments: see
:mod:`struct_flags`), so a new field is a new flag with nothing else to edit. Beside them,
the few spellings vLLM uses for the same settings:

* ``MODEL`` positional (``serve``) or ``--model``;
* ``-tp`` / ``-pp`` / ``-dp`` for the parallel sizes, ``-dpb`` for
  ``--data-parallel-backend``;
* ``--kv-transfer-config JSON`` (vLLM's KV connector form) and ``--kv-offloading-size GIB``
  set the ``kv_connector`` / ``kv_offload_*`` fields;
* ``--structured-outputs-config JSON`` and the older ``--guided-decoding-backend``,
  ``--guided-decoding-disable-any-whitespace``, ``--guided-decoding-disable-fallback`` set
  the ``structured_outputs_*`` fields and ``reasoning_parser``
  (``engine/structured_outputs_config.py``);
* ``--data-parallel-size-local`` (``-dpl``): on one node, the data-parallel size;
* ``--hf-token [TOKEN]``: the token hub downloads use (``HF_TOKEN``).

``engine_kwargs(args)`` returns only what the user set, so ``EngineConfig``'s own defaults
apply to the rest; :func:`engine_config` validates them (``EngineConfigError`` names the
field; :func:`describe_error` turns that into the flag).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from actorllm.engine.config import EngineConfig, EngineConfigError
from actorllm.entrypoints.commands.struct_flags import Groups, add_struct_flags, flag_for, given

_SHORT = {
    "tensor_parallel_size": ("-tp",),
    "pipeline_parallel_size": ("-pp",),
    "data_parallel_size": ("-dp",),
    "data_parallel_backend": ("-dpb",),
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


def _gib(text: str) -> int:
    return int(float(text) * 2**30)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _flag_bool(text: str | bool) -> bool:
    """vLLM's ``type=bool`` flags take a value (``--x true``)."""
    if isinstance(text, bool):
        return text
    if text.strip().lower() in _TRUE:
        return True
    if text.strip().lower() in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r} (true or false)")


_BACKENDS = ("auto", "xgrammar", "guidance")
# vLLM's backends we do not have: asking for one is refused, never silently swapped.
_OTHER_BACKENDS = ("outlines", "lm-format-enforcer")


def _backend(name: str) -> dict[str, Any]:
    name = name.strip()
    if name in _OTHER_BACKENDS:
        raise argparse.ArgumentTypeError(
            f"backend {name!r} is not built here (use one of {', '.join(_BACKENDS)})"
        )
    if name not in _BACKENDS:
        raise argparse.ArgumentTypeError(f"backend {name!r}: must be one of {', '.join(_BACKENDS)}")
    return {"structured_outputs_backend": name}


def _disable_fallback(value: Any) -> dict[str, Any]:
    # auto falls back from xgrammar to guidance; without fallback it is xgrammar alone.
    return {"_disable_fallback": _flag_bool(value)}


def guided_decoding_backend(text: str) -> dict[str, Any]:
    """vLLM's ``--guided-decoding-backend``: a backend name, with the older
    ``name:option,option`` form (``xgrammar:disable-any-whitespace``, ``no-fallback``)."""
    name, _, options = text.partition(":")
    out = _backend(name)
    for option in filter(None, (o.strip() for o in options.split(","))):
        if option == "disable-any-whitespace":
            out["structured_outputs_disable_any_whitespace"] = True
        elif option == "no-fallback":
            out |= _disable_fallback(True)
        else:
            raise argparse.ArgumentTypeError(f"backend option {option!r} is not supported")
    return out


def structured_outputs_config(text: str) -> dict[str, Any]:
    """vLLM's ``--structured-outputs-config`` JSON -> EngineConfig kwargs, e.g.
    ``{"backend": "xgrammar", "disable_any_whitespace": true}``. A key we cannot honour is
    an ``argparse.ArgumentTypeError`` naming it (the keys:
    ``engine/structured_outputs_config.py``)."""
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


def _add_vllm_spellings(parser: argparse.ArgumentParser, groups: Groups) -> None:
    """vLLM's other forms of settings that are EngineConfig fields here."""
    so = groups.get("StructuredOutputsConfig") or parser.add_argument_group(
        "StructuredOutputsConfig"
    )
    so.add_argument(
        "--structured-outputs-config",
        type=structured_outputs_config,
        default=argparse.SUPPRESS,
        metavar="JSON",
        help='vLLM\'s form: \'{"backend": "xgrammar", "disable_any_whitespace": true, '
        '"disable_fallback": false, "reasoning_parser": "qwen3"}\' (every key of vLLM\'s '
        "StructuredOutputsConfig)",
    )
    so.add_argument(
        "--guided-decoding-backend",
        type=guided_decoding_backend,
        default=argparse.SUPPRESS,
        metavar="BACKEND",
        help="vLLM's older name of --structured-outputs-backend (xgrammar:disable-any-whitespace "
        "and no-fallback options too)",
    )
    so.add_argument(
        "--guided-decoding-disable-any-whitespace",
        type=lambda v: {"structured_outputs_disable_any_whitespace": _flag_bool(v)},
        nargs="?",
        const="true",
        default=argparse.SUPPRESS,
        metavar="BOOL",
        help="vLLM's older name of --structured-outputs-disable-any-whitespace",
    )
    so.add_argument(
        "--guided-decoding-disable-fallback",
        type=_disable_fallback,
        nargs="?",
        const="true",
        default=argparse.SUPPRESS,
        metavar="BOOL",
        help="auto: use xgrammar alone, never falling back to guidance",
    )
    parallel = groups.get("ParallelConfig") or parser.add_argument_group("ParallelConfig")
    parallel.add_argument(
        "--data-parallel-size-local",
        "-dpl",
        type=int,
        default=argparse.SUPPRESS,
        metavar="N",
        help="vLLM's replicas on this node: every replica runs here, so it must equal "
        "--data-parallel-size (which it sets when that is not given)",
    )
    model = groups.get("ModelConfig") or parser.add_argument_group("ModelConfig")
    model.add_argument(
        "--hf-token",
        nargs="?",
        const=True,
        default=argparse.SUPPRESS,
        metavar="TOKEN",
        help="the Hugging Face token hub downloads use (sets HF_TOKEN); without a value, "
        "the token saved by `hf auth login` (huggingface_hub's default)",
    )


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
    _add_vllm_spellings(parser, groups)
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


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """EngineConfig keyword arguments for the flags the user gave."""
    values = vars(args)
    out: dict[str, Any] = dict(values.get("kv_transfer_config") or {})
    if "kv_offloading_size" in values:
        out |= {"kv_connector": "offload", "kv_offload_host_bytes": values["kv_offloading_size"]}
    for name in (
        "structured_outputs_config",
        "guided_decoding_backend",
        "guided_decoding_disable_any_whitespace",
        "guided_decoding_disable_fallback",
    ):
        out |= values.get(name) or {}
    if out.pop("_disable_fallback", False) and out.get("structured_outputs_backend", "auto") == (
        "auto"
    ):
        out["structured_outputs_backend"] = "xgrammar"
    out |= given(args, EngineConfig)  # the fields' own flags win over the composite forms
    local = values.get("data_parallel_size_local")
    if local is not None and out.setdefault("data_parallel_size", local) != local:
        raise EngineConfigError(
            "data_parallel_size",
            f"--data-parallel-size-local {local} differs from --data-parallel-size "
            f"{out['data_parallel_size']}: every replica runs on this node.",
        )
    tag = values.get("model_tag")
    if tag is not None:
        if out.get("model", tag) != tag:
            raise EngineConfigError("model", f"given twice: {tag!r} and --model {out['model']!r}")
        out["model"] = tag
    return out


def engine_config(args: argparse.Namespace) -> EngineConfig:
    token = vars(args).get("hf_token")
    if isinstance(token, str):
        os.environ["HF_TOKEN"] = token  # read by huggingface_hub at each download
    return EngineConfig(**engine_kwargs(args))


def describe_error(exc: Exception) -> str:
    """``EngineConfigError`` names a field; the user typed a flag: say the flag."""
    if isinstance(exc, EngineConfigError):
        message = str(exc).removeprefix(f"{exc.param}: ")
        return f"{flag_for(exc.param)}: {message}"
    return str(exc)
