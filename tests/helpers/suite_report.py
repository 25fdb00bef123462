"""The end of every run names the machine and where the suite's time went, by file.

CI shows only the tail of its log; the slowest tests alone did not explain a run three
times longer than the same suite on a like machine (the time was spread over thousands of
small tests), so the per-file totals (with the highest 1-minute load average seen while
each file ran), what bounds the threads, and the processes still using the CPU at the end
(a leaked server or cluster slows every later test) are printed there too.
"""

from __future__ import annotations

import collections
import os

import pytest

from actorllm.bench.machine import cpu_model
from actorllm.kernels.cpu_features import cpu_flags
from actorllm.worker.cpu_threads import cgroup_cpu_limit, usable_cpus

TOP_FILES = 15
_seconds: collections.Counter[str] = collections.Counter()
_tests: collections.Counter[str] = collections.Counter()
_load: dict[str, float] = {}


def worker_threads(workers: int) -> int | None:
    """The torch threads of each of ``workers`` pytest-xdist workers (their share of the
    usable CPUs); None where the default stays: no workers, or ``OMP_NUM_THREADS`` set."""
    if workers < 2 or os.environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, usable_cpus() // workers)


def machine_line(workers: int = 0) -> str:
    import torch

    share = worker_threads(workers)
    threads = f"{workers} workers of {share} torch threads" if share else "default threads"

    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in cpu_flags()]
    return (
        f"{cpu_model()}; cpu_count {os.cpu_count()}, usable {usable_cpus()}, "
        f"cgroup quota {cgroup_cpu_limit()}; {' '.join(isa) or 'no AVX2'}; "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads here; {threads}; "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})"
    )


def _workers(config: pytest.Config) -> int:
    return int(getattr(config.option, "numprocesses", None) or 0)


def pytest_report_header(config: pytest.Config) -> str:
    return f"machine: {machine_line(_workers(config))}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _seconds[path] += report.duration
    if report.when == "call":
        _tests[path] += 1
        _load[path] = max(_load.get(path, 0.0), os.getloadavg()[0])


def _by_directory() -> str:
    dirs: collections.Counter[str] = collections.Counter()
    for path, seconds in _seconds.items():
        parts = path.split("/")
        dirs["/".join(parts[:2]) if len(parts) > 2 else parts[0]] += seconds
    return ", ".join(f"{d} {s:.0f}" for d, s in dirs.most_common(12))


def _busy_processes(top: int = 6) -> list[str]:
    """The processes that used the most CPU, other than this one: name, pid, CPU seconds
    and state (R: running now)."""
    tick = os.sysconf("SC_CLK_TCK")
    seen = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, _, rest = f.read().rpartition(")")
            fields = rest.split()
            cpu = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
            seen.append((cpu, f"{head.split('(', 1)[1]}[{pid}] {cpu:.0f} s {fields[0]}"))
        except (OSError, IndexError, ValueError):
            continue
    return [line for _, line in sorted(seen, reverse=True)[:top]]


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds:
        return
    tr = terminalreporter
    total = sum(_seconds.values())
    tr.section(f"seconds per test file (top {TOP_FILES} of {total:.0f} s in all workers)")
    for path, seconds in _seconds.most_common(TOP_FILES):
        load = _load.get(path, 0.0)
        tr.write_line(f"{seconds:8.1f} s  {_tests[path]:4d} tests  load {load:4.1f}  {path}")
    tr.write_line(f"by directory (s): {_by_directory()}")
    tr.write_line(f"most CPU at the end: {'; '.join(_busy_processes())}")
    tr.write_line(f"machine: {machine_line(_workers(tr.config))}")
