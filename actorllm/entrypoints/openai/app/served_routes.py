"""Which routes the served model answers: as vLLM mounts only the routes its model serves
(generation routes for a generative model; for a pooling model the pooling routes its task
offers), a route the model does not serve is a 404 here, with FastAPI's ``"detail": "Not
Found"`` beside the OpenAI error body that says why (vLLM's clients and tests read either).
``/invocations``, ``/tokenize`` and the operational routes serve every model."""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.openai.app.state import AppState, Handler
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.openapi.endpoints import GENERATION_PATHS, POOLING_ENDPOINTS
from actorllm.entrypoints.openai.openapi.served import beside_pooling_task, offers

# {path: what the model must offer}: "generate", or a pooling need (a task, "score", "any")
NEEDS: dict[str, str] = {
    **{path: "generate" for path in GENERATION_PATHS - {"/invocations"}},
    "/v1/chat/completions/batch": "generate",
    "/v1/responses": "generate",
    "/v1/responses/{response_id}": "generate",
    "/v1/responses/{response_id}/cancel": "generate",
    "/v1/messages": "generate",
    "/v1/messages/count_tokens": "generate",
    **{path: needs for path, _, _, _, needs in POOLING_ENDPOINTS},
}


def why_not_served(needs: str, engine: Any) -> str | None:
    """None when the model offers what a route ``needs``; else why not."""
    pm = engine.pooling_model
    name = engine.model_name
    if needs == "generate":
        if pm is None:
            return None
        return f"The model `{name}` is a pooling model: it does not generate text."
    if pm is None:
        return f"The model `{name}` generates text: it serves no pooling route."
    if offers(needs, pm.ordered_tasks, pm.is_cross_encoder):
        return None
    return f"The model `{name}` ({', '.join(pm.tasks)}) does not serve this route."


_TASK_APIS = {"embed": "Embeddings", "classify": "Classification"}


def not_the_pooling_task(needs: str, engine: Any) -> str | None:
    """vLLM's 501 message when a task route's task is not the model's pooling task."""
    pm = engine.pooling_model
    if pm is None or not beside_pooling_task(needs, pm.ordered_tasks):
        return None
    return f"The model does not support {_TASK_APIS[needs]} API"


def only_if_served(path: str, fn: Handler) -> Handler:
    """``fn``, answering 404 first when the served model lacks what ``path`` needs (501
    when it has the task but serves another: vLLM's)."""
    needs = NEEDS.get(path)
    if needs is None:
        return fn

    async def guarded(state: AppState, request: Any) -> Any:
        engine = state.serving.engine
        why = why_not_served(needs, engine)
        if why is not None:
            raise APIError(404, why, detail="Not Found")
        other = not_the_pooling_task(needs, engine)
        if other is not None:
            raise APIError(501, other, kind="NotImplementedError")
        return await fn(state, request)

    guarded.__name__ = fn.__name__
    return guarded
