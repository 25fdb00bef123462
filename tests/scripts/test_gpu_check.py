"""``scripts/gpu_check.sh --dry-run``: the GPU check's own logic (arguments, one JSON per
group, time boxes, a failing or hung group not stopping the rest, the summary) proven on
CPU, so that a GPU lease is spent measuring, not debugging the script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
GROUPS = ["kernels", "parity", "graphs", "overlap", "memory", "sleep", "speed"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    full.pop("OUT", None)
    return subprocess.run(
        [str(SCRIPT), *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600
    )


@pytest.mark.timeout(600)
def test_dry_run_writes_every_group(tmp_path: Path) -> None:
    proc = _run("--dry-run", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary["groups"]) == [*GROUPS, "tp"]
    assert summary["groups"]["tp"]["status"] == "skipped"
    for group in GROUPS:
        result = json.loads((tmp_path / f"{group}.json").read_text())
        assert result["status"] == "pass", (group, result["failed"])
        assert result["info"]["dry_run"] is True
        assert result["checks"], group
    assert len(list(tmp_path.iterdir())) <= 8  # what a device call brings back
    speed = json.loads((tmp_path / "speed.json").read_text())
    assert {r["batch"] for r in speed["rows"] if "batch" in r} == {1, 4}
    assert "total" in proc.stdout.splitlines()[-1]


def test_a_hung_group_is_cut_at_its_box_and_the_rest_runs(tmp_path: Path) -> None:
    # sleep's box of 1 s (2 s in a dry run) ends it while torch still imports
    proc = _run(
        "--dry-run", "--out", str(tmp_path), "--only", "sleep,memory",
        env={"GPU_CHECK_BOXES": "sleep:1 memory:60"},
    )  # fmt: skip
    assert proc.returncode == 1
    groups = json.loads((tmp_path / "summary.json").read_text())["groups"]
    assert groups["sleep"]["status"] == "timeout"
    assert groups["memory"]["status"] == "pass"
    assert not (tmp_path / "sleep.json").exists()


def test_unknown_argument_is_refused(tmp_path: Path) -> None:
    proc = _run("--dry-rnu")
    assert proc.returncode == 2
    assert "unknown argument --dry-rnu" in proc.stderr


def test_without_cuda_the_real_run_says_so(tmp_path: Path) -> None:
    """Not a dry run on a machine without CUDA: each group records the reason."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    no_wheels = {"GPU_CHECK_WHEELS": str(tmp_path / "none")}  # the GPU image's wheels
    proc = _run("--out", str(tmp_path), "--only", "memory", env=no_wheels)
    assert proc.returncode == 1
    result = json.loads((tmp_path / "memory.json").read_text())
    assert result["status"] == "error"
    assert "no CUDA device" in result["error"]
