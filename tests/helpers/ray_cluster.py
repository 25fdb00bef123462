"""A throw-away single-node Ray cluster for tests: `ray start --head --block` in a temp dir.

Theory of operation: ``ray start --block`` stays in the foreground as the parent of the
cluster's processes (GCS server, raylet, autoscaler monitor, agents) and, on SIGTERM, drains
the node and stops them. Workers are the raylet's children but put themselves in their own
process groups, so a process-group kill would miss them; instead the stop walks the process
tree under our ``ray start`` (by pid, read from /proc) before signalling it, and kills by
pid whatever is still alive afterwards. Nothing is stopped by name (``ray stop`` would stop
every Ray cluster this user runs on the machine, other test sessions' included).

Every port is left to the OS (``--port=0`` picks the GCS port; the other services bind
ephemeral ports when none is given), so clusters of parallel sessions never collide. The
dashboard, the log monitor and usage stats are off: tests need none of them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import final

from actorllm.bench.launch import proc_stat

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc), empty where the process is gone."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text()
            found.extend(int(child) for child in text.split())
    except OSError:
        return []
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the process tree, parents before children."""
    order: list[int] = []
    todo = [pid]
    while todo:
        for child in _children(todo.pop()):
            order.append(child)
            todo.append(child)
    return order


def _identity(pid: int) -> tuple[int, str] | None:
    """(pid, start time) of a live process, None once it has exited: the start time keeps
    a recycled pid from being taken for the process it once named."""
    fields = proc_stat(pid)
    if fields is None:
        return None
    # fields[0] is the state (a zombie has exited, only its parent's wait is missing);
    # fields[19] is field 22 of proc(5), the start time in clock ticks since boot.
    return None if fields[0] == "Z" else (pid, fields[19])


def is_running(pid: int) -> bool:
    return _identity(pid) is not None


def _still_running(procs: set[tuple[int, str]], seconds: float) -> set[tuple[int, str]]:
    """Those of ``procs`` (``_identity`` pairs) still running after waiting up to
    ``seconds`` for them all to exit."""
    deadline = time.monotonic() + seconds
    while procs and time.monotonic() < deadline:
        procs = {i for i in procs if _identity(i[0]) == i}
        time.sleep(0.05)
    return procs


@final
class LocalRayCluster:
    """One head node owned by this process; ``address`` is its GCS address (``RAY_ADDRESS``).

    >>> cluster = LocalRayCluster(num_cpus=2)  # doctest: +SKIP
    >>> cluster.start(); cluster.address  # doctest: +SKIP
    '192.0.2.2:41233'
    >>> cluster.stop()  # doctest: +SKIP
    """

    def __init__(self, num_cpus: int) -> None:
        self.num_cpus = num_cpus
        self._tmp = tempfile.TemporaryDirectory(prefix="actorllm-ray-")
        self.temp_dir = Path(self._tmp.name)
        self.address = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the head and block until its address file names the GCS (or raise)."""
        ray = Path(sys.executable).with_name("ray")
        log = (self.temp_dir / "ray-start.log").open("wb")
        # Ray refuses unix-socket paths over 107 bytes; the default /tmp-based temp dir is
        # short, so keep it there rather than under pytest's long tmp_path.
        self._proc = subprocess.Popen(
            [str(ray), "start", "--head", "--block", *self._flags()],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C at the terminal reaches pytest, not Ray
            env=self._env(),
        )
        address_file = self.temp_dir / "ray_current_cluster"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not address_file.exists() or not address_file.read_text().strip():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                log = self.log()
                self.stop()
                raise RuntimeError(f"ray start failed:\n{log}")
            time.sleep(0.1)
        self.address = address_file.read_text().strip()

    def _env(self) -> dict[str, str]:
        """Workers inherit the raylet's environment: put this checkout first on their path
        so they import the code under test (and ``tests.helpers``), as pytest does."""
        path = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}

    def _flags(self) -> list[str]:
        return [
            f"--num-cpus={self.num_cpus}",
            "--num-gpus=0",
            "--port=0",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
            "--include-dashboard=false",
            "--include-log-monitor=false",
        ]

    def log(self) -> str:
        path = self.temp_dir / "ray-start.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def processes(self) -> list[int]:
        """Pids of our ``ray start`` and everything it started (for leak checks)."""
        if self._proc is None or self._proc.poll() is not None:
            return []
        return [self._proc.pid, *descendants(self._proc.pid)]

    def stop(self) -> None:
        """Stop the cluster and every process it started; idempotent, never raises."""
        proc, self._proc = self._proc, None
        if proc is not None:
            tree = {i for i in map(_identity, descendants(proc.pid)) if i is not None}
            proc.send_signal(signal.SIGTERM)  # ray start drains and stops its children
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            tree = _still_running(tree, 5.0)
            for pid, _ in tree:  # did not stop with the node: by pid, never by name
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            # SIGKILL is not instant: a process with many threads on a loaded host takes a
            # while to exit, and the leak check right after this must not catch it dying.
            _still_running(tree, 10.0)
        self._tmp.cleanup()
