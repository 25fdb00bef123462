"""The grammar compile pool: worker threads, a cache keyed by the spec, backend fallback.

One :class:`GrammarCompiler` per engine, shared by every scheduler incarnation (it lives
beside the actors, so a restarted scheduler finds its grammars still cached). Compiles run
on the pool's threads, never on the event loop; :meth:`submit` returns a
``concurrent.futures.Future`` (already done on a cache hit). Failures are cached too: the
same bad spec fails the same way at once.

Backend choice: a request's own ``backend`` wins, else the engine's. ``auto`` compiles
with xgrammar and falls back to llguidance when xgrammar refuses a feature (or cannot
compile the spec at all); if both refuse, the xgrammar error is reported.

    compiler = GrammarCompiler(hf_tokenizer, vocab_size=32000, backend="auto")
    compiled = compiler.submit(params.key, None).result()   # blocks: not on the loop
    matcher = compiler.matcher(compiled)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, final

import msgspec

from actorllm.core.structured_outputs_params import (
    GrammarKey,
    StructuredOutputsError,
    StructuredOutputsParams,
)
from actorllm.structured_output.backend import (
    BACKEND_CHOICES,
    BackendChoice,
    BackendName,
    CompiledGrammar,
    GrammarBackend,
    Matcher,
)

CacheKey = tuple[GrammarKey, BackendChoice]


@final
class GrammarCompiler:
    """Thread-safe. ``max_workers`` compile threads; ``cache_size`` grammars kept (LRU)."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        stop_token_ids: list[int] | None = None,
        backend: BackendChoice = "auto",
        disable_any_whitespace: bool = False,
        disable_additional_properties: bool = False,
        max_workers: int = 2,
        cache_size: int = 512,
    ) -> None:
        if backend not in BACKEND_CHOICES:
            raise ValueError(f"structured outputs backend must be one of {BACKEND_CHOICES}")
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = list(stop_token_ids or [])
        self.default_backend: BackendChoice = backend
        # Engine-wide: JSON without optional whitespace for every request (vLLM's
        # structured_outputs_config.disable_any_whitespace).
        self.disable_any_whitespace = disable_any_whitespace
        # ... and objects without additionalProperties closed, for every JSON request.
        self.disable_additional_properties = disable_additional_properties
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="grammar-compile")
        self._lock = threading.Lock()
        # {(key, backend choice): future of the compiled grammar}, LRU order.
        self._cache: OrderedDict[CacheKey, Future[CompiledGrammar]] = OrderedDict()
        self._cache_size = cache_size
        self._backends: dict[BackendName, GrammarBackend] = {}  # built on first use
        self.hits = 0
        self.misses = 0

    def submit_for(self, so: StructuredOutputsParams) -> Future[CompiledGrammar]:
        """The compiled grammar of a request's constraint (its backend, its fallback)."""
        return self.submit(so.key, so.backend, fallback=not so.disable_fallback)

    def submit(
        self, key: GrammarKey, backend: BackendChoice | None, *, fallback: bool = True
    ) -> Future[CompiledGrammar]:
        """The compiled grammar for ``key``, compiling in the pool on a cache miss.
        ``fallback=False``: ``auto`` means xgrammar alone (vLLM's ``disable_fallback``)."""
        choice = backend or self.default_backend
        if choice == "auto" and not fallback:
            choice = "xgrammar"
        if self.disable_any_whitespace and key.any_whitespace:
            key = msgspec.structs.replace(key, any_whitespace=False)
        if (
            self.disable_additional_properties
            and key.kind in ("json", "json_object")
            and not key.disable_additional_properties
        ):
            key = msgspec.structs.replace(key, disable_additional_properties=True)
        ck = (key, choice)
        with self._lock:
            fut = self._cache.get(ck)
            if fut is not None:
                self._cache.move_to_end(ck)
                self.hits += 1
                return fut
            self.misses += 1
            fut = self._pool.submit(self._compile, key, choice)
            self._cache[ck] = fut
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return fut

    def matcher(self, compiled: CompiledGrammar) -> Matcher:
        return self._backend(compiled.backend).matcher(compiled)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def statistics(self) -> dict[str, int]:
        with self._lock:
            return {"cached": len(self._cache), "hits": self.hits, "misses": self.misses}

    # -- on the pool's threads ------------------------------------------------------------

    def _compile(self, key: GrammarKey, choice: BackendChoice) -> CompiledGrammar:
        if choice != "auto":
            return self._backend(choice).compile(key)
        try:
            return self._backend("xgrammar").compile(key)
        except StructuredOutputsError as first:
            try:
                return self._backend("guidance").compile(key)
            except StructuredOutputsError:
                raise first from None

    def _backend(self, name: BackendName) -> GrammarBackend:
        with self._lock:
            backend = self._backends.get(name)
        if backend is not None:
            return backend
        built = _build_backend(name, self.tokenizer, self.vocab_size, self.stop_token_ids)
        with self._lock:
            return self._backends.setdefault(name, built)


def _build_backend(
    name: BackendName, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]
) -> GrammarBackend:
    if name == "xgrammar":
        from actorllm.structured_output.xgrammar_backend import XgrammarBackend

        return XgrammarBackend(tokenizer, vocab_size, stop_token_ids)
    from actorllm.structured_output.guidance_backend import GuidanceBackend

    return GuidanceBackend(tokenizer, vocab_size, stop_token_ids)
