"""(a) The kernel tests: ``pytest -m cuda tests/kernels`` (bf16/fp16 against torch
references), summarised from pytest's JUnit XML. Dry run: one kernel file's CPU cases
under Triton's interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.gpu_check.common import Ctx

DRY_RUN_SELECTION = ["tests/kernels/test_token_bitmask.py", "-k", "cpu"]


def run(ctx: Ctx, budget_s: float) -> None:
    junit = ctx.work / "kernels-junit.xml"
    # On the GPU host (16 cores) four workers compile the Triton kernels side by side.
    select = DRY_RUN_SELECTION if ctx.dry_run else ["-m", "cuda", "tests/kernels", "-n", "4"]
    cmd = [
        sys.executable, "-m", "pytest", *select, "-q", "-p", "no:cacheprovider",
        "-o", "addopts=", "--timeout", "90", f"--junitxml={junit}",
    ]  # fmt: skip
    env = dict(os.environ)
    if ctx.dry_run:
        env["TRITON_INTERPRET"] = "1"
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=max(budget_s - 10, 10)
        )
    except subprocess.TimeoutExpired as e:
        ctx.check("pytest finished in its time box", False, budget_s=budget_s)
        ctx.extra["log_tail"] = (e.stdout or b"")[-4000:] if isinstance(e.stdout, str) else ""
        summarise(ctx, junit)
        return
    ctx.extra["log_tail"] = proc.stdout[-4000:] + proc.stderr[-1500:]
    ctx.check("pytest exit code", proc.returncode == 0, rc=proc.returncode)
    summarise(ctx, junit)


def summarise(ctx: Ctx, junit: Path) -> None:
    """Counts and each failure's test name and first lines, from the JUnit XML."""
    if not junit.exists():
        ctx.check("junit report written", False)
        return
    root = ET.parse(junit).getroot()
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    failures: list[dict[str, str]] = []
    by_file: dict[str, dict[str, int]] = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        fname = (case.get("classname") or "").rsplit(".", 1)[-1]
        kind = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                kind = {"failure": "failed"}.get(child.tag, child.tag)
                if kind != "skipped":
                    msg = (child.get("message") or "") + "\n" + (child.text or "")[-600:]
                    failures.append({"test": name, "kind": kind, "message": msg[:900]})
        counts[kind] += 1
        by_file.setdefault(fname, dict.fromkeys(counts, 0))[kind] += 1
    ctx.extra["counts"] = counts
    ctx.extra["by_file"] = by_file
    ctx.extra["failures"] = failures[:60]
    ctx.check(
        "kernel tests pass",
        counts["passed"] > 0 and not counts["failed"] and not counts["error"],
        **counts,
    )
