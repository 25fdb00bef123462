"""scripts/cpu_host_check.sh --list: every stage, its result file named for this host."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["setup", "roofline", "realsize", "serve75m", "serve06b", "quant", "quantvllm",
          "overhead", "chaos_bf16"]  # fmt: skip


def _list(*args: str) -> str:
    run = subprocess.run(
        ["bash", str(ROOT / "scripts/cpu_host_check.sh"), "--list", *args],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return run.stdout


def test_it_lists_every_stage_with_the_hosts_files() -> None:
    out = _list()
    tag = out.splitlines()[0].split()[2]
    assert tag in ("amx", "zen4", "zen3", "avx512", "avx2")
    stages = [line[:-1] for line in out.splitlines() if line.endswith(":")]
    assert stages == STAGES
    # every measuring stage writes its own file for this host, never another host's
    for name in ("cpu_vs_vllm_realsize", "serve_vs_vllm_bf16", "serve_vs_vllm_06b_bf16",
                 "quant", "quant_vs_vllm", "chaos_bf16"):  # fmt: skip
        assert f"benchmarks/results/{name}_{tag}.json" in out
    assert f"overhead_lane_bound_{tag}_$loop.json" in out


def test_only_picks_stages() -> None:
    out = _list("--only", "quant,overhead")
    assert [line[:-1] for line in out.splitlines() if line.endswith(":")] == ["quant", "overhead"]
