"""Joining an existing Ray cluster, refusing clearly when there is none.

``distributed_executor_backend="ray"`` places ranks on a Ray cluster that someone started
(``ray start --head`` on one node, ``ray start --address=...`` on the others). The engine
connects with ``ray.init(address="auto")``: ``RAY_ADDRESS`` when set, else the cluster that
``ray start`` recorded on this node. When none is found it refuses with
:class:`RayClusterError` instead of starting a private single-node cluster as vLLM does:
a cluster the engine started would die with it and span one node only, which is the
``mp`` backend's job.

Addresses: with ``RAY_ADDRESS`` naming the head (``host:port``), the head is first probed
with a plain TCP connect (``HEAD_CONNECT_TIMEOUT_S``), so a dead or unreachable head is a
:class:`RayClusterError` naming it within seconds, where ``ray.init`` would retry for a
minute. This host's own address (the Ray node the engine attaches to) is
``ACTORLLM_HOST_IP`` (or vLLM's ``VLLM_HOST_IP``) when set, else the source address of the
route to the head: on a host with several interfaces, the one the cluster reaches it by
(Ray's own guess asks the route to a public address, which is the wrong interface on a
private cluster network). Loopback is never chosen: Ray resolves that itself.

Ray is an optional dependency (``pip install actorllm[ray]``); it is imported here, on
first use, never at ``import actorllm``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from types import ModuleType

HEAD_CONNECT_TIMEOUT_S = 5.0  # a TCP connect to the head's GCS port
HOST_IP_VARS = ("ACTORLLM_HOST_IP", "VLLM_HOST_IP")


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
            head = head_address()
            if head is not None:
                probe_head(*head)
            node_ip = host_ip(head)
            try:
                # log_to_driver off: rank processes' output stays in Ray's session logs
                # on their node rather than being echoed, line by line, into the engine.
                ray.init(
                    address="auto",
                    logging_level="WARNING",
                    log_to_driver=False,
                    _node_ip_address=node_ip,
                )
            except RuntimeError as e:  # Ray found the cluster but no node of this host
                raise RayClusterError(
                    f"this host ({node_ip or 'address chosen by Ray'}) has no node of the Ray "
                    f"cluster at {os.environ.get('RAY_ADDRESS', 'auto')}: run `ray start "
                    "--address=<head>:6379` here, or set ACTORLLM_HOST_IP (VLLM_HOST_IP) to "
                    f"this host's address on the cluster network. Ray said: {e}"
                ) from e
            except ConnectionError as e:
                raise RayClusterError(
                    "distributed_executor_backend='ray' runs on an existing Ray cluster and "
                    "none was found: start one (`ray start --head`, then `ray start "
                    "--address=<head>:6379` on other nodes) or set RAY_ADDRESS. "
                    f"Ray said: {e}"
                ) from e
    return ray


def head_address() -> tuple[str, int] | None:
    """The head's (host, port) from ``RAY_ADDRESS``; None when it is unset, ``auto``,
    ``local`` or a Ray Client ``ray://`` address (those are Ray's to resolve)."""
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if not address or address in ("auto", "local") or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise RayClusterError(f"RAY_ADDRESS={address!r} is not host:port")
    return host.strip("[]"), int(port)


def probe_head(host: str, port: int, timeout_s: float = HEAD_CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`RayClusterError` naming ``host:port`` unless a TCP connection to it
    opens within ``timeout_s``."""
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise RayClusterError(
            f"the Ray head at {host}:{port} (RAY_ADDRESS) is unreachable from this host: "
            f"{why} (after at most {timeout_s:.0f}s). Is `ray start --head` running there, "
            "and is its port open to this host?"
        ) from e


def host_ip(head: tuple[str, int] | None) -> str | None:
    """The address of this host's Ray node: ``ACTORLLM_HOST_IP`` / ``VLLM_HOST_IP``, else
    the source address of the route to ``head``; None (Ray's choice) without a head or
    when that route is loopback."""
    for var in HOST_IP_VARS:
        if os.environ.get(var):
            return os.environ[var]
    if head is None:
        return None
    try:
        family = socket.AF_INET6 if ":" in head[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(head)  # UDP: no packet is sent, the kernel only picks the route
            source = str(s.getsockname()[0])
    except OSError:
        return None
    return None if ipaddress.ip_address(source).is_loopback else source
