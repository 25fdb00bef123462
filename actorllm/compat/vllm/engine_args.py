"""``EngineArgs`` / ``AsyncEngineArgs``: vLLM's engine-argument objects, as keyword names.

    from actorllm import AsyncEngineArgs, EngineArgs

    args = EngineArgs(model="/path/to/model", max_model_len=512)
    config = args.create_engine_config()          # an EngineConfig

Each keyword is classified at construction and translated by :mod:`actorllm.compat.vllm.args`
(which lists the kinds of names, and the precedence when a setting is given two ways);
``disable_log_stats`` (and, on ``AsyncEngineArgs``, ``enable_log_requests`` /
``disable_log_requests``) are honoured by ``AsyncLLMEngine`` / ``LLMEngine``. An unknown
keyword raises ``TypeError`` naming it.

``EngineArgs.add_cli_args(parser)`` / ``EngineArgs.from_cli_args(args)`` are vLLM's
command-line helpers, with ``actorllm serve``'s engine flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from typing import Any, Self

from actorllm.compat.vllm import args as vllm_args
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError


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
        elif vllm_args.classify(name, value, type(self).__name__, error):
            self._given[name] = value

    # -- vLLM's command-line helpers --------------------------------------------------------

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Add the engine's flags (those of ``actorllm serve``: every ``EngineConfig``
        field, vLLM's other spellings, and vLLM's flags with no setting here, each ignored
        with a warning or refused) and ``--disable-log-stats``; returns ``parser``."""
        from actorllm.compat.vllm.cli_args import add_engine_arguments
        from actorllm.compat.vllm.foreign_flags import add_foreign_flags

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
        from actorllm.compat.vllm.foreign_flags import notes

        for note in notes(args):
            warnings.warn(note, UserWarning, stacklevel=2)
        values = vars(args)
        kwargs = vllm_args.namespace_kwargs(args)  # the flags, translated as parsed
        for name in (*vllm_args.FRONTEND, vllm_args.HF_TOKEN, *cls._EXTRA):
            if name in values:
                kwargs[name] = values[name]
        return cls(**kwargs)

    def __getattr__(self, name: str) -> Any:
        # Only called for names not set: given fields and spellings, then defaults (a
        # spelling not given reads None, as vLLM's unset field).
        given = self.__dict__.get("_given", {})
        if name in given:
            return given[name]
        if name in vllm_args.FIELDS:
            return getattr(EngineConfig(), name)
        if name in vllm_args.FRONTEND:
            return vllm_args.FRONTEND[name]
        if (
            name in vllm_args.SPELLINGS
            or name in vllm_args.SHORTHANDS
            or name == vllm_args.HF_TOKEN
        ):
            return None
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def create_engine_config(self, usage_context: Any = None) -> EngineConfig:
        """The ``EngineConfig`` these arguments describe. Raises ``EngineConfigError``
        naming the field. (``usage_context``: vLLM's, accepted and unused; ``hf_token`` is
        not part of the config: the engine's front doors export it when they start.)"""
        return EngineConfig(**vllm_args.translate(self._given))


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
_FIELD_NAMES += sorted([*vllm_args.FRONTEND, *vllm_args.SPELLINGS, vllm_args.HF_TOKEN])
# Set once both classes exist (AsyncEngineArgs has one field more).
EngineArgs.__dataclass_fields__ = _dataclass_fields([*_FIELD_NAMES, "disable_log_stats"])  # type: ignore[attr-defined]
AsyncEngineArgs.__dataclass_fields__ = _dataclass_fields(  # type: ignore[attr-defined]
    [*_FIELD_NAMES, "disable_log_stats", "enable_log_requests"]
)
