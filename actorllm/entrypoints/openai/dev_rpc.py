"""Dev-mode control of the workers over HTTP, as vLLM's dev server has it:
``POST /collective_rpc`` (run a worker method on every rank, between steps),
``POST /start_profile`` and ``POST /stop_profile`` (the torch profiler, written under
``--profiler-dir``).

These routes exist only with ``--dev-mode`` (or ``ACTORLLM_SERVER_DEV_MODE=1``): a method
name reaches any public worker method, which is not something to expose to clients.

    $ curl -X POST localhost:8000/collective_rpc -d '{"method": "statistics"}'
    {"results": [{...}]}
"""

from __future__ import annotations

from typing import Any

import msgspec

from actorllm.entrypoints.openai.engine_client import EngineClient
from actorllm.entrypoints.openai.errors import APIError
from actorllm.worker.profiler import ProfilerError


class CollectiveRPCRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    method: str  # a public Worker method's name
    timeout: float | None = None  # seconds; 504 past it (the method still runs to its end)
    args: list[Any] = msgspec.field(default_factory=list)
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)


class CollectiveRPCResponse(msgspec.Struct, kw_only=True):
    results: list[Any]  # one per rank


async def collective_rpc(engine: EngineClient, req: CollectiveRPCRequest) -> bytes:
    """The JSON response body. Errors: unknown method 400 (the engine's), the method's own
    exception 400 naming it, timeout 504, a dict or list result that is not JSON 400."""
    if req.timeout is not None and req.timeout <= 0:
        raise APIError(400, "`timeout` must be positive.", "timeout")
    try:
        results = await engine.collective_rpc(
            req.method, timeout=req.timeout, args=tuple(req.args), kwargs=req.kwargs
        )
    except TimeoutError as exc:
        message = f"collective_rpc {req.method!r} timed out after {req.timeout} s."
        raise APIError(504, message) from exc
    except ValueError:
        raise  # InvalidRequestError: no such method (400, naming it)
    except Exception as exc:
        message = f"collective_rpc {req.method!r} raised {type(exc).__name__}: {exc}"
        raise APIError(400, message, "method") from exc
    try:
        return msgspec.json.encode(CollectiveRPCResponse(results=[_as_json(r) for r in results]))
    except (TypeError, msgspec.EncodeError) as exc:
        raise APIError(400, f"the results of {req.method!r} are not JSON: {exc}", "method") from exc


def _as_json(result: Any) -> Any:
    """One rank's result as vLLM's route answers it: None, a dict or a list as they are,
    anything else (a number, a string, a tensor, a module) as its ``str()``. So a client
    reads the same JSON from both servers, and a method returning a Python object answers
    200 with its text rather than an error. A msgspec Struct (``statistics``) is this
    worker's dict: a JSON object."""
    if result is None or isinstance(result, dict | list | msgspec.Struct):
        return result
    return str(result)


async def profile(engine: EngineClient, *, start: bool) -> None:
    """Start or stop the profiler; 400 when it is not configured or out of order."""
    try:
        await (engine.start_profile() if start else engine.stop_profile())
    except ProfilerError as exc:
        raise APIError(400, str(exc)) from exc
