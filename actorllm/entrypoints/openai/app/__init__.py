"""The Starlette app: routes, guards, and the engine's lifetime (opened in the lifespan).

    app = build_app(lambda: AsyncEngine.open(config), AppSettings(api_key="k"))

Every handler goes through :func:`endpoint.as_endpoint`, which turns exceptions into OpenAI
error bodies (:func:`errors.to_api_error`): what a client can cause is a 4xx, a dead engine
a 503, only a genuine server bug a 500 (logged). Unknown routes are 404, wrong methods 405,
both with the same body. Dev-mode routes exist only with ``dev_mode`` (otherwise 404).

One module per part:

* ``build``: :func:`build_app`, putting the parts together
* ``settings``: :class:`AppSettings`, the HTTP side's settings (``actorllm serve``'s flags)
* ``state``: :class:`AppState`, what the handlers share
* ``lifespan``: the engine's lifetime
* ``routes``: the route table; the handlers by family in ``openai_routes``, ``ops_routes``
  and ``dev_routes``
* ``endpoint``: a handler made an endpoint (errors to error bodies); ``load_tracking``
* ``middleware_stack``, ``error_handlers``: what wraps the routes, what answers past them
"""

from actorllm.entrypoints.openai.app.build import build_app
from actorllm.entrypoints.openai.app.lifespan import EngineFactory, serving_defaults
from actorllm.entrypoints.openai.app.settings import AppSettings
from actorllm.entrypoints.openai.app.state import AppState, app_state

__all__ = ["AppSettings", "AppState", "EngineFactory", "app_state", "build_app", "serving_defaults"]
