"""vLLM's config objects that scripts build and pass to ``LLM(...)`` / ``EngineArgs(...)``
(``vllm.config``): ``CompilationConfig``, ``SpeculativeConfig``, ``KVTransferConfig``,
``KVEventsConfig``, ``StructuredOutputsConfig``, ``ReasoningConfig``, ``PoolerConfig``.

Each object *is* the dict vLLM accepts in its place (a ``dict`` subclass), so
``LLM(speculative_config=SpeculativeConfig(method="ngram", num_speculative_tokens=4))``
means exactly what ``speculative_config={"method": "ngram", "num_speculative_tokens": 4}``
means: the same translation (:mod:`actorllm.compat.vllm.args`), the same unsupported keys
refused by name, the same warning for ``compilation_config`` (there is no torch.compile).
Only the keys given are held: a key left out keeps actorllm's default, as with the dict.
Fields read and write as attributes, as on vLLM's dataclasses::

    >>> spec = SpeculativeConfig(method="ngram", num_speculative_tokens=4)
    >>> spec.num_speculative_tokens, spec == {"method": "ngram", "num_speculative_tokens": 4}
    (4, True)
    >>> spec
    SpeculativeConfig(method='ngram', num_speculative_tokens=4)
"""

from __future__ import annotations

import enum
from typing import Any


class _ConfigDict(dict[str, Any]):
    """A vLLM config object as the dict of its given fields. A field not given reads as an
    ``AttributeError`` naming it (its default is actorllm's, not vLLM's)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__}.{name} was not given (unset fields keep "
                "actorllm's defaults, which are not vLLM's)"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value  # ``config.mode = 3`` sets the field, as on vLLM's dataclass

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.items())
        return f"{type(self).__name__}({fields})"


class CompilationConfig(_ConfigDict):
    """vLLM's torch.compile and CUDA-graph settings. actorllm has no torch.compile:
    ``LLM`` / ``EngineArgs`` accept it with a warning naming it, as the dict
    (``enforce_eager`` is the switch for CUDA graphs)."""


class SpeculativeConfig(_ConfigDict):
    """``speculative_config``: ``method`` (ngram, a draft model, EAGLE...),
    ``num_speculative_tokens``, ``model``...; keys actorllm has not built are refused by
    ``EngineConfig`` naming them (``engine/config/speculative.py``)."""


class KVTransferConfig(_ConfigDict):
    """``kv_transfer_config``: only the host/disk offload tier
    (``kv_connector="OffloadingConnector"``, ``kv_role="kv_both"``); other connectors and
    roles are refused by name."""


class KVEventsConfig(_ConfigDict):
    """``kv_events_config``: KV cache events are not published here; an empty one (vLLM's
    default, events off) is accepted, any field refused by name."""


class StructuredOutputsConfig(_ConfigDict):
    """``structured_outputs_config``: ``backend``, ``disable_fallback``,
    ``disable_any_whitespace``... (``engine/config/structured_outputs_config.py``)."""


class ReasoningConfig(_ConfigDict):
    """``reasoning_config``: ``reasoning_start_str``, ``reasoning_end_str`` (the markers a
    request's thinking_token_budget counts and forces; engine/config/reasoning_config.py)."""


class PoolerConfig(_ConfigDict):
    """``pooler_config`` of a pooling model (``pooling_type``, ``normalize``...), read
    where the dict is (``engine/config/pooling_model.py``)."""


class ProfilerConfig(_ConfigDict):
    """``profiler_config``: ``{"profiler": "torch", "torch_profiler_dir": DIR}`` is
    ``profiler_dir``; other profilers and trace options are refused by name
    (``compat/vllm/profiler_config.py``)."""


class CompilationMode(enum.IntEnum):
    """vLLM's ``CompilationConfig.mode`` values (``LLM(compilation_config=3)`` is
    ``VLLM_COMPILE``); any of them is accepted with the same warning as the config."""

    NONE = 0
    STOCK_TORCH_COMPILE = 1
    DYNAMO_TRACE_ONCE = 2
    VLLM_COMPILE = 3


class CUDAGraphMode(enum.Enum):
    """vLLM's ``CompilationConfig.cudagraph_mode`` values; accepted with the same warning
    as the config."""

    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = (2, 0)
    FULL_AND_PIECEWISE = (2, 1)
