"""Benchmark servers in child processes on 127.0.0.1: ``actorllm serve`` (``launch_server``)
or any command that serves HTTP on a given port (``launch_process``, e.g. vLLM's server).

Each server binds loopback only, on a port the OS reports free; startup is bounded by
``timeout_s`` (``TimeoutError``; ``RuntimeError`` if the process exits first, with the tail
of its log when it has one). The child runs in its own process group, so
:meth:`ServerProcess.pause` / :meth:`~ServerProcess.resume` (SIGSTOP / SIGCONT) reach every
process it started: a server that is not being measured takes no CPU from the one that is
(interleaved rounds on a shared box). On exit the child gets SIGTERM (graceful shutdown),
then the whole group SIGKILL after ``stop_timeout_s``.

    with launch_server({"load_format": "dummy"}) as server:
        ...  # server.url: http://127.0.0.1:<port>; server.pause(), server.resume()
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx

from actorllm.compat.vllm.struct_flags import flag_for


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_argv(
    engine_kwargs: dict[str, Any], port: int, *, worker_class: str = "trio"
) -> list[str]:
    """The child's command line: ``actorllm serve [MODEL] --host 127.0.0.1 --port P ...``."""
    argv = [sys.executable, "-m", "actorllm.entrypoints.cli", "--log-level", "WARNING", "serve"]
    kwargs = dict(engine_kwargs)
    if kwargs.get("model") is not None:
        argv.append(str(kwargs.pop("model")))
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-interval", "0"]
    argv += ["--worker-class", worker_class]
    for key, value in kwargs.items():
        flag = flag_for(key)
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    return argv


class ServerProcess:
    """A started server: its ``url``, and SIGSTOP / SIGCONT for its whole process group."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, name: str) -> None:
        self.proc, self.url, self.name = proc, url, name

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)
        wait_group_stopped(self.proc.pid)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)


def wait_group_stopped(pgid: int, timeout_s: float = 2.0) -> bool:
    """Wait until every process of group ``pgid`` is stopped (or gone); False after
    ``timeout_s``, or where there is no ``/proc`` to tell. SIGSTOP is delivered
    asynchronously: a process busy on another core runs on for a moment, so a measurement
    started right after ``killpg(SIGSTOP)`` could still share the CPU with it."""
    proc = Path("/proc")
    if not proc.is_dir():
        return False
    deadline = time.monotonic() + timeout_s
    while True:
        running = False
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            fields = proc_stat(entry.name)
            if fields is None:
                continue  # gone meanwhile
            # T: stopped, t: traced, Z/X: exiting
            if int(fields[2]) == pgid and fields[0] not in ("T", "t", "Z", "X"):
                running = True
                break
        if not running:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)


def proc_stat(pid: int | str) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command name (state, ppid, pgrp, ...); None
    once the process is gone (or where there is no ``/proc``)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While inside, SIGTERM raises ``SystemExit(143)`` in the main thread, so the servers
    started inside are stopped on the way out: each runs in its own session, and one
    left SIGSTOPped would otherwise outlive this process, stopped. (Off the main thread,
    where Python cannot install handlers, nothing changes.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def launch_process(
    argv_for_port: Callable[[int], list[str]],
    *,
    name: str,
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    timeout_s: float = 300.0,
    stop_timeout_s: float = 30.0,
) -> Iterator[ServerProcess]:
    """Start ``argv_for_port(port)`` serving HTTP on 127.0.0.1:port and wait until its
    ``/health`` answers 200. ``log_path``: its stdout and stderr go there (else they are
    this process's)."""
    port = free_port()
    log: IO[bytes] | None = open(log_path, "wb") if log_path is not None else None  # noqa: SIM115
    proc = subprocess.Popen(
        argv_for_port(port),
        env=dict(env) if env is not None else None,
        stdout=log,
        stderr=subprocess.STDOUT if log is not None else None,
        start_new_session=True,  # its own process group: pause/resume/kill reach all of it
    )
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", name)
    try:
        _wait_healthy(proc, server.url, timeout_s, name=name, log_path=log_path)
        yield server
    finally:
        server.resume()  # a stopped process cannot handle SIGTERM
        proc.terminate()
        try:
            proc.wait(stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):  # children it left (an engine core)
            os.killpg(proc.pid, signal.SIGKILL)
        if log is not None:
            log.close()


@contextmanager
def launch_server(
    engine_kwargs: dict[str, Any],
    *,
    worker_class: str = "trio",
    timeout_s: float = 300.0,
    stop_timeout_s: float = 30.0,
) -> Iterator[ServerProcess]:
    """``actorllm serve`` with these engine settings, in dev mode (``/reset_prefix_cache``,
    which a benchmark's rounds call so that every round computes every prompt; the server
    listens on loopback only)."""
    with launch_process(
        lambda port: serve_argv(engine_kwargs, port, worker_class=worker_class),
        name="actorllm serve",
        env={**os.environ, "ACTORLLM_SERVER_DEV_MODE": "1"},
        timeout_s=timeout_s,
        stop_timeout_s=stop_timeout_s,
    ) as server:
        yield server


def _wait_healthy(
    proc: subprocess.Popen[bytes],
    url: str,
    timeout_s: float,
    *,
    name: str = "actorllm serve",
    log_path: Path | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"`{name}` exited with status {proc.returncode}{_log_tail(log_path)}"
            )
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"`{name}` was not healthy within {timeout_s:.0f} s{_log_tail(log_path)}")


def _log_tail(log_path: Path | None, lines: int = 30) -> str:
    if log_path is None or not log_path.exists():
        return ""
    tail = log_path.read_text(errors="replace").splitlines()[-lines:]
    return f"; the end of its log ({log_path}):\n" + "\n".join(tail)
