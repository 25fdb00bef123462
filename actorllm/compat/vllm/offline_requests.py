"""One request of ``LLM``'s offline calls, and how it runs: what ``generate`` / ``chat``
(which wait) and ``enqueue`` / ``enqueue_chat`` (which do not) share.

A call turns each prompt into an :class:`OfflineRequest` up front (its ``SamplingParams``
by vLLM's rules: FINAL_ONLY outputs, the offline seed), named by the ``LLM``'s
request counter as vLLM names them: ``"0"``, ``"1"``, ... across all calls. The engine
runs each under an id of its own (so a counter id never clashes with an id a script gave
``llm.llm_engine.add_request``, as vLLM suffixes its internal ids); :func:`final_output`
hands back the final output under the counter id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from actorllm.compat.vllm.bridge import caller_view
from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.errors import RequestFailedError

if TYPE_CHECKING:
    from actorllm.engine.api.async_engine import AsyncEngine


@dataclass(frozen=True, slots=True)
class OfflineRequest:
    """One prompt (or conversation) of an offline call, ready for the engine."""

    request_id: str  # the LLM's counter, as vLLM's: "0", "1", ...
    prompt: Any  # a checked prompt, or a conversation when ``chat`` is set
    params: SamplingParams  # FINAL_ONLY, with the offline seed
    priority: int
    lora_request: LoRARequest | None
    chat: Mapping[str, Any] | None  # AsyncEngine.chat's keywords; None: a prompt


async def final_output(engine: AsyncEngine, request: OfflineRequest) -> RequestOutput:
    """On the engine's loop: run ``request`` and return its final output under its
    counter id. Raises what failed it; cancelled, the request is aborted. (A function,
    not a method: a running request must not keep its ``LLM`` alive.)"""
    if request.chat is None:
        stream = engine.generate(
            request.prompt, request.params, priority=request.priority,
            lora_request=request.lora_request,
        )  # fmt: skip
    else:
        stream = engine.chat(
            request.prompt, request.params, priority=request.priority,
            lora_request=request.lora_request, **request.chat,
        )  # fmt: skip
    last: RequestOutput | None = None
    async for out in stream:
        last = out
    if last is None:
        raise RequestFailedError(request.request_id, "it ended without an output")
    return caller_view(last, request.request_id)


def chat_options(
    *,
    add_generation_prompt: bool,
    continue_final_message: bool,
    chat_template: str | None,
    chat_template_kwargs: Mapping[str, Any] | None,
    tools: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """``LLM.chat``'s options as ``AsyncEngine.chat``'s keywords: the template and
    ``continue_final_message`` travel inside ``chat_template_kwargs``
    (``render_chat_options`` takes them out). Both flags set is vLLM's ``ValueError``."""
    if continue_final_message and add_generation_prompt:
        raise ValueError(
            "continue_final_message and add_generation_prompt cannot both be set "
            "(pass add_generation_prompt=False)."
        )
    template_kwargs = dict(chat_template_kwargs or {})
    if continue_final_message:
        template_kwargs["continue_final_message"] = True
    if chat_template is not None:
        template_kwargs["chat_template"] = chat_template
    options: dict[str, Any] = {
        "add_generation_prompt": add_generation_prompt,
        "chat_template_kwargs": template_kwargs,
    }
    if tools:
        options["tools"] = [dict(t) for t in tools]
    return options


class _ProgressBar(tqdm):
    monitor_interval = 0  # no "tqdm_monitor" thread outliving the batch


UseTqdm = bool | Callable[..., Any]  # vLLM's: on, off, or a tqdm-like factory


def progress_bar(use_tqdm: UseTqdm, total: int, desc: str) -> Any:
    """vLLM's ``use_tqdm``: True a bar, False none (a disabled bar), a callable (such as
    ``functools.partial(tqdm, leave=False)``) makes the bar."""
    if callable(use_tqdm):
        return use_tqdm(total=total, desc=desc, dynamic_ncols=True)
    return _ProgressBar(total=total, desc=desc, disable=not use_tqdm, dynamic_ncols=True)
