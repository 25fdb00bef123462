"""The engine's command-line flags, shared by ``serve`` / ``generate`` / ``chat`` / ``bench``
and ``EngineArgs.add_cli_args``.

One flag per ``EngineConfig`` field (see :mod:`struct_flags`; the help text is
``EngineConfig.CLI_HELP``), and beside them the spellings vLLM uses for the same settings:

* ``MODEL`` positional (``serve``) or ``--model``;
* ``-tp`` / ``-pp`` / ``-dp`` for the parallel sizes, ``-dpb`` for
  ``--data-parallel-backend``;
* ``--kv-transfer-config JSON`` (vLLM's KV connector form) and ``--kv-offloading-size GIB``;
* ``--weight-transfer-config JSON`` (vLLM's form of ``--weight-transfer-backend``) and
  ``--profiler-config JSON`` (of ``--profiler-dir``);
* ``--structured-outputs-config JSON`` and the older ``--guided-decoding-backend``,
  ``--guided-decoding-disable-any-whitespace``, ``--guided-decoding-disable-fallback``;
* ``--data-parallel-size-local`` (``-dpl``): on one node, the data-parallel size;
* ``--hf-token [TOKEN]``: the token hub downloads use (``HF_TOKEN``);
* vLLM 0.32's shorthands (:mod:`shorthands`): ``--spec-method`` / ``--spec-model`` /
  ``--spec-tokens``, ``--max-num-active-seqs``, ``--max-num-scheduled-tokens``,
  ``--distributed-timeout-seconds``, ``--cpu-distributed-timeout-seconds``.

A spelling's flag holds that spelling's ``EngineConfig`` keyword arguments, translated by
:mod:`args` as it is parsed (so a bad value is a usage error naming the flag);
:func:`args.namespace_kwargs` merges them with the fields' flags, with the same precedence
as keywords and ``EngineArgs``. Flags default
to absent, so ``EngineConfig``'s own defaults apply to what the user did not set.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from actorllm.compat.vllm import args as vllm_args
from actorllm.compat.vllm.shorthands import human_int
from actorllm.compat.vllm.struct_flags import Groups, add_struct_flags, flag_for, json_object
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError

_SHORT = {
    "tensor_parallel_size": ("-tp",),
    "quantization": ("-q",),
    "pipeline_parallel_size": ("-pp",),
    "data_parallel_size": ("-dp",),
    "data_parallel_backend": ("-dpb",),
}


def _translated(name: str, parse: Callable[[str], Any] = str) -> Callable[[str], Any]:
    """An argparse ``type`` for spelling ``name``: its ``EngineConfig`` keyword arguments
    (:func:`args.spelling`), so a bad value is a usage error naming the flag."""

    def translate(text: str) -> Any:
        try:
            return vllm_args.spelling(name, parse(text))
        except EngineConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    translate.__name__ = name  # argparse names the type in "invalid <name> value"
    return translate


# The flags' argparse types, by the spelling they check.
structured_outputs_config = _translated("structured_outputs_config", json_object)
kv_transfer_config = _translated("kv_transfer_config", json_object)
weight_transfer_config = _translated("weight_transfer_config", json_object)
profiler_config = _translated("profiler_config", json_object)


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
        type=_translated("guided_decoding_backend"),
        default=argparse.SUPPRESS,
        metavar="BACKEND",
        help="vLLM's older name of --structured-outputs-backend (xgrammar:disable-any-whitespace "
        "and no-fallback options too)",
    )
    for field, help_text in (
        (
            "guided_decoding_disable_any_whitespace",
            "vLLM's older name of --structured-outputs-disable-any-whitespace",
        ),
        (
            "guided_decoding_disable_fallback",
            "auto: use xgrammar alone, never falling back to guidance",
        ),
    ):
        so.add_argument(
            "--" + field.replace("_", "-"),
            type=_translated(field),
            nargs="?",
            const="true",
            default=argparse.SUPPRESS,
            metavar="BOOL",
            help=help_text,
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


# vLLM 0.32's shorthands: (group, flag, type, help); their values are merged by
# args.namespace_kwargs (shorthands.py), after the fields.
_SHORTHAND_FLAGS: tuple[tuple[str, str, Callable[[str], Any], str], ...] = (
    ("SpeculativeConfig", "--spec-method", str, "speculative_config's method (ngram, ...)"),
    ("SpeculativeConfig", "--spec-model", str, "speculative_config's draft model"),
    ("SpeculativeConfig", "--spec-tokens", int, "speculative_config's num_speculative_tokens"),
    (
        "SchedulerConfig",
        "--max-num-active-seqs",
        int,
        "vLLM's cap on running requests: lowers --max-num-seqs (it may not exceed it)",
    ),
    (
        "SchedulerConfig",
        "--max-num-scheduled-tokens",
        human_int,
        "vLLM's cap on one step's tokens (2k, 2K too): sets --max-num-batched-tokens (it "
        "may not exceed it when both are given)",
    ),
    (
        "ParallelConfig",
        "--distributed-timeout-seconds",
        float,
        "vLLM's timeout of distributed operations: --tp-collective-timeout",
    ),
    (
        "ParallelConfig",
        "--cpu-distributed-timeout-seconds",
        float,
        "vLLM's timeout of CPU (gloo) groups: --tp-collective-timeout (wins over "
        "--distributed-timeout-seconds)",
    ),
)


def _add_shorthands(parser: argparse.ArgumentParser, groups: Groups) -> None:
    for group_name, flag, parse, help_text in _SHORTHAND_FLAGS:
        group = groups.get(group_name) or parser.add_argument_group(group_name)
        group.add_argument(flag, type=parse, default=argparse.SUPPRESS, help=help_text)


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
    _add_shorthands(parser, groups)
    wt = groups.get("WeightTransferConfig") or parser.add_argument_group("WeightTransferConfig")
    wt.add_argument(
        "--weight-transfer-config",
        type=weight_transfer_config,
        default=argparse.SUPPRESS,
        metavar="JSON",
        help='vLLM\'s form of --weight-transfer-backend: \'{"backend": "gloo"}\'',
    )
    profiler = groups.get("ProfilerConfig") or parser.add_argument_group("ProfilerConfig")
    profiler.add_argument(
        "--profiler-config",
        type=profiler_config,
        default=argparse.SUPPRESS,
        metavar="JSON",
        help='vLLM\'s form of --profiler-dir: \'{"profiler": "torch", "torch_profiler_dir": '
        '"/tmp/traces"}\' (other profilers and trace options are refused)',
    )
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
        type=_translated("kv_offloading_size", float),
        default=argparse.SUPPRESS,
        metavar="GIB",
        help="vLLM's offloading size in GiB: the offload connector with this much host memory",
    )
    kv.add_argument(
        "--kv-offloading-backend",
        type=_translated("kv_offloading_backend"),
        default=argparse.SUPPRESS,
        metavar="{native}",
        help="vLLM's offloading backend: native is the built-in host/disk tier",
    )


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``EngineConfig`` keyword arguments for the flags the user gave."""
    return vllm_args.namespace_kwargs(args)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The ``EngineConfig`` of the flags the user gave; ``EngineConfigError`` names a field
    (:func:`describe_error` turns it into the flag)."""
    return EngineConfig(**engine_kwargs(args))


_NAME = re.compile(r"\b[a-z]+(?:_[a-z0-9]+)+\b")
_FLAGGED = vllm_args.FIELDS | vllm_args.SPELLINGS.keys() | vllm_args.SHORTHANDS


def describe_error(exc: Exception) -> str:
    """``EngineConfigError`` names fields; the user typed flags: say the flags."""
    if not isinstance(exc, EngineConfigError):
        return str(exc)
    message = str(exc).removeprefix(f"{exc.param}: ")
    message = _NAME.sub(lambda m: flag_for(m[0]) if m[0] in _FLAGGED else m[0], message)
    flag = flag_for(exc.param)
    return message if message.startswith(flag) else f"{flag}: {message}"
