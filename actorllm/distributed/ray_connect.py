"""Joining an existing Ray cluster, refusing clearly when there is none.

``distributed_executor_backend="ray"`` places ranks on a Ray cluster that someone started
(``ray start --head`` on one node, ``ray start --address=...`` on the others). The engine
connects with ``ray.init(address="auto")``: ``RAY_ADDRESS`` when set, else the cluster that
``ray start`` recorded on this node. When none is found it refuses with
:class:`RayClusterError` instead of starting a private single-node cluster as vLLM does:
a cluster the engine started would die with it and span one node only, which is the
``mp`` backend's job.

Ray is an optional dependency (``pip install actorllm[ray]``); it is imported here, on
first use, never at ``import actorllm``.
"""

from __future__ import annotations

import threading
from types import ModuleType


class RayClusterError(ValueError):
    """The Ray backend cannot run: Ray is not installed, or no cluster is reachable (or it
    cannot place the ranks). A ``ValueError``, like a refused configuration: the value
    ``"ray"`` of ``distributed_executor_backend`` cannot be honoured here, and the CLI
    reports it as one line (exit 2) rather than a traceback."""

    param = "distributed_executor_backend"


_lock = threading.Lock()


def import_ray() -> ModuleType:
    """The ``ray`` module, or :class:`RayClusterError` saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise RayClusterError(
            "distributed_executor_backend='ray' needs Ray: pip install 'actorllm[ray]'"
        ) from e
    return ray


def connect() -> ModuleType:
    """Connect this process to the running Ray cluster once (later calls reuse the
    connection; thread-safe) and return the ``ray`` module. Blocks for the handshake
    (about a second); raises :class:`RayClusterError` when no cluster is running."""
    ray = import_ray()
    with _lock:
        if not ray.is_initialized():
            try:
                # log_to_driver off: rank processes' output stays in Ray's session logs
                # on their node rather than being echoed, line by line, into the engine.
                ray.init(address="auto", logging_level="WARNING", log_to_driver=False)
            except ConnectionError as e:
                raise RayClusterError(
                    "distributed_executor_backend='ray' runs on an existing Ray cluster and "
                    "none was found: start one (`ray start --head`, then `ray start "
                    "--address=<head>:6379` on other nodes) or set RAY_ADDRESS. "
                    f"Ray said: {e}"
                ) from e
    return ray
