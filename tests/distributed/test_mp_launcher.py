"""The ``mp`` rank launcher (distributed/mp_launcher.py): a rank whose entry returns exits
at once with code 0, its interpreter's teardown skipped (an atexit hook does not run) and
its buffered output flushed; a rank that raises exits with code 1, reported by the
monitor."""

from __future__ import annotations

import atexit
import sys
import threading
from pathlib import Path

from actorllm.distributed.mp_launcher import MpRankGroup


def _returns(rank: int, directory: str) -> None:
    atexit.register(Path(directory, f"atexit-{rank}").touch)
    sys.stdout = Path(directory, f"out-{rank}").open("w")  # noqa: SIM115 (flushed by the launcher)
    print("served", rank)


def _raises(rank: int, directory: str) -> None:
    sys.stderr = Path(directory, "err").open("w")  # noqa: SIM115 (the traceback lands here)
    raise RuntimeError(f"rank {rank} failed (test)")


def _run(entry: object, directory: Path) -> list[tuple[int, str]]:
    reports: list[tuple[int, str]] = []
    seen = threading.Event()

    def on_exit(rank: int, why: str) -> None:
        reports.append((rank, why))
        seen.set()

    group = MpRankGroup(world_size=2, name="test-mp")
    group.start(entry, lambda rank: (rank, str(directory)), on_exit)  # type: ignore[arg-type]
    assert seen.wait(60)
    group.stop(grace_s=0.0)
    return reports


def test_a_rank_that_returns_exits_with_0_skipping_teardown_output_flushed(tmp_path: Path) -> None:
    ((rank, why),) = _run(_returns, tmp_path)
    assert rank == 1 and why.endswith("exited: 0"), why
    assert (tmp_path / "out-1").read_text() == "served 1\n"
    assert not (tmp_path / "atexit-1").exists()  # the interpreter's teardown was skipped


def test_a_rank_that_raises_exits_with_1_and_its_traceback(tmp_path: Path) -> None:
    ((rank, why),) = _run(_raises, tmp_path)
    assert rank == 1 and why.endswith("exited: 1"), why
    assert "rank 1 failed (test)" in (tmp_path / "err").read_text()
