"""``LLMEngine``: vLLM's synchronous step API, for callers that write their own loop.

    from actorllm import LLMEngine, SamplingParams

    engine = LLMEngine("/path/to/model", max_num_seqs=8)   # or LLMEngine() for the demo model
    engine.add_request("a", "Hello", SamplingParams(max_tokens=16))
    engine.add_request("b", {"prompt_token_ids": [1, 2, 3]}, SamplingParams(max_tokens=8))
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                print(out.request_id, out.outputs[0].text)

The actor engine runs underneath, on its own thread (:mod:`actorllm.compat.vllm.bridge`),
and keeps stepping while the caller does something else. ``add_request`` tokenizes and
validates on the caller's thread, as vLLM does, so a bad request raises there; the request
then runs as it would under ``LLM.generate`` (same scheduler, same sampling), so the tokens
are the same. ``step()`` returns, per request, what it produced since the previous call
(merged; see :mod:`actorllm.engine.api.step_outputs`), blocking until something is there.
Aborted requests produce no further output.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from actorllm.compat.vllm.bridge import Deliver
from actorllm.compat.vllm.engine_args import EngineArgs
from actorllm.compat.vllm.not_built import LLM_ENGINE_NOT_BUILT, check_options, not_built
from actorllm.compat.vllm.offline_checks import engine_inputs
from actorllm.compat.vllm.offline_prompts import Prompt, check_prompt
from actorllm.compat.vllm.sync_facade import SyncFacade
from actorllm.core.errors import InvalidRequestError
from actorllm.core.input_processor import cache_salt_of
from actorllm.core.lora import LoRARequest
from actorllm.core.outputs import RequestOutput
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.api.request_fields import check_arrival_time, check_priority
from actorllm.engine.api.step_outputs import PendingOutputs
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.config.model_config import ModelConfig


def _step_sink(outputs: PendingOutputs, request_id: str, token: int) -> Deliver:
    """The pump's callback for one request: its outputs into the step mailbox. (Holds the
    mailbox, not the LLMEngine: a running request must not keep it alive.)"""

    def deliver(item: object) -> None:
        if isinstance(item, RequestOutput):
            outputs.put(request_id, token, item)
        elif isinstance(item, BaseException):
            outputs.fail(request_id, token, item)

    return deliver


class LLMEngine(SyncFacade):
    """A synchronous engine driven by ``add_request`` / ``step``. Not thread-safe: use one
    from one thread at a time, as vLLM's."""

    def __init__(
        self,
        model: str | Path | EngineConfig | None = None,
        *,
        backend: str = "trio",
        **config: Any,
    ) -> None:
        super().__init__(model, backend=backend, **config)
        self._open_requests()

    def _open_requests(self) -> None:
        """The request side: the input processor and the outputs ``step`` hands back."""
        # The engine's own checks, here on the caller's thread so that add_request raises
        # as vLLM's does.
        self._inputs = engine_inputs(self.engine)
        self._outputs = PendingOutputs()
        self._pumps: dict[str, Future[Any]] = {}  # {request_id: its task on the loop}

    @classmethod
    def over(cls, facade: SyncFacade) -> LLMEngine:
        """An ``LLMEngine`` on ``facade``'s engine (vLLM's ``LLM.llm_engine``): no second
        engine starts; closing either closes the one engine."""
        engine = cls._sharing(facade)
        engine._open_requests()
        return engine

    @classmethod
    def from_engine_args(
        cls,
        engine_args: EngineArgs | EngineConfig,
        usage_context: Any = None,
        stat_loggers: list[Any] | None = None,
        enable_multiprocessing: bool = False,
        **kwargs: Any,
    ) -> LLMEngine:
        """vLLM's constructor by configuration object: ``engine_args`` is an ``EngineArgs``
        (vLLM's keyword names; unless ``disable_log_stats``, the engine logs a stats line
        every 10 s, as vLLM's) or an ``EngineConfig``; ``kwargs`` go to ``__init__``.
        ``stat_loggers`` and ``enable_multiprocessing=True`` are refused (the engine runs
        on a thread of this process)."""
        if stat_loggers:
            raise NotImplementedError("stat_loggers: custom stat loggers are not supported.")
        if enable_multiprocessing:
            raise NotImplementedError(
                "enable_multiprocessing: the engine runs on a thread of this process."
            )
        if isinstance(engine_args, EngineArgs):
            kwargs.setdefault("disable_log_stats", engine_args.disable_log_stats)
            kwargs.setdefault("hf_token", engine_args.hf_token)
            return cls(engine_args.create_engine_config(), **kwargs)
        if not isinstance(engine_args, EngineConfig):
            raise TypeError(
                "engine_args must be EngineArgs or an EngineConfig, "
                f"got {type(engine_args).__name__}."
            )
        return cls(engine_args, **kwargs)

    # -- requests -------------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt: Prompt,
        params: SamplingParams,
        arrival_time: float | None = None,
        lora_request: LoRARequest | None = None,
        tokenization_kwargs: Mapping[str, Any] | None = None,
        trace_headers: Mapping[str, str] | None = None,
        priority: int = 0,
    ) -> None:
        """Queue a request. ``prompt`` is a str, ``{"prompt": str}`` or
        ``{"prompt_token_ids": [...]}``; ``arrival_time`` (``time.time()`` seconds,
        default now) orders it among the waiting requests and starts its queue-time
        metrics; ``priority`` counts under ``scheduling_policy="priority"`` (lower runs
        first) and must be 0 otherwise.

        Raises ``InvalidRequestError`` (a ``ValueError``; ``DuplicateRequestError`` for an
        id already in use, ``RequestTooLongError``, ...) without queueing anything;
        ``NotImplementedError`` for ``tokenization_kwargs`` or ``trace_headers`` other than
        None (vLLM's options not built here). ``lora_request``: the request's LoRA adapter
        (``enable_lora``), loaded first if new: a bad one raises ``InvalidRequestError``.
        """
        check_options(
            "LLMEngine.add_request",
            tokenization_kwargs=tokenization_kwargs or None,
            trace_headers=trace_headers or None,
        )
        if not isinstance(request_id, str) or not request_id:
            raise InvalidRequestError("request_id must be a non-empty string.", param="request_id")
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be SamplingParams, got {type(params).__name__}.")
        arrival = check_arrival_time(arrival_time)
        arrival = time.time() if arrival is None else arrival  # now, not when the loop runs it
        check_priority(priority, self.engine.config)
        if lora_request is not None:  # a bad adapter is refused here, before anything queues
            lora_request = self.engine.check_lora_request(lora_request)
            if lora_request.lora_name not in {r.lora_name for r in self.engine.list_loras()}:
                self.add_lora(lora_request)
        prompt = check_prompt(prompt)
        text, ids = self._inputs.tokenize(prompt)
        kept = params.truncate_prompt(ids, self.engine.max_model_len)  # as the engine cuts it
        if len(kept) != len(ids):
            text, ids = None, kept  # the text no longer matches the ids
        self._inputs.validate(ids, params)
        params = self.with_offline_seed(params)
        token = self._outputs.add(request_id, params.output_kind, text, ids, params.n)
        tokens: dict[str, Any] = {"prompt_token_ids": ids}
        if text is not None:
            tokens["prompt"] = text
        salt = cache_salt_of(prompt)
        if salt is not None:  # the prompt's prefix-cache namespace goes with it
            tokens["cache_salt"] = salt
        self._pumps[request_id], _ = self._bridge.submit(
            request_id,
            tokens,
            params,
            _step_sink(self._outputs, request_id, token),
            priority=priority,
            arrival_time=arrival,
            lora_request=lora_request,
        )

    def __getattr__(self, name: str) -> Any:
        # vLLM's methods for features not built here refuse by name (not_built.py).
        return not_built(self, name, LLM_ENGINE_NOT_BUILT)

    def step(self) -> list[RequestOutput]:
        """The outputs of every request that produced something since the last call, one
        per request. Blocks until there is at least one; returns ``[]`` at once when no
        request is unfinished. Raises ``EngineDeadError`` if the engine died."""
        self._thread.release_caller_team()
        outs = self._outputs.take()
        for out in outs:
            if out.finished:
                self._pumps.pop(out.request_id, None)
        return outs

    def abort_request(self, request_ids: str | Iterable[str], internal: bool = False) -> None:
        """Stop these requests and free their KV blocks; they produce no further output.
        Ids that are unknown or already finished are ignored. ``internal`` (vLLM's: the ids
        are the engine's own rather than the caller's) changes nothing here: this engine
        runs each request under the id it was added with."""
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        for rid in self._outputs.abort(ids):
            self._bridge.retire(rid)
            pump = self._pumps.pop(rid, None)
            if pump is not None:
                pump.cancel()  # the request's stream closes: the engine aborts it

    def has_unfinished_requests(self) -> bool:
        return self._outputs.num_unfinished() > 0

    def get_num_unfinished_requests(self) -> int:
        return self._outputs.num_unfinished()

    # -- the model ------------------------------------------------------------------------

    @property
    def model_config(self) -> ModelConfig:
        """vLLM's ``LLMEngine.model_config`` (as :meth:`get_model_config`)."""
        return self.get_model_config()

    def get_model_config(self) -> ModelConfig:
        return self.engine.model_config
