"""The Starlette app: routes, guards, and the engine's lifetime (opened in the lifespan).

    app = build_app(lambda: AsyncEngine.open(config), AppSettings(api_key="k"))

Every handler goes through :func:`_endpoint`, which turns exceptions into OpenAI error
bodies (:func:`errors.to_api_error`): what a client can cause is a 4xx, a dead engine a 503,
only a genuine server bug a 500 (logged). Unknown routes are 404, wrong methods 405, both
with the same body. Dev-mode routes exist only with ``dev_mode`` (otherwise 404).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, ClassVar, TypeVar, final

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route, request_response
from starlette.types import ASGIApp, Receive, Scope, Send

import actorllm
from actorllm.entrypoints.metrics import CONTENT_TYPE, ServerMetrics, log_stats_forever
from actorllm.entrypoints.openai import dev_rpc
from actorllm.entrypoints.openai import protocol as p
from actorllm.entrypoints.openai.engine_client import EngineClient
from actorllm.entrypoints.openai.errors import APIError, bad_request, to_api_error
from actorllm.entrypoints.openai.fields import decode_request
from actorllm.entrypoints.openai.middleware import (
    APIKeyMiddleware,
    BodyLimitMiddleware,
    RequestIdMiddleware,
    RootPathMiddleware,
    load_middleware,
    request_id_of,
)
from actorllm.entrypoints.openai.openapi import Served, openapi_document
from actorllm.entrypoints.openai.serving_chat import create_chat_completion
from actorllm.entrypoints.openai.serving_common import (
    ServingContext,
    ServingDefaults,
    json_response,
)
from actorllm.entrypoints.openai.serving_completion import create_completion
from actorllm.entrypoints.openai.serving_tokenize import detokenize, tokenize
from actorllm.entrypoints.openai.streams import ClientDisconnected
from actorllm.entrypoints.openai.tool_setup import ChatSetup

logger = logging.getLogger("actorllm.server")

EngineFactory = Callable[[], AbstractAsyncContextManager[EngineClient]]
S = TypeVar("S", bound=msgspec.Struct)


class AppSettings(msgspec.Struct, kw_only=True):
    """HTTP-side settings (the engine's are in ``EngineConfig``). ``actorllm serve``'s flags
    for them are generated from these fields and docstrings."""

    CLI_APPEND: ClassVar[frozenset[str]] = frozenset({"middleware"})  # one value per flag

    # -- Frontend ---------------------------------------------------------------------------
    api_key: str | list[str] | None = None
    """Require ``Authorization: Bearer KEY`` on /v1/* (default: $ACTORLLM_API_KEY or
    $VLLM_API_KEY); several keys (``--api-key a b``): any one of them is accepted."""
    max_body_bytes: int = 16 * 2**20
    """Requests with a larger body are refused with 413."""
    dev_mode: bool = False
    """Expose /sleep, /wake_up, /reset_prefix_cache, /kv_connector/* without
    authentication (unsafe; also on with ACTORLLM_SERVER_DEV_MODE=1)."""
    log_interval_s: float = 10.0
    """Seconds between stats log lines; 0: none (same as --disable-log-stats)."""
    root_path: str | None = None
    """The path prefix a reverse proxy serves the API under (e.g. /llm): requests come with
    or without it."""
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    """CORS: origins allowed to call the API from a browser, e.g. '["https://a.example"]'
    or '*'. Default: none (no cross-origin access)."""
    allowed_methods: list[str] = msgspec.field(default_factory=lambda: ["*"])
    """CORS: HTTP methods allowed cross-origin (when allowed_origins is set)."""
    allowed_headers: list[str] = msgspec.field(default_factory=lambda: ["*"])
    """CORS: request headers allowed cross-origin (when allowed_origins is set)."""
    allow_credentials: bool = False
    """CORS: allow cookies and Authorization on cross-origin requests."""
    response_role: str = "assistant"
    """The role of the messages chat completions return."""
    return_tokens_as_token_ids: bool = False
    """Logprob tokens as 'token_id:N' for every request (as if each set the request field
    return_tokens_as_token_ids)."""
    enable_force_include_usage: bool = False
    """Every stream ends with a usage chunk, whether or not the request asked for one with
    stream_options.include_usage."""
    default_chat_template_kwargs: dict[str, Any] | None = None
    """Chat template variables for every chat request, e.g. '{"enable_thinking": false}'; a
    request's own chat_template_kwargs win."""
    exclude_tools_when_tool_choice_none: bool = False
    """With tool_choice "none", leave the request's tools out of the prompt (by default
    the chat template still shows them to the model)."""
    enable_tokenizer_info_endpoint: bool = False
    """Serve GET /tokenizer_info: the tokenizer's class, settings and chat template (it
    shows the template to anyone who can reach the server)."""
    trust_request_chat_template: bool = False
    """Accept a request's own chat_template (chat completions, /tokenize); without it such
    a request is refused (400). A template runs with the server's rights: trust the
    clients."""
    enable_log_requests: bool = False
    """Log each request as it arrives (id, method, path, body up to max_log_len) and as it
    ends (status); --disable-log-requests turns it off."""
    max_log_len: int | None = None
    """Log at most this many characters of a request body, or of an output (default: all)."""
    enable_log_outputs: bool = False
    """Also log each completion's output text and finish reason when it is done (needs
    enable_log_requests)."""
    middleware: list[str] = msgspec.field(default_factory=list)
    """Extra ASGI middleware, outermost, by import path (repeat the flag for several): a
    class is built as cls(app); an async function f(request, call_next) wraps each HTTP
    request."""
    metrics_prefix: str = "actorllm:"
    """Prometheus metric name prefix; vllm makes an existing vLLM Grafana dashboard work
    unchanged."""
    enable_server_load_tracking: bool = False
    """Count the requests in flight on /v1/completions, /v1/chat/completions and
    /invocations (a stream counts until it ends); GET /load answers {"server_load": N}
    (without this flag always 0, as vLLM)."""

    def __post_init__(self) -> None:
        if self.enable_log_outputs and not self.enable_log_requests:
            raise ValueError("--enable-log-outputs needs --enable-log-requests.")


@final
class AppState:
    """What the lifespan sets up for the handlers (one per app)."""

    def __init__(self, settings: AppSettings) -> None:
        self.settings = settings
        self.ctx: ServingContext | None = None  # set once the engine is up
        self.startup_error: BaseException | None = None  # why the engine failed to start
        self.draining = False  # shutting down: /health says 503 so traffic goes elsewhere
        # Generation requests in flight (--enable-server-load-tracking), for GET /load.
        self.server_load = 0

    @property
    def serving(self) -> ServingContext:
        if self.ctx is None:
            raise APIError(503, "The engine is not running.")
        return self.ctx


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.actorllm
    return state


Handler = Callable[[AppState, Request], Awaitable[Response]]


@final
class _LoadTracked:
    """An ASGI route app that counts itself in ``AppState.server_load`` from the request's
    arrival until its response is sent (a stream's last chunk; a disconnect), as vLLM's
    ``load_aware_call``."""

    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.state.server_load += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.state.server_load -= 1


# The routes that run the engine: what --enable-server-load-tracking counts.
_LOAD_TRACKED = frozenset({"/v1/completions", "/v1/chat/completions", "/invocations"})


def _endpoint(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        state = _state(request)
        try:
            return await fn(state, request)
        except (ClientDisconnect, ClientDisconnected):
            return Response(status_code=499)  # nobody is listening; the request was aborted
        except Exception as exc:
            dead = state.ctx is not None and state.ctx.is_dead()
            return to_api_error(exc, engine_dead=dead).response()

    endpoint.__name__ = fn.__name__
    return endpoint


async def _decode(request: Request, kind: type[S]) -> S:
    return decode_request(await request.body(), kind)


# -- OpenAI routes ---------------------------------------------------------------------------


def _with_header_id(request: Request, req: S) -> S:
    """``X-Request-Id``, when sent, is the request's id (over the body's ``request_id``)."""
    given = request_id_of(request.scope)
    return msgspec.structs.replace(req, request_id=given) if given else req


async def completions(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await _decode(request, p.CompletionRequest))
    return await create_completion(state.serving, req, request.receive)


async def chat_completions(state: AppState, request: Request) -> Response:
    req = _with_header_id(request, await _decode(request, p.ChatCompletionRequest))
    return await create_chat_completion(state.serving, req, request.receive)


async def invocations(state: AppState, request: Request) -> Response:
    """SageMaker's (and vLLM's) ``POST /invocations``: a chat request when the body has
    ``messages``, a completion request when it has ``prompt``."""
    try:
        raw = msgspec.json.decode(await request.body())
    except msgspec.DecodeError:
        raw = None
    if isinstance(raw, dict) and "messages" in raw:
        return await chat_completions(state, request)
    if isinstance(raw, dict) and "prompt" in raw:
        return await completions(state, request)
    raise bad_request("/invocations takes a chat request (messages) or a completion (prompt).")


async def models(state: AppState, request: Request) -> Response:
    engine = state.serving.engine
    # One card per served name, as vLLM lists --served-model-name's aliases.
    cards = [
        p.ModelCard(id=name, created=0, root=engine.model_name, max_model_len=engine.max_model_len)
        for name in engine.model_names
    ]
    return json_response(p.ModelList(data=cards))


async def tokenize_route(state: AppState, request: Request) -> Response:
    return json_response(tokenize(state.serving, await _decode(request, p.TokenizeRequest)))


async def tokenizer_info(state: AppState, request: Request) -> Response:
    """vLLM's /tokenizer_info: the tokenizer's class, its JSON-able settings, the template."""
    tok = state.serving.engine.tokenizer
    settings = {
        k: v
        for k, v in (getattr(tok, "init_kwargs", None) or {}).items()
        if isinstance(v, str | int | float | bool) or v is None
    }
    body = {
        **settings,
        "tokenizer_class": type(tok).__name__,
        "chat_template": getattr(tok, "chat_template", None),
    }
    return json_response(body)


async def detokenize_route(state: AppState, request: Request) -> Response:
    return json_response(detokenize(state.serving, await _decode(request, p.DetokenizeRequest)))


# -- operations ------------------------------------------------------------------------------


async def health(state: AppState, request: Request) -> Response:
    if state.ctx is None or state.ctx.is_dead():
        raise APIError(503, "The engine is dead.")
    if state.draining:
        raise APIError(503, "The server is shutting down.")
    return Response(status_code=200)


async def metrics(state: AppState, request: Request) -> Response:
    ctx = state.serving
    if not ctx.is_dead():
        try:
            ctx.metrics.update_from_stats(await ctx.engine.get_stats())
        except Exception as exc:  # still serve what we have: a scrape must not fail
            logger.warning("could not read engine stats for /metrics: %s", exc)
    return Response(ctx.metrics.render(), media_type=CONTENT_TYPE)


async def load(state: AppState, request: Request) -> Response:
    """vLLM's ``GET /load``: generation requests in flight (0 unless the server runs with
    --enable-server-load-tracking)."""
    return json_response(p.LoadResponse(server_load=state.server_load))


async def version(state: AppState, request: Request) -> Response:
    return json_response(p.VersionResponse(version=actorllm.__version__))


async def openapi(state: AppState, request: Request) -> Response:
    engine = state.serving.engine
    served = Served(
        engine.max_model_len,
        engine.vocab_size,
        engine.config.scheduling_policy,
        trust_request_chat_template=state.settings.trust_request_chat_template,
        tokenizer_info=state.settings.enable_tokenizer_info_endpoint,
    )
    settings = state.settings
    doc = openapi_document(
        dev_mode=settings.dev_mode, api_key=bool(settings.api_key), served=served
    )
    return json_response(doc)


# -- dev mode --------------------------------------------------------------------------------


def _query_bool(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw.lower() not in ("true", "false", "1", "0"):
        raise bad_request(f"query parameter `{name}` must be true or false.", name)
    return raw.lower() in ("true", "1")


async def sleep(state: AppState, request: Request) -> Response:
    raw = request.query_params.get("level", "1")
    if raw not in ("1", "2"):
        raise bad_request("query parameter `level` must be 1 or 2.", "level")
    await state.serving.engine.sleep(int(raw))
    return Response(status_code=200)


async def wake_up(state: AppState, request: Request) -> Response:
    await state.serving.engine.wake_up()
    return Response(status_code=200)


async def is_sleeping(state: AppState, request: Request) -> Response:
    return json_response({"is_sleeping": await state.serving.engine.is_sleeping()})


async def reset_prefix_cache(state: AppState, request: Request) -> Response:
    if not await state.serving.engine.reset_prefix_cache():
        raise APIError(409, "The prefix cache could not be reset (blocks are in use).")
    return Response(status_code=200)


async def kv_connector_toggle(state: AppState, request: Request) -> Response:
    enabled = _query_bool(request, "enabled")
    await state.serving.engine.set_kv_connector_enabled(enabled)
    return json_response({"enabled": enabled})


async def kv_connector_enabled(state: AppState, request: Request) -> Response:
    return json_response({"enabled": await state.serving.engine.is_kv_connector_enabled()})


async def collective_rpc(state: AppState, request: Request) -> Response:
    # Strict: an unknown field is a 400 (forbid_unknown_fields), not a warning.
    req = msgspec.json.decode(await request.body(), type=dev_rpc.CollectiveRPCRequest)
    body = await dev_rpc.collective_rpc(state.serving.engine, req)
    return Response(body, media_type="application/json")


async def start_profile(state: AppState, request: Request) -> Response:
    await dev_rpc.profile(state.serving.engine, start=True)
    return Response(status_code=200)


async def stop_profile(state: AppState, request: Request) -> Response:
    await dev_rpc.profile(state.serving.engine, start=False)
    return Response(status_code=200)


_ROUTES: list[tuple[str, Handler, str]] = [
    ("/v1/completions", completions, "POST"),
    ("/v1/chat/completions", chat_completions, "POST"),
    ("/v1/models", models, "GET"),
    ("/tokenize", tokenize_route, "POST"),
    ("/detokenize", detokenize_route, "POST"),
    ("/health", health, "GET"),
    ("/ping", health, "GET"),  # vLLM's (SageMaker's) liveness probe, GET and POST
    ("/ping", health, "POST"),
    ("/invocations", invocations, "POST"),  # SageMaker's inference route
    ("/metrics", metrics, "GET"),
    ("/version", version, "GET"),
    ("/load", load, "GET"),
    ("/openapi.json", openapi, "GET"),
]
_DEV_ROUTES: list[tuple[str, Handler, str]] = [
    ("/sleep", sleep, "POST"),
    ("/wake_up", wake_up, "POST"),
    ("/is_sleeping", is_sleeping, "GET"),
    ("/reset_prefix_cache", reset_prefix_cache, "POST"),
    ("/kv_connector/toggle", kv_connector_toggle, "POST"),
    ("/kv_connector/enabled", kv_connector_enabled, "GET"),
    ("/collective_rpc", collective_rpc, "POST"),
    ("/start_profile", start_profile, "POST"),
    ("/stop_profile", stop_profile, "POST"),
]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    messages = {404: f"Not found: {request.url.path}", 405: f"Method {request.method} not allowed."}
    response = APIError(exc.status_code, messages.get(exc.status_code, str(exc.detail))).response()
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _server_error(request: Request, exc: Exception) -> Response:
    logger.error("unhandled error", exc_info=exc)
    return APIError(500, "Internal server error.").response()


def _middleware(settings: AppSettings) -> list[Middleware]:
    """Outermost first: the user's own (``--middleware``, outermost as in vLLM); every
    response gets its X-Request-Id; CORS answers preflights before the API key is asked for
    (browsers send none there); then the guards."""
    stack = load_middleware(settings.middleware)
    stack.append(
        Middleware(
            RequestIdMiddleware,
            log_requests=settings.enable_log_requests,
            max_log_len=settings.max_log_len,
        )
    )
    if settings.root_path:
        stack.append(Middleware(RootPathMiddleware, root_path=settings.root_path))
    if settings.allowed_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=settings.allowed_origins,
                allow_methods=settings.allowed_methods,
                allow_headers=settings.allowed_headers,
                allow_credentials=settings.allow_credentials,
                expose_headers=["X-Request-Id"],
            )
        )
    if settings.api_key:
        stack.append(Middleware(APIKeyMiddleware, api_key=settings.api_key))
    stack.append(Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes))
    return stack


def serving_defaults(
    settings: AppSettings, sampling: dict[str, float] | None = None
) -> ServingDefaults:
    return ServingDefaults(
        sampling=dict(sampling or {}),
        return_tokens_as_token_ids=settings.return_tokens_as_token_ids,
        force_include_usage=settings.enable_force_include_usage,
        chat_template_kwargs=dict(settings.default_chat_template_kwargs or {}),
        exclude_tools_when_tool_choice_none=settings.exclude_tools_when_tool_choice_none,
        trust_request_chat_template=settings.trust_request_chat_template,
        log_outputs=settings.enable_log_outputs,
        max_log_len=settings.max_log_len,
    )


def _tracked(path: str, fn: Handler, state: AppState, settings: AppSettings) -> Any:
    """The route's endpoint; counted in the server load when tracking is on."""
    endpoint = _endpoint(fn)
    if settings.enable_server_load_tracking and path in _LOAD_TRACKED:
        return _LoadTracked(request_response(endpoint), state)
    return endpoint


def build_app(engine_factory: EngineFactory, settings: AppSettings | None = None) -> Starlette:
    """The ASGI app. ``engine_factory()`` is entered in the lifespan; if it raises, startup
    fails (``app.state.actorllm.startup_error`` holds why) and the server exits."""
    settings = settings or AppSettings()
    state = AppState(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with AsyncExitStack() as stack:
                try:
                    engine = await stack.enter_async_context(engine_factory())
                except Exception as exc:
                    state.startup_error = exc
                    raise
                metrics = ServerMetrics(
                    engine.model_name, prefix=settings.metrics_prefix, cache_config=engine.config
                )
                try:
                    chat = ChatSetup.from_config(engine.config)
                    # The engine's generation_config / override_generation_config
                    # (engine/generation_config.py, shared with LLM and AsyncEngine).
                    sampling = engine.config.get_diff_sampling_param()
                except Exception as exc:  # a bad parser, plugin or generation config
                    state.startup_error = exc
                    raise
                state.ctx = ServingContext(
                    engine=engine,
                    metrics=metrics,
                    chat=chat,
                    response_role=settings.response_role,
                    defaults=serving_defaults(settings, sampling),
                )
                async with anyio.create_task_group() as tg:
                    if settings.log_interval_s > 0:
                        tg.start_soon(log_stats_forever, engine, settings.log_interval_s)
                    try:
                        yield
                    finally:
                        tg.cancel_scope.cancel()
        except Exception as exc:
            if state.startup_error is not None:
                raise
            # The engine died while serving (its context manager re-raises that on exit):
            # /health already said so; shutting down is all that is left to do.
            logger.error("the engine stopped with an error: %s", exc)

    routes = [
        Route(path, _tracked(path, fn, state, settings), methods=[m]) for path, fn, m in _ROUTES
    ]
    if settings.dev_mode:
        routes += [Route(path, _endpoint(fn), methods=[m]) for path, fn, m in _DEV_ROUTES]
    if settings.enable_tokenizer_info_endpoint:
        routes.append(Route("/tokenizer_info", _endpoint(tokenizer_info), methods=["GET"]))
    middleware = _middleware(settings)
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        lifespan=lifespan,
    )
    app.state.actorllm = state
    return app


def app_state(app: Any) -> AppState:
    """The AppState of an app made by :func:`build_app` (for the server runner and tests)."""
    state: AppState = app.state.actorllm
    return state
