"""SageMaker customer middleware, as vLLM 0.32 bootstraps it through AWS's
``model-hosting-container-standards`` package.

A customer script (``$SAGEMAKER_MODEL_PATH/$CUSTOM_SCRIPT_FILENAME``, default
``/opt/ml/model/model.py``) registers a throttle middleware and a pre/post-process
middleware with the package's decorators (``@custom_middleware("throttle")``,
``@input_formatter``, ``@output_formatter``), or env vars name them as ``file.py:func``
(``CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE``, ``CUSTOM_FASTAPI_MIDDLEWARE_PRE_POST_PROCESS``,
``CUSTOM_PRE_PROCESS``, ``CUSTOM_POST_PROCESS``); an env var wins over a decorator.

The script imports its decorators from the package, so their registry is the package's:
it is read here, by the package's own loaders (which also give the env-var precedence and
the pre + post combination). Only the package's ``bootstrap(app)`` is not used: it wants
a FastAPI app to rebuild. The package's middleware objects are plain Starlette ones, so
the same order is kept on our Starlette stack instead: throttle outermost, then the
engine's middleware, then pre/post-process innermost.
"""

from __future__ import annotations

import os
from typing import Any

from starlette.middleware import Middleware

# The package's names and defaults (sagemaker.config, common.fastapi.config), kept here so
# that a server with no SageMaker set-up never imports the package (it sets logging up).
MODEL_PATH_ENV = "SAGEMAKER_MODEL_PATH"
SCRIPT_ENV = "CUSTOM_SCRIPT_FILENAME"
DEFAULT_MODEL_PATH = "/opt/ml/model"
DEFAULT_SCRIPT = "model.py"
MIDDLEWARE_ENVS = (
    "CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE",
    "CUSTOM_FASTAPI_MIDDLEWARE_PRE_POST_PROCESS",
    "CUSTOM_PRE_PROCESS",
    "CUSTOM_POST_PROCESS",
)


def customer_script() -> str:
    """Where SageMaker puts the customer script (it need not exist)."""
    folder = os.environ.get(MODEL_PATH_ENV) or DEFAULT_MODEL_PATH
    return os.path.join(folder, os.environ.get(SCRIPT_ENV) or DEFAULT_SCRIPT)


def sagemaker_middleware() -> tuple[list[Middleware], list[Middleware]]:
    """(outermost, innermost) customer middleware: ``([throttle], [pre_post_process])``,
    each list empty when not registered. Raises ``ValueError`` naming the script, env var
    and function when the script or a named function cannot be loaded: a customer's
    mistake stops the server at startup instead of being logged and ignored."""
    script = customer_script()
    named = {var: spec for var in MIDDLEWARE_ENVS if (spec := os.environ.get(var))}
    if not named and not os.path.isfile(script):
        return [], []
    try:
        from model_hosting_container_standards.common.fastapi.middleware import (
            create_middleware_object,
            middleware_registry,
        )
        from model_hosting_container_standards.sagemaker.sagemaker_loader import (
            SageMakerFunctionLoader,
        )
    except ImportError as exc:
        raise ValueError(
            f"SageMaker customer script {script} / middleware env vars "
            f"{sorted(named)}: they need model-hosting-container-standards "
            f"(pip install 'actorllm[sagemaker]'): {exc}"
        ) from exc
    try:
        # imports the script, so its decorators fill the package's registry
        loader = SageMakerFunctionLoader.get_function_loader()
    except Exception as exc:
        raise ValueError(f"SageMaker customer script {script}: cannot load it: {exc}") from exc
    for var, spec in named.items():
        _check_spec(loader, var, spec)
    # the registry is built from its sources on every load; a second app in one process
    # (tests) must not find the first one's entries there
    middleware_registry.clear_middlewares()
    middleware_registry.load_middlewares(loader)
    return _registered("throttle", middleware_registry, create_middleware_object), _registered(
        "pre_post_process", middleware_registry, create_middleware_object
    )


def _check_spec(loader: Any, var: str, spec: str) -> None:
    """The package's env loader logs a bad spec and goes on without the middleware."""
    try:
        func = loader.load_function(spec)
    except Exception as exc:
        raise ValueError(f"{var}={spec}: cannot load it: {exc}") from exc
    if func is None:
        raise ValueError(f"{var}={spec}: not a 'file.py:function' or 'module:function' spec")


def _registered(name: str, registry: Any, make: Any) -> list[Middleware]:
    info = registry.get_middleware(name)
    return [make(info)] if info is not None else []
