"""``EngineArgs`` / ``AsyncEngineArgs``: vLLM's engine-argument objects, as keyword names.

    from actorllm import AsyncEngineArgs, EngineArgs

    args = EngineArgs(model="/path/to/model", max_model_len=512)
    config = args.create_engine_config()          # an EngineConfig

Every keyword is one of:

* an ``EngineConfig`` field (vLLM's name): passed on, validated by ``EngineConfig``;
* one of vLLM's other spellings of such a setting (``structured_outputs_config``,
  ``kv_transfer_config``, ``kv_offloading_size``, ``data_parallel_size_local``,
  ``hf_token``), translated as ``actorllm serve`` translates the flags;
* ``disable_log_stats`` (and, on ``AsyncEngineArgs``, ``enable_log_requests`` /
  ``disable_log_requests``): honoured by ``AsyncLLMEngine`` / ``LLMEngine``;
* one of vLLM's engine arguments listed in the serve compatibility table
  (``entrypoints/commands/vllm_compat.py``): a value asking for a feature actorllm lacks is
  refused (``EngineConfigError`` naming it); one with no meaning here
  (``trust_remote_code=True``) is accepted with a warning naming it, as ``serve`` does.

Anything else raises ``TypeError`` naming the keyword, at construction.

``EngineArgs.add_cli_args(parser)`` / ``EngineArgs.from_cli_args(args)`` are vLLM's
command-line helpers, with ``actorllm serve``'s engine flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any, Self

from actorllm.engine.config import EngineConfig, EngineConfigError

# vLLM spellings translated into EngineConfig fields in create_engine_config.
_SPELLINGS = frozenset(
    {
        "structured_outputs_config",
        "kv_transfer_config",
        "kv_offloading_size",
        "kv_offloading_backend",
        "data_parallel_size_local",
        "hf_token",
    }
)


def _foreign() -> dict[str, Any]:
    """{vLLM keyword: its Foreign entry} from the serve compatibility table."""
    from actorllm.entrypoints.commands.vllm_compat import FOREIGN

    return {
        flag[2:].replace("-", "_"): entry
        for entry in FOREIGN
        for flag in entry.flags
        if flag.startswith("--")
    }


def _caller_level() -> int:
    """``warnings.warn``'s stacklevel of the first frame outside this module (the line that
    built the arguments), from a function of this module."""
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


def _asks_nothing(value: Any, same: tuple[str, ...]) -> bool:
    """The value asks for what actorllm does anyway (vLLM's default, or off)."""
    if value is None or value is False or value == {} or value == []:
        return True
    text = str(value)
    if text in same:
        return True
    if isinstance(value, int | float) and not isinstance(value, bool):
        return any(_number(s) == value for s in same)
    return False


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _as_dict(value: Any, name: str) -> dict[str, Any]:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "__dict__"):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    raise EngineConfigError(name, f"must be a dict, got {type(value).__name__}.")


