"""Find the custom logits processor classes: installed plugins (entry-point groups
``actorllm.logits_processors`` and vLLM's ``vllm.logits_processors``), then the ones named
by ``--logits-processors`` / ``LLM(logits_processors=[...])`` as ``module:Class`` (vLLM's
syntax; classes given directly are accepted offline and travel by their qualified name)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from actorllm.worker.logitsprocs.interface import LogitsProcessor

PLUGIN_GROUPS = ("actorllm.logits_processors", "vllm.logits_processors")


def qualified_name(cls: type) -> str:
    """``module:Qual.Name``, the form a class travels in (loadable by :func:`load_class`)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def load_class(fqcn: str) -> type[LogitsProcessor]:
    """The class named ``module:Class``; ValueError naming it for anything else."""
    module_name, sep, qualname = fqcn.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(
            f"Invalid logits processor FQCN {fqcn!r}. Expected format: '<module>:<type>'"
        )
    try:
        obj: Any = importlib.import_module(module_name)
        for attr in qualname.split("."):
            obj = getattr(obj, attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"logits processor {fqcn!r} cannot be loaded: {exc}") from exc
    return _checked(obj, fqcn)


def _checked(obj: Any, name: str) -> type[LogitsProcessor]:
    if not isinstance(obj, type) or not issubclass(obj, LogitsProcessor):
        raise ValueError(
            f"logits processor {name!r} must be a subclass of LogitsProcessor "
            "(actorllm.v1.sample.logits_processor.LogitsProcessor)"
        )
    return obj


@lru_cache(maxsize=1)
def plugin_classes() -> tuple[type[LogitsProcessor], ...]:
    """The installed plugins' classes (none installed: empty), read once per process as
    vLLM reads its plugins: scanning every installed distribution's entry points took
    ~40 ms of each engine start."""
    classes = []
    for group in PLUGIN_GROUPS:
        for ep in entry_points(group=group):
            try:
                classes.append(_checked(ep.load(), ep.value))
            except Exception as exc:
                raise ValueError(f"logits processor plugin {ep.value!r}: {exc}") from exc
    return tuple(classes)


@lru_cache(maxsize=16)
def load_classes(names: tuple[str, ...]) -> tuple[type[LogitsProcessor], ...]:
    """Plugins, then the named classes, in order."""
    return (*plugin_classes(), *(load_class(n) for n in names))


def as_names(specs: str | type | Sequence[str | type] | None) -> tuple[str, ...]:
    """``--logits-processors`` entries (FQCN strings or classes, or one of them) as FQCN
    strings, each checked to load."""
    if isinstance(specs, str | type):
        specs = [specs]
    names = []
    for spec in specs or ():
        if isinstance(spec, type):
            _checked(spec, spec.__name__)
            names.append(qualified_name(spec))
        elif isinstance(spec, str):
            load_class(spec)
            names.append(spec)
        else:
            raise ValueError(
                f"logits_processors entries are 'module:Class' strings or classes, got {spec!r}"
            )
    return tuple(names)
