"""Gather the groups' JSON into ``summary.json`` (with the tail of each group's log and its
exit code) and print one line per group: what the reply of a device call shows first."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    out, logs = Path(argv[0]), Path(argv[1])
    groups: dict[str, Any] = {}
    order = ["kernels", "parity", "graphs", "overlap", "memory", "sleep", "speed", "tp"]
    files = sorted(logs.glob("*.rc"), key=lambda f: order.index(f.stem) if f.stem in order else 99)
    for rc_file in files:
        name = rc_file.stem
        rc = int(rc_file.read_text().split()[0])
        box = float((logs / f"{name}.box").read_text())
        secs = float((logs / f"{name}.secs").read_text())
        log = (
            (logs / f"{name}.log").read_text(errors="replace")
            if (logs / f"{name}.log").exists()
            else ""
        )
        result = out / f"{name}.json"
        if name == "tp":
            status = "skipped"
        elif result.exists():
            status = json.loads(result.read_text())["status"]
        else:
            status = "timeout" if rc in (124, 137) else f"crashed (rc {rc})"
        groups[name] = {
            "status": status,
            "rc": rc,
            "seconds": secs,
            "time_box_s": box,
            "log_tail": log[-2500:],
        }
    groups.setdefault("tp", {"status": "skipped"})["reason"] = (
        "tensor parallel is CPU-only (gloo) until NCCL lands"
    )
    total = sum(g.get("seconds", 0) for g in groups.values())
    (out / "summary.json").write_text(
        json.dumps({"total_s": round(total, 1), "groups": groups}, indent=1)
    )
    print(f"{'group':10} {'status':18} {'seconds':>8} {'box':>6}")
    for name, g in groups.items():
        print(
            f"{name:10} {g['status']:18} {g.get('seconds', 0):8.1f} {g.get('time_box_s', 0):6.0f}"
        )
    print(f"total {total:.1f} s")
    return 0 if all(g["status"] in ("pass", "skipped") for g in groups.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
