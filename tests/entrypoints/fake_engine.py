"""A fake engine with the ``AsyncEngine`` surface the server uses, for tests without a model.

It "generates" a fixed script of words, one token per word, honoring what the server
translates: ``n``, ``max_tokens`` (None: up to max_model_len), stop strings, logprobs,
DELTA / FINAL_ONLY. It records request ids that were closed before finishing (``aborted``),
so tests can prove a disconnect aborts the request; ``open`` holds running requests, like
the KV blocks they would hold.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
from transformers import AutoTokenizer

from actorllm.core.beam_search import BeamSearchParams
from actorllm.core.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from actorllm.core.request_stats import FinishedRequest, RequestStats, RequestStatsSnapshot
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from actorllm.demo import demo_tokenizer_path
from actorllm.engine.api.beam_search import beam_search
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.errors import EngineDeadError, InvalidRequestError

SCRIPT = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "and",
    "then",
    "it",
    "sleeps",
]


class FakeStats(msgspec.Struct, kw_only=True):
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_preemptions: int = 0
    actor_restarts: dict[str, int] = msgspec.field(default_factory=dict)
    mailbox_depth: dict[str, int] = msgspec.field(default_factory=dict)
    # Like EngineStats: the recent steps' token counts, and the cumulative step count that
    # tells a reader how many of them are new.
    iteration_tokens: list[int] = msgspec.field(default_factory=list)
    iterations_done: int = 0
    num_gpu_blocks: int = 0
    requests: RequestStatsSnapshot | None = None


_TOKENIZER: Any = None


def demo_tokenizer() -> Any:
    global _TOKENIZER
    if _TOKENIZER is None:
        _TOKENIZER = AutoTokenizer.from_pretrained(demo_tokenizer_path())
    return _TOKENIZER


class FakeEngine:
    def __init__(
        self,
        *,
        token_delay_s: float = 0.0,
        max_model_len: int = 64,
        scheduling_policy: str = "fcfs",
        max_logprobs: int = 20,
        script: str | None = None,
        reasoning_parser: str | None = None,
        tokenizer: Any = None,
        model: str | None = None,
    ) -> None:
        """``script``: every sample's text, one token per step, finishing with "stop" at
        its end (instead of the words below, cycled); ``reasoning_parser``: the engine
        config's (the server reads it); ``tokenizer``: instead of the demo one; ``model``:
        the engine config's model directory (the server reads its config.json)."""
        self.model_name = "fake-model"
        self.model_names = [self.model_name]
        self.max_model_len = max_model_len
        self.tokenizer = tokenizer if tokenizer is not None else demo_tokenizer()
        self.vocab_size = len(self.tokenizer)
        self.prompt_embeds_spec = None  # enable_prompt_embeds off
        self.stats = RequestStats(max_model_len)  # what the engine's output path records
        self.config = EngineConfig(
            scheduling_policy=scheduling_policy,  # type: ignore[arg-type]
            max_logprobs=max_logprobs,
            reasoning_parser=reasoning_parser,
            model=model,
        )
        # What the last generate() was asked: (prompt, params, priority).
        self.last_request: tuple[str | dict[str, Any], SamplingParams, int] | None = None
        self.last_reasoning_ended: bool | None = None  # the last generate's
        self.token_delay_s = token_delay_s
        self.is_dead = False
        self.pooling_model = None  # a generative model: the pooling routes answer 400
        self.open: set[str] = set()
        self.aborted: list[str] = []
        self.finished: list[str] = []
        self.sleeping = False
        self.paused = False
        self.kv_connector = True
        self.prefix_queries = 0
        self._words = [(" " + w, self.tokenizer.encode(" " + w)[0]) for w in SCRIPT]
        self._scripted = script is not None
        if script is not None:
            ids = self.tokenizer.encode(script, add_special_tokens=False)
            self._words = [
                (self.tokenizer.decode(ids[: i + 1])[len(self.tokenizer.decode(ids[:i])) :], t)
                for i, t in enumerate(ids)
            ]

    # -- LoRA: none served -------------------------------------------------------------

    def list_loras(self) -> list[Any]:
        return []

    async def add_lora(self, request: Any) -> bool:
        raise InvalidRequestError("LoRA is not enabled (fake engine)", param="lora_request")

    async def remove_lora(self, name: str) -> bool:
        return False

    # -- generation ---------------------------------------------------------------------

    def beam_search(
        self,
        prompt: str | dict[str, Any],
        params: BeamSearchParams,
        request_id: str | None = None,
        *,
        lora_request: Any = None,
        priority: int = 0,
        logprobs: int | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """The engine's own beam search, over this engine's generate."""
        return beam_search(
            self.generate, self.tokenizer, prompt, params, request_id or "beam",
            lora_request=lora_request, priority=priority, logprobs=logprobs,
        )  # fmt: skip

    async def generate(
        self,
        prompt: str | dict[str, Any],
        sampling_params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        *,
        lora_request: Any = None,
        reasoning_ended: bool | None = None,
    ) -> AsyncIterator[RequestOutput]:
        if lora_request is not None:
            raise InvalidRequestError("LoRA is not enabled (fake engine)", param="lora_request")
        if self.is_dead:
            raise EngineDeadError("the fake engine is dead")
        rid = request_id or f"fake-{time.monotonic_ns()}"
        self.last_request = (prompt, sampling_params, priority)
        self.last_reasoning_ended = reasoning_ended
        text: str | None
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidRequestError("The prompt is empty.", param="prompt")
            ids, text = list(self.tokenizer.encode(prompt)), prompt
        else:
            ids, text = list(prompt["prompt_token_ids"]), prompt.get("prompt")
        if len(ids) >= self.max_model_len:
            raise InvalidRequestError(
                f"The prompt ({len(ids)} tokens) does not fit max_model_len={self.max_model_len}.",
                param="prompt",
            )
        sampling_params.verify_vocab(len(self.tokenizer))
        budget = self.max_model_len - len(ids)
        max_tokens = min(sampling_params.max_tokens or budget, budget)
        self.open.add(rid)
        self.prefix_queries += len(ids)
        done = False
        try:
            async for out in self._run(rid, text, ids, sampling_params, max_tokens):
                done = out.finished
                yield out
        finally:
            self.open.discard(rid)
            (self.finished if done else self.aborted).append(rid)

    async def _run(
        self, rid: str, text: str | None, ids: list[int], sp: SamplingParams, max_tokens: int
    ) -> AsyncIterator[RequestOutput]:
        arrival = time.monotonic()
        states = [_Sample(j) for j in range(sp.n)]
        delta = sp.output_kind == RequestOutputKind.DELTA
        step, last = 0, arrival
        while not all(s.finish for s in states):
            await anyio.sleep(self.token_delay_s)
            outs = []
            for s in states:
                if s.finish:
                    continue
                piece, tid = self._words[(step + s.index) % len(self._words)]
                s.add(piece, tid, self._logprobs(tid, sp.num_logprobs, sp.logprob_token_ids))
                stop = next((x for x in sp.stop_strings if x in s.text), None)
                if stop is not None:
                    s.finish, s.stop_reason = "stop", stop
                    cut = s.text.index(stop) + (len(stop) if sp.include_stop_str_in_output else 0)
                    piece = piece[: max(0, len(piece) - (len(s.text) - cut))]
                    s.text = s.text[:cut]
                elif self._scripted and len(s.tokens) >= len(self._words):
                    s.finish = "stop"
                elif len(s.tokens) >= max_tokens:
                    s.finish = "length"
                s.pending_text += piece
                outs.append(s)
            step += 1
            finished = all(s.finish for s in states)
            now = time.monotonic()
            if step == 1:
                self.stats.prompt(len(ids))
            for _ in outs:
                self.stats.tokens(1, None if step == 1 else now - last)
            last = now
            if finished:
                self._record(sp, ids, states, arrival, now, max_tokens)
            metrics = RequestMetrics(
                arrival_time=arrival,
                first_scheduled_time=arrival,
                first_token_time=arrival + 1e-3,
                last_token_time=now,
                finished_time=now if finished else None,
            )
            if delta:
                yield self._output(
                    rid, text, ids, sp, [s.take_delta() for s in outs], finished, metrics
                )
            elif finished:
                yield self._output(rid, text, ids, sp, [s.full() for s in states], True, metrics)

    def _record(
        self,
        sp: SamplingParams,
        ids: list[int],
        states: list[_Sample],
        arrival: float,
        now: float,
        max_tokens: int,
    ) -> None:
        lens = [len(s.tokens) for s in states]
        self.stats.finished(
            FinishedRequest(
                finish_reason=states[0].finish or "abort",
                arrival_time=arrival,
                scheduled_time=arrival,
                first_token_time=arrival + 1e-3,
                last_token_time=now,
                finished_time=now,
                prompt_tokens=len(ids),
                generation_tokens=sum(lens),
                max_generation_tokens=max(lens),
                n=sp.n,
                max_tokens=sp.max_tokens,
            )
        )

    def _logprobs(
        self, tid: int, k: int | None, ids: list[int] | None = None
    ) -> dict[int, Logprob] | None:
        if k is None:
            return None
        entries = {tid: Logprob(logprob=-0.5, rank=1, decoded_token=self.tokenizer.decode([tid]))}
        for r in range(k):
            other = ids[r] if ids else (tid + 1 + r) % len(self.tokenizer)
            entries.setdefault(
                other,
                Logprob(logprob=-1.0 - r, rank=2 + r, decoded_token=self.tokenizer.decode([other])),
            )
        return entries

    def _output(
        self,
        rid: str,
        text: str | None,
        ids: list[int],
        sp: SamplingParams,
        outputs: list[CompletionOutput],
        finished: bool,
        metrics: RequestMetrics,
    ) -> RequestOutput:
        prompt_lps = None
        if sp.prompt_logprobs is not None:
            prompt_lps = [None] + [{t: Logprob(logprob=-2.0, rank=1)} for t in ids[1:]]
        return RequestOutput(
            request_id=rid,
            prompt=text,
            prompt_token_ids=ids,
            prompt_logprobs=prompt_lps,
            outputs=outputs,
            finished=finished,
            num_cached_tokens=2,
            num_cache_creation_tokens=3,
            metrics=metrics,
        )

    # -- control plane ------------------------------------------------------------------

    async def abort(self, request_id: str) -> None:
        self.open.discard(request_id)

    async def drain(self, timeout_s: float | None = None) -> int:
        """Like AsyncEngine.drain, minus the aborts: wait for the open requests to finish."""
        with anyio.move_on_after(5.0 if timeout_s is None else timeout_s):
            while self.open:
                await anyio.sleep(0.01)
        return len(self.open)

    def check_admission(self, n: int = 1, request_id: str | None = None) -> None:
        return None  # no queue limits

    async def release_kv_cache_memory(self) -> None:
        return None

    async def sleep(self, level: int = 1, mode: str = "keep") -> None:
        self.sleeping = True

    async def wake_up(self, tags: list[str] | None = None) -> bool:
        self.sleeping = False
        return True

    async def pause_generation(self, *, mode: str = "abort", clear_cache: bool = True) -> None:
        self.paused = True

    async def resume_generation(self) -> None:
        self.paused = False

    async def is_paused(self) -> bool:
        return self.paused

    async def is_sleeping(self) -> bool:
        return self.sleeping

    async def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        return True

    async def set_kv_connector_enabled(self, enabled: bool) -> None:
        self.kv_connector = enabled

    async def is_kv_connector_enabled(self) -> bool:
        return self.kv_connector

    async def get_stats(self) -> FakeStats:
        return FakeStats(
            num_running_reqs=len(self.open),
            kv_cache_usage=0.1 * len(self.open),
            prefix_cache_queries=self.prefix_queries,
            prefix_cache_hits=self.prefix_queries // 2,
            actor_restarts={"scheduler": 1},
            mailbox_depth={"router": 0},
            iteration_tokens=[4, 8],
            iterations_done=2,
            num_gpu_blocks=100,
            requests=self.stats.snapshot(),
        )


class _Sample:
    def __init__(self, index: int) -> None:
        self.index = index
        self.text = ""
        self.tokens: list[int] = []
        self.logprobs: list[dict[int, Logprob]] = []
        self.finish: str | None = None
        self.stop_reason: str | None = None
        self.pending_text = ""
        self.sent_tokens = 0

    def add(self, piece: str, tid: int, lp: dict[int, Logprob] | None) -> None:
        self.text += piece
        self.tokens.append(tid)
        if lp is not None:
            self.logprobs.append(lp)

    def take_delta(self) -> CompletionOutput:
        new = self.tokens[self.sent_tokens :]
        lps = self.logprobs[self.sent_tokens :] if self.logprobs else None
        self.sent_tokens = len(self.tokens)
        text, self.pending_text = self.pending_text, ""
        return CompletionOutput(
            index=self.index,
            text=text,
            token_ids=new,
            logprobs=lps,
            finish_reason=self.finish,
            stop_reason=self.stop_reason,
        )

    def full(self) -> CompletionOutput:
        return CompletionOutput(
            index=self.index,
            text=self.text,
            token_ids=list(self.tokens),
            logprobs=self.logprobs or None,
            finish_reason=self.finish,
            stop_reason=self.stop_reason,
        )


@asynccontextmanager
async def open_fake_engine(engine: FakeEngine | None = None) -> AsyncIterator[FakeEngine]:
    yield engine or FakeEngine()
