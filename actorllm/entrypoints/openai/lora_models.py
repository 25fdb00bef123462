"""LoRA adapters over HTTP: the ``model`` field names one, ``/v1/models`` lists them, and
``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter`` change them at run time.

vLLM's behaviour, kept: adapters are listed with ``parent`` = the base model (or the
``base_model_name`` given with ``--lora-modules``); an unknown model name is a 404 with
OpenAI's body; the two load/unload routes exist only when
``ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING`` (or vLLM's ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``)
is true, and 404 otherwise; ``lora_int_id`` is a counter; a path with no adapter at it
(no directory, or no ``adapter_config.json`` in it) is a 404 with vLLM's message
(``LoRAAdapterNotFoundError``). An adapter that is there but does not load is a 500
``InternalServerError`` naming it and why (vLLM's status: its clients catch that class),
and ``unload`` frees the adapter on the workers too. Paths are local
directories only (nothing is fetched).

    --lora-modules sql=/adapters/sql '{"name": "chat", "path": "/adapters/chat",
                                       "base_model_name": "my-base"}'
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from actorllm.core.lora import LoRARequest
from actorllm.entrypoints.openai.engine_client import EngineClient
from actorllm.entrypoints.openai.errors import APIError
from actorllm.models.lora_adapter import CONFIG_FILE

ENV_FLAGS = ("ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_ALLOW_RUNTIME_LORA_UPDATING")
_TRUE = ("1", "true", "yes", "on")


class LoRAModule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``--lora-modules`` entry (vLLM's ``LoRAModulePath``; vLLM builds it with
    ``LoRAModulePath(**entry)``, so an unknown key is an error there too, never dropped)."""

    name: str
    path: str
    base_model_name: str | None = None
    is_3d_lora_weight: bool = False  # vLLM's; only False is accepted (see LoRARequest)


class LoadLoRAAdapterRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    lora_name: str = ""
    lora_path: str = ""
    load_inplace: bool = False
    is_3d_lora_weight: bool = False  # vLLM's; only False is accepted (see LoRARequest)


class RegisterAdapterRequest(msgspec.Struct, kw_only=True):
    """SageMaker's ``POST /adapters`` body (``app/sagemaker_routes.py``); its ``preload``
    and ``pin`` are accepted: every adapter here is loaded when registered."""

    name: str
    src: str
    preload: bool = True
    pin: bool = False
    load_inplace: bool = False


class UnloadLoRAAdapterRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    lora_name: str = ""
    lora_int_id: int | None = None


def runtime_updating_allowed() -> bool:
    """Whether the load/unload routes are served (an environment switch, as vLLM's)."""
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ENV_FLAGS)


def parse_lora_modules(values: str | Sequence[str] | None) -> list[LoRAModule]:
    """``--lora-modules`` values: ``name=path`` or a JSON object with ``name``, ``path`` and
    optionally ``base_model_name``. Raises ``ValueError`` naming the flag."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    out: list[LoRAModule] = []
    for item in items:
        text = item.strip()
        try:
            if text.startswith("{"):
                out.append(msgspec.convert(json.loads(text), LoRAModule))
                continue
            name, sep, path = text.partition("=")
            if not sep or not name or not path:
                raise ValueError("expected name=path")
            out.append(LoRAModule(name=name, path=path))
        except (ValueError, msgspec.ValidationError) as exc:
            raise ValueError(
                f"--lora-modules: invalid entry {item!r} ({exc}); expected name=path or "
                '\'{"name": ..., "path": ..., "base_model_name": ...}\''
            ) from None
    return out


def resolve_model(requested: str | None, engine: EngineClient) -> LoRARequest | None:
    """The adapter a request's ``model`` names (None or ``""``: the base model, as vLLM's);
    404 for a name this server does not serve."""
    if not requested or requested in engine.model_names:
        return None
    for lora in engine.list_loras():
        if lora.lora_name == requested:
            return lora
    raise APIError(404, f"The model `{requested}` does not exist.", "model")


def lora_options(lora: LoRARequest | None) -> dict[str, Any]:
    """``generate``'s keyword for the adapter (none for the base model)."""
    return {} if lora is None else {"lora_request": lora}


def adapter_cards(engine: EngineClient) -> list[dict[str, Any]]:
    """``/v1/models`` entries of the adapters (vLLM's: ``root`` the path, ``parent`` the
    base model)."""
    return [
        {
            "id": lo.lora_name,
            "root": lo.lora_path,
            "parent": lo.base_model_name or engine.model_name,
        }
        for lo in engine.list_loras()
    ]


def _has_adapter(path: str) -> bool:
    """Whether ``path`` (``~`` expanded, as vLLM resolves it) holds an adapter's config."""
    return (Path(path).expanduser() / CONFIG_FILE).is_file()


async def load_adapter(
    engine: EngineClient,
    name: str,
    path: str,
    *,
    base_model_name: str | None = None,
    load_inplace: bool = False,
    is_3d_lora_weight: bool = False,
) -> str:
    """Load adapter ``name`` from local directory ``path`` on the engine; the success text
    vLLM answers. Raises APIError: 404 when no adapter is at ``path``, 500 naming the
    adapter and why when it does not load."""
    if not name or not path:
        raise APIError(400, "Both 'lora_name' and 'lora_path' must be provided.", "lora_name")
    if name in engine.model_names:
        raise APIError(
            400, f"The lora adapter '{name}' conflicts with a served base model.", "lora_name"
        )
    loaded = {lo.lora_name: lo for lo in engine.list_loras()}
    if name in loaded and not load_inplace:
        raise APIError(
            400,
            f"The lora adapter '{name}' has already been loaded. If you want to load the "
            "adapter in place, set 'load_inplace' to True.",
            "lora_name",
        )
    if is_3d_lora_weight:
        raise APIError(
            400,
            f"is_3d_lora_weight=true is not supported for LoRA adapter '{name}': MoE expert "
            "adapters are not built here (only false).",
            "is_3d_lora_weight",
        )
    if not _has_adapter(path):
        # vLLM's LoRAAdapterNotFoundError (its loader's FileNotFoundError on the adapter's
        # config): a 404 NotFoundError with this message, not a 400 or a 500.
        raise APIError(404, f"Loading lora {name} failed: No adapter found for {path}")
    lora_id = loaded[name].lora_int_id if name in loaded else _next_id(loaded.values())
    base = base_model_name if base_model_name in engine.model_names else None
    request = LoRARequest(name, lora_id, path, base, load_inplace=load_inplace)
    try:
        await engine.add_lora(request)
    except ValueError as exc:  # InvalidRequestError: names the adapter and the reason
        raise APIError(500, str(exc), "lora_path") from None
    return f"Success: LoRA adapter '{name}' added successfully."


async def unload_adapter(engine: EngineClient, name: str) -> str:
    if not name:
        raise APIError(
            400, "'lora_name' needs to be provided to unload a LoRA adapter.", "lora_name"
        )
    if not await engine.remove_lora(name):
        raise APIError(404, f"The lora adapter '{name}' cannot be found.", "lora_name")
    return f"Success: LoRA adapter '{name}' removed successfully."


def _next_id(loaded: Any) -> int:
    return max((lo.lora_int_id for lo in loaded), default=0) + 1