class EngineArgs:
    """vLLM's ``EngineArgs``: keyword arguments, checked by name at construction; the
    values are validated by :meth:`create_engine_config`. Reading an ``EngineConfig`` field
    that was not given returns its default."""

    _EXTRA: frozenset[str] = frozenset({"disable_log_stats"})

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        self._given: dict[str, Any] = {}  # EngineConfig fields and vLLM spellings
        self.model = model
        self.disable_log_stats: bool = bool(kwargs.pop("disable_log_stats", False))
        for name, value in kwargs.items():
            self._take(name, value, TypeError)

    def __setattr__(self, name: str, value: Any) -> None:
        """Setting a field later (``args.max_model_len = 512``) counts as giving it."""
        self._take(name, value, AttributeError)

    def _take(self, name: str, value: Any, error: type[Exception]) -> None:
        if name.startswith("_") or name in self._EXTRA:
            object.__setattr__(self, name, value)
        elif name in EngineConfig.__struct_fields__ or name in _SPELLINGS:
            self._given[name] = value
        else:
            foreign = _foreign()
            if name not in foreign:
                raise error(
                    f"{type(self).__name__}: {name!r} is not supported by actorllm (neither "
                    "an engine setting here nor a vLLM engine argument it can honour); "
                    "remove it."
                )
            self._check_foreign(name, value, foreign[name])

    # -- vLLM's command-line helpers --------------------------------------------------------

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Add the engine's flags (those of ``actorllm serve``: every ``EngineConfig``
        field, vLLM's other spellings, and vLLM's flags with no setting here, each ignored
        with a warning or refused) and ``--disable-log-stats``; returns ``parser``."""
        from actorllm.entrypoints.commands.engine_args import add_engine_arguments
        from actorllm.entrypoints.commands.vllm_compat import add_foreign_flags

        add_engine_arguments(parser, model_positional=False)
        parser.add_argument(
            "--disable-log-stats",
            action="store_true",
            default=False,
            help="no periodic stats log line",
        )
        cls._add_own_flags(parser)
        add_foreign_flags(parser)
        return parser

    @classmethod
    def _add_own_flags(cls, parser: argparse.ArgumentParser) -> None:
        pass

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> Self:
        """The arguments of a namespace parsed by a parser :meth:`add_cli_args` filled.
        Raises ``ForeignFlagError`` for a refused vLLM flag; warns for an ignored one."""
        from actorllm.entrypoints.commands.engine_args import engine_kwargs
        from actorllm.entrypoints.commands.vllm_compat import notes

        for note in notes(args):
            warnings.warn(note, UserWarning, stacklevel=2)
        kwargs = engine_kwargs(args)
        values = vars(args)
        if isinstance(values.get("hf_token"), str):
            kwargs["hf_token"] = values["hf_token"]
        for name in cls._EXTRA:
            if name in values:
                kwargs[name] = values[name]
        return cls(**kwargs)

    @staticmethod
    def _check_foreign(name: str, value: Any, entry: Any) -> None:
        if _asks_nothing(value, entry.same):
            return
        if entry.verdict == "refuse":
            raise EngineConfigError(name, f"{value!r} is not supported: {entry.reason}.")
        warnings.warn(
            f"{name}={value!r} has no effect in actorllm: {entry.reason}; ignoring it.",
            UserWarning,
            stacklevel=_caller_level(),
        )

    def __getattr__(self, name: str) -> Any:
        # Only called for names not set: given fields and spellings, then defaults (a
        # spelling not given reads None, as vLLM's unset field).
        given = self.__dict__.get("_given", {})
        if name in given:
            return given[name]
        if name in EngineConfig.__struct_fields__:
            return getattr(EngineConfig(), name)
        if name in _SPELLINGS:
            return None
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def create_engine_config(self, usage_context: Any = None) -> EngineConfig:
        """The ``EngineConfig`` these arguments describe. Raises ``EngineConfigError``
        naming the field. (``usage_context``: vLLM's, accepted and unused.)"""
        # A spelling given as None (``dataclasses.asdict`` of unset arguments) asks nothing.
        given = {k: v for k, v in self._given.items() if v is not None or k not in _SPELLINGS}
        out: dict[str, Any] = {}
        if "structured_outputs_config" in given:
            from actorllm.engine.structured_outputs_config import (
                structured_outputs_config_kwargs,
            )

            out |= structured_outputs_config_kwargs(given.pop("structured_outputs_config"))
        kv = given.pop("kv_transfer_config", None)
        if kv is not None:
            from actorllm.entrypoints.commands.engine_args import kv_transfer_config

            try:
                out |= kv_transfer_config(json.dumps(_as_dict(kv, "kv_transfer_config")))
            except argparse.ArgumentTypeError as exc:
                raise EngineConfigError("kv_transfer_config", str(exc)) from None
        size = given.pop("kv_offloading_size", None)
        if size is not None:
            out |= {"kv_connector": "offload", "kv_offload_host_bytes": int(size * 2**30)}
        backend = given.pop("kv_offloading_backend", None)
        if backend not in (None, "native"):
            raise EngineConfigError(
                "kv_offloading_backend", f"only native (the built-in tier), got {backend!r}."
            )
        local = given.pop("data_parallel_size_local", None)
        token = given.pop("hf_token", None)
        out |= given  # the fields themselves win over the composite forms
        if local is not None and out.setdefault("data_parallel_size", local) != local:
            raise EngineConfigError(
                "data_parallel_size_local",
                f"{local} differs from data_parallel_size {out['data_parallel_size']}: "
                "every replica runs on this node.",
            )
        if isinstance(token, str):
            os.environ["HF_TOKEN"] = token  # read by huggingface_hub at each download
        model = out.pop("model", None)
        return EngineConfig(model=None if model is None else str(model), **out)


class AsyncEngineArgs(EngineArgs):
    """vLLM's ``AsyncEngineArgs``: ``EngineArgs`` plus ``enable_log_requests`` (log each
    request as it is added, finishes or is aborted; vLLM's older ``disable_log_requests``
    is its opposite)."""

    _EXTRA = frozenset({"disable_log_stats", "enable_log_requests"})

    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        self.enable_log_requests: bool = False
        if "disable_log_requests" in kwargs:
            disable = kwargs.pop("disable_log_requests")
            if "enable_log_requests" in kwargs and bool(kwargs["enable_log_requests"]) == bool(
                disable
            ):
                raise EngineConfigError(
                    "disable_log_requests", "contradicts enable_log_requests: give one."
                )
            kwargs["enable_log_requests"] = not disable
        super().__init__(model, **kwargs)
        self.enable_log_requests = bool(self.enable_log_requests)

    @classmethod
    def _add_own_flags(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--enable-log-requests",
            action=argparse.BooleanOptionalAction,
            default=False,
            help="log each request added, finished or aborted",
        )
        parser.add_argument(
            "--disable-log-requests",
            dest="enable_log_requests",
            action="store_false",
            help="vLLM's older spelling of --no-enable-log-requests",
        )


def _dataclass_fields(names: list[str]) -> dict[str, dataclasses.Field[Any]]:
    """``__dataclass_fields__`` naming ``names``, so ``dataclasses.asdict(args)`` /
    ``fields`` / ``replace`` work on the arguments as on vLLM's dataclass (its scripts build
    ``LLM(**dataclasses.asdict(engine_args))``). Taken from a real dataclass's."""
    shadow = dataclasses.make_dataclass(
        "_EngineArgsFields", [(n, Any, dataclasses.field(default=None)) for n in names]
    )
    return dict(shadow.__dataclass_fields__)  # type: ignore[attr-defined]


_FIELD_NAMES = ["model", *(f for f in EngineConfig.__struct_fields__ if f != "model")]
_FIELD_NAMES += sorted(_SPELLINGS)
# Set once both classes exist (AsyncEngineArgs has one field more).
EngineArgs.__dataclass_fields__ = _dataclass_fields([*_FIELD_NAMES, "disable_log_stats"])  # type: ignore[attr-defined]
AsyncEngineArgs.__dataclass_fields__ = _dataclass_fields(  # type: ignore[attr-defined]
    [*_FIELD_NAMES, "disable_log_stats", "enable_log_requests"]
)
