"""``python -m actorllm.entrypoints.launchers.run_batch`` is ``run-batch`` (vLLM 0.32's
module path, as its test_metrics_exist_run_batch launches it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_launcher_module_is_run_batch(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    missing = str(tmp_path / "missing.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "actorllm.entrypoints.launchers.run_batch", "-i", missing,
         "-o", str(tmp_path / "out.jsonl"), "--enable-metrics", "--port", "0"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert done.returncode == 2 and "cannot read --input-file" in done.stderr
