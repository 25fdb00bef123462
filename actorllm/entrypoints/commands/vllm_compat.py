"""vLLM's ``serve`` flags that have no field here, so that vLLM launch scripts start.

Every flag ``actorllm serve`` honours is generated from a settings struct
(:mod:`struct_flags`); this table holds only vLLM's other flags, each with what we do:

* ``ignore``: it has no meaning here (the reason says why). Accepted, with one warning
  naming it, so a launch script starts and its author still learns the flag did nothing.
* ``refuse``: it asks for a feature actorllm does not have. Values in ``same`` ask for what
  actorllm does anyway (``--kv-cache-dtype auto``, ``--api-server-count 1``) and are
  accepted quietly; any other value stops the launch with an error naming the flag.

Renamed spellings that map onto a real setting (``--disable-log-requests``,
``--disable-log-stats``, ``--kv-transfer-config``, ...) are in ``engine_args`` and
``serve``, beside the setting they change.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

# Where parse results go: [(verdict, flag, value, reason)], read by notes().
NOTES_DEST = "_vllm_compat_notes"


@dataclass(frozen=True)
class Foreign:
    flags: tuple[str, ...]
    verdict: Literal["ignore", "refuse"]
    reason: str
    takes_value: bool = True
    same: tuple[str, ...] = ()  # values that ask for what actorllm does anyway


def _i(*flags: str, why: str, value: bool = True) -> Foreign:
    return Foreign(flags, "ignore", why, takes_value=value)


def _r(*flags: str, why: str, value: bool = True, same: tuple[str, ...] = ()) -> Foreign:
    return Foreign(flags, "refuse", why, takes_value=value, same=same)


FOREIGN: list[Foreign] = [
    # -- no meaning here: warn and go on ----------------------------------------------------
    _i("--trust-remote-code", value=False, why="actorllm runs only its own model code"),
    _i("--disable-uvicorn-access-log", value=False, why="there is no access log"),
    _i("--disable-access-log-for-endpoints", why="there is no access log"),
    _i(
        "--disable-frontend-multiprocessing",
        value=False,
        why="the server and the engine always share one process",
    ),
    _i("--swap-space", why="preempted requests are recomputed, never swapped"),
    _i("--disable-custom-all-reduce", value=False, why="the CPU all-reduce is gloo's own"),
    _i("--max-parallel-loading-workers", why="weights load in one worker"),
    _i("--enable-sleep-mode", value=False, why="sleep/wake_up are always built in (dev mode)"),
    _i("--compilation-config", "-O", why="there is no torch.compile; see --enforce-eager"),
    _i("--cuda-graph-sizes", why="the CUDA-graph batch sizes are fixed"),
    _i("--max-seq-len-to-capture", why="CUDA graphs capture decode steps of any length"),
    _i(
        "--disable-async-output-proc",
        value=False,
        why="outputs are always processed by their own actor",
    ),
    _i("--use-v2-block-manager", value=False, why="there is one block manager"),
    _i("--enable-prompt-tokens-details", value=False, why="usage always has cached tokens"),
    _i("--enable-request-id-headers", value=False, why="X-Request-Id is always echoed"),
    _i("--disable-fastapi-docs", value=False, why="there is no docs UI (/openapi.json only)"),
    _i("--h11-max-header-count", why="hypercorn has no header-count limit"),
    _i("--disable-sliding-window", value=False, why="no supported model uses sliding windows"),
    _i("--disable-cascade-attn", value=False, why="there is no cascade attention"),
    _i("--disable-chunked-mm-input", value=False, why="there are no multimodal inputs"),
    _i("--prefix-caching-hash-algo", why="the prefix cache's hash is fixed"),
    # -- features not built: the default value is fine, anything else is refused ------------
    _r("--tokenizer-mode", why="only Hugging Face tokenizers are supported", same=("auto", "hf")),
    _r("--kv-cache-dtype", why="the KV cache uses the model's dtype", same=("auto",)),
    _r("--quantization", "-q", why="quantized models are not supported", same=("None", "none")),
    _r("--task", why="only text generation is supported", same=("auto", "generate")),
    _r("--runner", why="only text generation is supported", same=("auto", "generate")),
    _r("--convert", why="only text generation is supported", same=("auto", "none")),
    _r("--enable-lora", value=False, why="LoRA adapters are not supported"),
    _r("--lora-modules", why="LoRA adapters are not supported"),
    _r("--speculative-config", why="speculative decoding is not supported"),
    _r("--enable-auto-tool-choice", value=False, why="tool calling is not supported yet"),
    _r("--tool-call-parser", why="tool calling is not supported yet"),
    _r("--reasoning-parser", why="reasoning parsers are not supported yet"),
    _r("--otlp-traces-endpoint", why="OpenTelemetry tracing is not supported"),
    _r("--uds", why="serving on a Unix socket is not supported"),
    _r("--headless", value=False, why="multi-node data parallelism is not supported"),
    _r("--api-server-count", "-asc", why="one API server process only", same=("1",)),
    _r("--middleware", why="extra ASGI middleware is not supported"),
    _r("--hf-overrides", why="model config overrides are not supported"),
    _r("--rope-scaling", why="rope scaling overrides are not supported"),
    _r("--rope-theta", why="rope overrides are not supported"),
    _r("--num-scheduler-steps", why="multi-step scheduling is not supported", same=("1",)),
    _r("--max-num-partial-prefills", why="one partial prefill at a time", same=("1",)),
    _r("--max-long-partial-prefills", why="one partial prefill at a time", same=("1",)),
    _r("--preemption-mode", why="preemption always recomputes", same=("recompute",)),
    _r("--cpu-offload-gb", why="weights cannot be offloaded to CPU", same=("0",)),
    _r("--num-lookahead-slots", why="speculative decoding is not supported", same=("0",)),
    _r("--max-logprobs", why="at most 20 logprobs per token (OpenAI's limit)", same=("20",)),
    _r("--generation-config", why="defaults come from the model's files", same=("auto",)),
    _r("--override-generation-config", why="generation defaults cannot be overridden"),
    _r("--limit-mm-per-prompt", why="multimodal inputs are not supported"),
    _r("--kv-events-config", why="KV cache events are not published"),
    _r(
        "--chat-template-content-format",
        why="message content is passed to the template as sent",
        same=("auto",),
    ),
]


class _Record(argparse.Action):
    """Stores (verdict, flag, value, reason) for :func:`notes`; decides nothing itself."""

    def __init__(self, option_strings: Sequence[str], dest: str, foreign: Foreign, **kw: Any):
        self.foreign = foreign
        super().__init__(option_strings, dest, nargs=None if foreign.takes_value else 0, **kw)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        notes = list(getattr(namespace, NOTES_DEST, []))
        value = values if isinstance(values, str) else None
        notes.append((self.foreign.verdict, option_string, value, self.foreign))
        setattr(namespace, NOTES_DEST, notes)


def add_foreign_flags(parser: argparse.ArgumentParser) -> None:
    """Add vLLM's other flags (those no setting of ours already defines) in one group."""
    taken = set(parser._option_string_actions)
    group = parser.add_argument_group(
        "vLLM compatibility", "vLLM flags with no setting here: see each one's note."
    )
    for foreign in FOREIGN:
        flags = [f for f in foreign.flags if f not in taken]
        if not flags:
            continue
        verb = "ignored with a warning" if foreign.verdict == "ignore" else "refused"
        note = f"{verb}: {foreign.reason}"
        if foreign.same:
            note += f" (accepted: {', '.join(foreign.same)})"
        group.add_argument(
            *flags,
            action=_Record,
            foreign=foreign,
            dest=NOTES_DEST + "_unused",
            default=argparse.SUPPRESS,
            help=note,
            metavar=None if not foreign.takes_value else "VALUE",
        )


class ForeignFlagError(ValueError):
    """A vLLM flag asked for a feature actorllm does not have."""


def notes(args: argparse.Namespace) -> list[str]:
    """Warnings for the ignored flags the user gave (one per flag). Raises
    :class:`ForeignFlagError` for the first refused one whose value asks for something."""
    warnings: dict[str, str] = {}
    for verdict, flag, value, foreign in getattr(args, NOTES_DEST, []):
        shown = f"{flag} {value}" if value is not None else flag
        if verdict == "refuse":
            if value is not None and value in foreign.same:
                continue
            raise ForeignFlagError(f"{shown}: {foreign.reason}.")
        warnings[flag] = f"{flag} has no effect in actorllm: {foreign.reason}; ignoring it."
    return list(warnings.values())
