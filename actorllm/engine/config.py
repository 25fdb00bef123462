"""``EngineConfig``: every knob of the engine, with vLLM's names, validated in one place.

Configuration flows in through this object only (no globals). Fields a user can get wrong
raise :class:`EngineConfigError` (a ``ValueError``) naming the field.

    >>> EngineConfig(model="/models/tiny", max_num_seqs=8).max_num_seqs
    8
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import msgspec

Device = Literal["auto", "cpu", "cuda"]
AttentionBackend = Literal["auto", "torch", "triton"]
SchedulingPolicy = Literal["fcfs", "priority"]
LoadFormat = Literal["auto", "safetensors", "dummy"]
DType = Literal["auto", "float32", "bfloat16", "float16", "half", "float"]
StructuredOutputsBackend = Literal["auto", "xgrammar", "guidance"]


class EngineConfigError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.param = field


class EngineConfig(msgspec.Struct, kw_only=True):
    # -- model ----------------------------------------------------------------------------
    model: str | None = None  # a directory with config.json + safetensors; None = demo model
    tokenizer: str | None = None  # defaults to `model`
    served_model_name: str | None = None  # defaults to `model` (the demo: "actorllm-demo")
    dtype: DType = "auto"
    seed: int = 0
    load_format: LoadFormat = "auto"
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    # -- KV cache -------------------------------------------------------------------------
    block_size: int = 16
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = 0.9
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None  # CPU: bytes for the KV cache (default 256 MiB)
    # -- scheduler ------------------------------------------------------------------------
    enable_chunked_prefill: bool = True
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None  # None: 2048 (chunked) or max_model_len
    long_prefill_token_threshold: int = 0
    scheduling_policy: SchedulingPolicy = "fcfs"
    async_scheduling: bool = False
    # -- execution ------------------------------------------------------------------------
    device: Device = "auto"
    attention_backend: AttentionBackend = "auto"
    enforce_eager: bool = False
    # -- actors ---------------------------------------------------------------------------
    max_restarts: int = 3  # restart intensity: more than this many crashes ...
    restart_window_s: float = 30.0  # ... within this window kills the engine
    mailbox_size: int = 1024
    # After start-up, collect once and move every object alive (weights' Python objects,
    # tokenizer, modules) to a permanent GC generation that is never scanned again, as vLLM
    # does: the per-step cost of the cyclic GC no longer grows with that heap. Process-wide
    # (gc.freeze); turn it off if the embedding application relies on GC of older cycles.
    freeze_gc_at_start: bool = True
    # Delay before restarting a crashed actor (exponential from this, with jitter); 0 = at once.
    restart_backoff_s: float = 0.0
    # -- faults and overload (docs/testing.md, "Chaos") -----------------------------------
    actor_message_deadline_s: float | None = None
    """Watchdog: an engine actor that holds one message longer than this many seconds (a
    handler that never returns) is restarted as if it had crashed, and the message is
    retried or failed like any crash's. Includes waiting on full mailboxes, so keep it well
    above the slowest step. None: no watchdog."""
    step_timeout_s: float | None = None
    """A model step still running after this many seconds is treated as an executor crash:
    the core restarts and its requests are recomputed. None: no timeout."""
    max_waiting_requests: int | None = None
    """Refuse new requests (``EngineOverloadedError``, HTTP 503 with ``Retry-After``) while
    this many are already waiting: accepted but not running (queued, being tokenized, or
    preempted). None: no bound."""
    max_stream_backlog: int | None = 4096
    """Outputs a caller may leave unread on a request's stream. Beyond this the caller is a
    slow consumer: the request is aborted (its KV blocks freed) and its stream ends with
    ``SlowConsumerError``. None: unbounded."""
    shutdown_timeout: float = 30.0
    """``AsyncEngine.drain()`` (and the server on SIGTERM): seconds open requests may run
    to completion after new ones are refused, before the rest are aborted."""
    # -- KV connector (host/disk offload tier) --------------------------------------------
    kv_connector: Literal["offload"] | None = None
    kv_connector_enabled: bool = True  # start switched on (when a connector is configured)
    kv_offload_host_bytes: int = 256 * 2**20
    kv_offload_disk_dir: str | None = None
    kv_offload_disk_bytes: int = 8 * 2**30
    kv_offload_write_through: bool = False  # also save finished requests' blocks
    # -- structured outputs, tool calling, reasoning --------------------------------------
    # Grammar backend for structured outputs (JSON schema, regex, choice, grammar):
    # "xgrammar", "guidance" (llguidance), or "auto": xgrammar, falling back to guidance for
    # schema features xgrammar does not enforce. A request's own backend wins.
    structured_outputs_backend: StructuredOutputsBackend = "auto"
    # Split a reasoning model's thinking into reasoning_content: deepseek_r1, qwen3 or
    # granite. Structured outputs then constrain the answer only (after the reasoning).
    reasoning_parser: str | None = None
    # Let the model decide to call tools (tool_choice "auto", the default when tools are
    # given); needs tool_call_parser.
    enable_auto_tool_choice: bool = False
    # How to read tool calls out of the model's text: hermes, llama3_json, mistral,
    # qwen3_coder (qwen3_xml), pythonic, or a name a tool_parser_plugin registers.
    tool_call_parser: str | None = None
    # A Python file that registers extra tool call parsers (register_tool_parser).
    tool_parser_plugin: str | None = None
    # -- profiling ------------------------------------------------------------------------
    # Directory for torch-profiler traces written by start_profile()/stop_profile() (Chrome
    # trace JSON, CPU activities, CUDA too on a GPU; the worker thread and the event loop).
    # None: profiling is disabled and start_profile() raises ProfilerError naming this field.
    profiler_dir: str | None = None

    def __post_init__(self) -> None:
        if self.block_size not in (1, 2, 4, 8, 16, 32, 64, 128):
            raise EngineConfigError(
                "block_size", f"must be a power of two up to 128, got {self.block_size}."
            )
        if self.max_num_seqs < 1:
            raise EngineConfigError("max_num_seqs", f"must be at least 1, got {self.max_num_seqs}.")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise EngineConfigError("max_num_batched_tokens", "must be at least 1.")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise EngineConfigError("max_model_len", "must be at least 2.")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise EngineConfigError("gpu_memory_utilization", "must be in (0, 1].")
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 2:
            raise EngineConfigError(
                "num_gpu_blocks_override", "must be at least 2 (block 0 is the null block)."
            )
        if self.long_prefill_token_threshold < 0:
            raise EngineConfigError("long_prefill_token_threshold", "must be non-negative.")
        if self.max_restarts < 0 or self.restart_window_s <= 0:
            raise EngineConfigError("max_restarts", "must be non-negative, with a positive window.")
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise EngineConfigError(
                "enable_auto_tool_choice", "needs tool_call_parser (which format to parse)."
            )
        if self.reasoning_parser is not None:
            from actorllm.reasoning import REASONING_PARSERS

            if self.reasoning_parser not in REASONING_PARSERS:
                raise EngineConfigError(
                    "reasoning_parser",
                    f"must be one of {', '.join(sorted(REASONING_PARSERS))}, "
                    f"got {self.reasoning_parser!r}.",
                )
        for name in ("actor_message_deadline_s", "step_timeout_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise EngineConfigError(name, f"must be positive or None, got {value}.")
        for name in ("max_waiting_requests", "max_stream_backlog"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise EngineConfigError(name, f"must be at least 1 or None, got {value}.")
        if self.shutdown_timeout < 0:
            raise EngineConfigError("shutdown_timeout", "must be non-negative.")

    # -- resolved views -------------------------------------------------------------------

    def resolved_model(self) -> Path:
        """The model directory (building the demo model when ``model`` is None)."""
        if self.model is None:
            from actorllm.demo import demo_model_path

            return demo_model_path()
        path = Path(self.model).expanduser()
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"model {self.model!r} is not a directory with a config.json "
                "(actorllm loads local checkpoints only; no model hub is contacted)."
            )
        return path

    def resolved_tokenizer(self) -> Path:
        return Path(self.tokenizer).expanduser() if self.tokenizer else self.resolved_model()

    def model_name(self) -> str:
        if self.served_model_name:
            return self.served_model_name
        return "actorllm-demo" if self.model is None else self.model

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_max_num_batched_tokens(self, max_model_len: int) -> int:
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return 2048 if self.enable_chunked_prefill else max(2048, max_model_len)

    def replace(self, **changes: Any) -> EngineConfig:
        return msgspec.structs.replace(self, **changes)


class ModelNotFoundError(FileNotFoundError):
    """The configured model directory does not exist or has no config.json."""


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "B": 1,
    "K": 10**3,
    "KB": 10**3,
    "KIB": 2**10,
    "M": 10**6,
    "MB": 10**6,
    "MIB": 2**20,
    "G": 10**9,
    "GB": 10**9,
    "GIB": 2**30,
    "T": 10**12,
    "TB": 10**12,
    "TIB": 2**40,
}


def parse_size(text: str | int) -> int:
    """``"512MiB"`` -> 536870912; plain integers are bytes."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(text)
    unit = (m.group(2) or "").upper() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (try 512MiB or 2GiB)")
    return int(float(m.group(1)) * _UNITS[unit])
