"""Run a measurement inside another checkout: A/B benchmarks of two trees
(``benchmarks/overhead_ab.py``, ``benchmarks/output_stream_bench.py``).

The probe is Python source run in a fresh interpreter with ``tree`` as its working
directory and first on ``PYTHONPATH``, so it imports that tree's ``actorllm``; its last line
of output is one JSON object, the result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_probe(tree: Path, probe: str, argv: list[str]) -> dict[str, Any]:
    """``python -c probe *argv`` in ``tree``; the JSON object it printed last."""
    out = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        cwd=tree,
        env=dict(os.environ, PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result
