"""``worker_extension_cls``: a user's class mixed into every worker (vLLM's parallel-config
option of that name).

RL frameworks (TRL's ``WeightSyncWorkerExtension``, OpenRLHF's and verl's worker wrappers)
ship a class whose methods they call by name through ``collective_rpc``; inside them
``self`` is the worker: ``self.model_runner.model``, ``self.device``, ``self.rank``,
``self.model_config``, ``self.load_weights(...)``. :func:`worker_class` resolves the dotted
path and returns a subclass of :class:`~actorllm.worker.worker.Worker` with the extension as
a second base, the same class on every rank (rank 0's worker thread, the tensor-parallel
rank processes, a Ray actor), each resolving the path itself. Unlike vLLM, the worker class
itself is never changed: each engine gets its own subclass.

A name the extension shares with the worker (a method, or an attribute a worker sets) would
silently replace the worker's own and break the engine; it is refused, naming both.

    >>> worker_class("") is Worker
    True
    >>> worker_class("no.such.module.Ext")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    actorllm.worker.extension.WorkerExtensionError: ... cannot be imported: No module named 'no'.
"""

from __future__ import annotations

import functools
import importlib

from actorllm.worker.worker import Worker


class WorkerExtensionError(ValueError):
    """The ``worker_extension_cls`` cannot be used (not importable, not a class, or it
    redefines a name of the worker)."""

    param = "worker_extension_cls"


def resolve(path: str) -> type:
    """The class at dotted ``path`` (``package.module.Class``)."""
    module_name, _, name = path.rpartition(".")
    if not module_name or not name:
        raise WorkerExtensionError(
            f"worker_extension_cls {path!r} must be a dotted path: package.module.Class."
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise WorkerExtensionError(f"worker_extension_cls {path!r} cannot be imported: {e}.") from e
    cls = getattr(module, name, None)
    if cls is None:
        raise WorkerExtensionError(
            f"worker_extension_cls {path!r}: module {module_name!r} has no {name!r}."
        )
    if not isinstance(cls, type):
        raise WorkerExtensionError(
            f"worker_extension_cls {path!r} is not a class (it is {type(cls).__name__} {cls!r})."
        )
    return cls


def worker_names() -> set[str]:
    """Every name a worker has: its class's attributes and those its ``__init__`` sets."""
    names = {n for n in dir(Worker) if not n.startswith("__")}
    return names | set(Worker.__annotations__)


@functools.cache
def worker_class(path: str) -> type[Worker]:
    """:class:`Worker` with the extension at ``path`` mixed in ("" : the plain Worker).
    Raises :class:`WorkerExtensionError` naming what is wrong."""
    if not path:
        return Worker
    ext = resolve(path)
    if issubclass(ext, Worker):
        raise WorkerExtensionError(
            f"worker_extension_cls {path!r} subclasses the worker; an extension is a plain "
            "class whose methods are mixed into the worker."
        )
    clashes = sorted(n for n in dir(ext) if not n.startswith("__") and n in worker_names())
    if clashes:
        raise WorkerExtensionError(
            f"worker_extension_cls {path!r} defines {', '.join(clashes)}, which the worker "
            "already has; rename them in the extension."
        )
    return type(f"{ext.__name__}Worker", (Worker, ext), {"__module__": __name__})
