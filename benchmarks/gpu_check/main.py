"""Run one group of the GPU check: ``python -m benchmarks.gpu_check.main GROUP --out DIR
[--dry-run] [--budget S]``. The group's JSON is written whatever happens inside it; the
shell script's ``timeout`` covers a group that hangs."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

GROUPS = ("kernels", "parity", "graphs", "overlap", "memory", "sleep", "speed")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check")
    p.add_argument("group", choices=GROUPS)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dry-run", action="store_true", help="CPU twins at tiny shapes")
    p.add_argument("--budget", type=float, default=120.0, help="seconds this group may take")
    args = p.parse_args(argv)
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    from benchmarks.gpu_check.common import Ctx, write_result

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("GPU_CHECK_WORK") or tempfile.mkdtemp(prefix="gpu_check-"))
    ctx = Ctx(args.group, args.out, args.dry_run, work)
    t0 = time.perf_counter()
    if not args.dry_run and not torch.cuda.is_available():
        write_result(ctx, "error", 0.0, error="no CUDA device (use --dry-run on CPU)")
        return 2
    status = "pass"
    try:
        importlib.import_module(f"benchmarks.gpu_check.{args.group}").run(ctx, args.budget)
    except Exception as e:
        status = "error"
        ctx.extra["error"] = f"{type(e).__name__}: {e}"[:1000]
        ctx.extra["traceback"] = traceback.format_exc()[-4000:]
        print(ctx.extra["traceback"], file=sys.stderr, flush=True)
    path = write_result(ctx, status, time.perf_counter() - t0)
    print(f"[{args.group}] wrote {path}", flush=True)
    return 0 if status == "pass" and not any(c.get("ok") is False for c in ctx.checks) else 1


if __name__ == "__main__":
    sys.exit(main())
