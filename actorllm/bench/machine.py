"""What a result was measured on, and the JSON document every benchmark writes.

doc = result_document("throughput", figures={"actorllm": {...}}, config={...})
write_json("benchmarks/results/x.json", doc)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name (``kernels/cpu_features.py``; imported here when asked, so that
    this module stays light)."""
    from actorllm.kernels.cpu_features import cpu_model as read

    return read()


def machine_info() -> dict[str, Any]:
    """CPU model, core count and cgroup CPU quota, GPU name (if any), Python / torch /
    actorllm versions."""
    import torch

    from actorllm import __version__ as actorllm_version
    from actorllm.worker.cpu_threads import cgroup_cpu_limit

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cgroup_cpu_limit": cgroup_cpu_limit(),
        "gpu": gpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "actorllm": actorllm_version,
        "isa": cpu_isa(),
        "loadavg": os.getloadavg(),
    }


def cpu_times() -> list[int] | None:
    """The host's aggregate CPU time counters (/proc/stat's ``cpu`` line, in clock ticks:
    user nice system idle iowait irq softirq steal ...); None where there is no /proc."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    return [int(x) for x in fields[1:]] if fields and fields[0] == "cpu" else None


def gemm_probe_ms(samples: int = 9) -> float:
    """The host's compute speed now: the median time (ms) of one [256 x 1024] x
    [1024 x 4096] matmul (bfloat16 where the CPU has native bf16 dot products, else
    float32), each of ``samples`` samples the mean of 5 calls (~0.2 s in all).

    Steal misses what moves this on a shared VM: on the 2-core Xeon (AMX) the same matmul
    took 1.95 to 5.69 ms within one minute, in runs of seconds, with steal under 1 %
    (another tenant on the physical cores, whose AMX units two hyperthreads share). A run's
    figures carry the probe taken just before it, so two runs compare on the same footing.
    """
    import statistics

    import torch

    from actorllm.kernels.cpu_features import native_bf16

    dtype = torch.bfloat16 if native_bf16() else torch.float32
    x = torch.randn(256, 1024, dtype=dtype)
    w = torch.randn(4096, 1024, dtype=dtype)
    times = []
    with torch.inference_mode():
        torch.nn.functional.linear(x, w)  # first call: the kernel is made
        for _ in range(samples):
            t0 = time.perf_counter()
            for _ in range(5):
                torch.nn.functional.linear(x, w)
            times.append((time.perf_counter() - t0) / 5 * 1000)
    return round(statistics.median(times), 3)


def steal_share(before: list[int] | None, after: list[int] | None) -> float | None:
    """The share of the host's CPU time the hypervisor gave to other guests between two
    :func:`cpu_times` readings (steal: on a shared VM a run's speed moves with it), or None.

    >>> steal_share([100, 0, 0, 100, 0, 0, 0, 0], [150, 0, 0, 130, 0, 0, 0, 20])
    0.2
    """
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return None
    delta = [b - a for a, b in zip(before[:8], after[:8], strict=True)]
    total = sum(delta)
    return round(delta[7] / total, 4) if total > 0 else None


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed (``actorllm bench ...``), quoted for a shell."""
    args = sys.argv if argv is None else argv
    prog = Path(args[0]).name if args else "actorllm"
    if prog in ("cli.py", "__main__.py", "-c"):  # python -m actorllm.entrypoints.cli
        prog = "actorllm"
    return shlex.join([prog, *args[1:]])


def result_document(
    benchmark: str,
    *,
    figures: dict[str, Any],
    config: dict[str, Any] | None = None,
    args: argparse.Namespace | None = None,
    argv: list[str] | None = None,
) -> dict[str, Any]:
    """The JSON result: benchmark name, UTC date, the process's command line, the parsed
    ``args`` (exact even when the CLI was called in-process), machine, config, figures."""
    return {
        "benchmark": benchmark,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line(argv),
        "arguments": _arguments(args),
        "machine": machine_info(),
        "config": config or {},
        "figures": figures,
    }


def _arguments(args: argparse.Namespace | None) -> dict[str, Any]:
    if args is None:
        return {}
    out = {}
    for key, value in sorted(vars(args).items()):
        if key.startswith("_") or callable(value):
            continue
        out[key] = value if isinstance(value, str | int | float | bool | None) else str(value)
    return out


def write_json(path: str | Path, doc: dict[str, Any]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=2) + "\n")


def cpu_isa() -> dict[str, Any]:
    """What the CPU offers for matmuls: torch's detected capability and the /proc/cpuinfo
    flags that matter (AVX-512, its BF16 and VNNI extensions, AMX tiles)."""
    import torch

    flags: set[str] = set()
    ident: dict[str, Any] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = (part.strip() for part in line.partition(":"))
                if key == "flags":
                    flags = set(value.split())
                    break
                if key == "vendor_id":
                    ident["vendor"] = value
                elif key in ("cpu family", "model", "stepping") and value.isdigit():
                    ident[key.replace("cpu ", "")] = int(value)
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
    return {
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "flags": [f for f in wanted if f in flags],
        # "AMD EPYC" names every generation: family 23 is Zen 1/2, 25 Zen 3/4 (the model
        # number tells which), and their vector units differ (Zen 1: 128-bit halves).
        "cpu_id": ident,
    }
