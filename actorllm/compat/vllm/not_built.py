"""vLLM's front-door methods and options that actorllm has not built, refused by name in
one way for ``LLM``, ``LLMEngine`` and ``AsyncLLM``: a script that calls one gets a
``NotImplementedError`` saying which and why, never an ``AttributeError`` or a bare
``TypeError`` that reads like its own bug.

    >>> check_options("LLM.generate", mm_processor_kwargs=None)  # None: nothing asked, fine
    >>> check_options("LLM.generate", mm_processor_kwargs={"a": 1})
    Traceback (most recent call last):
    ...
    NotImplementedError: LLM.generate(mm_processor_kwargs=...): there are no multimodal inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

_POOLING = "reward models are not supported (embed, classify and score are)"
_MM = "there are no multimodal inputs"

# vLLM AsyncLLM methods not built here: {name: why}.
ASYNC_LLM_NOT_BUILT: Mapping[str, str] = {
    "scale_elastic_ep": "elastic expert parallelism is not supported",
    "notify_kv_transfer_request_rejected": "disaggregated KV transfer is not supported",
    "get_external_elastic_ep_phase": "elastic expert parallelism is not supported",
    "handle_fault": "fault-tolerance instructions are not supported",
    "get_status": "fault-tolerance status is not supported (see check_health)",
    "checkpoint_prepare": "worker checkpoint/restore is not supported",
    "checkpoint_restore": "worker checkpoint/restore is not supported",
    "start_draft_weight_update": "weight updates of a speculative draft model are not built",
}

# vLLM LLM methods not built here (vllm/entrypoints/llm.py and its mixins:
# beam_search/offline.py, pooling/offline.py; ``reward`` is older vLLM's).
LLM_NOT_BUILT: Mapping[str, str] = {
    "reward": _POOLING,
    "start_draft_weight_update": "weight updates of a speculative draft model are not built",
}

# vLLM LLMEngine methods not built here (vllm/v1/engine/llm_engine.py).
LLM_ENGINE_NOT_BUILT: Mapping[str, str] = {}

# Why an option of a request method is refused when given (anything but None).
_OPTION_WHY: Mapping[str, str] = {
    "mm_processor_kwargs": _MM,
    "profile_prefix": "the trace files are named by the engine, under profiler_dir",
    "delay_iterations": "the profiler starts at once (0 steps of delay)",
    "max_iterations": "the profiler runs until stop_profile (0: no limit)",
}


def refuse(name: str, why: str) -> NoReturn:
    raise NotImplementedError(f"{name}: {why}.")


def refused_type(name: str, why: str) -> type:
    """A class named ``name`` whose construction refuses: one of vLLM's public types for
    a feature not built here, so its import works and its use says why
    (``ExplicitEncoderDecoderPrompt(...)``: no encoder-decoder models)."""

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        refuse(name, why)

    return type(name, (), {"__new__": __new__, "__doc__": f"Not built here: {why}."})


def check_options(method: str, **options: Any) -> None:
    """Options of a request method that are not built refuse any value but None (their
    "off" value, as in vLLM)."""
    for name, value in options.items():
        if value is not None:
            refuse(f"{method}({name}=...)", _OPTION_WHY.get(name, "not supported by actorllm"))


def not_built(
    owner: object, name: str, table: Mapping[str, str], *, is_async: bool = False
) -> Callable[..., Any]:
    """For ``__getattr__``: a method named in ``table`` that refuses when called (a
    coroutine function when ``is_async``); any other name is the usual AttributeError."""
    cls = type(owner).__name__
    if name not in table:
        raise AttributeError(f"{cls!r} object has no attribute {name!r}")
    why, qualified = table[name], f"{cls}.{name}"

    def sync_refusal(*args: Any, **kwargs: Any) -> Any:
        refuse(qualified, why)

    async def async_refusal(*args: Any, **kwargs: Any) -> Any:
        refuse(qualified, why)

    return async_refusal if is_async else sync_refusal
