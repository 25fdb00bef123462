"""Structured outputs as the engine sees them: one grammar compiler per engine, shared by the
input processor (which checks a request's spec compiles before it is scheduled) and every
scheduler incarnation (whose tracker polls the same cache, so a restarted scheduler finds
its grammars compiled and only replays tokens).

The compiler is built on first use (loading a backend takes a moment; engines that never
see a constraint never pay it). Waiting for a compile never blocks the event loop: the
pool's thread posts the result back to the loop.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar, final

import anyio

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import BackendChoice, StructuredOutputsError
from actorllm.structured_output import GrammarCompiler, StructuredOutputManager
from actorllm.structured_output.reasoning_gate import (
    ReasoningGate,
    TextMarkers,
    TextRule,
    TokenMarkers,
)
from actorllm.worker.worker_thread import LoopPoster

T = TypeVar("T")


@final
class StructuredOutputs:
    """Engine-wide structured-outputs state (lives beside the actors, survives restarts)."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        stop_token_ids: list[int],
        backend: BackendChoice = "auto",
        disable_any_whitespace: bool = False,
        disable_additional_properties: bool = False,
        reasoning_markers: tuple[str, str] | None = None,
        reasoning_texts: tuple[tuple[str, ...], tuple[str, ...], TextRule] | None = None,
        reasoning_thinking: bool | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = stop_token_ids
        self.backend: BackendChoice = backend
        self.disable_any_whitespace = disable_any_whitespace
        self.disable_additional_properties = disable_additional_properties
        # From the reasoning parser: (start, end) special-token text, or (starts, ends,
        # rule) plain-text markers.
        self.reasoning_markers = reasoning_markers
        self.reasoning_texts = reasoning_texts
        # Whether a request that does not say starts inside the reasoning (the parser's
        # thinking_of no chat_template_kwargs).
        self.reasoning_thinking = reasoning_thinking
        self._compiler: GrammarCompiler | None = None
        self._reasoning: ReasoningGate | None = None
        # Every scheduler incarnation's tracker still alive, closed at shutdown.
        self._trackers: weakref.WeakSet[StructuredOutputManager] = weakref.WeakSet()

    @property
    def compiler(self) -> GrammarCompiler:
        if self._compiler is None:
            self._compiler = GrammarCompiler(
                self.tokenizer,
                vocab_size=self.vocab_size,
                stop_token_ids=self.stop_token_ids,
                backend=self.backend,
                disable_any_whitespace=self.disable_any_whitespace,
                disable_additional_properties=self.disable_additional_properties,
            )
            self._reasoning = _gate(
                self.tokenizer,
                self.reasoning_markers,
                self.reasoning_texts,
                self.reasoning_thinking,
            )
        return self._compiler

    async def check(self, params: SamplingParams) -> None:
        """Compile ``params``' constraint (a cache hit after the first time) without blocking
        the loop. Raises ``StructuredOutputsError`` (HTTP 400) for a spec that cannot compile."""
        so = params.structured_outputs
        if so is None:
            return
        await wait_future(self.compiler.submit_for(so))

    def when_done(self, fut: Future[Any], fn: Callable[[], None]) -> None:
        """Run ``fn`` on the event loop once ``fut`` is done (``fn`` must not block; if it
        raises — a full mailbox — it is tried again on the next loop turn)."""
        poster = LoopPoster()

        def attempt() -> None:
            try:
                fn()
            except Exception:
                poster.post(attempt)

        fut.add_done_callback(lambda _f: poster.post(attempt))

    @staticmethod
    def result(fut: Future[Any], param: str = "structured_outputs") -> Any:
        """A done compile's grammar; its ``StructuredOutputsError`` as is, any other failure
        (a backend bug) as a ``StructuredOutputsError`` naming ``param`` too: the
        request's, not the actor's."""
        try:
            return fut.result()
        except StructuredOutputsError:
            raise
        except Exception as exc:
            raise StructuredOutputsError(f"cannot be compiled: {exc!r}", param=param) from exc

    def tracker(self, wake: Callable[[], None]) -> StructuredOutputManager:
        """A new scheduler's tracker; ``wake`` runs on the event loop when a compile that
        was not cached finishes (so the scheduler can admit the request)."""
        compiler = self.compiler
        poster = LoopPoster()
        tracker = StructuredOutputManager(
            compiler, on_ready=lambda: poster.post(wake), reasoning=self._reasoning
        )
        self._trackers.add(tracker)
        return tracker

    def shutdown(self) -> None:
        for tracker in list(self._trackers):
            tracker.close()
        if self._compiler is not None:
            self._compiler.shutdown()


def _gate(tokenizer: Any, markers: Any, texts: Any, thinking: bool | None) -> ReasoningGate | None:
    if markers is not None:
        start, end = markers

        def ids(text: str) -> list[int]:
            return list(tokenizer.encode(text, add_special_tokens=False))

        return TokenMarkers(ids(start), ids(end), thinking)
    if texts is not None:
        starts, ends, rule = texts
        return TextMarkers(tokenizer, starts, ends, rule, thinking)
    return None


def _reasoning_markers(config: Any) -> tuple[Any, Any, bool | None]:
    """(special-token markers, plain-text markers, the thinking of a request that does not
    say) of the config's reasoning parser."""
    markers = texts = thinking = None
    # enable_in_reasoning: no markers, so the constraint covers the reasoning too.
    if config.reasoning_parser is not None and not config.structured_outputs_enable_in_reasoning:
        from actorllm.reasoning import get_reasoning_parser

        parser = get_reasoning_parser(config.reasoning_parser)
        thinking = parser.thinking_of({})
        if parser.start_marker is not None and parser.end_marker is not None:
            markers = (parser.start_marker, parser.end_marker)
        elif parser.end_texts:
            texts = (parser.start_texts, parser.end_texts, parser.text_rule)
    return markers, texts, thinking


def reasoning_gate_for(config: Any, tokenizer: Any) -> ReasoningGate | None:
    """The gate the engine holds structured outputs behind (None: no reasoning parser, or
    the constraint covers the reasoning): ``/render`` asks it whether a prompt already
    ended the reasoning."""
    return _gate(tokenizer, *_reasoning_markers(config))


def structured_outputs_for(config: Any, tokenizer: Any, model: Any) -> StructuredOutputs:
    """The engine's service from its config (backend, reasoning parser) and model info."""
    markers, texts, thinking = _reasoning_markers(config)
    return StructuredOutputs(
        tokenizer,
        vocab_size=model.vocab_size,
        stop_token_ids=list(model.eos_token_ids),
        backend=config.structured_outputs_backend,
        disable_any_whitespace=config.structured_outputs_disable_any_whitespace,
        disable_additional_properties=config.structured_outputs_disable_additional_properties,
        reasoning_markers=markers,
        reasoning_texts=texts,
        reasoning_thinking=thinking,
    )


async def wait_future(fut: Future[T]) -> T:
    """The result of a ``concurrent.futures.Future``, waited for without blocking the loop."""
    if not fut.done():
        event = anyio.Event()
        poster = LoopPoster()
        fut.add_done_callback(lambda _f: poster.post(event.set))
        await event.wait()
    return fut.result()
